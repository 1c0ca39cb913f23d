//! The behaviour suite against PostgreSQL behind PgBouncer in transaction
//! pooling mode (`TETHER_TEST_PGBOUNCER_URL`; `scripts/pgbouncer` starts
//! one), with LISTEN on a direct connection: every operation must work
//! with no session state and no named prepared statements.

tether_conformance::behaviour_suite!(tether_conformance::postgres_behind_pgbouncer);
