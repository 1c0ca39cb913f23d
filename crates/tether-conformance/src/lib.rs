//! The behaviour suite every tether backend must pass, and the harness that
//! provisions a throw-away database for each test.
//!
//! A backend's test file is one line:
//!
//! ```ignore
//! tether_conformance::behaviour_suite!(tether_conformance::postgres);
//! ```
//!
//! which expands to one `#[tokio::test]` per behaviour in [`suite`]. Each test
//! gets a fresh database from the constructor ([`postgres`] or [`sqlite`]),
//! runs the behaviour through the validated [`Engine`], and drops the
//! database afterwards ([`TestDb::cleanup`]). A failing test leaks its
//! database; PostgreSQL leftovers are all named `tether_test_%`, SQLite ones
//! live in `tether-test-*` folders of the temp directory.
//!
//! The suite never skips: if PostgreSQL cannot be reached, the postgres
//! constructor panics loudly.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use sqlx::Connection;
use tether_core::{Engine, Result};
use tether_postgres::{PgOptions, PgStore};
use tether_sqlite::SqliteStore;
use uuid::Uuid;

pub mod suite;

/// The admin URL used when `TETHER_TEST_DATABASE_URL` is not set.
pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// Name prefix of every database (PostgreSQL) and folder (SQLite) the
/// harness creates; leftovers of failed tests can be swept by it.
pub const TEST_DB_PREFIX: &str = "tether_test_";

/// The hooks a backend exposes under its `testing` feature: they move time
/// forward for one row, as if the clock had advanced.
#[async_trait]
trait Hooks: Send + Sync {
    async fn lapse(&self, id: Uuid) -> Result<()>;
    async fn lapse_named(&self, name: &str) -> Result<()>;
    async fn due(&self, id: Uuid) -> Result<()>;
    async fn age_worker(&self, tenant: &str, worker_id: &str, ms: i64) -> Result<()>;
}

#[async_trait]
impl Hooks for PgStore {
    async fn lapse(&self, id: Uuid) -> Result<()> {
        PgStore::lapse_lease(self, id).await
    }
    async fn lapse_named(&self, name: &str) -> Result<()> {
        PgStore::lapse_named_lease(self, name).await
    }
    async fn due(&self, id: Uuid) -> Result<()> {
        PgStore::make_due(self, id).await
    }
    async fn age_worker(&self, tenant: &str, worker_id: &str, ms: i64) -> Result<()> {
        PgStore::age_worker(self, tenant, worker_id, ms).await
    }
}

#[async_trait]
impl Hooks for SqliteStore {
    async fn lapse(&self, id: Uuid) -> Result<()> {
        SqliteStore::lapse_lease(self, id).await
    }
    async fn lapse_named(&self, name: &str) -> Result<()> {
        SqliteStore::lapse_named_lease(self, name).await
    }
    async fn due(&self, id: Uuid) -> Result<()> {
        SqliteStore::make_due(self, id).await
    }
    async fn age_worker(&self, tenant: &str, worker_id: &str, ms: i64) -> Result<()> {
        SqliteStore::age_worker(self, tenant, worker_id, ms).await
    }
}

/// What has to be removed when a test is done.
enum Drop {
    Postgres { admin_url: String, database: String },
    Sqlite { dir: PathBuf },
}

/// A fresh, empty database behind an [`Engine`], plus the backend's time
/// hooks. Obtain one from [`postgres`] or [`sqlite`]; call
/// [`TestDb::cleanup`] when done.
pub struct TestDb {
    /// The engine every behaviour is tested through.
    pub engine: Engine,
    hooks: Arc<dyn Hooks>,
    drop: Drop,
}

impl std::fmt::Debug for TestDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestDb")
            .field("backend", &self.backend())
            .finish_non_exhaustive()
    }
}

