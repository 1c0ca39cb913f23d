//! What the clients saw: the line protocol worker processes speak on stdout,
//! and the parent's record of it (plus the producers' acknowledgements).

use std::collections::{BTreeMap, HashMap};
use std::time::{SystemTime, UNIX_EPOCH};

use uuid::Uuid;

/// Microseconds since the Unix epoch on this machine's clock, which is also
/// PostgreSQL's (same host): comparable with the history's `at`.
pub fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or_default()
}

/// A claim a worker received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimObs {
    /// The job.
    pub job: Uuid,
    /// Its attempt after the claim.
    pub attempt: i32,
    /// The claiming worker id.
    pub worker: String,
    /// When the answer arrived (µs).
    pub at_us: i64,
}

/// A `lease_lost` answer a worker received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostObs {
    /// `heartbeat`, `complete`, `fail` or `snooze`.
    pub op: String,
    /// The job.
    pub job: Uuid,
    /// The token the worker presented.
    pub token: Uuid,
    /// When the answer arrived (µs).
    pub at_us: i64,
}

/// One line of a worker process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// The worker runs.
    Ready,
    /// `CLAIM <job> <attempt> <token> <worker> <µs>`.
    Claim(Uuid, ClaimObs),
    /// `ERR <op> <code>`: an error the SDK reported.
    Err {
        /// The operation.
        op: String,
        /// The API code, or `transport`/`timeout`/`decode` for failures
        /// that carry none.
        code: String,
    },
    /// `LOST <op> <job> <token> <µs>`.
    Lost(LostObs),
}

impl Line {
    /// The line as a worker prints it.
    pub fn render(&self) -> String {
        match self {
            Line::Ready => "READY".to_owned(),
            Line::Claim(token, c) => format!(
                "CLAIM {} {} {token} {} {}",
                c.job, c.attempt, c.worker, c.at_us
            ),
            Line::Err { op, code } => format!("ERR {op} {code}"),
            Line::Lost(l) => format!("LOST {} {} {} {}", l.op, l.job, l.token, l.at_us),
        }
    }

    /// Parses a printed line; `None` for anything else.
    pub fn parse(line: &str) -> Option<Line> {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["READY"] => Some(Line::Ready),
            ["CLAIM", job, attempt, token, worker, at] => Some(Line::Claim(
                token.parse().ok()?,
                ClaimObs {
                    job: job.parse().ok()?,
                    attempt: attempt.parse().ok()?,
                    worker: (*worker).to_owned(),
                    at_us: at.parse().ok()?,
                },
            )),
            ["ERR", op, code] => Some(Line::Err {
                op: (*op).to_owned(),
                code: (*code).to_owned(),
            }),
            ["LOST", op, job, token, at] => Some(Line::Lost(LostObs {
                op: (*op).to_owned(),
                job: job.parse().ok()?,
                token: token.parse().ok()?,
                at_us: at.parse().ok()?,
            })),
            _ => None,
        }
    }
}

/// Who saw an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Side {
    /// A producer (enqueue).
    Producer,
    /// A worker process.
    Worker,
}

/// Everything the clients observed during a run.
#[derive(Debug, Default)]
pub struct Obs {
    /// Claims by lease token.
    pub claims: HashMap<Uuid, ClaimObs>,
    /// Every `lease_lost` answer.
    pub losts: Vec<LostObs>,
    /// Errors by who saw them and code.
    pub errors: BTreeMap<(Side, String), u64>,
    /// Errors workers saw, by `<operation> <code>`.
    pub worker_errors: BTreeMap<String, u64>,
    /// Every acknowledgement per idempotency key: (job id, created).
    pub acks: HashMap<String, Vec<(Uuid, bool)>>,
    /// Worker lines that did not parse.
    pub bad_lines: u64,
    /// Batches submitted a second time after their first acknowledgement.
    pub resubmitted_batches: u64,
    /// Jobs in those batches.
    pub resubmitted_jobs: u64,
    /// Singles submitted twice at once.
    pub concurrent_singles: u64,
    /// Enqueue requests acknowledged (batches and singles).
    pub enqueue_requests: u64,
}

impl Obs {
    /// Records a worker line.
    pub fn record_line(&mut self, line: Line) {
        match line {
            Line::Ready => {}
            Line::Claim(token, c) => {
                self.claims.insert(token, c);
            }
            Line::Err { op, code } => {
                self.error(Side::Worker, &code);
                *self
                    .worker_errors
                    .entry(format!("{op} {code}"))
                    .or_insert(0) += 1;
            }
            Line::Lost(l) => self.losts.push(l),
        }
    }

    /// Counts an error.
    pub fn error(&mut self, side: Side, code: &str) {
        *self.errors.entry((side, code.to_owned())).or_insert(0) += 1;
    }

    /// Records an acknowledgement of `key`.
    pub fn ack(&mut self, key: String, id: Uuid, created: bool) {
        self.acks.entry(key).or_default().push((id, created));
    }

    /// Errors by code that `side` saw.
    pub fn errors_of(&self, side: Side) -> BTreeMap<String, u64> {
        (self.errors.iter())
            .filter(|((s, _), _)| *s == side)
            .map(|((_, code), n)| (code.clone(), *n))
            .collect()
    }

    /// Errors by code, whoever saw them.
    pub fn errors_by_code(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for ((_, code), n) in &self.errors {
            *out.entry(code.clone()).or_insert(0) += n;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        let lines = [
            Line::Ready,
            Line::Claim(
                Uuid::new_v4(),
                ClaimObs {
                    job: Uuid::new_v4(),
                    attempt: 3,
                    worker: "w1.2.m".into(),
                    at_us: 1_700_000_000_000_000,
                },
            ),
            Line::Err {
                op: "claim".into(),
                code: "unavailable".into(),
            },
            Line::Lost(LostObs {
                op: "heartbeat".into(),
                job: Uuid::new_v4(),
                token: Uuid::new_v4(),
                at_us: 5,
            }),
        ];
        for l in lines {
            assert_eq!(Line::parse(&l.render()), Some(l));
        }
        assert_eq!(Line::parse("thread 'main' panicked"), None);
    }
}
