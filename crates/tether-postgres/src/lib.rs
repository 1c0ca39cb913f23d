//! The PostgreSQL backend of tether: the production store, where many server
//! replicas and workers share one database.
//!
//! Every operation is one SQL statement (a chain of CTEs where a transition
//! also writes history), so it is atomic without an explicit transaction and
//! costs one round trip; only a schedule's fire and trigger take a short
//! transaction, to enqueue and record the run together with the
//! timetable's compare-and-set or row lock. All times come from the
//! database's `now()`. The schema lives in its own `tether` schema with its
//! own migrations table, so an application that shares the database keeps
//! its own names.
//!
//! The crate reads side by side with `tether-sqlite`: the same files, each
//! holding the same operations of [`Store`] under the same names.
//!
//! | file | what |
//! | --- | --- |
//! | `lib.rs` | [`PgStore`], connecting, the [`Store`] impl that hands each operation to its module |
//! | `enqueue.rs` | enqueue, and [`enqueue_in`] on the caller's transaction |
//! | `attempts.rs` | claim, heartbeat, complete, fail, snooze: what a worker does, fenced by the lease token |
//! | `jobs.rs` | get, list, history, cancel, replay |
//! | `queues.rs` | queue stats, pause, settings |
//! | `maintenance.rs` | the reaper, expiry, pruning, named leases |
//! | `tenants.rs` | tenants, API keys, the server-secret check |
//! | `schedules.rs` | schedules and their runs |
//! | `sql/` | the statements, one file per module above |
//! | `rows.rs` | rows to the model, driver errors to tether's |
//! | `migrate.rs` | the schema's migrations |
//! | `testing.rs` | clock controls for the behaviour suite (feature `testing`) |
//! | `notify.rs` | wake-up hints across processes by LISTEN/NOTIFY (PostgreSQL only) |

#[macro_use]
mod sql;
mod attempts;
mod enqueue;
mod jobs;
mod maintenance;
mod migrate;
mod notify;
mod queues;
mod rows;
mod schedules;
mod tenants;
#[cfg(feature = "testing")]
mod testing;
mod url;

pub use enqueue::enqueue_in;
#[cfg(feature = "testing")]
pub use testing::migrate_up_to;

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Postgres, Transaction};
use tether_core::schedule::{Fire, FireOutcome};
use tether_core::{
    ApiKeyInfo, BulkReplayed, ClaimRequest, ClaimedJob, Completion, Enqueued, Error, EventCursor,
    EventPage, Failure, Heartbeat, HeartbeatAck, Job, JobFilter, JobPage, Lease, LeaseToken,
    NewJobRef, OperatorKeySetup, QueueConfigPatch, QueueStats, ReapReport, ReplayFilter, Result,
    Schedule, ScheduleRun, ScheduleSpec, Store, Tenant, Wakeup,
};
use uuid::Uuid;

use crate::rows::Db;

pub use url::url_with_database;

/// A [`tether_core::Store`] on PostgreSQL.
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    notifications: std::sync::Arc<notify::Notifications>,
}

/// A transaction on the pool.
pub(crate) type Tx = Transaction<'static, Postgres>;

impl PgStore {
    /// Connects with a pool of up to 16 connections and applies migrations.
    pub async fn connect(url: &str) -> Result<PgStore> {
        let options: PgConnectOptions = url
            .parse()
            .map_err(|e: sqlx::Error| Error::invalid("database_url", e.to_string()))?;
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await
            .db()?;
        PgStore::from_pool(pool).await
    }

    /// Uses an existing pool (e.g. the application's own) and applies
    /// migrations.
    pub async fn from_pool(pool: PgPool) -> Result<PgStore> {
        migrate::run(&pool).await?;
        Ok(PgStore {
            pool,
            notifications: Default::default(),
        })
    }

    /// The connection pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Starts a transaction on the pool.
    pub(crate) async fn begin(&self) -> Result<Tx> {
        self.pool.begin().await.db()
    }

    /// Hints that `jobs` jobs of `queue` became ready: wakes this process's
    /// subscribers now, other processes by NOTIFY shortly (see `notify`).
    pub(crate) fn notify(&self, tenant: &str, queue: &str, jobs: usize) {
        self.notifications.poke(&self.pool, tenant, queue, jobs);
    }

    /// After commit: the hints for the jobs an enqueue created (an existing
    /// job that was returned wakes nobody).
    pub(crate) fn notify_created(&self, tenant: &str, answers: &[Enqueued]) {
        for (queue, jobs) in tether_core::created_by_queue(answers) {
            self.notify(tenant, queue, jobs);
        }
    }
}

