//! Schedules: the builder of a cron preview's query.

use chrono::{DateTime, Utc};
use tether_api::CronPreviewQuery;

use super::time;

/// What `GET /v1/cron/preview` computes: the next fire instants of an
/// expression, by the same code the scheduler uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronPreview {
    /// The expression: 5 fields, or 6 with seconds first.
    pub cron: String,
    /// The IANA time zone it is read in (server default `UTC`).
    pub timezone: Option<String>,
    /// Instants strictly after this one (server default: now).
    pub from: Option<DateTime<Utc>>,
    /// How many instants, 1–100 (server default 5).
    pub count: Option<u32>,
}

impl CronPreview {
    /// The next 5 instants of `cron` in UTC after now.
    pub fn new(cron: impl Into<String>) -> Self {
        CronPreview {
            cron: cron.into(),
            timezone: None,
            from: None,
            count: None,
        }
    }

    /// Reads the expression in this IANA time zone.
    pub fn timezone(mut self, timezone: impl Into<String>) -> Self {
        self.timezone = Some(timezone.into());
        self
    }

    /// Instants strictly after `from` instead of now.
    pub fn from(mut self, from: DateTime<Utc>) -> Self {
        self.from = Some(from);
        self
    }

    /// This many instants (1–100).
    pub fn count(mut self, count: u32) -> Self {
        self.count = Some(count);
        self
    }

    /// The query string.
    pub(crate) fn query(&self) -> CronPreviewQuery {
        CronPreviewQuery {
            cron: self.cron.clone(),
            timezone: self.timezone.clone(),
            from: self.from.as_ref().map(time),
            count: self.count.map(|n| n.to_string()),
        }
    }
}
