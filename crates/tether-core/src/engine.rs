use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::counters;
use crate::cron::CronSchedule;
use crate::error::{Error, Result};
use crate::group_commit::{GroupCommit, GroupCommitStats};
use crate::keys::{
    ApiKeyInfo, ApiKeySecret, OperatorKeySetup, ServerSecret, Tenant, TenantStatus, DEFAULT_TENANT,
    KEY_USE_INTERVAL_MS,
};
use crate::lifecycle;
use crate::model::{
    BulkReplayed, CarriedReports, ClaimRequest, ClaimedJob, Completion, Enqueued, EventPage,
    EventQuery, Failure, FailureReport, Heartbeat, HeartbeatAck, Job, JobEvent, JobFilter, JobPage,
    Lease, LeaseToken, NewJob, QueueConfigPatch, QueueStats, QueueThroughput, ReapReport,
    ReplayFilter, ReportedAndClaimed, WorkerSummary, THROUGHPUT_MINUTES,
};
use crate::schedule::{
    self, Fire, FireOutcome, FireRef, FireReport, RunOutcome, Schedule, SchedulePatch, ScheduleRun,
    ScheduleSpec,
};
use crate::store::{NewJobRef, Store};
use crate::validate::{self, Limits};
use crate::wakeup::Wakeup;

/// The validated front door to a [`Store`]: every public operation of tether
/// goes through here, so every backend sees the same checked input.
#[derive(Clone)]
pub struct Engine {
    store: Arc<dyn Store>,
    limits: Limits,
    /// The HMAC key of operator keys; without it, operator keys neither
    /// authenticate nor can be stored.
    server_secret: Option<Arc<ServerSecret>>,
    /// Turns of each tenant's aggregate reads (queue lists, throughput,
    /// workers): each reads a whole queue or a day of history, so a tenant
    /// runs [`AGGREGATE_READS`] at a time and the rest of its burst waits
    /// here instead of on connections other tenants need.
    aggregates: Arc<crate::turns::Turns>,
    /// Single enqueues, grouped into shared commits.
    group_commit: Arc<GroupCommit>,
}

/// How many aggregate reads (see [`Engine::throughput`]) one tenant runs
/// at once in a process.
pub const AGGREGATE_READS: usize = 2;

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("backend", &self.store.backend())
            .field("limits", &self.limits)
            .field("server_secret", &self.server_secret.is_some())
            .finish()
    }
}

