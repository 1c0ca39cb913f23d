//! The maintenance fence: the lease a process's maintenance passes act
//! under, so that the database itself refuses a pass of a leader whose
//! lease has lapsed.
//!
//! A leader cut off from the database, or only slowed, may have statements
//! on the wire when its lease lapses and another node takes over; a local
//! clock cannot stop those. So the store puts the lease in every statement
//! of a pass that changes something: the statement changes nothing unless
//! the named lease still carries this token and has not expired by the
//! database's clock at the moment it runs (invariant 10 of docs/DESIGN.md).

use std::sync::Mutex;

use crate::model::LeaseToken;

/// The lease this process's maintenance passes run under, if any. A store
/// holds one; the maintenance loop sets it whenever its leadership is
/// confirmed. Unset (as in tests that run a pass by hand), passes are not
/// fenced.
#[derive(Debug, Default)]
pub struct MaintenanceFence(Mutex<Option<(String, LeaseToken)>>);

impl MaintenanceFence {
    /// Fences the passes by the lease `name` held with `token`, or (`None`)
    /// lifts the fence.
    pub fn set(&self, lease: Option<(&str, LeaseToken)>) {
        let mut fence = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *fence = lease.map(|(name, token)| (name.to_owned(), token));
    }

    /// The lease passes run under now: its name and token, if fenced.
    pub fn get(&self) -> Option<(String, LeaseToken)> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