impl TestDb {
    /// The backend's short name (`postgres`, `sqlite`).
    pub fn backend(&self) -> &'static str {
        self.engine.store().backend()
    }

    /// The URL of this test's PostgreSQL database (`None` on SQLite), for
    /// tests that need a second store on the same database.
    pub fn postgres_url(&self) -> Option<String> {
        match &self.drop {
            Drop::Postgres {
                admin_url,
                database,
            } => Some(tether_postgres::url_with_database(admin_url, database)),
            Drop::Sqlite { .. } => None,
        }
    }

    /// The path of this test's SQLite file (`None` on PostgreSQL), for
    /// tests that need another process on the same file.
    pub fn sqlite_path(&self) -> Option<PathBuf> {
        match &self.drop {
            Drop::Postgres { .. } => None,
            Drop::Sqlite { dir } => Some(dir.join(SQLITE_FILE)),
        }
    }

    /// Moves a running job's `lease_expires_at` into the past, as if its
    /// worker had stopped heartbeating long ago. Panics if the hook fails.
    pub async fn lapse_lease(&self, id: Uuid) {
        if let Err(e) = self.hooks.lapse(id).await {
            panic!("testing hook lapse_lease({id}) failed: {e}");
        }
    }

    /// Moves a named lease's expiry into the past. Panics if the hook fails.
    pub async fn lapse_named_lease(&self, name: &str) {
        if let Err(e) = self.hooks.lapse_named(name).await {
            panic!("testing hook lapse_named_lease({name}) failed: {e}");
        }
    }

    /// Moves a queued job's `run_at` to now, as if its delay had passed.
    /// Panics if the hook fails.
    pub async fn make_due(&self, id: Uuid) {
        if let Err(e) = self.hooks.due(id).await {
            panic!("testing hook make_due({id}) failed: {e}");
        }
    }

    /// Moves an announced worker's `last_seen_at` `ms` into the past, as if
    /// it had not been seen since. Panics if the hook fails.
    pub async fn age_worker(&self, tenant: &str, worker_id: &str, ms: i64) {
        if let Err(e) = self.hooks.age_worker(tenant, worker_id, ms).await {
            panic!("testing hook age_worker({worker_id}) failed: {e}");
        }
    }

    /// The two tenants every HTTP test starts from: `default` with an admin
    /// key, and `other` with a key that is not an admin's.
    pub async fn two_tenants(&self) -> TwoTenants {
        let default = self
            .engine
            .ensure_tenant("default")
            .await
            .expect("tenant default");
        let (_, admin_key) = self
            .engine
            .issue_api_key(default.id, Some("admin"), true)
            .await
            .expect("admin key of default");
        let other = self
            .engine
            .ensure_tenant("other")
            .await
            .expect("tenant other");
        let (_, other_key) = self
            .engine
            .issue_api_key(other.id, Some("other"), false)
            .await
            .expect("key of other");
        TwoTenants {
            admin_key,
            other_key,
            other_id: other.id,
        }
    }

    /// Closes the store and deletes the database (PostgreSQL: `DROP
    /// DATABASE ... WITH (FORCE)`; SQLite: removes the folder).
    pub async fn cleanup(self) {
        let TestDb {
            engine,
            hooks,
            drop,
        } = self;
        std::mem::drop(engine);
        std::mem::drop(hooks);
        match drop {
            Drop::Postgres {
                admin_url,
                database,
            } => {
                let mut admin = admin_connection(&admin_url).await;
                let sql = format!("DROP DATABASE IF EXISTS \"{database}\" WITH (FORCE)");
                if let Err(e) = sqlx::raw_sql(&sql).execute(&mut admin).await {
                    panic!("cannot drop test database {database}: {e}");
                }
                let _ = admin.close().await;
            }
            Drop::Sqlite { dir } => {
                // The pool closes its connections in the background; a
                // leftover folder is harmless, so do not fail the test on it.
                let _ = std::fs::remove_dir_all(&dir);
            }
        }
    }
}

/// The keys of [`TestDb::two_tenants`].
#[derive(Debug, Clone)]
pub struct TwoTenants {
    /// An admin key of tenant `default`.
    pub admin_key: String,
    /// A key of tenant `other`, not an admin's.
    pub other_key: String,
    /// The id of tenant `other`.
    pub other_id: Uuid,
}