impl Engine {
    /// An engine over `store` with default limits.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Engine {
            limits: Limits::default(),
            server_secret: None,
            aggregates: crate::turns::Turns::new(AGGREGATE_READS),
            group_commit: GroupCommit::new(store.clone()),
            store,
        }
    }

    /// Replaces the size limits. The engine gets group commits of its own
    /// (see [`Engine::enqueue`]), so that no group mixes callers held to
    /// different limits.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self.group_commit = GroupCommit::new(self.store.clone());
        self
    }

    /// Sets the server secret, which operator keys (`TETHER_ADMIN_KEY`)
    /// need: their id and stored hash are HMACs under it. Every process
    /// serving one database must use the same one (see
    /// [`Engine::check_server_secret`]).
    pub fn with_server_secret(mut self, secret: ServerSecret) -> Self {
        self.server_secret = Some(Arc::new(secret));
        self
    }

    /// The store underneath.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The size limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Enqueues one job. Jobs enqueued one per call while others are
    /// being written share their commit (group commit, see
    /// [`Engine::group_commit_stats`]); each still gets its own answer,
    /// and only once its job is durable.
    pub async fn enqueue(&self, tenant: &str, job: NewJob) -> Result<Enqueued> {
        validate::name("tenant", tenant)?;
        // Validated on its own so that errors name `queue`, not `jobs[0].queue`.
        validate::new_job("", &job, &self.limits)?;
        let out = self
            .group_commit
            .enqueue(tenant, job, self.limits.max_queues_per_tenant)
            .await?;
        counters::enqueued(tenant, std::slice::from_ref(&out));
        Ok(out)
    }

    /// How many group commits single enqueues made in this engine, and
    /// how many enqueues they carried.
    pub fn group_commit_stats(&self) -> GroupCommitStats {
        self.group_commit.stats()
    }

    /// Enqueues 1–1000 jobs all-or-nothing; answers in request order.
    pub async fn enqueue_many(&self, tenant: &str, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
        validate::name("tenant", tenant)?;
        validate::new_jobs(jobs, &self.limits)?;
        self.store_enqueue(tenant, jobs).await
    }

    /// Hands validated jobs to the store and counts the ones created.
    async fn store_enqueue(&self, tenant: &str, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
        let out = self
            .store
            .enqueue(
                tenant,
                &NewJobRef::mint(jobs),
                self.limits.max_queues_per_tenant,
            )
            .await?;
        counters::enqueued(tenant, &out);
        Ok(out)
    }

    /// Claims up to `req.limit` ready jobs.
    pub async fn claim(&self, tenant: &str, req: &ClaimRequest) -> Result<Vec<ClaimedJob>> {
        validate::name("tenant", tenant)?;
        validate::claim(req)?;
        let jobs = self.store.claim(tenant, req).await?;
        counters::claimed(tenant, &req.queue, &jobs);
        Ok(jobs)
    }

    /// Applies the reports a claim carries (the last batch's completions,
    /// then its failures), then claims up to `req.limit` ready jobs: one
    /// round trip and, where the queue's rules allow, one transaction (see
    /// [`Store::report_and_claim`]). One answer per report, as the batch
    /// and fail routes answer it; a refused report never fails the claim.
    /// Nothing is applied when the request is bad as a whole.
    pub async fn report_and_claim(
        &self,
        tenant: &str,
        req: &ClaimRequest,
        reports: &CarriedReports,
    ) -> Result<ReportedAndClaimed> {
        if reports.is_empty() {
            let jobs = self.claim(tenant, req).await?;
            return Ok(ReportedAndClaimed {
                reports: Vec::new(),
                jobs,
            });
        }
        validate::name("tenant", tenant)?;
        validate::claim(req)?;
        validate::carried_reports(reports, &self.limits)?;
        // Errors keep their tail, as `fail` keeps it (copied only then).
        let trimmed;
        let reports = match (reports.fail.iter())
            .all(|f| lifecycle::error_tail(&f.failure.error) == f.failure.error)
        {
            true => reports,
            false => {
                trimmed = CarriedReports {
                    complete: reports.complete.clone(),
                    fail: (reports.fail.iter())
                        .map(|f| FailureReport {
                            failure: Failure {
                                error: lifecycle::error_tail(&f.failure.error),
                                ..f.failure.clone()
                            },
                            ..f.clone()
                        })
                        .collect(),
                };
                &trimmed
            }
        };
        let jitters: Vec<f64> = reports.fail.iter().map(|_| lifecycle::jitter()).collect();
        let stored = self
            .store
            .report_and_claim(tenant, reports, &jitters, req)
            .await?;
        counters::completed_many(
            tenant,
            stored.completed.iter().filter_map(|r| r.as_ref().ok()),
        );
        for reported in stored.failed.iter().flatten() {
            if reported.now {
                counters::failed(tenant, &reported.job);
            }
        }
        counters::claimed(tenant, &req.queue, &stored.jobs);
        let answers = (stored.completed.into_iter().map(|r| r.map(|_| ())))
            .chain(stored.failed.into_iter().map(|r| r.map(|_| ())))
            .collect();
        Ok(ReportedAndClaimed {
            reports: answers,
            jobs: stored.jobs,
        })
    }

    /// Extends a lease and records progress.
    pub async fn heartbeat(&self, tenant: &str, hb: &Heartbeat) -> Result<HeartbeatAck> {
        validate::name("tenant", tenant)?;
        validate::heartbeat(hb, &self.limits)?;
        self.store.heartbeat(tenant, hb).await
    }

    /// Heartbeats 1–1000 jobs in one round trip; one answer per item.
    pub async fn heartbeat_many(
        &self,
        tenant: &str,
        items: &[Heartbeat],
    ) -> Result<Vec<Result<HeartbeatAck>>> {
        validate::name("tenant", tenant)?;
        validate::batch_len("items", items.len(), validate::MAX_BATCH)?;
        for hb in items {
            validate::heartbeat(hb, &self.limits)?;
        }
        self.store.heartbeat_many(tenant, items).await
    }

    /// Subscribes to hints that `queue` may have ready jobs. Subscribe before
    /// claiming, then wait on it (with a poll timeout) when a claim is empty.
    /// The names are checked first, so a bad one costs no subscription.
    pub fn subscribe(&self, tenant: &str, queue: &str) -> Result<Wakeup> {
        validate::name("tenant", tenant)?;
        validate::name("queue", queue)?;
        Ok(self.store.subscribe(tenant, queue))
    }

    /// Marks a job succeeded.
    pub async fn complete(
        &self,
        tenant: &str,
        id: Uuid,
        token: LeaseToken,
        result: Option<Value>,
    ) -> Result<Job> {
        validate::name("tenant", tenant)?;
        if let Some(r) = &result {
            validate::json_size("result", r, &self.limits)?;
        }
        let reported = self
            .store
            .complete(tenant, id, token, result.as_ref())
            .await?;
        if reported.now {
            counters::completed(tenant, &reported.job);
        }
        Ok(reported.job)
    }

    /// Completes 1–1000 jobs in one round trip; one answer per item.
    pub async fn complete_many(
        &self,
        tenant: &str,
        items: &[Completion],
    ) -> Result<Vec<Result<()>>> {
        validate::name("tenant", tenant)?;
        validate::completions(items, &self.limits)?;
        let out = self.store.complete_many(tenant, items).await?;
        counters::completed_many(tenant, out.iter().filter_map(|r| r.as_ref().ok()));
        Ok(out.into_iter().map(|r| r.map(|_| ())).collect())
    }

    /// Ends an attempt with a failure; the error keeps its last 2 000 characters.
    pub async fn fail(
        &self,
        tenant: &str,
        id: Uuid,
        token: LeaseToken,
        failure: Failure,
    ) -> Result<Job> {
        validate::name("tenant", tenant)?;
        validate::failure(&failure)?;
        let failure = Failure {
            error: lifecycle::error_tail(&failure.error),
            ..failure
        };
        let reported = self
            .store
            .fail(tenant, id, token, &failure, lifecycle::jitter())
            .await?;
        if reported.now {
            counters::failed(tenant, &reported.job);
        }
        Ok(reported.job)
    }

    /// "Not now": back to the queue after `delay_ms`, the attempt given back.
    pub async fn snooze(
        &self,
        tenant: &str,
        id: Uuid,
        token: LeaseToken,
        delay_ms: i64,
    ) -> Result<Job> {
        validate::name("tenant", tenant)?;
        validate::millis("delay_ms", delay_ms, 0..=validate::MAX_DURATION_MS)?;
        let reported = self.store.snooze(tenant, id, token, delay_ms).await?;
        if reported.now {
            counters::snoozed(tenant, &reported.job);
        }
        Ok(reported.job)
    }

    /// Cancels a queued job, or asks a running one to stop.
    pub async fn cancel(&self, tenant: &str, id: Uuid) -> Result<Job> {
        validate::name("tenant", tenant)?;
        self.store.cancel(tenant, id).await
    }

    /// Queues a failed or cancelled job again, attempt 0, without an
    /// `expires_at` (an expired job would otherwise expire again at once).
    pub async fn replay(&self, tenant: &str, id: Uuid) -> Result<Job> {
        self.replay_with(tenant, id, None).await
    }

    /// Queues a failed or cancelled job again, attempt 0, with
    /// `expires_at` as its new expiry (`None`: none).
    pub async fn replay_with(
        &self,
        tenant: &str,
        id: Uuid,
        expires_at: Option<DateTime<Utc>>,
    ) -> Result<Job> {
        validate::name("tenant", tenant)?;
        if let Some(at) = &expires_at {
            validate::instant("expires_at", at)?;
        }
        let job = self.store.replay(tenant, id, expires_at).await?;
        counters::replayed(tenant, &job.queue, 1);
        Ok(job)
    }

    /// Replays many dead jobs of one queue; follow `next_cursor` (as the
    /// filter's `cursor`) to go through a selection larger than `limit`.
    pub async fn replay_many(&self, tenant: &str, filter: &ReplayFilter) -> Result<BulkReplayed> {
        validate::name("tenant", tenant)?;
        validate::replay_filter(filter)?;
        let out = self.store.replay_many(tenant, filter).await?;
        counters::replayed(tenant, &filter.queue, out.replayed);
        Ok(out)
    }

    /// One job.
    pub async fn get(&self, tenant: &str, id: Uuid) -> Result<Job> {
        validate::name("tenant", tenant)?;
        self.store.get(tenant, id).await
    }

    /// A page of jobs, newest first.
    pub async fn list(&self, tenant: &str, filter: &JobFilter) -> Result<JobPage> {
        validate::name("tenant", tenant)?;
        validate::job_filter(filter)?;
        self.store.list(tenant, filter).await
    }

    /// One page of a job's history, oldest first (default 100 events, at
    /// most 1 000); follow `next_cursor` for the rest.
    pub async fn events_page(
        &self,
        tenant: &str,
        id: Uuid,
        query: &EventQuery,
    ) -> Result<EventPage> {
        validate::name("tenant", tenant)?;
        validate::event_query(query)?;
        let limit = query.limit.unwrap_or(validate::DEFAULT_EVENT_PAGE);
        self.store.events(tenant, id, query.cursor, limit).await
    }

    /// A job's whole history, oldest first, read page by page. For callers
    /// in the process; the HTTP API hands it out one page at a time.
    pub async fn events(&self, tenant: &str, id: Uuid) -> Result<Vec<JobEvent>> {
        let mut query = EventQuery {
            limit: Some(validate::MAX_EVENT_PAGE),
            cursor: None,
        };
        let mut events = Vec::new();
        loop {
            let page = self.events_page(tenant, id, &query).await?;
            events.extend(page.events);
            match page.next_cursor {
                Some(cursor) => query.cursor = Some(cursor),
                None => return Ok(events),
            }
        }
    }

    /// One queue's stats.
    pub async fn queue_stats(&self, tenant: &str, queue: &str) -> Result<QueueStats> {
        validate::name("tenant", tenant)?;
        validate::name("queue", queue)?;
        self.store.queue_stats(tenant, queue).await
    }

    /// Every known queue's stats (an aggregate read: in the tenant's turn).
    pub async fn list_queues(&self, tenant: &str) -> Result<Vec<QueueStats>> {
        validate::name("tenant", tenant)?;
        let _turn = self.aggregates.take(tenant.to_owned()).await;
        self.store.list_queues(tenant).await
    }

    /// Removes an empty queue: its row, pause flag and settings go; a queue
    /// holding any job is `Conflict`, one without a row `NotFound`.
    pub async fn delete_queue(&self, tenant: &str, queue: &str) -> Result<()> {
        validate::name("tenant", tenant)?;
        validate::name("queue", queue)?;
        self.store.delete_queue(tenant, queue).await
    }

    /// A queue's last `minutes` minutes (see [`QueueThroughput`]); an
    /// aggregate read, run in the tenant's turn.
    pub async fn throughput(
        &self,
        tenant: &str,
        queue: &str,
        minutes: u32,
    ) -> Result<QueueThroughput> {
        validate::name("tenant", tenant)?;
        validate::name("queue", queue)?;
        if !THROUGHPUT_MINUTES.contains(&minutes) {
            return Err(Error::invalid(
                "minutes",
                format!(
                    "must be between {} and {}, got {minutes}",
                    THROUGHPUT_MINUTES.start(),
                    THROUGHPUT_MINUTES.end()
                ),
            ));
        }
        let _turn = self.aggregates.take(tenant.to_owned()).await;
        self.store.throughput(tenant, queue, minutes).await
    }

    /// Who holds the tenant's running jobs now (an aggregate read: in the
    /// tenant's turn).
    pub async fn list_workers(&self, tenant: &str) -> Result<Vec<WorkerSummary>> {
        validate::name("tenant", tenant)?;
        let _turn = self.aggregates.take(tenant.to_owned()).await;
        self.store.list_workers(tenant).await
    }

    /// Pauses a queue: it accepts enqueues and hands out no claims.
    pub async fn pause(&self, tenant: &str, queue: &str) -> Result<QueueStats> {
        validate::name("tenant", tenant)?;
        validate::name("queue", queue)?;
        self.store
            .set_paused(tenant, queue, true, self.limits.max_queues_per_tenant)
            .await
    }

    /// Resumes a paused queue.
    pub async fn resume(&self, tenant: &str, queue: &str) -> Result<QueueStats> {
        validate::name("tenant", tenant)?;
        validate::name("queue", queue)?;
        self.store
            .set_paused(tenant, queue, false, self.limits.max_queues_per_tenant)
            .await
    }

    /// Changes a queue's settings for jobs enqueued from now on.
    pub async fn configure_queue(
        &self,
        tenant: &str,
        queue: &str,
        patch: &QueueConfigPatch,
    ) -> Result<QueueStats> {
        validate::name("tenant", tenant)?;
        validate::name("queue", queue)?;
        validate::queue_config(patch)?;
        self.store
            .configure_queue(tenant, queue, patch, self.limits.max_queues_per_tenant)
            .await
    }

    /// Runs the maintenance passes under the named lease `lease` (name,
    /// token) from now on, or (`None`) unfenced: see
    /// [`Store::fence_maintenance`].
    pub fn fence_maintenance(&self, lease: Option<(&str, LeaseToken)>) {
        self.store.fence_maintenance(lease)
    }

    /// One reaper pass (the maintenance leader runs this).
    pub async fn reap_lapsed_leases(&self, batch: u32) -> Result<ReapReport> {
        validate::batch_len("batch", batch as usize, validate::MAX_REPLAY as usize)?;
        let report = self.store.reap_lapsed_leases(batch).await?;
        counters::reaped(&report);
        Ok(report)
    }

    /// One expiry pass.
    pub async fn expire_jobs(&self, batch: u32) -> Result<u64> {
        validate::batch_len("batch", batch as usize, validate::MAX_REPLAY as usize)?;
        let n = self.store.expire_jobs(batch).await?;
        counters::expired(n);
        Ok(n)
    }

    /// One pass that deletes queue rows holding nothing (no job, no
    /// settings): at most `batch` of them, all tenants.
    pub async fn prune_empty_queues(&self, batch: u32) -> Result<u64> {
        validate::batch_len("batch", batch as usize, validate::MAX_REPLAY as usize)?;
        self.store.prune_empty_queues(batch).await
    }

    /// One pruning pass.
    pub async fn prune_finished(&self, retention_ms: i64, batch: u32) -> Result<u64> {
        validate::millis("retention_ms", retention_ms, 0..=i64::MAX)?;
        validate::batch_len("batch", batch as usize, validate::MAX_REPLAY as usize)?;
        let n = self.store.prune_finished(retention_ms, batch).await?;
        counters::pruned(n);
        Ok(n)
    }

    /// Tries to take a named lease (e.g. [`lifecycle::MAINTENANCE_LEASE`]).
    pub async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl_ms: i64,
    ) -> Result<Option<Lease>> {
        validate::name("lease", name)?;
        validate::worker_id("holder", holder)?;
        validate::millis("ttl_ms", ttl_ms, validate::LEASE_TTL_RANGE)?;
        self.store.acquire_lease(name, holder, ttl_ms).await
    }

    /// Extends a held lease.
    pub async fn renew_lease(&self, name: &str, token: LeaseToken, ttl_ms: i64) -> Result<Lease> {
        validate::name("lease", name)?;
        validate::millis("ttl_ms", ttl_ms, validate::LEASE_TTL_RANGE)?;
        self.store.renew_lease(name, token, ttl_ms).await
    }

    /// Gives a lease up.
    pub async fn release_lease(&self, name: &str, token: LeaseToken) -> Result<()> {
        validate::name("lease", name)?;
        self.store.release_lease(name, token).await
    }

    /// Creates a tenant; its name follows the queue-name rules and is not a
    /// UUID ([`validate::tenant_name`]).
    pub async fn create_tenant(&self, name: &str) -> Result<Tenant> {
        validate::tenant_name("name", name)?;
        self.store.create_tenant(name).await
    }

    /// Every tenant, by name.
    pub async fn list_tenants(&self) -> Result<Vec<Tenant>> {
        self.store.list_tenants().await
    }

    /// One tenant by id.
    pub async fn get_tenant(&self, id: Uuid) -> Result<Tenant> {
        self.store.get_tenant(id).await
    }

    /// The tenant named `name_or_id`, or whose id it is (an admin acting
    /// for a tenant names it either way); `NotFound` if there is none.
    ///
    /// New tenant names cannot read as ids ([`validate::tenant_name`]), but
    /// a tenant created before that rule may be named like another
    /// tenant's id. A value that is one tenant's id and another's name is
    /// refused (`Invalid`): picking either could act on the tenant the
    /// caller did not mean. Each stays reachable by its other handle.
    pub async fn find_tenant(&self, name_or_id: &str) -> Result<Tenant> {
        let by_id = match Uuid::try_parse(name_or_id) {
            Ok(id) => match self.store.get_tenant(id).await {
                Ok(tenant) => Some(tenant),
                Err(Error::NotFound(_)) => None,
                Err(e) => return Err(e),
            },
            Err(_) => None,
        };
        let by_name = self
            .store
            .list_tenants()
            .await?
            .into_iter()
            .find(|t| t.name == name_or_id);
        match (by_id, by_name) {
            (Some(a), Some(b)) if a.id != b.id => Err(Error::invalid(
                "tenant",
                format!(
                    "{name_or_id:?} is the id of tenant {:?} and the name of tenant {} \
                     (named before tenant names could not be UUIDs); name the first by \
                     its name or the second by its id",
                    a.name, b.id
                ),
            )),
            (Some(t), _) | (None, Some(t)) => Ok(t),
            (None, None) => Err(Error::NotFound(format!("tenant {name_or_id}"))),
        }
    }

    /// Every tenant, by name, with its standing.
    pub async fn tenant_statuses(&self) -> Result<Vec<TenantStatus>> {
        let suspended: HashMap<Uuid, DateTime<Utc>> =
            self.store.suspended_tenants().await?.into_iter().collect();
        Ok(self
            .store
            .list_tenants()
            .await?
            .into_iter()
            .map(|tenant| TenantStatus {
                suspended_at: suspended.get(&tenant.id).copied(),
                tenant,
            })
            .collect())
    }

    /// [`Engine::find_tenant`] with the tenant's standing.
    pub async fn find_tenant_status(&self, name_or_id: &str) -> Result<TenantStatus> {
        let tenant = self.find_tenant(name_or_id).await?;
        let suspended_at = self
            .store
            .suspended_tenants()
            .await?
            .into_iter()
            .find_map(|(id, at)| (id == tenant.id).then_some(at));
        Ok(TenantStatus {
            tenant,
            suspended_at,
        })
    }

    /// Suspends tenant `id`: from now on its keys authenticate nothing
    /// ([`Error::TenantSuspended`], 403) and its schedules do not fire; its
    /// jobs, queues, schedules and keys stay. The [`DEFAULT_TENANT`] holds
    /// the operator's admin keys and cannot be suspended (`Invalid`).
    /// Suspending a suspended tenant changes nothing.
    pub async fn suspend_tenant(&self, id: Uuid) -> Result<TenantStatus> {
        let tenant = self.store.get_tenant(id).await?;
        if tenant.name == DEFAULT_TENANT {
            return Err(Error::invalid(
                "tenant_id",
                format!(
                    "the {DEFAULT_TENANT:?} tenant holds the operator's admin keys and \
                     cannot be suspended"
                ),
            ));
        }
        self.store.suspend_tenant(id).await
    }

    /// Resumes a suspended tenant: its keys work again and its enabled
    /// schedules fire from their first instant after now (the instants of
    /// the suspension are not made up, as when a schedule is enabled
    /// again). Resuming an active tenant changes nothing.
    pub async fn resume_tenant(&self, id: Uuid) -> Result<TenantStatus> {
        let tenant = self.store.get_tenant(id).await?;
        let mut next_runs = Vec::new();
        for s in self.store.list_schedules(&tenant.name).await? {
            if !s.spec.enabled {
                continue;
            }
            // A stored definition that no longer parses cannot fire: it
            // keeps no next run, as the scheduler would leave it.
            let Ok(cron) = CronSchedule::parse(&s.spec.cron, &s.spec.timezone) else {
                next_runs.push((s.id, None));
                continue;
            };
            let next = Self::first_run(&s.spec, &cron).and_then(|next| match s.last_run_at {
                Some(last) if next <= last => cron.next_after(last),
                _ => Some(next),
            });
            next_runs.push((s.id, next));
        }
        self.store.resume_tenant(id, &next_runs).await
    }

    /// The tenant named `name`, created if missing (e.g. `default` at start);
    /// a new name follows [`validate::tenant_name`].
    pub async fn ensure_tenant(&self, name: &str) -> Result<Tenant> {
        validate::tenant_name("name", name)?;
        self.store.ensure_tenant(name).await
    }

    /// Stores a key minted elsewhere (e.g. `TETHER_ADMIN_KEY` at bootstrap):
    /// its id and the SHA-256 of its secret. Prefer [`Engine::issue_api_key`].
    pub async fn create_api_key(
        &self,
        tenant_id: Uuid,
        name: Option<&str>,
        admin: bool,
        key_id: Uuid,
        hash: [u8; 32],
    ) -> Result<ApiKeyInfo> {
        if let Some(name) = name {
            validate::key_name("name", name)?;
        }
        self.store
            .create_api_key(tenant_id, name, admin, key_id, hash)
            .await
    }

    /// The server secret, or `Invalid` when none was set.
    fn server_secret(&self) -> Result<&ServerSecret> {
        self.server_secret.as_deref().ok_or_else(|| {
            Error::invalid(
                "server_secret",
                "no server secret is set; operator keys need one",
            )
        })
    }

    /// Whether the server secret is the one this database's operator keys
    /// were stored under. With `record` (a process about to store an
    /// operator key), the first call on a database stores the secret's
    /// check value (never the secret); without, a database that has none
    /// yet accepts any secret, so replicas that never use operator keys
    /// need not share one. A process whose secret differs must not serve:
    /// the operator key it stores or looks up would be another row than the
    /// other replicas', and each would revoke the other's at start.
    /// `Invalid` when no secret is set.
    pub async fn check_server_secret(&self, record: bool) -> Result<bool> {
        let check = self.server_secret()?.check_value();
        let stored = self.store.server_secret_check(check, record).await?;
        Ok(stored.is_none_or(|stored| stored == check))
    }

    /// Makes an operator-chosen string (e.g. `TETHER_ADMIN_KEY`) the
    /// operator key: an admin key of the [`DEFAULT_TENANT`], stored unless
    /// it is already there, so every replica can run this at start. Storing
    /// a new one revokes the earlier operator keys: rotating
    /// `TETHER_ADMIN_KEY` retires the old value (replicas starting with the
    /// same value derive the same key id, so they never revoke each other's).
    /// A key that was revoked stays revoked and revokes nothing (the answer
    /// shows it): revocation is never undone behind an operator's back, and
    /// an old value coming back cannot retire the newer one.
    pub async fn ensure_operator_admin_key(&self, key: &str) -> Result<OperatorKeySetup> {
        let (key_id, secret) = ApiKeySecret::operator(key, self.server_secret()?)
            .map_err(|why| Error::invalid("TETHER_ADMIN_KEY", why))?;
        let tenant = self.ensure_tenant(DEFAULT_TENANT).await?;
        self.store
            .store_operator_key(tenant.id, key_id, secret.hash())
            .await
    }

    /// Mints and stores a new key for a tenant. Returns the key's info and
    /// the full key string, which is shown once and stored nowhere.
    pub async fn issue_api_key(
        &self,
        tenant_id: Uuid,
        name: Option<&str>,
        admin: bool,
    ) -> Result<(ApiKeyInfo, String)> {
        let (key_id, key, hash) = ApiKeySecret::generate();
        let info = self
            .create_api_key(tenant_id, name, admin, key_id, hash)
            .await?;
        Ok((info, key))
    }

    /// A key by id with its stored hash (revoked keys included).
    pub async fn find_api_key(&self, key_id: Uuid) -> Result<Option<(ApiKeyInfo, [u8; 32])>> {
        Ok(self
            .store
            .find_api_key(key_id)
            .await?
            .map(|k| (k.info, k.hash)))
    }

    /// Revokes a key; it authenticates nothing from now on.
    pub async fn revoke_api_key(&self, key_id: Uuid) -> Result<()> {
        self.store.revoke_api_key(key_id).await
    }

    /// A tenant's keys, oldest first.
    pub async fn list_api_keys(&self, tenant_id: Uuid) -> Result<Vec<ApiKeyInfo>> {
        self.store.list_api_keys(tenant_id).await
    }

    /// The key's info if `key` is a well-formed, known, unrevoked key whose
    /// secret matches (compared in constant time); else `Unauthenticated`,
    /// without saying why. (The hashing is done while parsing, before the
    /// lookup, so an unknown id is not told apart by timing.) A valid key
    /// of a suspended tenant is [`Error::TenantSuspended`].
    ///
    /// It writes nothing: the caller records the use with
    /// [`Engine::record_key_use`] when [`ApiKeyInfo::use_is_due`].
    pub async fn authenticate(&self, key: &str) -> Result<ApiKeyInfo> {
        let Some((key_id, secret)) = ApiKeySecret::parse(key, self.server_secret.as_deref()) else {
            return Err(Error::Unauthenticated);
        };
        match self.store.find_api_key(key_id).await? {
            Some(k) if secret.verify(&k.hash) && !k.info.is_revoked() => {
                if k.tenant_suspended_at.is_some() {
                    return Err(Error::tenant_suspended(&k.info.tenant));
                }
                Ok(k.info)
            }
            Some(_) | None => Err(Error::Unauthenticated),
        }
    }

    /// Sets the key's `last_used_at` to now unless it was set less than
    /// [`KEY_USE_INTERVAL_MS`] ago (or the key is revoked); whether it
    /// wrote. A conditional update: replicas and concurrent requests that
    /// race here write once per interval between them.
    pub async fn record_key_use(&self, key_id: Uuid) -> Result<bool> {
        self.store.touch_api_key(key_id, KEY_USE_INTERVAL_MS).await
    }
    /// The first fire instant from now, for an enabled schedule.
    fn first_run(spec: &ScheduleSpec, cron: &CronSchedule) -> Option<DateTime<Utc>> {
        if spec.enabled {
            cron.next_after(Utc::now())
        } else {
            None
        }
    }

    /// Creates a schedule; its first run is the first fire instant from now.
    pub async fn create_schedule(&self, tenant: &str, spec: &ScheduleSpec) -> Result<Schedule> {
        validate::name("tenant", tenant)?;
        let cron = validate::schedule(spec, &self.limits)?;
        self.store
            .create_schedule(
                tenant,
                spec,
                Self::first_run(spec, &cron),
                self.limits.max_schedules_per_tenant,
            )
            .await
    }

    /// One schedule.
    pub async fn get_schedule(&self, tenant: &str, id: Uuid) -> Result<Schedule> {
        validate::name("tenant", tenant)?;
        self.store.get_schedule(tenant, id).await
    }

    /// The newest `limit` runs of each of the tenant's schedules, keyed by
    /// schedule id (newest first); 1 to [`MAX_LISTED_RUNS`].
    pub async fn recent_schedule_runs(
        &self,
        tenant: &str,
        limit: u32,
    ) -> Result<std::collections::HashMap<Uuid, Vec<ScheduleRun>>> {
        validate::name("tenant", tenant)?;
        if !(1..=MAX_LISTED_RUNS).contains(&limit) {
            return Err(Error::invalid(
                "runs",
                format!("must be between 1 and {MAX_LISTED_RUNS}, got {limit}"),
            ));
        }
        let mut by_schedule: std::collections::HashMap<Uuid, Vec<ScheduleRun>> =
            std::collections::HashMap::new();
        for (id, run) in self.store.recent_schedule_runs(tenant, limit).await? {
            by_schedule.entry(id).or_default().push(run);
        }
        Ok(by_schedule)
    }

    /// A tenant's schedules, by name.
    pub async fn list_schedules(&self, tenant: &str) -> Result<Vec<Schedule>> {
        validate::name("tenant", tenant)?;
        self.store.list_schedules(tenant).await
    }

    /// Changes a schedule. `next_run_at` is recomputed from now, so
    /// re-enabling a schedule does not replay the time it was disabled.
    pub async fn patch_schedule(
        &self,
        tenant: &str,
        id: Uuid,
        patch: &SchedulePatch,
    ) -> Result<Schedule> {
        validate::name("tenant", tenant)?;
        let current = self.store.get_schedule(tenant, id).await?;
        let spec = patch.apply(&current.spec);
        let cron = validate::schedule(&spec, &self.limits)?;
        // Never back onto an instant that already ran, whatever this
        // host's clock says.
        let next_run_at =
            Self::first_run(&spec, &cron).and_then(|next| match current.last_run_at {
                Some(last) if next <= last => cron.next_after(last),
                _ => Some(next),
            });
        self.store
            .update_schedule(tenant, id, &spec, next_run_at)
            .await
    }

    /// Deletes a schedule and its runs (the jobs it enqueued stay).
    pub async fn delete_schedule(&self, tenant: &str, id: Uuid) -> Result<()> {
        validate::name("tenant", tenant)?;
        self.store.delete_schedule(tenant, id).await
    }

    /// A schedule's newest [`SCHEDULE_RUNS_SHOWN`] runs, newest first.
    pub async fn schedule_runs(&self, tenant: &str, id: Uuid) -> Result<Vec<ScheduleRun>> {
        validate::name("tenant", tenant)?;
        self.store
            .schedule_runs(tenant, id, SCHEDULE_RUNS_SHOWN)
            .await
    }

    /// Runs a schedule now, outside its timetable: enqueues its job and
    /// records the run; `next_run_at` stays.
    pub async fn trigger_schedule(&self, tenant: &str, id: Uuid) -> Result<Job> {
        validate::name("tenant", tenant)?;
        let schedule = self.store.get_schedule(tenant, id).await?;
        let spec = &schedule.spec;
        let job = NewJob::new(&spec.queue, &spec.kind, spec.payload.clone())
            .idempotency_key(schedule::trigger_key(id));
        validate::new_job("", &job, &self.limits)?;
        let refs = NewJobRef::mint(std::slice::from_ref(&job));
        let job = self.store.trigger_schedule(tenant, id, refs[0]).await?;
        counters::enqueued(
            tenant,
            &[Enqueued {
                job: job.clone(),
                created: true,
            }],
        );
        Ok(job)
    }

    /// The next `count` (1–100) fire instants of `cron` in `timezone`
    /// strictly after `from` (default now), by the very function the
    /// scheduler uses.
    pub fn cron_preview(
        cron: &str,
        timezone: &str,
        from: Option<DateTime<Utc>>,
        count: u32,
    ) -> Result<Vec<DateTime<Utc>>> {
        if !(1..=MAX_PREVIEW).contains(&count) {
            return Err(Error::invalid(
                "count",
                format!("must be between 1 and {MAX_PREVIEW}, got {count}"),
            ));
        }
        if let Some(from) = &from {
            validate::instant("from", from)?;
        }
        // The same text rule as a schedule's, so a preview never shows
        // times for a cron that creating the schedule would refuse.
        validate::printable_ascii("cron", cron)?;
        validate::printable_ascii("timezone", timezone)?;
        let schedule = CronSchedule::parse(cron, timezone)?;
        Ok(schedule.upcoming(from.unwrap_or_else(Utc::now), count as usize))
    }

    /// One scheduler pass (the maintenance leader runs it): fires at most
    /// `batch` due schedules, one run each, recorded by the store in one
    /// set-based transaction.
    ///
    /// A schedule whose due instant is at most `catch_up` old fires that
    /// instant and moves to the next one (which may be due already: the
    /// next pass fires it), so a leader failover shorter than `catch_up`
    /// loses no instant. One that is older (the scheduler was down) fires
    /// once, stamped with the latest missed instant, and moves to the first
    /// instant after now: the missed fires collapse into one run. The
    /// instants are worked out here, by [`CronSchedule`], for the whole
    /// pass; the store only writes them.
    pub async fn fire_due_schedules(
        &self,
        batch: u32,
        catch_up: std::time::Duration,
    ) -> Result<FireReport> {
        validate::batch_len("batch", batch as usize, validate::MAX_REPLAY as usize)?;
        let (now, due) = self.store.due_schedules(batch).await?;
        let mut report = FireReport::default();
        // Parsed once per expression and zone: a pass of thousands of
        // schedules usually shares a handful of them.
        let mut parsed: HashMap<(&str, &str), Option<CronSchedule>> = HashMap::new();
        let mut fires = Vec::with_capacity(due.len());
        for s in &due {
            let Some(expected) = s.next_run_at else {
                continue;
            };
            // Stored definitions were valid when written; one that no longer
            // parses (e.g. a zone renamed in newer tz data) cannot fire.
            let cron = parsed
                .entry((s.spec.cron.as_str(), s.spec.timezone.as_str()))
                .or_insert_with(|| CronSchedule::parse(&s.spec.cron, &s.spec.timezone).ok());
            let Some(cron) = cron else {
                report.failed += 1;
                continue;
            };
            let late = (now - expected).to_std().unwrap_or_default();
            let (fire_at, next_run_at) = if late <= catch_up {
                (expected, cron.next_after(expected))
            } else {
                let fire_at = cron.latest_in(expected, now).unwrap_or(expected);
                (fire_at, cron.next_after(now.max(fire_at)))
            };
            let job = NewJob::new(&s.spec.queue, &s.spec.kind, s.spec.payload.clone())
                .idempotency_key(schedule::fire_key(s.id, fire_at));
            fires.push(Fire {
                schedule_id: s.id,
                tenant: s.tenant.clone(),
                expected_next_run_at: expected,
                fire_at,
                next_run_at,
                job,
                overlap: s.spec.overlap,
            });
        }
        if fires.is_empty() {
            return Ok(report);
        }
        let refs: Vec<FireRef<'_>> = fires
            .iter()
            .map(|fire| FireRef {
                fire,
                job_id: Uuid::now_v7(),
            })
            .collect();
        let outcomes = self.store.fire_schedules(&refs).await?;
        for (fire, outcome) in fires.iter().zip(outcomes) {
            match outcome {
                FireOutcome::Ran(RunOutcome::Enqueued, _) => {
                    report.enqueued += 1;
                    counters::fired(&fire.tenant, fire.fire_at);
                }
                FireOutcome::Ran(RunOutcome::Skipped, _) => report.skipped += 1,
                FireOutcome::Raced => report.raced += 1,
            }
        }
        Ok(report)
    }

    /// How long until the earliest enabled schedule is due (zero when one
    /// already is), by the database's clock; `None` with no enabled schedule.
    pub async fn next_schedule_due(&self) -> Result<Option<std::time::Duration>> {
        let (now, next) = self.store.next_schedule_due().await?;
        Ok(next.map(|at| (at - now).to_std().unwrap_or_default()))
    }

    /// Deletes at most `batch` schedule runs older than `retention_ms`.
    pub async fn prune_schedule_runs(&self, retention_ms: i64, batch: u32) -> Result<u64> {
        validate::millis("retention_ms", retention_ms, 0..=i64::MAX)?;
        validate::batch_len("batch", batch as usize, validate::MAX_REPLAY as usize)?;
        self.store.prune_schedule_runs(retention_ms, batch).await
    }
}

/// How many runs [`Engine::schedule_runs`] shows, newest first.
pub const SCHEDULE_RUNS_SHOWN: u32 = 100;
/// Most instants one cron preview computes.
pub const MAX_PREVIEW: u32 = 100;

/// At most this many recent runs and next fire times per schedule in a
/// listing of schedules (`GET /v1/schedules?runs=&next=`).
pub const MAX_LISTED_RUNS: u32 = 20;
