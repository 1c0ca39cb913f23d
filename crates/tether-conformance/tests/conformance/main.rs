//! Every test of the behaviour suite's crate, in one binary so that CI
//! links the tree once for them: the suite on each backend, what only
//! PostgreSQL does, migrations, and upgrades in place.

/// The behaviour suite against PostgreSQL (`TETHER_TEST_DATABASE_URL`).
mod postgres {
    tether_conformance::behaviour_suite!(tether_conformance::postgres);
}

/// The behaviour suite against SQLite files.
mod sqlite {
    tether_conformance::behaviour_suite!(tether_conformance::sqlite);
}

/// The behaviour suite against PostgreSQL behind PgBouncer in transaction
/// pooling mode (`TETHER_TEST_PGBOUNCER_URL`; `scripts/pgbouncer` starts
/// one), with LISTEN on a direct connection: every operation must work
/// with no session state and no named prepared statements.
mod pgbouncer {
    tether_conformance::behaviour_suite!(tether_conformance::postgres_behind_pgbouncer);
}

mod migrations;
mod postgres_only;
mod upgrade;
