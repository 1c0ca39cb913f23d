//! Upgrades in place: each module makes a database as an older tether left
//! it (on PostgreSQL, SQLite or both), migrates it and checks that what was
//! there still reads and works.

mod dependencies;
mod edge_addresses;
mod event_feed;
mod flow_control;
mod from_version_3;
mod job_headers;
mod outcome_history;
mod rate_and_keys;
mod report_digest;
mod state_indexes;
mod suspension;
mod workflow_events;
mod workflows;