/// A unique name: `<prefix><pid>_<counter>_<random>`.
fn unique_name(prefix: &str, sep: char) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let random = Uuid::new_v4().simple().to_string();
    format!(
        "{prefix}{pid}{sep}{n}{sep}{rand}",
        pid = std::process::id(),
        rand = &random[..8]
    )
}

async fn admin_connection(admin_url: &str) -> sqlx::PgConnection {
    match sqlx::PgConnection::connect(admin_url).await {
        Ok(conn) => conn,
        Err(e) => panic!(
            "\n\n\
             ******************************************************************\n\
             *  tether conformance: cannot reach PostgreSQL at\n\
             *    {admin_url}\n\
             *  error: {e}\n\
             *  Start PostgreSQL or point TETHER_TEST_DATABASE_URL at one.\n\
             *  The postgres behaviour suite never skips.\n\
             ******************************************************************\n"
        ),
    }
}

/// A fresh PostgreSQL database for one test.
///
/// Connects to `TETHER_TEST_DATABASE_URL` (default
/// [`DEFAULT_DATABASE_URL`]), creates a database named
/// `tether_test_<pid>_<counter>_<random>` and connects a [`PgStore`] to it
/// (which applies the migrations). Panics loudly if PostgreSQL cannot be
/// reached: this suite never skips.
pub async fn postgres() -> TestDb {
    let (admin_url, database) = create_postgres_database().await;
    connect_postgres(admin_url, database).await
}

/// A fresh PostgreSQL database as an older tether left it, for upgrade
/// tests: migrated up to schema `version` only, then `seed` (SQL written for
/// that schema) run on it; then connected like [`postgres`], which applies
/// the newer migrations.
pub async fn postgres_upgraded_from(version: i64, seed: &str) -> TestDb {
    let (admin_url, database) = create_postgres_database().await;
    let url = tether_postgres::url_with_database(&admin_url, &database);
    let pool = match sqlx::PgPool::connect(&url).await {
        Ok(pool) => pool,
        Err(e) => panic!("cannot connect to {url}: {e}"),
    };
    if let Err(e) = tether_postgres::migrate_up_to(&pool, version).await {
        panic!("cannot migrate {database} up to version {version}: {e}");
    }
    if let Err(e) = sqlx::raw_sql(seed).execute(&pool).await {
        panic!("cannot seed {database}: {e}");
    }
    pool.close().await;
    connect_postgres(admin_url, database).await
}

/// Creates an empty database; returns the admin URL and its name.
async fn create_postgres_database() -> (String, String) {
    let admin_url =
        std::env::var("TETHER_TEST_DATABASE_URL").unwrap_or_else(|_| DEFAULT_DATABASE_URL.into());
    let database = unique_name(TEST_DB_PREFIX, '_');
    let mut admin = admin_connection(&admin_url).await;
    let sql = format!("CREATE DATABASE \"{database}\"");
    if let Err(e) = sqlx::raw_sql(&sql).execute(&mut admin).await {
        panic!("cannot create test database {database} through {admin_url}: {e}");
    }
    let _ = admin.close().await;
    (admin_url, database)
}

async fn connect_postgres(admin_url: String, database: String) -> TestDb {
    let url = tether_postgres::url_with_database(&admin_url, &database);
    connect_postgres_with(admin_url, database, &url, &PgOptions::default()).await
}

/// The admin URL of the PgBouncer (transaction pooling) in front of the test
/// PostgreSQL used when `TETHER_TEST_PGBOUNCER_URL` is not set; `scripts/pgbouncer`
/// starts one there.
pub const DEFAULT_PGBOUNCER_URL: &str = "postgres://postgres@127.0.0.1:6432/postgres";

