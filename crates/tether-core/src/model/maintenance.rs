//! The maintenance passes' reports and their named leases.

use super::*;

/// What one reaper pass did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReapReport {
    /// Lapsed on their last attempt: now `failed`.
    pub failed: u64,
    /// Lapsed after a cancel request: now `cancelled`.
    pub cancelled: u64,
    /// Lapsed with attempts left: `queued` again.
    pub requeued: u64,
    /// The same, queue by queue (for the metrics' `queue` label).
    pub by_queue: Vec<QueueReaped>,
}

/// One queue's part of a reaper pass.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueueReaped {
    /// The queue's tenant.
    pub tenant: String,
    /// The queue.
    pub queue: String,
    /// Now `failed`.
    pub failed: u64,
    /// Now `cancelled`.
    pub cancelled: u64,
    /// `queued` again.
    pub requeued: u64,
}

impl ReapReport {
    /// Jobs touched in all.
    pub fn total(&self) -> u64 {
        self.failed + self.cancelled + self.requeued
    }

    /// Counts `n` lapsed jobs of `queue` of `tenant` that the pass sent to
    /// `state` (`queued`: requeued; `failed`; `cancelled`).
    pub fn add(&mut self, tenant: &str, queue: &str, state: JobState, n: u64) {
        let at = match self
            .by_queue
            .iter()
            .position(|q| q.tenant == tenant && q.queue == queue)
        {
            Some(at) => at,
            None => {
                self.by_queue.push(QueueReaped {
                    tenant: tenant.to_owned(),
                    queue: queue.to_owned(),
                    ..QueueReaped::default()
                });
                self.by_queue.len() - 1
            }
        };
        let q = &mut self.by_queue[at];
        let (total, part) = match state {
            JobState::Failed => (&mut self.failed, &mut q.failed),
            JobState::Cancelled => (&mut self.cancelled, &mut q.cancelled),
            _ => (&mut self.requeued, &mut q.requeued),
        };
        *total += n;
        *part += n;
    }
}

/// A held lease on a named role (e.g. the maintenance leader).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The role.
    pub name: String,
    /// Who holds it.
    pub holder: String,
    /// Fences the holder: renew and release need it.
    pub token: LeaseToken,
    /// When it lapses unless renewed (database clock).
    pub expires_at: DateTime<Utc>,
}
