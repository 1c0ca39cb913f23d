//! Times on the wire: answers write RFC 3339 in UTC with milliseconds
//! (`2026-11-29T23:00:00.123Z`); requests are read by the one rule of every
//! input time ([`tether_core::validate::parse_instant`]).
//!
//! Reading an answer's time takes any RFC 3339 (chrono's own decoding), and
//! writing a request's time is chrono's own encoding: the client cuts it to
//! what the server keeps before it sends it.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serializer};

/// RFC 3339 in UTC with milliseconds: `2026-11-29T23:00:00.123Z`.
pub fn format(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Writes a time as [`format()`] does.
pub fn ser<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format(t))
}

/// Writes an optional time as [`format()`] does (`None` is `null`).
pub fn ser_opt<S: Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&format(t)),
        None => s.serialize_none(),
    }
}

/// Writes a list of times as [`format()`] does.
pub fn ser_vec<S: Serializer>(ts: &[DateTime<Utc>], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(ts.iter().map(format))
}

/// Writes an optional list of times as [`format()`] does.
pub fn ser_opt_vec<S: Serializer>(
    ts: &Option<Vec<DateTime<Utc>>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match ts {
        Some(ts) => ser_vec(ts, s),
        None => s.serialize_none(),
    }
}

/// Reads an input time of a body by the one rule of every input time
/// ([`tether_core::validate::parse_instant`], also the query strings').
/// With `#[serde(default)]`: absent and `null` are `None`.
pub fn de_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
    Option::<String>::deserialize(d)?
        .map(|text| tether_core::validate::parse_instant(&text).map_err(serde::de::Error::custom))
        .transpose()
}