/// A fresh PostgreSQL database for one test, which the store reaches through
/// PgBouncer in transaction pooling mode (`TETHER_TEST_PGBOUNCER_URL`,
/// default [`DEFAULT_PGBOUNCER_URL`]), with LISTEN on a direct connection.
/// Panics loudly if PgBouncer cannot be reached: run `scripts/pgbouncer`.
pub async fn postgres_behind_pgbouncer() -> TestDb {
    let (admin_url, database) = create_postgres_database().await;
    let bouncer =
        std::env::var("TETHER_TEST_PGBOUNCER_URL").unwrap_or_else(|_| DEFAULT_PGBOUNCER_URL.into());
    let url = tether_postgres::url_with_database(&bouncer, &database);
    let options = PgOptions {
        transaction_pooler: true,
        listen_url: Some(tether_postgres::url_with_database(&admin_url, &database)),
        ..PgOptions::default()
    };
    connect_postgres_with(admin_url, database, &url, &options).await
}

async fn connect_postgres_with(
    admin_url: String,
    database: String,
    url: &str,
    options: &PgOptions,
) -> TestDb {
    let store = match PgStore::connect_with(url, options).await {
        Ok(store) => Arc::new(store),
        Err(e) => panic!(
            "PgStore::connect_with({url}) failed: {e}{}",
            if options.transaction_pooler {
                " (is PgBouncer running? scripts/pgbouncer starts one)"
            } else {
                ""
            }
        ),
    };
    TestDb {
        engine: Engine::new(store.clone()),
        hooks: store,
        drop: Drop::Postgres {
            admin_url,
            database,
        },
    }
}

/// A fresh SQLite file for one test:
/// `<temp dir>/tether-test-<pid>-<counter>-<random>/db.sqlite`.
pub async fn sqlite() -> TestDb {
    let dir = create_sqlite_dir();
    open_sqlite(dir).await
}

/// A fresh SQLite file as an older tether left it, for upgrade tests:
/// migrated up to schema `version` only, then `seed` (SQL written for that
/// schema) run on it; then opened like [`sqlite`], which applies the newer
/// migrations.
pub async fn sqlite_upgraded_from(version: i64, seed: &str) -> TestDb {
    let dir = create_sqlite_dir();
    let path = dir.join(SQLITE_FILE);
    if let Err(e) = tether_sqlite::migrate_up_to(&path, version).await {
        panic!(
            "cannot migrate {} up to version {version}: {e}",
            path.display()
        );
    }
    let seeded = async {
        let mut conn = sqlx::SqliteConnection::connect_with(
            &sqlx::sqlite::SqliteConnectOptions::new().filename(&path),
        )
        .await?;
        sqlx::raw_sql(seed).execute(&mut conn).await?;
        conn.close().await
    };
    if let Err(e) = seeded.await {
        panic!("cannot seed {}: {e}", path.display());
    }
    open_sqlite(dir).await
}

/// The file name of the database inside a SQLite test's folder.
const SQLITE_FILE: &str = "db.sqlite";

fn create_sqlite_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(unique_name("tether-test-", '-'));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        panic!("cannot create {}: {e}", dir.display());
    }
    dir
}

async fn open_sqlite(dir: PathBuf) -> TestDb {
    let path = dir.join(SQLITE_FILE);
    let store = match SqliteStore::open(&path).await {
        Ok(store) => Arc::new(store),
        Err(e) => panic!("SqliteStore::open({}) failed: {e}", path.display()),
    };
    TestDb {
        engine: Engine::new(store.clone()),
        hooks: store,
        drop: Drop::Sqlite { dir },
    }
}

/// How long one behaviour may take before its test fails as hung.
pub const TEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(90);

/// Runs one behaviour against a fresh database from `constructor`, failing
/// (instead of hanging) if it takes longer than [`TEST_TIMEOUT`]. The
/// database is cleaned up only when the behaviour passed.
pub async fn run<C, CF, F>(constructor: C, behaviour: F)
where
    C: FnOnce() -> CF,
    CF: std::future::Future<Output = TestDb>,
    F: for<'a> FnOnce(&'a TestDb) -> futures_util::future::BoxFuture<'a, ()>,
{
    let db = constructor().await;
    if tokio::time::timeout(TEST_TIMEOUT, behaviour(&db))
        .await
        .is_err()
    {
        panic!(
            "behaviour did not finish within {:?} on {}",
            TEST_TIMEOUT,
            db.backend()
        );
    }
    db.cleanup().await;
}

