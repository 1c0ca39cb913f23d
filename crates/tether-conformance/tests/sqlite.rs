//! The behaviour suite against SQLite files in the temp directory.

tether_conformance::behaviour_suite!(tether_conformance::sqlite);
