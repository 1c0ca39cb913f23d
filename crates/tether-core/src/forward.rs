//! The one `impl Store` of both backends, written once.
//!
//! `tether-postgres` and `tether-sqlite` lay out their files the same way
//! (`enqueue.rs`, `attempts.rs`, `jobs.rs`, `feed.rs`, `queues.rs`, `maintenance.rs`,
//! `tenants.rs`, `schedules.rs`, `workflows.rs`), each with a function named after every
//! [`Store`](crate::Store) method it implements. [`forward_store!`] writes
//! the trait impl that forwards each method to that function, so the map
//! from method to file lives here only, and a backend that strays from the
//! twin layout does not compile.

/// Paths the macro's expansion names, so that a backend need not import
/// them. Not part of the API.
#[doc(hidden)]
pub mod __forward {
    pub use async_trait::async_trait;
    pub use chrono::{DateTime, Utc};
    pub use serde_json::Value;
    pub use uuid::Uuid;
}

/// Implements [`Store`](crate::Store) for a backend's store type by
/// forwarding every method to the function of the same name in the
/// backend's module for it (e.g. `claim` → `attempts::claim(self, …)`).
/// `backend` is [`Store::backend`](crate::Store::backend)'s answer;
/// `subscribe` is the body of [`Store::subscribe`](crate::Store::subscribe),
/// the one method whose mechanism differs between backends.
#[macro_export]
macro_rules! forward_store {
    ($store:ty, backend = $backend:literal, subscribe = |$this:ident, $tenant:ident, $queue:ident| $subscribe:expr $(,)?) => {
        #[$crate::__forward::async_trait]
        impl $crate::Store for $store {
            fn backend(&self) -> &'static str {
                $backend
            }

            fn subscribe(&self, tenant: &str, queue: &str) -> $crate::Wakeup {
                let ($this, $tenant, $queue) = (self, tenant, queue);
                $subscribe
            }

            async fn enqueue(
                &self,
                tenant: &str,
                jobs: &[$crate::NewJobRef<'_>],
                max_queues: u32,
            ) -> $crate::Result<Vec<$crate::Enqueued>> {
                enqueue::enqueue(self, tenant, jobs, max_queues).await
            }

            async fn claim(
                &self,
                tenant: &str,
                req: &$crate::ClaimRequest,
            ) -> $crate::Result<Vec<$crate::ClaimedJob>> {
                attempts::claim(self, tenant, req).await
            }

            async fn report_and_claim(
                &self,
                tenant: &str,
                reports: &$crate::CarriedReports,
                jitters: &[f64],
                req: &$crate::ClaimRequest,
            ) -> $crate::Result<$crate::StoredClaim> {
                attempts::report_and_claim(self, tenant, reports, jitters, req).await
            }

            async fn heartbeat_many(
                &self,
                tenant: &str,
                items: &[$crate::Heartbeat],
            ) -> $crate::Result<Vec<$crate::Result<$crate::HeartbeatAck>>> {
                attempts::heartbeat_many(self, tenant, items).await
            }

            async fn complete(
                &self,
                tenant: &str,
                id: $crate::__forward::Uuid,
                token: $crate::LeaseToken,
                result: Option<&$crate::__forward::Value>,
            ) -> $crate::Result<$crate::Reported> {
                attempts::complete(self, tenant, id, token, result).await
            }

            async fn complete_many(
                &self,
                tenant: &str,
                items: &[$crate::Completion],
            ) -> $crate::Result<Vec<$crate::Result<$crate::Completed>>> {
                attempts::complete_many(self, tenant, items).await
            }

            async fn fail(
                &self,
                tenant: &str,
                id: $crate::__forward::Uuid,
                token: $crate::LeaseToken,
                failure: &$crate::Failure,
                jitter: f64,
            ) -> $crate::Result<$crate::Reported> {
                attempts::fail(self, tenant, id, token, failure, jitter).await
            }

            async fn snooze(
                &self,
                tenant: &str,
                id: $crate::__forward::Uuid,
                token: $crate::LeaseToken,
                delay_ms: i64,
            ) -> $crate::Result<$crate::Reported> {
                attempts::snooze(self, tenant, id, token, delay_ms).await
            }

            async fn cancel(
                &self,
                tenant: &str,
                id: $crate::__forward::Uuid,
            ) -> $crate::Result<$crate::Job> {
                jobs::cancel(self, tenant, id).await
            }

            async fn replay(
                &self,
                tenant: &str,
                id: $crate::__forward::Uuid,
                expires_at: Option<$crate::__forward::DateTime<$crate::__forward::Utc>>,
            ) -> $crate::Result<$crate::Job> {
                jobs::replay(self, tenant, id, expires_at).await
            }

            async fn replay_many(
                &self,
                tenant: &str,
                filter: &$crate::ReplayFilter,
            ) -> $crate::Result<$crate::BulkReplayed> {
                jobs::replay_many(self, tenant, filter).await
            }

            async fn get(
                &self,
                tenant: &str,
                id: $crate::__forward::Uuid,
            ) -> $crate::Result<$crate::Job> {
                jobs::get(self, tenant, id).await
            }

            async fn list(
                &self,
                tenant: &str,
                filter: &$crate::JobFilter,
            ) -> $crate::Result<$crate::JobPage> {
                jobs::list(self, tenant, filter).await
            }

            async fn events(
                &self,
                tenant: &str,
                id: $crate::__forward::Uuid,
                cursor: Option<$crate::EventCursor>,
                limit: u32,
            ) -> $crate::Result<$crate::EventPage> {
                jobs::events(self, tenant, id, cursor, limit).await
            }

            async fn feed_head(&self) -> $crate::Result<$crate::FeedCursor> {
                feed::feed_head(self).await
            }

            async fn feed_read(
                &self,
                after: &$crate::FeedCursor,
                filter: &$crate::FeedFilter,
                limit: u32,
            ) -> $crate::Result<$crate::FeedPage> {
                feed::feed_read(self, after, filter, limit).await
            }

            async fn dependencies(
                &self,
                tenant: &str,
                id: $crate::__forward::Uuid,
            ) -> $crate::Result<Vec<$crate::DependencyJob>> {
                workflows::dependencies(self, tenant, id).await
            }

            async fn enqueue_workflow(
                &self,
                tenant: &str,
                id: $crate::__forward::Uuid,
                workflow: &$crate::NewWorkflow,
                jobs: &[$crate::NewJobRef<'_>],
                max_queues: u32,
            ) -> $crate::Result<$crate::WorkflowEnqueued> {
                workflows::enqueue_workflow(self, tenant, id, workflow, jobs, max_queues).await
            }

            async fn get_workflow(
                &self,
                tenant: &str,
                id: $crate::__forward::Uuid,
            ) -> $crate::Result<$crate::WorkflowGraph> {
                workflows::get_workflow(self, tenant, id).await
            }

            async fn list_workflows(
                &self,
                tenant: &str,
                filter: &$crate::WorkflowFilter,
            ) -> $crate::Result<$crate::WorkflowPage> {
                workflows::list_workflows(self, tenant, filter).await
            }

            async fn cancel_workflow(
                &self,
                tenant: &str,
                id: $crate::__forward::Uuid,
            ) -> $crate::Result<$crate::WorkflowCancelled> {
                workflows::cancel_workflow(self, tenant, id).await
            }

            async fn retry_workflow(
                &self,
                tenant: &str,
                id: $crate::__forward::Uuid,
                mode: $crate::RetryMode,
            ) -> $crate::Result<u64> {
                workflows::retry_workflow(self, tenant, id, mode).await
            }

            async fn queue_stats(
                &self,
                tenant: &str,
                queue: &str,
            ) -> $crate::Result<$crate::QueueStats> {
                queues::queue_stats(self, tenant, queue).await
            }

            async fn list_queues(&self, tenant: &str) -> $crate::Result<Vec<$crate::QueueStats>> {
                queues::list_queues(self, tenant).await
            }

            async fn delete_queue(&self, tenant: &str, queue: &str) -> $crate::Result<()> {
                queues::delete_queue(self, tenant, queue).await
            }

            async fn throughput(
                &self,
                tenant: &str,
                queue: &str,
                minutes: u32,
            ) -> $crate::Result<$crate::QueueThroughput> {
                queues::throughput(self, tenant, queue, minutes).await
            }

            async fn list_workers(
                &self,
                tenant: &str,
            ) -> $crate::Result<Vec<$crate::WorkerSummary>> {
                jobs::list_workers(self, tenant).await
            }

            async fn announce_worker(
                &self,
                tenant: &str,
                worker_id: &str,
                announcement: &$crate::WorkerAnnouncement,
                max_live: u32,
            ) -> $crate::Result<$crate::__forward::DateTime<$crate::__forward::Utc>> {
                jobs::announce_worker(self, tenant, worker_id, announcement, max_live).await
            }

            async fn touch_worker(&self, tenant: &str, worker_id: &str) -> $crate::Result<()> {
                jobs::touch_worker(self, tenant, worker_id).await
            }

            async fn announced_workers(
                &self,
                tenant: &str,
            ) -> $crate::Result<Vec<(String, $crate::WorkerPresence)>> {
                jobs::announced_workers(self, tenant).await
            }

            async fn set_paused(
                &self,
                tenant: &str,
                queue: &str,
                paused: bool,
                max_queues: u32,
            ) -> $crate::Result<$crate::QueueStats> {
                queues::set_paused(self, tenant, queue, paused, max_queues).await
            }

            async fn configure_queue(
                &self,
                tenant: &str,
                queue: &str,
                patch: &$crate::QueueConfigPatch,
                max_queues: u32,
            ) -> $crate::Result<$crate::QueueStats> {
                queues::configure_queue(self, tenant, queue, patch, max_queues).await
            }

            fn fence_maintenance(&self, lease: Option<(&str, $crate::LeaseToken)>) {
                maintenance::fence_maintenance(self, lease)
            }

            async fn prune_empty_queues(&self, batch: u32) -> $crate::Result<u64> {
                maintenance::prune_empty_queues(self, batch).await
            }

            async fn reap_lapsed_leases(&self, batch: u32) -> $crate::Result<$crate::ReapReport> {
                maintenance::reap_lapsed_leases(self, batch).await
            }

            async fn expire_jobs(&self, batch: u32) -> $crate::Result<u64> {
                maintenance::expire_jobs(self, batch).await
            }

            async fn prune_finished(&self, retention_ms: i64, batch: u32) -> $crate::Result<u64> {
                maintenance::prune_finished(self, retention_ms, batch).await
            }

            async fn acquire_lease(
                &self,
                name: &str,
                holder: &str,
                ttl_ms: i64,
            ) -> $crate::Result<Option<$crate::Lease>> {
                maintenance::acquire_lease(self, name, holder, ttl_ms).await
            }

            async fn renew_lease(
                &self,
                name: &str,
                token: $crate::LeaseToken,
                ttl_ms: i64,
            ) -> $crate::Result<$crate::Lease> {
                maintenance::renew_lease(self, name, token, ttl_ms).await
            }

            async fn release_lease(
                &self,
                name: &str,
                token: $crate::LeaseToken,
            ) -> $crate::Result<()> {
                maintenance::release_lease(self, name, token).await
            }

            async fn create_tenant(&self, name: &str) -> $crate::Result<$crate::Tenant> {
                tenants::create_tenant(self, name).await
            }

            async fn list_tenants(&self) -> $crate::Result<Vec<$crate::Tenant>> {
                tenants::list_tenants(self).await
            }

            async fn get_tenant(
                &self,
                id: $crate::__forward::Uuid,
            ) -> $crate::Result<$crate::Tenant> {
                tenants::get_tenant(self, id).await
            }

            async fn ensure_tenant(&self, name: &str) -> $crate::Result<$crate::Tenant> {
                tenants::ensure_tenant(self, name).await
            }

            async fn create_api_key(
                &self,
                tenant_id: $crate::__forward::Uuid,
                name: Option<&str>,
                admin: bool,
                key_id: $crate::__forward::Uuid,
                hash: [u8; 32],
            ) -> $crate::Result<$crate::ApiKeyInfo> {
                tenants::create_api_key(self, tenant_id, name, admin, key_id, hash).await
            }

            async fn find_api_key(
                &self,
                key_id: $crate::__forward::Uuid,
            ) -> $crate::Result<Option<$crate::keys::StoredKey>> {
                tenants::find_api_key(self, key_id).await
            }

            async fn suspend_tenant(
                &self,
                id: $crate::__forward::Uuid,
            ) -> $crate::Result<$crate::keys::TenantStatus> {
                tenants::suspend_tenant(self, id).await
            }

            async fn resume_tenant(
                &self,
                id: $crate::__forward::Uuid,
                next_runs: &[(
                    $crate::__forward::Uuid,
                    Option<$crate::__forward::DateTime<$crate::__forward::Utc>>,
                )],
            ) -> $crate::Result<$crate::keys::TenantStatus> {
                tenants::resume_tenant(self, id, next_runs).await
            }

            async fn suspended_tenants(
                &self,
            ) -> $crate::Result<
                Vec<(
                    $crate::__forward::Uuid,
                    $crate::__forward::DateTime<$crate::__forward::Utc>,
                )>,
            > {
                tenants::suspended_tenants(self).await
            }

            async fn revoke_api_key(&self, key_id: $crate::__forward::Uuid) -> $crate::Result<()> {
                tenants::revoke_api_key(self, key_id).await
            }

            async fn list_api_keys(
                &self,
                tenant_id: $crate::__forward::Uuid,
            ) -> $crate::Result<Vec<$crate::ApiKeyInfo>> {
                tenants::list_api_keys(self, tenant_id).await
            }

            async fn touch_api_key(
                &self,
                key_id: $crate::__forward::Uuid,
                min_interval_ms: i64,
            ) -> $crate::Result<bool> {
                tenants::touch_api_key(self, key_id, min_interval_ms).await
            }

            async fn store_operator_key(
                &self,
                tenant_id: $crate::__forward::Uuid,
                key_id: $crate::__forward::Uuid,
                hash: [u8; 32],
            ) -> $crate::Result<$crate::OperatorKeySetup> {
                tenants::store_operator_key(self, tenant_id, key_id, hash).await
            }

            async fn server_secret_check(
                &self,
                check: [u8; 32],
                record: bool,
            ) -> $crate::Result<Option<[u8; 32]>> {
                tenants::server_secret_check(self, check, record).await
            }

            async fn create_schedule(
                &self,
                tenant: &str,
                spec: &$crate::ScheduleSpec,
                next_run_at: Option<$crate::__forward::DateTime<$crate::__forward::Utc>>,
                max_schedules: u32,
            ) -> $crate::Result<$crate::Schedule> {
                schedules::create_schedule(self, tenant, spec, next_run_at, max_schedules).await
            }

            async fn get_schedule(
                &self,
                tenant: &str,
                id: $crate::__forward::Uuid,
            ) -> $crate::Result<$crate::Schedule> {
                schedules::get_schedule(self, tenant, id).await
            }

            async fn find_schedule(
                &self,
                tenant: &str,
                name: &str,
            ) -> $crate::Result<Option<$crate::Schedule>> {
                schedules::find_schedule(self, tenant, name).await
            }

            async fn list_schedules(&self, tenant: &str) -> $crate::Result<Vec<$crate::Schedule>> {
                schedules::list_schedules(self, tenant).await
            }

            async fn update_schedule(
                &self,
                tenant: &str,
                id: $crate::__forward::Uuid,
                spec: &$crate::ScheduleSpec,
                next_run_at: Option<$crate::__forward::DateTime<$crate::__forward::Utc>>,
            ) -> $crate::Result<$crate::Schedule> {
                schedules::update_schedule(self, tenant, id, spec, next_run_at).await
            }

            async fn recent_schedule_runs(
                &self,
                tenant: &str,
                limit: u32,
            ) -> $crate::Result<Vec<($crate::__forward::Uuid, $crate::ScheduleRun)>> {
                schedules::recent_schedule_runs(self, tenant, limit).await
            }

            async fn delete_schedule(
                &self,
                tenant: &str,
                id: $crate::__forward::Uuid,
            ) -> $crate::Result<()> {
                schedules::delete_schedule(self, tenant, id).await
            }

            async fn schedule_runs(
                &self,
                tenant: &str,
                id: $crate::__forward::Uuid,
                limit: u32,
            ) -> $crate::Result<Vec<$crate::ScheduleRun>> {
                schedules::schedule_runs(self, tenant, id, limit).await
            }

            async fn due_schedules(
                &self,
                limit: u32,
            ) -> $crate::Result<(
                $crate::__forward::DateTime<$crate::__forward::Utc>,
                Vec<$crate::Schedule>,
            )> {
                schedules::due_schedules(self, limit).await
            }

            async fn next_schedule_due(
                &self,
            ) -> $crate::Result<(
                $crate::__forward::DateTime<$crate::__forward::Utc>,
                Option<$crate::__forward::DateTime<$crate::__forward::Utc>>,
            )> {
                schedules::next_schedule_due(self).await
            }

            async fn fire_schedules(
                &self,
                fires: &[$crate::schedule::FireRef<'_>],
            ) -> $crate::Result<Vec<$crate::schedule::FireOutcome>> {
                schedules::fire_schedules(self, fires).await
            }

            async fn trigger_schedule(
                &self,
                tenant: &str,
                id: $crate::__forward::Uuid,
                job: $crate::NewJobRef<'_>,
            ) -> $crate::Result<$crate::Job> {
                schedules::trigger_schedule(self, tenant, id, job).await
            }

            async fn prune_schedule_runs(
                &self,
                retention_ms: i64,
                batch: u32,
            ) -> $crate::Result<u64> {
                schedules::prune_schedule_runs(self, retention_ms, batch).await
            }
        }
    };
}