/// Polls `f` every 20 ms until it answers `Some`, and returns that;
/// panics naming `what` after `within`. The one way tests wait for
/// something another task or process does.
pub async fn eventually<T, F, Fut>(what: &str, within: std::time::Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("gave up after {within:?} waiting for {what}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Declares each listed `async fn(&TestDb)` of the enclosing module as one
/// test per backend (modules `postgres` and `sqlite`), each on a fresh
/// database through [`run`]. `threads = N;` first sets the tokio worker
/// threads of each test (default 2).
///
/// ```ignore
/// tether_conformance::both_backends!(threads = 4; retries_are_spaced, leases_lapse);
/// ```
#[macro_export]
macro_rules! both_backends {
    (threads = $threads:tt; $($name:ident),* $(,)?) => {
        mod postgres {
            $(
                #[::tokio::test(flavor = "multi_thread", worker_threads = $threads)]
                async fn $name() {
                    $crate::run($crate::postgres, |db| ::std::boxed::Box::pin(super::$name(db)))
                        .await;
                }
            )*
        }
        mod sqlite {
            $(
                #[::tokio::test(flavor = "multi_thread", worker_threads = $threads)]
                async fn $name() {
                    $crate::run($crate::sqlite, |db| ::std::boxed::Box::pin(super::$name(db)))
                        .await;
                }
            )*
        }
    };
    ($($name:ident),* $(,)?) => {
        $crate::both_backends!(threads = 2; $($name),*);
    };
}

/// Expands to one `#[tokio::test]` per behaviour of the suite, each running
/// against a fresh database from `$constructor` (e.g.
/// `tether_conformance::postgres`).
#[macro_export]
macro_rules! behaviour_suite {
    ($constructor:path) => {
        $crate::__behaviour_tests! {
            $constructor;
            workflows {
                a_dependent_waits_until_its_dependencies_succeed,
                dependencies_that_already_ended_count_at_enqueue,
                a_failure_cancels_the_graph_downstream,
                every_path_that_ends_a_job_moves_its_dependents,
                a_batch_enqueues_a_graph,
                bad_dependencies_write_nothing,
                concurrent_ends_release_exactly_once,
                replay_waits_for_dependencies_again,
                a_workflow_is_a_graph_enqueued_at_once,
                a_workflow_key_answers_the_existing_workflow,
                jobs_join_a_running_workflow,
                workflows_list_by_state_and_name,
                cancelling_a_workflow_stops_every_unfinished_job,
                retrying_a_workflow_puts_failed_jobs_back,
                a_waiting_job_holds_its_unique_key,
                workflow_events_announce_creation_and_each_finish,
                concurrent_last_ends_announce_once,
            }
            feed {
                the_feed_reads_each_event_once_in_order,
                feed_filters_narrow_what_is_read,
                concurrent_writers_are_read_exactly,
                events_pruned_before_they_were_read_are_a_gap,
                feed_reads_refuse_bad_input,
            }
            claim {
                one_owner_under_eight_concurrent_claimers,
                claim_returns_at_most_limit_jobs,
                claim_order_is_priority_desc_run_at_id,
                delayed_jobs_are_not_claimed_until_due,
                other_queues_and_tenants_are_not_claimed,
            }
            fencing {
                every_claim_mints_a_distinct_token,
                stale_token_is_refused_after_takeover_and_changes_nothing,
                reaper_takeover_alone_fences_the_old_holder,
                lapsed_lease_nobody_took_over_still_belongs_to_holder,
                holder_and_reaper_race_has_one_winner,
                wrong_token_is_lease_lost,
                heartbeat_after_the_attempts_own_report_records_no_lease_lost,
                unknown_id_is_job_not_found,
            }
            clock {
                lease_expiry_is_database_now_plus_ttl,
                delayed_run_at_is_created_at_plus_delay,
                heartbeat_records_progress_without_history,
                answers_match_the_stored_job,
            }
            reports {
                repeated_reports_are_answered_like_the_first,
                a_different_report_with_a_spent_token_is_a_conflict,
                lease_lost_only_when_something_else_took_the_job,
                report_racing_its_own_retry_is_never_lease_lost,
            }
            carried {
                a_claim_applies_its_reports_first_and_answers_each,
                the_slots_carried_reports_free_count_for_their_claim,
                a_carried_report_repeated_is_answered_like_the_first,
                a_claim_bad_as_a_whole_changes_nothing,
            }
            attempts {
                attempt_grows_at_claim,
                lapse_on_last_attempt_fails_and_is_never_claimed_again,
                snooze_gives_the_attempt_back,
            }
            reaper {
                lapsed_lease_is_requeued_in_real_time,
                reaper_buries_exhausted_requeues_rest_and_cancels_in_one_pass,
                reaper_pass_is_bounded_by_batch,
                reaper_works_across_tenants,
            }
            dedupe {
                idempotency_key_returns_existing_job_in_any_state,
                unique_key_dedupes_only_against_active_jobs,
                idempotency_key_wins_over_unique_key,
                concurrent_enqueues_with_one_unique_key_create_one_job,
                concurrent_enqueues_with_one_idempotency_key_create_one_job,
                duplicates_inside_one_batch_resolve_to_the_first,
                batch_keys_resolve_in_order_against_existing_jobs,
                single_enqueues_share_commits_and_keep_their_own_answers,
                a_group_member_that_fails_fails_alone,
            }
            retry {
                retryable_failure_backs_off_exponentially_with_jitter,
                backoff_is_capped,
                retry_after_sets_the_exact_delay_and_counts_an_attempt,
                snooze_requeues_after_delay_with_event,
                fatal_failure_fails_at_once,
                last_error_keeps_the_tail,
            }
            cancel {
                cancel_of_queued_job_is_immediate,
                cancel_of_running_job_is_requested_and_acknowledged,
                failure_or_snooze_while_cancel_requested_ends_cancelled,
                complete_while_cancel_requested_succeeds,
                lapsed_lease_with_cancel_requested_ends_cancelled,
                cancel_of_terminal_job_is_invalid_state,
                cancel_racing_claims_never_loses_the_request,
            }
            pause {
                paused_queue_accepts_enqueues_and_hands_out_nothing,
            }
            flow {
                max_running_caps_claims_and_ends_free_slots,
                concurrent_claimers_never_exceed_max_running,
                reaped_job_frees_its_slot,
                a_freed_slot_wakes_throttled_claims,
                key_max_running_passes_over_full_keys,
                a_bounded_walk_reaches_every_key_in_turn,
                concurrent_claimers_never_exceed_key_max_running,
                claims_follow_the_limits_when_they_change,
                rate_limit_holds_a_sliding_window,
                rate_window_wakes_claims_and_fair_claims_share,
            }
            leader {
                leader_lease_is_exclusive_and_fenced,
                lapsed_leader_lease_is_renewable_until_taken,
                leader_takeover_within_one_ttl_in_real_time,
                fenced_passes_of_a_lapsed_leader_change_nothing,
            }
            validation {
                bad_names_are_refused,
                bad_priority_delay_and_attempts_are_refused,
                oversize_payload_is_refused,
                bad_batch_sizes_are_refused,
                one_bad_entry_refuses_the_whole_batch,
                bad_arguments_to_other_operations_are_refused,
                nul_characters_are_refused_or_replaced,
                out_of_range_times_are_refused,
            }
            tenants {
                tenant_cannot_see_or_touch_another_tenants_job,
                tenant_listings_and_stats_are_separate,
                same_keys_in_two_tenants_make_two_jobs,
            }
            history {
                history_records_every_transition_in_order,
                history_is_paged_oldest_first,
            }
            keys {
                tenants_are_created_listed_and_fetched,
                duplicate_tenant_name_is_already_exists,
                ensure_tenant_is_idempotent,
                issued_key_authenticates_as_its_tenant,
                bad_keys_are_unauthenticated,
                only_the_hash_of_the_secret_is_stored,
                bad_key_requests_are_refused,
                keys_are_listed_only_under_their_tenant,
                revocation_takes_effect_at_once,
                operator_key_is_keyed_by_the_server_secret,
                rotating_the_operator_key_revokes_the_old_one,
                replicas_starting_at_once_agree_on_the_operator_key,
                the_first_server_secret_is_kept,
                key_use_is_recorded_at_most_once_per_interval,
                suspended_tenants_authenticate_and_fire_nothing,
            }
            operators {
                workers_are_read_from_running_jobs,
                announced_workers_are_listed_idle_and_forgotten,
                throughput_counts_outcomes_per_minute,
                only_an_empty_queue_is_removed,
                recent_runs_of_every_schedule,
                jobs_are_found_by_id_prefix_and_creation_time,
            }
            replay {
                replay_resets_attempts_and_keeps_the_id,
                replay_of_active_job_is_invalid_state,
                replay_of_succeeded_job_runs_it_again,
                replay_is_refused_while_unique_key_is_held,
                bulk_replay_by_queue_kind_and_state,
                replay_clears_or_sets_expires_at,
                bulk_replay_rounds_follow_a_cursor_and_take_each_job_once,
            }
            expiry {
                expired_job_fails_and_is_never_claimed,
            }
            retention {
                prune_deletes_finished_jobs_and_history_only,
            }
            listing {
                list_filters_by_queue_state_kind_and_tag,
                cursor_pagination_covers_every_job_once,
            }
            queues {
                queue_stats_report_counts_ready_scheduled_age_and_leases,
                queue_config_is_copied_at_enqueue,
                list_queues_shows_every_used_queue,
                queue_limit_refuses_new_queues_and_writes_nothing,
                schedule_limit_refuses_more_schedules,
                empty_queues_are_removed_and_others_kept,
                queue_removal_racing_enqueues_keeps_every_used_queue,
            }
            batch {
                complete_many_answers_per_item,
                heartbeat_many_answers_per_item,
                repeated_stale_items_record_one_lease_lost_per_batch,
                each_item_is_answered_by_its_own_token,
            }
            wakeups {
                enqueue_replay_and_hand_back_wake_subscribers,
            }
            headers {
                headers_travel_with_the_job,
                bad_headers_are_refused_and_enqueue_nothing,
            }
            model {
                model_based_random_operation_sequences,
            }
            schedules {
                schedules_crud_and_tenant_walls,
                schedules_put_by_name_create_update_or_leave_unchanged,
                bad_schedules_are_refused_and_write_nothing,
                a_disabled_schedule_keeps_no_next_run_even_if_given_one,
                schedule_runs_are_pruned_and_jobs_outlive_schedules,
                schedule_rows_round_trip,
                deleting_a_schedule_takes_its_runs_and_leaves_its_jobs,
            }
            schedule_fires {
                concurrent_schedulers_fire_each_instant_once,
                missed_fires_collapse_into_one_run,
                short_gaps_are_caught_up_instant_by_instant,
                a_fire_never_makes_a_second_job_for_its_instant,
                overlap_skip_records_skipped_runs,
                disabled_schedules_do_not_fire_or_replay,
                trigger_runs_now_and_keeps_the_timetable,
                one_pass_fires_hundreds_of_due_schedules_once_each,
                racing_passes_fire_each_due_schedule_once,
                a_failed_enqueue_leaves_the_timetable_alone,
                due_schedules_span_tenants_earliest_first,
            }
        }
    };
}

/// Implementation detail of [`behaviour_suite!`].
#[doc(hidden)]
#[macro_export]
macro_rules! __behaviour_tests {
    ($constructor:path; $( $module:ident { $( $name:ident ),* $(,)? } )*) => {
        $(
            mod $module {
                $(
                    #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
                    async fn $name() {
                        $crate::run($constructor, |db| {
                            ::std::boxed::Box::pin($crate::suite::$module::$name(db))
                        })
                        .await;
                    }
                )*
            }
        )*
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_prefixed() {
        let a = unique_name(TEST_DB_PREFIX, '_');
        let b = unique_name(TEST_DB_PREFIX, '_');
        assert_ne!(a, b);
        assert!(a.starts_with("tether_test_"));
        assert!(a.len() < 63, "PostgreSQL truncates identifiers at 63 bytes");
    }
}
