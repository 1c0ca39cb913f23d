//! The `tether` command: `tether serve` runs the HTTP service (SQLite under a
//! data directory by default, PostgreSQL when given a URL) with the
//! maintenance leader election built in; `tether migrate` applies the schema
//! and exits. The operator commands ([`cli`]: `enqueue`, `jobs`, `queues`,
//! `dlq`, `schedules`, `tenants`, `keys`, `stats`) talk to a server through
//! the Rust SDK.
//!
//! The logic lives in this library so that tests and the benchmark program
//! run exactly the code the binary runs.

pub mod admin_key;
pub mod cli;
pub mod data_dir;
pub mod duration;
pub mod serve;
pub mod server_secret;
pub mod store;