/// The claim and batch-complete statements exactly as the store runs them.
/// The benchmark executes them bare, as its raw-SQL reference, to measure
/// what tether's own code costs on top of what PostgreSQL needs anyway.
pub mod reference_sql {
    pub use crate::sql::attempts::{CLAIM, COMPLETE_MANY};
}

/// Each operation is in the module of its kind (see the table above).
#[async_trait]
impl Store for PgStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    async fn enqueue(
        &self,
        tenant: &str,
        jobs: &[NewJobRef<'_>],
        max_queues: u32,
    ) -> Result<Vec<Enqueued>> {
        enqueue::enqueue(self, tenant, jobs, max_queues).await
    }

    async fn claim(&self, tenant: &str, req: &ClaimRequest) -> Result<Vec<ClaimedJob>> {
        attempts::claim(self, tenant, req).await
    }

    async fn heartbeat_many(
        &self,
        tenant: &str,
        items: &[Heartbeat],
    ) -> Result<Vec<Result<HeartbeatAck>>> {
        attempts::heartbeat_many(self, tenant, items).await
    }

    fn subscribe(&self, tenant: &str, queue: &str) -> Wakeup {
        self.notifications.subscribe(&self.pool, tenant, queue)
    }

    async fn complete(
        &self,
        tenant: &str,
        id: Uuid,
        token: LeaseToken,
        result: Option<&Value>,
    ) -> Result<Job> {
        attempts::complete(self, tenant, id, token, result).await
    }

    async fn complete_many(&self, tenant: &str, items: &[Completion]) -> Result<Vec<Result<()>>> {
        attempts::complete_many(self, tenant, items).await
    }

    async fn fail(
        &self,
        tenant: &str,
        id: Uuid,
        token: LeaseToken,
        failure: &Failure,
        jitter: f64,
    ) -> Result<Job> {
        attempts::fail(self, tenant, id, token, failure, jitter).await
    }

    async fn snooze(
        &self,
        tenant: &str,
        id: Uuid,
        token: LeaseToken,
        delay_ms: i64,
    ) -> Result<Job> {
        attempts::snooze(self, tenant, id, token, delay_ms).await
    }

    async fn cancel(&self, tenant: &str, id: Uuid) -> Result<Job> {
        jobs::cancel(self, tenant, id).await
    }

    async fn replay(
        &self,
        tenant: &str,
        id: Uuid,
        expires_at: Option<DateTime<Utc>>,
    ) -> Result<Job> {
        jobs::replay(self, tenant, id, expires_at).await
    }

    async fn replay_many(&self, tenant: &str, filter: &ReplayFilter) -> Result<BulkReplayed> {
        jobs::replay_many(self, tenant, filter).await
    }

    async fn get(&self, tenant: &str, id: Uuid) -> Result<Job> {
        jobs::get(self, tenant, id).await
    }

    async fn list(&self, tenant: &str, filter: &JobFilter) -> Result<JobPage> {
        jobs::list(self, tenant, filter).await
    }

    async fn events(
        &self,
        tenant: &str,
        id: Uuid,
        cursor: Option<EventCursor>,
        limit: u32,
    ) -> Result<EventPage> {
        jobs::events(self, tenant, id, cursor, limit).await
    }

    async fn queue_stats(&self, tenant: &str, queue: &str) -> Result<QueueStats> {
        queues::queue_stats(self, tenant, queue).await
    }

    async fn list_queues(&self, tenant: &str) -> Result<Vec<QueueStats>> {
        queues::list_queues(self, tenant).await
    }

    async fn set_paused(
        &self,
        tenant: &str,
        queue: &str,
        paused: bool,
        max_queues: u32,
    ) -> Result<QueueStats> {
        queues::set_paused(self, tenant, queue, paused, max_queues).await
    }

    async fn configure_queue(
        &self,
        tenant: &str,
        queue: &str,
        patch: &QueueConfigPatch,
        max_queues: u32,
    ) -> Result<QueueStats> {
        queues::configure_queue(self, tenant, queue, patch, max_queues).await
    }

    async fn prune_empty_queues(&self, batch: u32) -> Result<u64> {
        maintenance::prune_empty_queues(self, batch).await
    }

    async fn reap_lapsed_leases(&self, batch: u32) -> Result<ReapReport> {
        maintenance::reap_lapsed_leases(self, batch).await
    }

    async fn expire_jobs(&self, batch: u32) -> Result<u64> {
        maintenance::expire_jobs(self, batch).await
    }

    async fn prune_finished(&self, retention_ms: i64, batch: u32) -> Result<u64> {
        maintenance::prune_finished(self, retention_ms, batch).await
    }

    async fn acquire_lease(&self, name: &str, holder: &str, ttl_ms: i64) -> Result<Option<Lease>> {
        maintenance::acquire_lease(self, name, holder, ttl_ms).await
    }

    async fn renew_lease(&self, name: &str, token: LeaseToken, ttl_ms: i64) -> Result<Lease> {
        maintenance::renew_lease(self, name, token, ttl_ms).await
    }

    async fn release_lease(&self, name: &str, token: LeaseToken) -> Result<()> {
        maintenance::release_lease(self, name, token).await
    }

    async fn create_tenant(&self, name: &str) -> Result<Tenant> {
        tenants::create_tenant(self, name).await
    }

    async fn list_tenants(&self) -> Result<Vec<Tenant>> {
        tenants::list_tenants(self).await
    }

    async fn get_tenant(&self, id: Uuid) -> Result<Tenant> {
        tenants::get_tenant(self, id).await
    }

    async fn ensure_tenant(&self, name: &str) -> Result<Tenant> {
        tenants::ensure_tenant(self, name).await
    }

    async fn create_api_key(
        &self,
        tenant_id: Uuid,
        name: Option<&str>,
        admin: bool,
        key_id: Uuid,
        hash: [u8; 32],
    ) -> Result<ApiKeyInfo> {
        tenants::create_api_key(self, tenant_id, name, admin, key_id, hash).await
    }

    async fn find_api_key(&self, key_id: Uuid) -> Result<Option<(ApiKeyInfo, [u8; 32])>> {
        tenants::find_api_key(self, key_id).await
    }

    async fn revoke_api_key(&self, key_id: Uuid) -> Result<()> {
        tenants::revoke_api_key(self, key_id).await
    }

    async fn list_api_keys(&self, tenant_id: Uuid) -> Result<Vec<ApiKeyInfo>> {
        tenants::list_api_keys(self, tenant_id).await
    }

    async fn touch_api_key(&self, key_id: Uuid, min_interval_ms: i64) -> Result<bool> {
        tenants::touch_api_key(self, key_id, min_interval_ms).await
    }

    async fn store_operator_key(
        &self,
        tenant_id: Uuid,
        key_id: Uuid,
        hash: [u8; 32],
    ) -> Result<OperatorKeySetup> {
        tenants::store_operator_key(self, tenant_id, key_id, hash).await
    }

    async fn server_secret_check(&self, check: [u8; 32], record: bool) -> Result<Option<[u8; 32]>> {
        tenants::server_secret_check(self, check, record).await
    }

    async fn create_schedule(
        &self,
        tenant: &str,
        spec: &ScheduleSpec,
        next_run_at: Option<DateTime<Utc>>,
        max_schedules: u32,
    ) -> Result<Schedule> {
        schedules::create_schedule(self, tenant, spec, next_run_at, max_schedules).await
    }

    async fn get_schedule(&self, tenant: &str, id: Uuid) -> Result<Schedule> {
        schedules::get_schedule(self, tenant, id).await
    }

    async fn list_schedules(&self, tenant: &str) -> Result<Vec<Schedule>> {
        schedules::list_schedules(self, tenant).await
    }

    async fn update_schedule(
        &self,
        tenant: &str,
        id: Uuid,
        spec: &ScheduleSpec,
        next_run_at: Option<DateTime<Utc>>,
    ) -> Result<Schedule> {
        schedules::update_schedule(self, tenant, id, spec, next_run_at).await
    }

    async fn delete_schedule(&self, tenant: &str, id: Uuid) -> Result<()> {
        schedules::delete_schedule(self, tenant, id).await
    }

    async fn schedule_runs(&self, tenant: &str, id: Uuid, limit: u32) -> Result<Vec<ScheduleRun>> {
        schedules::schedule_runs(self, tenant, id, limit).await
    }

    async fn due_schedules(&self, limit: u32) -> Result<(DateTime<Utc>, Vec<Schedule>)> {
        schedules::due_schedules(self, limit).await
    }

    async fn next_schedule_due(&self) -> Result<(DateTime<Utc>, Option<DateTime<Utc>>)> {
        schedules::next_schedule_due(self).await
    }

    async fn fire_schedule(&self, fire: &Fire, job_id: Uuid) -> Result<FireOutcome> {
        schedules::fire_schedule(self, fire, job_id).await
    }

    async fn trigger_schedule(&self, tenant: &str, id: Uuid, job: NewJobRef<'_>) -> Result<Job> {
        schedules::trigger_schedule(self, tenant, id, job).await
    }

    async fn prune_schedule_runs(&self, retention_ms: i64, batch: u32) -> Result<u64> {
        schedules::prune_schedule_runs(self, retention_ms, batch).await
    }
}
