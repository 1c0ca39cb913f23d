//! The behaviour suite against PostgreSQL (`TETHER_TEST_DATABASE_URL`).

tether_conformance::behaviour_suite!(tether_conformance::postgres);
