//! The `tether` command: `tether serve` runs the HTTP service (SQLite under a
//! data directory by default, PostgreSQL when given a URL) with the
//! maintenance leader election built in; `tether migrate` applies the schema
//! and exits, `tether migrate status` shows it ([`migrate`]). The operator
//! commands ([`cli`]: `enqueue`, `jobs`, `workflows`, `queues`, `dlq`,
//! `schedules`, `tenants`, `keys`, `stats`, `workers`) talk to a server
//! through the Rust SDK.
//!
//! Starting a server is [`tether_server::start`]; this library holds the
//! command line around it, so that tests run exactly the code the binary
//! runs.

pub mod cli;
pub mod duration;
pub mod migrate;
pub mod serve;
