//! Workers: who holds jobs (read from the jobs) and who announced itself
//! (`PUT /v1/workers/{worker_id}`), merged; and the refresh of an announced
//! worker's `last_seen_at` by its claims.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::*;
use crate::model::{WorkerAnnouncement, WorkerPresence, MAX_LIVE_WORKERS, WORKER_SEEN_REFRESH_MS};

/// When each worker's claims last refreshed its `last_seen_at` in this
/// process: a claim writes it at most every [`WORKER_SEEN_REFRESH_MS`], so
/// presence costs a write per worker per interval, not one per claim.
#[derive(Debug, Default)]
pub(super) struct SeenWorkers {
    last: Mutex<HashMap<(String, String), Instant>>,
}

/// Entries kept before the stale ones are swept (a sweep is linear, so it
/// runs when the map has doubled past this, not on every insert).
const SEEN_SWEEP_AT: usize = 4_096;

impl SeenWorkers {
    /// Whether `worker_id`'s `last_seen_at` is due a refresh now; if so it
    /// counts as refreshed from now on.
    fn due(&self, tenant: &str, worker_id: &str) -> bool {
        let interval = Duration::from_millis(WORKER_SEEN_REFRESH_MS as u64);
        let now = Instant::now();
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let key = (tenant.to_owned(), worker_id.to_owned());
        if last
            .get(&key)
            .is_some_and(|at| now.duration_since(*at) < interval)
        {
            return false;
        }
        if last.len() >= SEEN_SWEEP_AT {
            last.retain(|_, at| now.duration_since(*at) < interval);
        }
        last.insert(key, now);
        true
    }
}

impl Engine {
    /// Refreshes an announced worker's `last_seen_at` when due (see
    /// [`SeenWorkers`]). Presence is advisory: a failed refresh fails
    /// nothing (the claim that follows meets the same database anyway).
    pub(super) async fn seen(&self, tenant: &str, worker_id: &str) {
        if self.seen_workers.due(tenant, worker_id) {
            let _ = self.store.touch_worker(tenant, worker_id).await;
        }
    }

    /// Records a worker's announcement: it is listed from now on, idle or
    /// not, until it is not seen (announcing or claiming) for
    /// [`crate::WORKER_FORGET_AFTER_MS`]. A tenant holds at most
    /// [`MAX_LIVE_WORKERS`] of them.
    pub async fn announce_worker(
        &self,
        tenant: &str,
        worker_id: &str,
        announcement: &WorkerAnnouncement,
    ) -> Result<DateTime<Utc>> {
        validate::name("tenant", tenant)?;
        validate::worker_announcement(worker_id, announcement)?;
        let seen = self
            .store
            .announce_worker(tenant, worker_id, announcement, MAX_LIVE_WORKERS)
            .await?;
        // Its next claim need not write again right away.
        self.seen_workers.due(tenant, worker_id);
        Ok(seen)
    }

    /// The tenant's workers: those holding running jobs and those that
    /// announced themselves and were seen lately, merged by `worker_id` (an
    /// aggregate read: in the tenant's turn).
    pub async fn list_workers(&self, tenant: &str) -> Result<Vec<WorkerSummary>> {
        validate::name("tenant", tenant)?;
        let _turn = self.aggregates.take(tenant.to_owned()).await;
        let running = self.store.list_workers(tenant).await?;
        let announced = self.store.announced_workers(tenant).await?;
        Ok(merge_workers(running, announced))
    }
}

/// Workers holding jobs and announced workers, one entry per `worker_id`
/// (by id): the counts of the first, the presence of the second, the
/// queues of both.
fn merge_workers(
    running: Vec<WorkerSummary>,
    announced: Vec<(String, WorkerPresence)>,
) -> Vec<WorkerSummary> {
    let mut by_id: BTreeMap<String, WorkerSummary> = running
        .into_iter()
        .map(|w| (w.worker_id.clone(), w))
        .collect();
    for (worker_id, presence) in announced {
        let entry = by_id
            .entry(worker_id.clone())
            .or_insert_with(|| WorkerSummary {
                worker_id,
                queues: Vec::new(),
                running: 0,
                last_heartbeat_at: None,
                presence: None,
            });
        entry
            .queues
            .extend(presence.announcement.queues.iter().cloned());
        entry.queues.sort();
        entry.queues.dedup();
        entry.presence = Some(presence);
    }
    by_id.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn presence(queues: &[&str]) -> WorkerPresence {
        WorkerPresence {
            announcement: WorkerAnnouncement {
                queues: queues.iter().map(|q| q.to_string()).collect(),
                concurrency: 4,
                ..WorkerAnnouncement::default()
            },
            last_seen_at: Utc::now(),
        }
    }

    #[test]
    fn merged_by_id_with_both_sides_queues() {
        let busy = WorkerSummary {
            worker_id: "b".into(),
            queues: vec!["mail".into()],
            running: 2,
            last_heartbeat_at: Some(Utc::now()),
            presence: None,
        };
        let unannounced = WorkerSummary {
            worker_id: "c".into(),
            ..busy.clone()
        };
        let merged = merge_workers(
            vec![busy, unannounced],
            vec![
                ("a".into(), presence(&["idle"])),
                ("b".into(), presence(&["pdf", "mail"])),
            ],
        );
        let got: Vec<(&str, Vec<&str>, u64, bool)> = merged
            .iter()
            .map(|w| {
                (
                    w.worker_id.as_str(),
                    w.queues.iter().map(String::as_str).collect(),
                    w.running,
                    w.presence.is_some(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("a", vec!["idle"], 0, true),
                ("b", vec!["mail", "pdf"], 2, true),
                ("c", vec!["mail"], 2, false),
            ]
        );
    }

    #[test]
    fn a_claim_refreshes_at_most_once_per_interval() {
        let seen = SeenWorkers::default();
        assert!(seen.due("t", "w"));
        assert!(!seen.due("t", "w"), "within the interval");
        assert!(seen.due("t", "w2"), "per worker");
        assert!(seen.due("t2", "w"), "per tenant");
    }
}
