//! Group commit of single enqueues: jobs enqueued one per call that arrive
//! while earlier ones are being written go to the store together, as one
//! batch in one statement and one commit.
//!
//! The grouping is driven by the commits themselves: a tenant has at most
//! [`WRITERS`] writes in flight; an enqueue that finds a writer free is
//! written at once (an idle server adds no waiting), and one that finds
//! it busy joins the tenant's waiting list, which the writer takes whole
//! (up to [`MAX_GROUP`] jobs) when its commit is done. Under load, each commit thus
//! carries everything that arrived during the one before it.
//!
//! Each caller still gets its own answer: a batch answers per entry, an
//! entry behaves as if enqueued after the ones before it (so two callers
//! with one idempotency key get one job), and nothing is answered before
//! the commit. A batch is all-or-nothing, so when a group fails (one entry
//! would create a queue past the tenant's limit, say), each of its entries
//! is written again alone and gets its own answer or error: one caller's
//! failure never becomes another's.
//!
//! Groups are per tenant, so one tenant's jobs never wait on, or fail with,
//! another tenant's.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::counters;
use crate::error::{Error, Result};
use crate::model::{Enqueued, NewJob};
use crate::store::{NewJobRef, Store};

/// Writes in flight per tenant. One, measured: on two cores the database's
/// CPU, not its WAL flush, is the limit, so more writers in flight (smaller
/// groups) were slower (`pg_enqueue_single_physical_ratio` 0.58–0.66 with
/// one, 0.49–0.53 with two, 0.35–0.39 with four, in one session).
pub const WRITERS: usize = 1;

/// Most jobs one group commit writes.
pub const MAX_GROUP: usize = 128;

/// The single enqueues of every tenant, grouped into commits.
pub(crate) struct GroupCommit {
    store: Arc<dyn Store>,
    tenants: Mutex<HashMap<String, Tenant>>,
    groups: AtomicU64,
    jobs: AtomicU64,
}

/// One tenant's waiting enqueues and its writers in flight.
#[derive(Default)]
struct Tenant {
    writers: usize,
    waiting: Vec<Waiting>,
}

/// An enqueue waiting for its group's commit.
struct Waiting {
    job: NewJob,
    answer: oneshot::Sender<Result<Enqueued>>,
}

/// How many group commits this engine has made and how many jobs they
/// carried (duplicates included); jobs ÷ groups is the mean group size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupCommitStats {
    /// Commits of one or more single enqueues.
    pub groups: u64,
    /// Single enqueues those commits carried.
    pub jobs: u64,
}

impl GroupCommit {
    pub(crate) fn new(store: Arc<dyn Store>) -> Arc<GroupCommit> {
        Arc::new(GroupCommit {
            store,
            tenants: Mutex::new(HashMap::new()),
            groups: AtomicU64::new(0),
            jobs: AtomicU64::new(0),
        })
    }

    pub(crate) fn stats(&self) -> GroupCommitStats {
        GroupCommitStats {
            groups: self.groups.load(Ordering::Relaxed),
            jobs: self.jobs.load(Ordering::Relaxed),
        }
    }

    /// Enqueues one validated job with whatever else of `tenant` is
    /// waiting; answers once its group has committed.
    pub(crate) async fn enqueue(
        self: &Arc<Self>,
        tenant: &str,
        job: NewJob,
        max_queues: u32,
    ) -> Result<Enqueued> {
        let (answer, answered) = oneshot::channel();
        let start_writer = {
            let mut tenants = self.lock();
            let t = tenants.entry(tenant.to_owned()).or_default();
            t.waiting.push(Waiting { job, answer });
            let free = t.writers < WRITERS;
            if free {
                t.writers += 1;
            }
            free
        };
        if start_writer {
            // A task of its own, so the group outlives a caller that gives
            // up (a client that disconnects) and every waiter is answered.
            let writer = Writer {
                commits: self.clone(),
                tenant: tenant.to_owned(),
                released: false,
            };
            tokio::spawn(writer.run(max_queues));
        }
        answered.await.unwrap_or_else(|_| {
            Err(Error::Storage(
                "the enqueue's group commit ended without an answer".into(),
            ))
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Tenant>> {
        self.tenants.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes one group and answers each of its callers.
    async fn write(&self, tenant: &str, group: Vec<Waiting>, max_queues: u32) {
        self.groups.fetch_add(1, Ordering::Relaxed);
        self.jobs.fetch_add(group.len() as u64, Ordering::Relaxed);
        counters::enqueue_group(tenant, group.len());
        let (jobs, answers): (Vec<NewJob>, Vec<_>) =
            group.into_iter().map(|w| (w.job, w.answer)).unzip();
        let refs = NewJobRef::mint(&jobs);
        match self.store.enqueue(tenant, &refs, max_queues).await {
            Ok(out) => {
                for (answer, enqueued) in answers.into_iter().zip(out) {
                    let _ = answer.send(Ok(enqueued));
                }
            }
            Err(e) if refs.len() == 1 => {
                if let Some(answer) = answers.into_iter().next() {
                    let _ = answer.send(Err(e));
                }
            }
            Err(_) => {
                // Someone's entry failed the batch: each alone, in order.
                for (answer, entry) in answers.into_iter().zip(refs) {
                    let alone = self
                        .store
                        .enqueue(tenant, std::slice::from_ref(&entry), max_queues)
                        .await
                        .map(|mut out| out.remove(0));
                    let _ = answer.send(alone);
                }
            }
        }
    }
}

/// One writer of a tenant: writes groups until nothing waits.
struct Writer {
    commits: Arc<GroupCommit>,
    tenant: String,
    /// Whether it gave its slot back (under the same lock that found
    /// nothing waiting, so no enqueue can join a list nobody will write).
    released: bool,
}

impl Writer {
    async fn run(mut self, max_queues: u32) {
        loop {
            let group: Vec<Waiting> = {
                let mut tenants = self.commits.lock();
                let Some(t) = tenants.get_mut(&self.tenant) else {
                    self.released = true;
                    return;
                };
                if t.waiting.is_empty() {
                    t.writers -= 1;
                    if t.writers == 0 {
                        tenants.remove(&self.tenant);
                    }
                    self.released = true;
                    return;
                }
                let n = t.waiting.len().min(MAX_GROUP);
                t.waiting.drain(..n).collect()
            };
            self.commits.write(&self.tenant, group, max_queues).await;
        }
    }
}

impl Drop for Writer {
    // A writer that ends without giving its slot back (a panic, a runtime
    // shutting down) still does, and when it was the last, answers what
    // waits with an error rather than leaving it waiting for nobody.
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let mut tenants = self.commits.lock();
        if let Some(t) = tenants.get_mut(&self.tenant) {
            t.writers -= 1;
            if t.writers == 0 {
                for w in t.waiting.drain(..) {
                    let _ = w.answer.send(Err(Error::Storage(
                        "the enqueue's group commit ended early".into(),
                    )));
                }
                tenants.remove(&self.tenant);
            }
        }
    }
}
