//! The producers: every job enqueued with its idempotency key, in batches
//! and singles, some batches submitted twice and some singles twice at once;
//! transport errors and `unavailable` retried with backoff (the same request,
//! the same keys: exactly the idempotent path) on the next replica.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tether_client::{Enqueued, HttpClient, NewJob};
use tokio::time::Instant;

use crate::graph;
use crate::obs::{Obs, Side};
use crate::plan;
use crate::worker::client_code;

/// How a run of consecutive job numbers is submitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// One batch request; `resubmit`: sent again (same keys) once answered.
    Batch {
        /// Sent a second time after the first acknowledgement.
        resubmit: bool,
    },
    /// One request per job; `twice[i]`: that job is sent twice at once, to
    /// two different replicas.
    Singles {
        /// Which ones are doubled.
        twice: Vec<bool>,
    },
}

/// Consecutive job numbers `first..first + len`, submitted one way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// First job number.
    pub first: u64,
    /// How many.
    pub len: u64,
    /// How.
    pub mode: Mode,
}

/// Cuts `0..jobs` into chunks, deterministically from `seed`: about 90 % of
/// the jobs in batches of 20–200 (one in five submitted twice), the rest as
/// singles (one in four sent twice at once).
pub fn chunks(seed: u64, jobs: u64) -> Vec<Chunk> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xc4a0_5eed);
    let mut out = Vec::new();
    let mut next = 0;
    while next < jobs {
        let (len, mode) = if rng.random_bool(0.6) {
            let len = rng.random_range(20..=200u64);
            (
                len,
                Mode::Batch {
                    resubmit: rng.random_bool(0.2),
                },
            )
        } else {
            let len = rng.random_range(1..=12u64);
            let twice = (0..len).map(|_| rng.random_bool(0.25)).collect();
            (len, Mode::Singles { twice })
        };
        let len = len.min(jobs - next);
        let mode = match mode {
            Mode::Singles { mut twice } => {
                twice.truncate(len as usize);
                Mode::Singles { twice }
            }
            m @ Mode::Batch { .. } => m,
        };
        out.push(Chunk {
            first: next,
            len,
            mode,
        });
        next += len;
    }
    out
}

/// Job `n` as the producers enqueue it; `limited_per_mille` of the jobs go
/// to the limited queue, with their concurrency keys.
pub fn new_job(seed: u64, n: u64, limited_per_mille: u64) -> NewJob {
    let p = plan::plan(seed, n);
    let queue = plan::queue(seed, n, limited_per_mille);
    let mut job = NewJob::new(queue, plan::KIND, json!({ "n": n }));
    job.max_attempts = Some(p.max_attempts());
    job.backoff = Some(plan::BACKOFF);
    job.idempotency_key = Some(plan::key(n));
    if queue == plan::LIMITED_QUEUE {
        job.concurrency_key = plan::concurrency_key(seed, n);
    }
    job
}

/// Everything a producer task needs.
#[derive(Clone)]
pub struct Producer {
    /// One client per replica.
    pub clients: Vec<HttpClient>,
    /// The record.
    pub obs: Arc<Mutex<Obs>>,
    /// The run's seed.
    pub seed: u64,
    /// Jobs in the run.
    pub jobs: u64,
    /// The share of them (per mille) that go to the limited queue.
    pub limited_per_mille: u64,
    /// When production started.
    pub start: Instant,
    /// Over how long the chunks are spread.
    pub window: Duration,
    /// Give up (and report it) after this.
    pub deadline: Instant,
}

impl Producer {
    fn obs(&self) -> std::sync::MutexGuard<'_, Obs> {
        self.obs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Submits `chunks` in order, each at its time in the window. Answers
    /// the problems met (a refusal, or a deadline passed).
    pub async fn run(self, id: usize, chunks: Vec<Chunk>) -> Vec<String> {
        let mut problems = Vec::new();
        let mut server = id;
        for (i, chunk) in chunks.iter().enumerate() {
            let at = self.start
                + self
                    .window
                    .mul_f64(chunk.first as f64 / self.jobs.max(1) as f64);
            tokio::time::sleep_until(at).await;
            server = (server + 1) % self.clients.len();
            let previous = i.checked_sub(1).map(|p| &chunks[p]);
            if let Err(e) = self.submit(chunk, previous, server).await {
                problems.push(format!(
                    "jobs {}..{}: {e}",
                    chunk.first,
                    chunk.first + chunk.len
                ));
            }
        }
        problems
    }

