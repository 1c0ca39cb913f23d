//! The job model: what a job is, what happens to it, and the shapes of the
//! requests and answers of every store operation.
//!
//! One file per topic, named as the backends' files are.

// The imports every topic file takes (`use super::*`).
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, DurationRound, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::lifecycle;

mod attempts;
mod enqueue;
mod feed;
mod jobs;
mod maintenance;
mod queues;
mod workflows;

pub use attempts::*;
pub use enqueue::*;
pub use feed::*;
pub use jobs::*;
pub use maintenance::*;
pub use queues::*;
pub use workflows::*;
