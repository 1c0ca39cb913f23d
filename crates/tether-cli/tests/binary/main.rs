//! The `tether` binary as a process: `serve` (settings, logs, shutdown,
//! durability across kills, hostile clients, a database that refuses
//! connections), `migrate`, cron schedules, the README's quick start, and
//! checks of the repository itself. One test binary for all of them, so
//! that CI links the tree once for them.

#[path = "../common/mod.rs"]
mod common;
mod cron;
mod database_unavailable;
mod durability;
mod hostile_clients;
mod logs;
mod migrate;
mod readme;
mod repository;
mod serve;
mod settings;