    /// Submits `chunk`; `previous` is this producer's chunk before it (its
    /// jobs acknowledged), which some singles wait for ([`graph::single_wait`]).
    async fn submit(
        &self,
        chunk: &Chunk,
        previous: Option<&Chunk>,
        server: usize,
    ) -> Result<(), String> {
        match &chunk.mode {
            Mode::Batch { resubmit } => {
                let entries = graph::batch_entries(self.seed, chunk);
                let ns: Vec<u64> = entries.iter().map(|e| e.n).collect();
                let jobs: Vec<NewJob> = entries
                    .iter()
                    .map(|e| {
                        let job = new_job(self.seed, e.n, self.limited_per_mille);
                        if e.after.is_empty() {
                            return job;
                        }
                        (e.after.iter())
                            .fold(job, |job, &a| job.after_entry(a))
                            .dependency_failure(e.rule)
                    })
                    .collect();
                let answers = self.batch(&jobs, server).await?;
                self.record(&ns, &answers)?;
                if *resubmit {
                    let again = self.batch(&jobs, server + 1).await?;
                    self.record(&ns, &again)?;
                    let mut obs = self.obs();
                    obs.resubmitted_batches += 1;
                    obs.resubmitted_jobs += chunk.len;
                }
            }
            Mode::Singles { twice } => {
                let ns = chunk.first..chunk.first + chunk.len;
                for (n, twice) in ns.zip(twice) {
                    let mut job = new_job(self.seed, n, self.limited_per_mille);
                    if let Some((on, rule)) = graph::single_wait(self.seed, n, previous) {
                        job = job.after(self.acknowledged(on)?).dependency_failure(rule);
                    }
                    if *twice {
                        let (a, b) = tokio::join!(
                            self.single(job.clone(), server),
                            self.single(job, server + 1)
                        );
                        self.record(&[n], &[a?])?;
                        self.record(&[n], &[b?])?;
                        self.obs().concurrent_singles += 1;
                    } else {
                        let a = self.single(job, server).await?;
                        self.record(&[n], &[a])?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The id job `n` was acknowledged as.
    fn acknowledged(&self, n: u64) -> Result<uuid::Uuid, String> {
        let key = plan::key(n);
        (self.obs().acks.get(&key))
            .and_then(|acks| acks.first())
            .map(|ack| ack.0)
            .ok_or_else(|| format!("job {n}, which a single waits for, was never acknowledged"))
    }

    /// Records the answers to the jobs `ns`, in the order sent.
    fn record(&self, ns: &[u64], answers: &[Enqueued]) -> Result<(), String> {
        if answers.len() != ns.len() {
            return Err(format!("{} answers for {} jobs", answers.len(), ns.len()));
        }
        let mut obs = self.obs();
        obs.enqueue_requests += 1;
        for (&n, a) in ns.iter().zip(answers) {
            let key = plan::key(n);
            if a.job.idempotency_key.as_deref() != Some(key.as_str()) {
                return Err(format!(
                    "the answer for key {key} is job {} with key {:?}",
                    a.job.id, a.job.idempotency_key
                ));
            }
            obs.ack(key, a.job.id, a.created);
        }
        Ok(())
    }

    async fn batch(&self, jobs: &[NewJob], server: usize) -> Result<Vec<Enqueued>, String> {
        self.retrying(server, |c| {
            let jobs = jobs.to_vec();
            async move { c.enqueue_batch(&jobs).await }
        })
        .await
    }

    async fn single(&self, job: NewJob, server: usize) -> Result<Enqueued, String> {
        self.retrying(server, |c| {
            let job = job.clone();
            async move { c.enqueue(job).await }
        })
        .await
    }

    /// Calls `f` on replica `server` until it answers, moving to the next
    /// replica after each retryable failure.
    async fn retrying<T, F, Fut>(&self, mut server: usize, f: F) -> Result<T, String>
    where
        F: Fn(HttpClient) -> Fut,
        Fut: std::future::Future<Output = tether_client::Result<T>>,
    {
        let mut backoff = Duration::from_millis(50);
        loop {
            let client = self.clients[server % self.clients.len()].clone();
            match f(client).await {
                Ok(v) => return Ok(v),
                Err(e) => {
                    let code = client_code(&e);
                    self.obs().error(Side::Producer, &code);
                    if !e.is_retryable() {
                        return Err(format!("refused: {e}"));
                    }
                    if Instant::now() > self.deadline {
                        return Err(format!("still failing at the deadline: {e}"));
                    }
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(2));
            server += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_every_job_once() {
        let cs = chunks(3, 5_000);
        assert_eq!(cs, chunks(3, 5_000));
        let mut next = 0;
        for c in &cs {
            assert_eq!(c.first, next);
            assert!(c.len > 0);
            if let Mode::Singles { twice } = &c.mode {
                assert_eq!(twice.len() as u64, c.len);
            }
            next += c.len;
        }
        assert_eq!(next, 5_000);
        assert!(cs.iter().any(|c| c.mode == Mode::Batch { resubmit: true }));
        assert!(cs
            .iter()
            .any(|c| matches!(&c.mode, Mode::Singles { twice } if twice.contains(&true))));
    }
}
