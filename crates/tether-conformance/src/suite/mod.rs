//! The behaviours, one `pub async fn name(db: &TestDb)` each, in modules by
//! topic. The numbers in the docs refer to the invariants of `docs/DESIGN.md`;
//! `docs/semantics.md` holds the finer decisions checked here.

pub mod attempts;
pub mod batch;
pub mod cancel;
pub mod carried;
pub mod claim;
pub mod clock;
pub mod dedupe;
pub mod expiry;
pub mod feed;
pub mod fencing;
pub mod flow;
pub mod headers;
pub mod history;
pub mod keys;
pub mod leader;
pub mod listing;
pub mod model;
pub mod operators;
pub mod pause;
pub mod queues;
pub mod reaper;
pub mod replay;
pub mod reports;
pub mod retention;
pub mod retry;
pub mod schedule_fires;
pub mod schedules;
pub mod tenants;
pub mod validation;
pub mod wakeups;
pub mod workflows;

pub(crate) mod support;
