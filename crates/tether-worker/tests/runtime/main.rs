//! The worker runtime against real databases: every behaviour in
//! `runtime/behaviours.rs` runs once on PostgreSQL and once on SQLite, each
//! on a fresh database from the conformance harness. Plus what only one
//! backend can show (hints across two PostgreSQL pools, a real SIGTERM to a
//! child process on an SQLite file) and the builder's validation.

mod behaviours;
mod sigterm;
mod support;

use std::sync::Arc;
use std::time::Duration;

use tether_core::Engine;
use tether_worker::{BuildError, Worker};

use behaviours::*;

tether_conformance::both_backends! {
    threads = 4;
    success_stores_the_result,
    hooks_run_around_every_handler,
    typed_jobs_decode_args_and_bad_payloads_are_fatal,
    retry_then_success,
    fatal_fails_at_once,
    retry_after_sets_the_exact_delay,
    a_short_snooze_is_reported,
    long_snooze_is_handed_back,
    the_queues_lease_applies_and_is_heartbeated_at_a_third,
    an_explicit_lease_ttl_wins_over_the_queues,
    panic_becomes_a_retryable_failure,
    timeout_drops_the_handler_and_fails_the_attempt,
    cancel_of_a_running_job_reaches_the_handler,
    a_cancel_is_pushed_to_the_handler_before_any_heartbeat,
    without_a_push_a_cancel_comes_with_a_heartbeat,
    progress_is_sent_promptly_and_coalesced,
    any_answer_after_a_cancel_request_cancels,
    ignored_cancel_drops_the_handler_after_a_lease_ttl,
    heartbeats_keep_a_long_job_alive,
    lease_lost_to_a_new_owner_discards_the_outcome,
    lease_lost_on_complete_is_discarded,
    concurrency_is_bounded_per_queue,
    a_throttled_queue_runs_within_its_limits,
    an_idle_worker_wakes_on_enqueue,
    graceful_shutdown_hands_back_what_outlives_the_grace,
    a_claim_in_flight_at_shutdown_is_handed_back,
    maintenance_has_one_leader_and_fails_over,
    a_vanished_workers_job_is_requeued_by_the_runtime,
    a_kind_without_handler_is_a_retryable_failure,
    a_source_outage_is_survived,
    failing_heartbeats_back_off,
    completions_are_batched,
    handlers_see_their_attempt,
    handlers_read_their_dependencies,
}

/// PostgreSQL: the worker runs on one store (its own pool and listener), the
/// jobs are enqueued through another, as from another process. The hint
/// crosses by LISTEN/NOTIFY.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_hint_crosses_to_a_worker_on_another_pool() {
    let db = tether_conformance::postgres().await;
    let url = db.postgres_url().expect("a PostgreSQL test database");
    let consumer = Engine::new(Arc::new(
        tether_postgres::PgStore::connect(&url)
            .await
            .expect("second store"),
    ));
    tokio::time::timeout(
        tether_conformance::TEST_TIMEOUT,
        behaviours::wakes_on_enqueue_with(consumer, &db.engine),
    )
    .await
    .expect("the behaviour hung");
    db.cleanup().await;
}

/// The builder refuses incomplete or invalid configurations, each with its
/// own error (nothing is started; the database only provides a source).
#[tokio::test]
async fn build_validates_the_configuration() {
    let db = tether_conformance::sqlite().await;
    let noop_worker = || Worker::builder(db.engine.clone());
    let h = |b: tether_worker::WorkerBuilder| b.handler("k", |_ctx| async move { Ok(None) });
    assert_eq!(h(noop_worker()).build().unwrap_err(), BuildError::NoQueues);
    assert_eq!(
        noop_worker().queue("q", 1).build().unwrap_err(),
        BuildError::NoHandlers
    );
    assert!(matches!(
        h(noop_worker().queue("bad queue", 1)).build().unwrap_err(),
        BuildError::InvalidName { what: "queue", .. }
    ));
    assert!(matches!(
        h(noop_worker().queue("q", 1).tenant(""))
            .build()
            .unwrap_err(),
        BuildError::InvalidName { what: "tenant", .. }
    ));
    assert!(matches!(
        noop_worker()
            .queue("q", 1)
            .handler("no/slash", |_ctx| async move { Ok(None) })
            .build()
            .unwrap_err(),
        BuildError::InvalidName { what: "kind", .. }
    ));
    assert!(matches!(
        h(noop_worker().queue("q", 1).worker_id(""))
            .build()
            .unwrap_err(),
        BuildError::InvalidName {
            what: "worker_id",
            ..
        }
    ));
    assert_eq!(
        h(noop_worker().queue("q", 1).queue("q", 2))
            .build()
            .unwrap_err(),
        BuildError::DuplicateQueue("q".into())
    );
    assert_eq!(
        h(h(noop_worker().queue("q", 1))).build().unwrap_err(),
        BuildError::DuplicateHandler("k".into())
    );
    assert!(matches!(
        h(noop_worker().queue("q", 0)).build().unwrap_err(),
        BuildError::InvalidConcurrency { concurrency: 0, .. }
    ));
    assert!(matches!(
        h(noop_worker()
            .queue("q", 1)
            .lease_ttl(Duration::from_millis(999)))
        .build()
        .unwrap_err(),
        BuildError::InvalidDuration {
            setting: "lease_ttl",
            ..
        }
    ));
    assert!(matches!(
        h(noop_worker().queue("q", 1).poll_interval(Duration::ZERO))
            .build()
            .unwrap_err(),
        BuildError::InvalidDuration {
            setting: "poll_interval",
            ..
        }
    ));
    let w = h(noop_worker().queue("q", 1).queue("r", 1000))
        .build()
        .unwrap();
    assert!(!w.worker_id().is_empty());
    drop(w);
    db.cleanup().await;
}
