//! Cron timetables: parsing an expression in an IANA time zone and computing
//! its fire instants. The scheduler and `GET /v1/cron/preview` both call
//! [`CronSchedule`], so a preview always equals what fires.
//!
//! # Expressions
//!
//! Five fields (`minute hour day-of-month month day-of-week`, seconds 0), or
//! six with seconds first. Vixie/OCPS semantics, matched by the `croner`
//! crate: `*`, lists, ranges and steps (`*/15`, `10-50/20`); month names
//! `JAN`–`DEC` and weekday names `SUN`–`SAT` (case-insensitive, each only in
//! its own field); `0` and `7` both mean Sunday; `L` (last day of the month,
//! or `5L` = last Friday), `W` (`15W` = the weekday nearest the 15th, `LW` =
//! the last weekday), `#` (`1#2` = second Monday, `FRI#L` = last Friday); `?`
//! is accepted as `*` in the two day fields. When both day-of-month and
//! day-of-week are restricted they are OR-ed (`0 0 13 * FRI` fires on every
//! 13th and on every Friday). Nicknames (`@daily`), a year field and croner's
//! `+` (AND) modifier are refused, as is any expression that never fires
//! (`0 0 30 2 *`): a schedule must not be created that silently never runs.
//!
//! # Time zones and daylight saving time
//!
//! The expression is matched against the wall clock of its time zone; zones
//! come from the IANA database compiled into the binary (`chrono-tz`), never
//! from the host. Each matching wall-clock time fires exactly once:
//!
//! * A wall-clock time that does not exist because the clocks jump forward
//!   fires once, at the first instant after the gap (on a 02:00→03:00 night
//!   `30 2 * * *` fires at 03:00 local, the instant the gap ends). Every
//!   skipped time collapses onto that instant, and when the schedule also
//!   matches the gap's end (03:00) it still fires only once there.
//! * A wall-clock time that happens twice because the clocks fall back fires
//!   once, at its first occurrence. This holds for interval schedules too:
//!   on a 02:00→01:00 night `*/15 * * * *` fires at 01:00, 01:15, 01:30 and
//!   01:45 in the first pass (daylight time) and not again during the second
//!   pass, then at 02:00 standard time; a per-second schedule pauses for the
//!   repeated hour. (Plain `croner` would fire interval schedules in both
//!   passes and skip them in a gap; this module does not use its time zone
//!   logic at all.)
//!
//! Mapped this way, later wall-clock times never give earlier instants, so
//! fire instants are strictly increasing and never repeat.
//!
//! The search walks wall-clock time with `croner` (no time zone involved)
//! and maps each match to its instant by the two rules above.

use std::str::FromStr as _;

use chrono::{DateTime, LocalResult, NaiveDateTime, TimeDelta, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use croner::errors::CronError;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;

use crate::error::{Error, Result};

/// The longest expression or time zone name accepted, in bytes.
pub const MAX_INPUT_LEN: usize = 256;

/// The field named by errors about the expression.
const CRON_FIELD: &str = "cron";
/// The field named by errors about the time zone.
const TIMEZONE_FIELD: &str = "timezone";

/// The six fields, seconds first, with their allowed numeric ranges.
const FIELDS: [(&str, &str); 6] = [
    ("second", "0-59"),
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31"),
    ("month", "1-12 or JAN-DEC"),
    ("day-of-week", "0-7 or SUN-SAT, 0 and 7 = Sunday"),
];
const DOM: usize = 3;
const MONTH: usize = 4;
const DOW: usize = 5;

const MONTH_NAMES: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const WEEKDAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// How far the wall clock is walked to find the end of a DST gap or of a
/// repeated range. Real transitions shift by at most a day (Samoa skipped
/// 2011-12-30 whole); two days leaves room.
const MAX_TRANSITION_MINUTES: i64 = 2 * 24 * 60;

/// A parsed schedule timetable: a cron expression evaluated in an IANA time zone.
#[derive(Clone, Debug)]
pub struct CronSchedule {
    expression: String,
    zone: Tz,
    cron: Cron,
    has_seconds: bool,
}

impl CronSchedule {
    /// Parses `expr` (5 fields, or 6 with seconds first) in `timezone` (IANA
    /// name, e.g. "Europe/Berlin"; "UTC" allowed).
    ///
    /// Errors are [`Error::Invalid`] naming the field `cron` or `timezone`
    /// with a message that says what is wrong. An expression that can never
    /// fire (e.g. `0 0 30 2 *`) is refused too.
    pub fn parse(expr: &str, timezone: &str) -> Result<CronSchedule> {
        let zone = parse_zone(timezone)?;
        let (expression, cron, has_seconds) = parse_expression(expr)?;
        Ok(CronSchedule {
            expression,
            zone,
            cron,
            has_seconds,
        })
    }

    /// The first fire instant strictly after `after`; `None` if there is none
    /// within a bounded search (croner searches up to the year 5000, and
    /// expressions that never fire are refused by [`CronSchedule::parse`]).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut cursor = self.wall_clock(after);
        if let LocalResult::Ambiguous(_, later) = self.zone.from_local_datetime(&cursor) {
            if after >= later.with_timezone(&Utc) {
                // `after` lies in the second pass of a repeated range. Every
                // wall-clock time left in that range fired in the first
                // pass, before `after`: resume at the range's last second.
                cursor = self.repeated_range_end(cursor)? - TimeDelta::seconds(1);
            }
        }
        // One pass suffices (see above); the bound only guards the unforeseen.
        for _ in 0..64 {
            let wall = self.cron.find_next_occurrence(&cursor, false).ok()?;
            let instant = self.instant_of(wall)?;
            if instant > after {
                return Some(instant);
            }
            cursor = wall;
        }
        None
    }

    /// The next `count` fire instants strictly after `after`, in order
    /// (fewer if the bounded search runs out).
    pub fn upcoming(&self, after: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
        let mut times = Vec::with_capacity(count.min(128));
        let mut cursor = after;
        while times.len() < count {
            match self.next_after(cursor) {
                Some(instant) => {
                    times.push(instant);
                    cursor = instant;
                }
                None => break,
            }
        }
        times
    }

    /// The latest fire instant at or before `now` that is at or after `from`;
    /// `None` if there is none.
    ///
    /// This collapses the fires missed during downtime into one run, stamped
    /// with the latest missed instant. It searches backwards from `now`, so
    /// it costs the same however long the window is.
    pub fn latest_in(&self, from: DateTime<Utc>, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if from > now {
            return None;
        }
        let mut cursor = self.wall_clock(now);
        if let LocalResult::Ambiguous(_, later) = self.zone.from_local_datetime(&cursor) {
            if now >= later.with_timezone(&Utc) {
                // `now` lies in the second pass of a repeated range: the whole
                // range already fired in the first pass, so it all counts.
                cursor = self.repeated_range_end(cursor)? - TimeDelta::seconds(1);
            }
        }
        // Later wall-clock times never give earlier instants, so the latest
        // matching wall-clock time at or before `cursor` is the latest fire.
        let wall = self.cron.find_previous_occurrence(&cursor, true).ok()?;
        let instant = self.instant_of(wall)?;
        (instant >= from && instant <= now).then_some(instant)
    }

    /// The expression, with its fields separated by single spaces.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The IANA name of the time zone.
    pub fn timezone(&self) -> &str {
        self.zone.name()
    }

    /// Whether the expression has a seconds field (6 fields).
    pub fn has_seconds(&self) -> bool {
        self.has_seconds
    }

    /// The wall-clock time of `instant` in the zone, whole seconds.
    fn wall_clock(&self, instant: DateTime<Utc>) -> NaiveDateTime {
        let local = instant.with_timezone(&self.zone).naive_local();
        local.with_nanosecond(0).unwrap_or(local)
    }

    /// The instant a matching wall-clock time fires at: the time itself; the
    /// first occurrence of a repeated time; the end of the gap for a skipped
    /// time.
    fn instant_of(&self, wall: NaiveDateTime) -> Option<DateTime<Utc>> {
        match self.zone.from_local_datetime(&wall) {
            LocalResult::Single(t) => Some(t.with_timezone(&Utc)),
            LocalResult::Ambiguous(earlier, _) => Some(earlier.with_timezone(&Utc)),
            LocalResult::None => {
                let end = self.first_wall_after(wall, |r| !matches!(r, LocalResult::None))?;
                match self.zone.from_local_datetime(&end) {
                    LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => {
                        Some(t.with_timezone(&Utc))
                    }
                    LocalResult::None => None,
                }
            }
        }
    }

    /// The first wall-clock time after the repeated range holding `wall`.
    fn repeated_range_end(&self, wall: NaiveDateTime) -> Option<NaiveDateTime> {
        self.first_wall_after(wall, |r| matches!(r, LocalResult::Single(_)))
    }

    /// The first wall-clock second after `wall` whose resolution in the zone
    /// satisfies `done`, where every second from `wall` up to it does not:
    /// minute steps, then seconds within the last minute.
    fn first_wall_after(
        &self,
        wall: NaiveDateTime,
        done: impl Fn(&LocalResult<DateTime<Tz>>) -> bool,
    ) -> Option<NaiveDateTime> {
        let holds = |w: NaiveDateTime| done(&self.zone.from_local_datetime(&w));
        for minutes in 1..=MAX_TRANSITION_MINUTES {
            let step = wall.checked_add_signed(TimeDelta::minutes(minutes))?;
            if holds(step) {
                return (0..60)
                    .rev()
                    .filter_map(|back| step.checked_sub_signed(TimeDelta::seconds(back)))
                    .find(|&w| w > wall && holds(w));
            }
        }
        None
    }
}

/// Looks up an IANA time zone by its exact name.
fn parse_zone(timezone: &str) -> Result<Tz> {
    if timezone.trim().is_empty() {
        return Err(Error::invalid(
            TIMEZONE_FIELD,
            "time zone must not be empty (use an IANA name such as \"UTC\" or \"Europe/Berlin\")",
        ));
    }
    if timezone.len() > MAX_INPUT_LEN {
        return Err(Error::invalid(
            TIMEZONE_FIELD,
            format!(
                "time zone is {} bytes long, above the limit of {MAX_INPUT_LEN}",
                timezone.len()
            ),
        ));
    }
    Tz::from_str(timezone).map_err(|_| {
        Error::invalid(
            TIMEZONE_FIELD,
            format!(
                "unknown time zone {timezone:?} (expected an IANA name such as \"UTC\" or \"Europe/Berlin\")"
            ),
        )
    })
}

/// The five fields a nickname stands for (`@hourly`, `@daily`...), as in
/// Vixie cron; `None` for anything else. `@reboot` has no instant.
fn shorthand(expr: &str) -> Option<&'static str> {
    Some(match expr.to_ascii_lowercase().as_str() {
        "@hourly" => "0 * * * *",
        "@daily" | "@midnight" => "0 0 * * *",
        "@weekly" => "0 0 * * 0",
        "@monthly" => "0 0 1 * *",
        "@yearly" | "@annually" => "0 0 1 1 *",
        _ => return None,
    })
}

/// Parses and checks an expression: returns it normalised, compiled, and
/// whether it has a seconds field.
fn parse_expression(expr: &str) -> Result<(String, Cron, bool)> {
    let invalid = |message: String| Error::invalid(CRON_FIELD, message);
    if expr.len() > MAX_INPUT_LEN {
        return Err(invalid(format!(
            "expression is {} bytes long, above the limit of {MAX_INPUT_LEN}",
            expr.len()
        )));
    }
    let expr = shorthand(expr.trim()).unwrap_or(expr);
    let fields: Vec<&str> = expr.split_whitespace().collect();
    if fields.is_empty() {
        return Err(invalid(
            "expression must not be empty (expected 5 fields \"minute hour day-of-month month day-of-week\", or 6 with seconds first)"
                .to_owned(),
        ));
    }
    if fields.len() != 5 && fields.len() != 6 {
        let hint = if fields.len() == 1 && fields[0].starts_with('@') {
            " (the nicknames are @hourly, @daily, @midnight, @weekly, @monthly, @yearly and @annually)"
        } else {
            " (minute hour day-of-month month day-of-week, optionally with seconds first)"
        };
        return Err(invalid(format!(
            "expected 5 or 6 fields, got {}{hint}",
            fields.len()
        )));
    }
    let has_seconds = fields.len() == 6;
    let offset = if has_seconds { 0 } else { 1 };
    for (i, field) in fields.iter().enumerate() {
        check_field(offset + i, field).map_err(invalid)?;
    }

    let expression = fields.join(" ");
    let cron = parser().parse(&expression).map_err(|e| {
        // Blame the first field that fails on its own; croner's own errors
        // do not say which field they are about.
        let culprit = fields.iter().enumerate().find_map(|(i, field)| {
            let mut probe = ["0", "0", "0", "*", "*", "*"];
            probe[offset + i] = field;
            parser()
                .parse(&probe.join(" "))
                .err()
                .map(|e| field_message(offset + i, field, &croner_message(&e)))
        });
        invalid(culprit.unwrap_or_else(|| croner_message(&e)))
    })?;

    if !fires_ever(&cron) {
        return Err(invalid(format!(
            "expression {expression:?} never fires: no date matches it"
        )));
    }
    Ok((expression, cron, has_seconds))
}

/// The croner parser configured as tether documents: 6 fields means seconds
/// first, 5 fields means seconds 0, no year field, day fields OR-ed, standard
/// (not Quartz) weekday numbers, no sloppy ranges.
fn parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .dom_and_dow(false)
        .alternative_weekdays(false)
        .sloppy_ranges(false)
        .build()
}

/// Checks one field's characters and names (croner would replace a weekday
/// name anywhere, e.g. `MON` in the month field as 1, and honours a leading
/// `+` that turns the day fields' OR into an AND).
fn check_field(index: usize, field: &str) -> std::result::Result<(), String> {
    let upper = field.to_ascii_uppercase();
    let extra: &[char] = match index {
        DOM => &['?'],
        DOW => &['?', '#'],
        _ => &[],
    };
    if let Some(bad) = upper
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "*,-/".contains(*c) || extra.contains(c)))
    {
        let why = if bad == '+' && index == DOW {
            "the '+' (AND) modifier is not supported; day-of-month and day-of-week are OR-ed"
                .to_owned()
        } else {
            format!("unexpected character {bad:?}")
        };
        return Err(field_message(index, field, &why));
    }
    for word in upper
        .split(|c: char| !c.is_ascii_alphabetic())
        .filter(|w| !w.is_empty())
    {
        let allowed = match index {
            DOM => matches!(word, "L" | "W" | "LW"),
            MONTH => MONTH_NAMES.contains(&word),
            DOW => word == "L" || WEEKDAY_NAMES.contains(&word),
            _ => false,
        };
        if !allowed {
            return Err(field_message(
                index,
                field,
                &format!("unknown name {word:?}"),
            ));
        }
    }
    Ok(())
}

/// "minute field "61": number out of bounds (allowed: 0-59)".
fn field_message(index: usize, field: &str, why: &str) -> String {
    let (name, range) = FIELDS[index];
    format!("{name} field {field:?}: {why} (allowed: {range})")
}

/// croner's error text without its prefix and final full stop, lower case.
fn croner_message(error: &CronError) -> String {
    let text = match error {
        CronError::InvalidPattern(m)
        | CronError::IllegalCharacters(m)
        | CronError::ComponentError(m) => m.clone(),
        other => other.to_string(),
    };
    let text = text.trim().trim_end_matches('.');
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => "invalid expression".to_owned(),
    }
}

/// Whether the expression matches any wall-clock time at all. Matching
/// depends only on the civil calendar, which repeats every 400 years
/// (146 097 days, a whole number of weeks), and every matching wall-clock
/// time fires in any zone (a skipped one at the end of its gap). So one
/// search over 400 years settles it: it starts 401 years before croner's
/// search limit, where croner itself stops a search that finds nothing.
fn fires_ever(cron: &Cron) -> bool {
    let start = chrono::NaiveDate::from_ymd_opt(croner::YEAR_UPPER_LIMIT - 401, 1, 1)
        .and_then(|d| d.and_hms_opt(0, 0, 0));
    start.is_some_and(|start| cron.find_next_occurrence(&start, true).is_ok())
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    fn at(rfc3339: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(rfc3339)
            .unwrap_or_else(|e| panic!("bad test instant {rfc3339}: {e}"))
            .with_timezone(&Utc)
    }

    fn sched(expr: &str, zone: &str) -> CronSchedule {
        CronSchedule::parse(expr, zone).unwrap_or_else(|e| panic!("{expr:?} in {zone}: {e}"))
    }

    fn rfc(times: &[DateTime<Utc>]) -> Vec<String> {
        times
            .iter()
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            .collect()
    }

    /// Asserts the next `expected.len()` fires after `after`.
    #[track_caller]
    fn assert_upcoming(expr: &str, zone: &str, after: &str, expected: &[&str]) {
        let s = sched(expr, zone);
        let got = rfc(&s.upcoming(at(after), expected.len()));
        assert_eq!(got, expected, "{expr:?} in {zone} after {after}");
        // `next_after` agrees with `upcoming`, one step at a time.
        let mut cursor = at(after);
        for want in expected {
            let next = s.next_after(cursor).expect("a next fire");
            assert_eq!(rfc(&[next])[0], *want, "{expr:?} next_after {cursor}");
            cursor = next;
        }
    }

    #[track_caller]
    fn assert_invalid(expr: &str, zone: &str, field: &str, needle: &str) {
        match CronSchedule::parse(expr, zone) {
            Err(Error::Invalid {
                field: f,
                message: m,
            }) => {
                assert_eq!(f, field, "{expr:?} in {zone:?}: {m}");
                assert!(
                    m.contains(needle),
                    "{expr:?} in {zone:?}: message {m:?} lacks {needle:?}"
                );
            }
            Err(other) => panic!("{expr:?} in {zone:?}: wrong error {other:?}"),
            Ok(s) => panic!("{expr:?} in {zone:?}: accepted as {s:?}"),
        }
    }

    /// The UTC instants where the zone's offset changes in `[from, to)`, at
    /// minute resolution, with the offsets before and after in seconds.
    fn transitions(zone: &str, from: &str, to: &str) -> Vec<(String, i32, i32)> {
        use chrono::Offset as _;
        let tz: Tz = zone.parse().expect("zone");
        let offset = |t: DateTime<Utc>| t.with_timezone(&tz).offset().fix().local_minus_utc();
        let (mut t, end) = (at(from), at(to));
        let mut out = Vec::new();
        while t < end {
            let next = t + TimeDelta::minutes(1);
            if offset(next) != offset(t) {
                out.push((rfc(&[next])[0].clone(), offset(t), offset(next)));
            }
            t = next;
        }
        out
    }

    // ---- The bundled time zone data itself --------------------------------

    #[test]
    fn bundled_zone_data_has_the_2026_transitions_the_tests_rely_on() {
        let h = 3600;
        assert_eq!(
            transitions(
                "America/New_York",
                "2026-01-01T00:00:00Z",
                "2027-01-01T00:00:00Z"
            ),
            [
                ("2026-03-08T07:00:00Z".to_owned(), -5 * h, -4 * h),
                ("2026-11-01T06:00:00Z".to_owned(), -4 * h, -5 * h),
            ]
        );
        assert_eq!(
            transitions(
                "Europe/Berlin",
                "2026-01-01T00:00:00Z",
                "2027-01-01T00:00:00Z"
            ),
            [
                ("2026-03-29T01:00:00Z".to_owned(), h, 2 * h),
                ("2026-10-25T01:00:00Z".to_owned(), 2 * h, h),
            ]
        );
        // Lord Howe shifts by half an hour: +11 → +10:30 on the first Sunday
        // of April at 02:00 local, back to +11 on the first Sunday of
        // October at 02:00 local.
        assert_eq!(
            transitions(
                "Australia/Lord_Howe",
                "2026-01-01T00:00:00Z",
                "2027-01-01T00:00:00Z"
            ),
            [
                ("2026-04-04T15:00:00Z".to_owned(), 11 * h, 21 * h / 2),
                ("2026-10-03T15:30:00Z".to_owned(), 21 * h / 2, 11 * h),
            ]
        );
    }

    // ---- Spring forward: skipped times fire once, when the gap ends ------

    #[test]
    fn new_york_spring_forward_skipped_time_fires_at_gap_end() {
        // 2026-03-08 02:00 EST → 03:00 EDT; 02:30 does not exist.
        assert_upcoming(
            "30 2 * * *",
            "America/New_York",
            "2026-03-06T12:00:00Z",
            &[
                "2026-03-07T07:30:00Z", // 02:30 EST
                "2026-03-08T07:00:00Z", // 03:00 EDT, the gap's end
                "2026-03-09T06:30:00Z", // 02:30 EDT
            ],
        );
        assert_upcoming(
            "0 2 * * *",
            "America/New_York",
            "2026-03-07T12:00:00Z",
            &["2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z"],
        );
        assert_upcoming(
            "0 3 * * *",
            "America/New_York",
            "2026-03-07T12:00:00Z",
            &["2026-03-08T07:00:00Z", "2026-03-09T07:00:00Z"],
        );
        // Just before the gap's end, and exactly on it.
        let s = sched("30 2 * * *", "America/New_York");
        assert_eq!(
            s.next_after(at("2026-03-08T06:59:59Z")),
            Some(at("2026-03-08T07:00:00Z"))
        );
        assert_eq!(
            s.next_after(at("2026-03-08T07:00:00Z")),
            Some(at("2026-03-09T06:30:00Z"))
        );
    }

    #[test]
    fn new_york_spring_forward_gap_and_its_end_fire_once_together() {
        // Hourly: 02:00 is skipped and collapses onto 03:00, which also
        // matches: one fire there, no duplicate.
        assert_upcoming(
            "0 * * * *",
            "America/New_York",
            "2026-03-08T05:30:00Z",
            &[
                "2026-03-08T06:00:00Z", // 01:00 EST
                "2026-03-08T07:00:00Z", // 03:00 EDT
                "2026-03-08T08:00:00Z", // 04:00 EDT
            ],
        );
        // 02:30 (skipped) and 03:30 (real) on the same night.
        assert_upcoming(
            "30 2,3 * * *",
            "America/New_York",
            "2026-03-08T00:00:00Z",
            &[
                "2026-03-08T07:00:00Z",
                "2026-03-08T07:30:00Z",
                "2026-03-09T06:30:00Z",
            ],
        );
        // Two skipped times fire once, together, at the gap's end.
        assert_upcoming(
            "0,30 2 * * *",
            "America/New_York",
            "2026-03-08T00:00:00Z",
            &[
                "2026-03-08T07:00:00Z",
                "2026-03-09T06:00:00Z",
                "2026-03-09T06:30:00Z",
            ],
        );
        // Every 15 minutes, offset by 5: 02:05..02:50 collapse onto 03:00.
        assert_upcoming(
            "5-59/15 * * * *",
            "America/New_York",
            "2026-03-08T06:40:00Z",
            &[
                "2026-03-08T06:50:00Z", // 01:50 EST
                "2026-03-08T07:00:00Z", // 03:00 EDT (02:05..02:50)
                "2026-03-08T07:05:00Z", // 03:05 EDT
                "2026-03-08T07:20:00Z",
            ],
        );
        assert_upcoming(
            "*/15 * * * *",
            "America/New_York",
            "2026-03-08T06:30:00Z",
            &[
                "2026-03-08T06:45:00Z",
                "2026-03-08T07:00:00Z",
                "2026-03-08T07:15:00Z",
            ],
        );
        // Per second: no second is lost or doubled across the jump.
        assert_upcoming(
            "* * * * * *",
            "America/New_York",
            "2026-03-08T06:59:58Z",
            &[
                "2026-03-08T06:59:59Z",
                "2026-03-08T07:00:00Z",
                "2026-03-08T07:00:01Z",
            ],
        );
    }

    // ---- Fall back: a repeated time fires once, at its first occurrence --

    #[test]
    fn new_york_fall_back_repeated_time_fires_once_first_occurrence() {
        // 2026-11-01 02:00 EDT → 01:00 EST; 01:30 happens twice.
        assert_upcoming(
            "30 1 * * *",
            "America/New_York",
            "2026-10-31T00:00:00Z",
            &[
                "2026-10-31T05:30:00Z", // 01:30 EDT
                "2026-11-01T05:30:00Z", // 01:30 EDT, first occurrence
                "2026-11-02T06:30:00Z", // 01:30 EST
            ],
        );
        // Right after the first occurrence, and during the second pass: the
        // second occurrence (06:30Z) never fires.
        let s = sched("30 1 * * *", "America/New_York");
        for after in [
            "2026-11-01T05:30:00Z",
            "2026-11-01T06:10:00Z",
            "2026-11-01T06:30:00Z",
        ] {
            assert_eq!(
                s.next_after(at(after)),
                Some(at("2026-11-02T06:30:00Z")),
                "after {after}"
            );
        }
    }

    #[test]
    fn new_york_fall_back_interval_schedules_skip_the_second_pass() {
        assert_upcoming(
            "0 * * * *",
            "America/New_York",
            "2026-11-01T03:30:00Z",
            &[
                "2026-11-01T04:00:00Z", // 00:00 EDT
                "2026-11-01T05:00:00Z", // 01:00 EDT (not again at 06:00Z)
                "2026-11-01T07:00:00Z", // 02:00 EST
                "2026-11-01T08:00:00Z",
            ],
        );
        assert_upcoming(
            "*/15 * * * *",
            "America/New_York",
            "2026-11-01T04:50:00Z",
            &[
                "2026-11-01T05:00:00Z", // 01:00 EDT
                "2026-11-01T05:15:00Z",
                "2026-11-01T05:30:00Z",
                "2026-11-01T05:45:00Z", // 01:45 EDT
                "2026-11-01T07:00:00Z", // 02:00 EST
                "2026-11-01T07:15:00Z",
            ],
        );
        assert_upcoming(
            "* * * * * *",
            "America/New_York",
            "2026-11-01T05:59:58Z",
            &["2026-11-01T05:59:59Z", "2026-11-01T07:00:00Z"],
        );
        // Asked from inside the second pass.
        let s = sched("*/15 * * * *", "America/New_York");
        assert_eq!(
            s.next_after(at("2026-11-01T06:20:00Z")),
            Some(at("2026-11-01T07:00:00Z"))
        );
        let s = sched("0 0 * * * *", "America/New_York");
        assert_eq!(
            s.next_after(at("2026-11-01T06:00:00Z")),
            Some(at("2026-11-01T07:00:00Z"))
        );
    }

    // ---- Europe/Berlin ---------------------------------------------------

    #[test]
    fn berlin_both_2026_transitions() {
        // 2026-03-29 02:00 CET → 03:00 CEST.
        assert_upcoming(
            "30 2 * * *",
            "Europe/Berlin",
            "2026-03-27T12:00:00Z",
            &[
                "2026-03-28T01:30:00Z", // 02:30 CET
                "2026-03-29T01:00:00Z", // 03:00 CEST, the gap's end
                "2026-03-30T00:30:00Z", // 02:30 CEST
            ],
        );
        assert_upcoming(
            "0 * * * *",
            "Europe/Berlin",
            "2026-03-28T23:30:00Z",
            &[
                "2026-03-29T00:00:00Z", // 01:00 CET
                "2026-03-29T01:00:00Z", // 03:00 CEST (02:00 skipped)
                "2026-03-29T02:00:00Z",
            ],
        );
        // 2026-10-25 03:00 CEST → 02:00 CET; 02:30 happens twice.
        assert_upcoming(
            "30 2 * * *",
            "Europe/Berlin",
            "2026-10-23T12:00:00Z",
            &[
                "2026-10-24T00:30:00Z", // 02:30 CEST
                "2026-10-25T00:30:00Z", // 02:30 CEST, first occurrence
                "2026-10-26T01:30:00Z", // 02:30 CET
            ],
        );
        assert_upcoming(
            "0 * * * *",
            "Europe/Berlin",
            "2026-10-24T23:30:00Z",
            &[
                "2026-10-25T00:00:00Z", // 02:00 CEST
                "2026-10-25T02:00:00Z", // 03:00 CET (02:00 CET repeats)
                "2026-10-25T03:00:00Z",
            ],
        );
    }

    // ---- Australia/Lord_Howe: a 30-minute shift --------------------------

    #[test]
    fn lord_howe_half_hour_gap_and_repeat() {
        // 2026-10-04 02:00 +10:30 → 02:30 +11; 02:15 does not exist.
        assert_upcoming(
            "15 2 * * *",
            "Australia/Lord_Howe",
            "2026-10-02T00:00:00Z",
            &[
                "2026-10-02T15:45:00Z", // 10-03 02:15 +10:30
                "2026-10-03T15:30:00Z", // 10-04 02:30 +11, the gap's end
                "2026-10-04T15:15:00Z", // 10-05 02:15 +11
            ],
        );
        // 2026-04-05 02:00 +11 → 01:30 +10:30; 01:45 happens twice.
        assert_upcoming(
            "45 1 * * *",
            "Australia/Lord_Howe",
            "2026-04-03T00:00:00Z",
            &[
                "2026-04-03T14:45:00Z", // 04-04 01:45 +11
                "2026-04-04T14:45:00Z", // 04-05 01:45 +11, first occurrence
                "2026-04-05T15:15:00Z", // 04-06 01:45 +10:30
            ],
        );
        assert_upcoming(
            "*/15 * * * *",
            "Australia/Lord_Howe",
            "2026-04-04T14:20:00Z",
            &[
                "2026-04-04T14:30:00Z", // 01:30 +11
                "2026-04-04T14:45:00Z", // 01:45 +11
                "2026-04-04T15:30:00Z", // 02:00 +10:30 (01:30, 01:45 repeat)
            ],
        );
    }

    // ---- Calendar features -----------------------------------------------

    #[test]
    fn leap_day() {
        assert_upcoming(
            "0 12 29 2 *",
            "UTC",
            "2026-01-01T00:00:00Z",
            &["2028-02-29T12:00:00Z", "2032-02-29T12:00:00Z"],
        );
    }

    #[test]
    fn last_day_of_month() {
        assert_upcoming(
            "0 0 L * *",
            "UTC",
            "2026-01-15T00:00:00Z",
            &[
                "2026-01-31T00:00:00Z",
                "2026-02-28T00:00:00Z",
                "2026-03-31T00:00:00Z",
                "2026-04-30T00:00:00Z",
            ],
        );
        assert_upcoming(
            "0 0 L 2 *",
            "UTC",
            "2027-03-01T00:00:00Z",
            &["2028-02-29T00:00:00Z"],
        );
    }

    #[test]
    fn nearest_weekday() {
        // 2026-02-15 and 2026-03-15 are Sundays, 2026-08-15 a Saturday.
        assert_upcoming(
            "0 0 15W * *",
            "UTC",
            "2026-02-01T00:00:00Z",
            &[
                "2026-02-16T00:00:00Z",
                "2026-03-16T00:00:00Z",
                "2026-04-15T00:00:00Z",
            ],
        );
        assert_upcoming(
            "0 0 15W 8 *",
            "UTC",
            "2026-01-01T00:00:00Z",
            &["2026-08-14T00:00:00Z"],
        );
        // 2026-08-01 is a Saturday: the nearest weekday stays in August.
        assert_upcoming(
            "0 0 1W 8 *",
            "UTC",
            "2026-01-01T00:00:00Z",
            &["2026-08-03T00:00:00Z"],
        );
        // 2026-05-31 is a Sunday: the last weekday of May is Friday the 29th.
        assert_upcoming(
            "0 0 LW 5 *",
            "UTC",
            "2026-01-01T00:00:00Z",
            &["2026-05-29T00:00:00Z"],
        );
    }

    #[test]
    fn nth_and_last_weekday() {
        // Second Monday.
        assert_upcoming(
            "0 9 * * 1#2",
            "UTC",
            "2026-01-01T00:00:00Z",
            &[
                "2026-01-12T09:00:00Z",
                "2026-02-09T09:00:00Z",
                "2026-03-09T09:00:00Z",
            ],
        );
        assert_upcoming(
            "0 9 * * MON#2",
            "UTC",
            "2026-01-01T00:00:00Z",
            &["2026-01-12T09:00:00Z"],
        );
        // Last Friday, three spellings.
        for expr in ["0 9 * * 5L", "0 9 * * FRI#L", "0 9 * * 5#L"] {
            assert_upcoming(
                expr,
                "UTC",
                "2026-01-01T00:00:00Z",
                &[
                    "2026-01-30T09:00:00Z",
                    "2026-02-27T09:00:00Z",
                    "2026-03-27T09:00:00Z",
                ],
            );
        }
    }

    #[test]
    fn names_are_accepted_case_insensitively() {
        let expected = [
            "2026-01-01T09:00:00Z", // Thursday
            "2026-01-02T09:00:00Z",
            "2026-01-05T09:00:00Z",
        ];
        assert_upcoming(
            "0 9 * JAN MON-FRI",
            "UTC",
            "2026-01-01T00:00:00Z",
            &expected,
        );
        assert_upcoming(
            "0 9 * jan mon-fri",
            "UTC",
            "2026-01-01T00:00:00Z",
            &expected,
        );
        // After the last weekday of January 2026 (Friday the 30th) comes
        // Friday 2027-01-01.
        assert_upcoming(
            "0 9 * JAN MON-FRI",
            "UTC",
            "2026-01-30T09:00:00Z",
            &["2027-01-01T09:00:00Z"],
        );
    }

    #[test]
    fn day_of_month_and_day_of_week_are_ored() {
        // April 2026: Fridays 3, 10, 17, 24; the 13th is a Monday.
        assert_upcoming(
            "0 0 13 * FRI",
            "UTC",
            "2026-04-01T00:00:00Z",
            &[
                "2026-04-03T00:00:00Z",
                "2026-04-10T00:00:00Z",
                "2026-04-13T00:00:00Z",
                "2026-04-17T00:00:00Z",
                "2026-04-24T00:00:00Z",
                "2026-05-01T00:00:00Z",
            ],
        );
        // Only one restricted: no OR with the other.
        assert_upcoming(
            "0 0 13 * *",
            "UTC",
            "2026-04-01T00:00:00Z",
            &["2026-04-13T00:00:00Z", "2026-05-13T00:00:00Z"],
        );
    }

    #[test]
    fn zero_and_seven_are_sunday() {
        let sundays = [
            "2026-01-04T00:00:00Z",
            "2026-01-11T00:00:00Z",
            "2026-01-18T00:00:00Z",
        ];
        for expr in ["0 0 * * 0", "0 0 * * 7", "0 0 * * SUN", "0 0 * * sun"] {
            assert_upcoming(expr, "UTC", "2026-01-01T00:00:00Z", &sundays);
        }
        // A range ending in 7: Friday to Sunday.
        for expr in ["0 0 * * 5-7", "0 0 * * FRI-SUN"] {
            assert_upcoming(
                expr,
                "UTC",
                "2026-01-01T00:00:00Z",
                &[
                    "2026-01-02T00:00:00Z",
                    "2026-01-03T00:00:00Z",
                    "2026-01-04T00:00:00Z",
                    "2026-01-09T00:00:00Z",
                ],
            );
        }
    }

    #[test]
    fn question_mark_is_a_wildcard_in_the_day_fields_only() {
        assert_upcoming(
            "0 0 ? * MON",
            "UTC",
            "2026-01-01T00:00:00Z",
            &["2026-01-05T00:00:00Z", "2026-01-12T00:00:00Z"],
        );
        assert_upcoming(
            "0 0 1 * ?",
            "UTC",
            "2026-01-01T00:00:00Z",
            &["2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"],
        );
        assert_invalid("? * * * *", "UTC", "cron", "minute field \"?\"");
    }

    #[test]
    fn time_zone_is_applied_outside_transitions() {
        // 09:00 in Tokyo (+9, no DST) and in Berlin in winter (+1).
        assert_upcoming(
            "0 9 * * *",
            "Asia/Tokyo",
            "2026-01-01T00:00:00Z",
            &["2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z"],
        );
        assert_upcoming(
            "0 9 * * *",
            "Europe/Berlin",
            "2026-01-01T00:00:00Z",
            &["2026-01-01T08:00:00Z", "2026-01-02T08:00:00Z"],
        );
    }

    // ---- Fields, seconds and boundaries ------------------------------------

    #[test]
    fn six_fields_have_seconds_five_fields_fire_on_second_zero() {
        let s = sched("*/10 * * * * *", "UTC");
        assert!(s.has_seconds());
        assert_eq!(
            rfc(&s.upcoming(at("2026-01-01T00:00:05Z"), 4)),
            [
                "2026-01-01T00:00:10Z",
                "2026-01-01T00:00:20Z",
                "2026-01-01T00:00:30Z",
                "2026-01-01T00:00:40Z",
            ]
        );
        let s = sched("* * * * *", "UTC");
        assert!(!s.has_seconds());
        assert_eq!(
            rfc(&s.upcoming(at("2026-01-01T00:00:05Z"), 2)),
            ["2026-01-01T00:01:00Z", "2026-01-01T00:02:00Z"]
        );
        // Six fields are seconds first, not a year last.
        assert_upcoming(
            "30 15 10 * * *",
            "UTC",
            "2026-01-01T00:00:00Z",
            &["2026-01-01T10:15:30Z", "2026-01-02T10:15:30Z"],
        );
    }

    #[test]
    fn upcoming_is_strictly_after_and_strictly_increasing() {
        let s = sched("0 * * * *", "UTC");
        // Exactly on a fire time: excluded.
        assert_eq!(
            rfc(&s.upcoming(at("2026-01-01T10:00:00Z"), 2)),
            ["2026-01-01T11:00:00Z", "2026-01-01T12:00:00Z"]
        );
        assert_eq!(
            s.next_after(at("2026-01-01T10:00:00Z")),
            Some(at("2026-01-01T11:00:00Z"))
        );
        // A hair before it: included.
        assert_eq!(
            s.next_after(at("2026-01-01T09:59:59.999Z")),
            Some(at("2026-01-01T10:00:00Z"))
        );
        // A hair after it: excluded.
        assert_eq!(
            s.next_after(at("2026-01-01T10:00:00.001Z")),
            Some(at("2026-01-01T11:00:00Z"))
        );
        assert!(s.upcoming(at("2026-01-01T10:00:00Z"), 0).is_empty());

        // Across a whole year of DST nights in several zones.
        for (expr, zone) in [
            ("*/30 * * * *", "America/New_York"),
            ("0 * * * *", "Europe/Berlin"),
            ("15,45 1,2 * * *", "Australia/Lord_Howe"),
            ("0 2 * * *", "America/New_York"),
        ] {
            let s = sched(expr, zone);
            let times = s.upcoming(at("2026-01-01T00:00:00Z"), 20_000);
            assert!(times.len() > 700, "{expr} in {zone}");
            assert!(
                times.windows(2).all(|w| w[0] < w[1]),
                "{expr} in {zone}: not strictly increasing"
            );
        }
    }

    #[test]
    fn accessors() {
        let s = sched("  0   9 * *  MON-FRI ", "Europe/Berlin");
        assert_eq!(s.expression(), "0 9 * * MON-FRI");
        assert_eq!(s.timezone(), "Europe/Berlin");
        assert!(!s.has_seconds());
        assert_eq!(sched("* * * * *", "UTC").timezone(), "UTC");
    }

    // ---- latest_in -----------------------------------------------------------

    #[test]
    fn latest_in_picks_the_latest_missed_fire() {
        let s = sched("0 * * * *", "UTC");
        assert_eq!(
            s.latest_in(at("2026-01-01T00:30:00Z"), at("2026-01-01T05:59:59Z")),
            Some(at("2026-01-01T05:00:00Z"))
        );
        // Both ends are inclusive.
        assert_eq!(
            s.latest_in(at("2026-01-01T05:00:00Z"), at("2026-01-01T05:00:00Z")),
            Some(at("2026-01-01T05:00:00Z"))
        );
        assert_eq!(
            s.latest_in(at("2026-01-01T04:00:00Z"), at("2026-01-01T06:00:00Z")),
            Some(at("2026-01-01T06:00:00Z"))
        );
        // Empty window, and an inverted one.
        assert_eq!(
            s.latest_in(at("2026-01-01T05:00:01Z"), at("2026-01-01T05:59:59Z")),
            None
        );
        assert_eq!(
            s.latest_in(at("2026-01-01T06:00:00Z"), at("2026-01-01T05:00:00Z")),
            None
        );
        let yearly = sched("0 0 1 1 *", "UTC");
        assert_eq!(
            yearly.latest_in(at("2026-02-01T00:00:00Z"), at("2026-12-31T23:59:59Z")),
            None
        );
        // Years back.
        let leap = sched("0 12 29 2 *", "UTC");
        assert_eq!(
            leap.latest_in(at("2026-01-01T00:00:00Z"), at("2031-06-01T00:00:00Z")),
            Some(at("2028-02-29T12:00:00Z"))
        );
    }

    #[test]
    fn latest_in_per_second_schedule_over_three_days_is_fast() {
        let s = sched("* * * * * *", "UTC");
        let started = Instant::now();
        let latest = s.latest_in(at("2026-01-01T00:00:00Z"), at("2026-01-04T00:00:00.500Z"));
        assert_eq!(latest, Some(at("2026-01-04T00:00:00Z")));
        let s = sched("*/7 * * * * *", "Europe/Berlin");
        assert_eq!(
            s.latest_in(at("2026-03-27T00:00:00Z"), at("2026-03-29T23:59:59Z")),
            Some(at("2026-03-29T23:59:56Z"))
        );
        assert!(
            started.elapsed() < Duration::from_millis(100),
            "took {:?}",
            started.elapsed()
        );
    }

    #[test]
    fn latest_in_across_dst_transitions() {
        let s = sched("*/15 * * * *", "America/New_York");
        // In the second pass of the repeated hour: the last fire was 01:45
        // EDT, in the first pass.
        assert_eq!(
            s.latest_in(at("2026-11-01T04:00:00Z"), at("2026-11-01T06:40:00Z")),
            Some(at("2026-11-01T05:45:00Z"))
        );
        assert_eq!(
            s.latest_in(at("2026-11-01T04:00:00Z"), at("2026-11-01T07:00:00Z")),
            Some(at("2026-11-01T07:00:00Z"))
        );
        // Inside the first pass.
        assert_eq!(
            s.latest_in(at("2026-11-01T04:00:00Z"), at("2026-11-01T05:20:00Z")),
            Some(at("2026-11-01T05:15:00Z"))
        );
        let s = sched("30 1 * * *", "America/New_York");
        assert_eq!(
            s.latest_in(at("2026-11-01T00:00:00Z"), at("2026-11-01T06:59:59Z")),
            Some(at("2026-11-01T05:30:00Z"))
        );
        // Spring forward: the skipped 02:30 fires at the gap's end.
        let s = sched("30 2 * * *", "America/New_York");
        assert_eq!(
            s.latest_in(at("2026-03-08T00:00:00Z"), at("2026-03-08T07:00:00Z")),
            Some(at("2026-03-08T07:00:00Z"))
        );
        assert_eq!(
            s.latest_in(at("2026-03-08T00:00:00Z"), at("2026-03-08T06:59:59Z")),
            None
        );
    }

    /// The fire instants in `[start, end)` by brute force, straight from
    /// the definition: every matching wall-clock minute `w` fires at the
    /// first instant whose wall-clock time is at or after `w` (the instant
    /// itself; a repeated time's first occurrence; a skipped time's gap end).
    fn brute_force(s: &CronSchedule, start: DateTime<Utc>, end: DateTime<Utc>) -> Vec<String> {
        let zone = s.zone;
        let local = |i: DateTime<Utc>| i.with_timezone(&zone).naive_local();
        let mut fires = Vec::new();
        // Walls from a day before to a day after, minute by minute.
        let mut wall = start.naive_utc() - TimeDelta::days(1);
        while wall < end.naive_utc() + TimeDelta::days(1) {
            if s.cron.is_time_matching(&wall).expect("match") {
                // Offsets lie within -12h..+14h, so 15 hours before the
                // wall read as UTC is still earlier on the wall clock.
                let mut i = wall.and_utc() - TimeDelta::hours(15);
                while local(i) < wall {
                    i += TimeDelta::minutes(1);
                }
                if i > start && i < end {
                    fires.push(i);
                }
            }
            wall += TimeDelta::minutes(1);
        }
        fires.sort();
        fires.dedup();
        rfc(&fires)
    }

    #[test]
    fn matches_brute_force_around_transitions() {
        let windows = [
            ("America/New_York", "2026-03-07T12:00:00Z"),
            ("America/New_York", "2026-10-31T12:00:00Z"),
            ("Europe/Berlin", "2026-03-28T12:00:00Z"),
            ("Europe/Berlin", "2026-10-24T12:00:00Z"),
            ("Australia/Lord_Howe", "2026-04-03T12:00:00Z"),
            ("Australia/Lord_Howe", "2026-10-02T12:00:00Z"),
            // Samoa skipped the whole of 2011-12-30 (-10 → +14).
            ("Pacific/Apia", "2011-12-28T12:00:00Z"),
        ];
        let exprs = [
            "*/15 * * * *",
            "5-59/20 * * * *",
            "0 * * * *",
            "30 1,2,3 * * *",
            "0,30 2 * * *",
            "45 1 * * *",
            "15 2 * * *",
            "0 12 * * *",
            "59 23 * * *",
            "0 0 * * *",
        ];
        for (zone, from) in windows {
            let start = at(from);
            let end = start + TimeDelta::days(3);
            for expr in exprs {
                let s = sched(expr, zone);
                let got: Vec<DateTime<Utc>> = s
                    .upcoming(start, 1000)
                    .into_iter()
                    .take_while(|t| *t < end)
                    .collect();
                assert_eq!(rfc(&got), brute_force(&s, start, end), "{expr} in {zone}");
            }
        }
    }

    #[test]
    fn latest_in_agrees_with_upcoming() {
        // For every fire t in a DST-heavy stretch, latest_in(.., t) is t and
        // latest_in(.., t - 1s) is the fire before it.
        for (expr, zone) in [
            ("*/20 * * * *", "America/New_York"),
            ("30 2 * * *", "Europe/Berlin"),
            ("0,30 1,2 * * *", "Australia/Lord_Howe"),
        ] {
            let s = sched(expr, zone);
            for (from, count) in [("2026-03-07T00:00:00Z", 300), ("2026-10-02T00:00:00Z", 300)] {
                let times = s.upcoming(at(from), count);
                for w in times.windows(2) {
                    assert_eq!(s.latest_in(at(from), w[1]), Some(w[1]), "{expr} {zone}");
                    assert_eq!(
                        s.latest_in(at(from), w[1] - TimeDelta::seconds(1)),
                        Some(w[0]),
                        "{expr} {zone} before {}",
                        w[1]
                    );
                }
            }
        }
    }

    // ---- Validation ----------------------------------------------------------

    #[test]
    fn invalid_expressions_name_the_cron_field() {
        assert_invalid("* * * *", "UTC", "cron", "expected 5 or 6 fields, got 4");
        assert_invalid(
            "0 * * * * * 2026",
            "UTC",
            "cron",
            "expected 5 or 6 fields, got 7",
        );
        assert_invalid(
            "* * * * * * *",
            "UTC",
            "cron",
            "expected 5 or 6 fields, got 7",
        );
        assert_invalid("61 * * * *", "UTC", "cron", "minute field \"61\"");
        assert_invalid("* 24 * * *", "UTC", "cron", "hour field \"24\"");
        assert_invalid("60 * * * * *", "UTC", "cron", "second field \"60\"");
        assert_invalid("0 0 32 * *", "UTC", "cron", "day-of-month field \"32\"");
        assert_invalid("0 0 0 * *", "UTC", "cron", "day-of-month field \"0\"");
        assert_invalid("0 0 * 13 *", "UTC", "cron", "month field \"13\"");
        assert_invalid("0 0 * * 8", "UTC", "cron", "day-of-week field \"8\"");
        assert_invalid("*/0 * * * *", "UTC", "cron", "minute field \"*/0\"");
        assert_invalid("5-1 * * * *", "UTC", "cron", "minute field \"5-1\"");
        assert_invalid("not a cron expression", "UTC", "cron", "got 4");
        assert_invalid(
            "a b c d e",
            "UTC",
            "cron",
            "minute field \"a\": unknown name",
        );
        assert_invalid(
            "0 0 * MON *",
            "UTC",
            "cron",
            "month field \"MON\": unknown name",
        );
        assert_invalid("0 SAT * * *", "UTC", "cron", "hour field \"SAT\"");
        assert_invalid("0 0 * * FOO", "UTC", "cron", "unknown name \"FOO\"");
        assert_invalid("0 0 * * +1", "UTC", "cron", "'+' (AND) modifier");
        assert_invalid("0 0 * * 1;2", "UTC", "cron", "unexpected character ';'");
        assert_invalid("", "UTC", "cron", "must not be empty");
        assert_invalid("   ", "UTC", "cron", "must not be empty");
        assert_invalid("@reboot", "UTC", "cron", "nicknames");
        assert_invalid("@every 5m", "UTC", "cron", "expected 5 or 6 fields");
        let long = format!("0 0 * * {}", vec!["1"; 200].join(","));
        assert!(long.len() > MAX_INPUT_LEN);
        assert_invalid(&long, "UTC", "cron", "above the limit of 256");
    }

    #[test]
    fn never_firing_expressions_are_refused() {
        for expr in [
            "0 0 30 2 *",
            "0 0 31 4,6,9,11 *",
            "0 0 31 2 *",
            "0 0 30,31 2 *",
            "0 0 0 30 2 *",
            "0 9 * * L",
        ] {
            assert_invalid(expr, "UTC", "cron", "never fires");
        }
        // Rare but real: Feb 29, and a fifth Monday in February (2016, 2044).
        assert_upcoming(
            "0 0 * 2 1#5",
            "UTC",
            "2017-01-01T00:00:00Z",
            &["2044-02-29T00:00:00Z", "2072-02-29T00:00:00Z"],
        );
        // Checking takes little time.
        let started = Instant::now();
        assert!(CronSchedule::parse("59 59 23 31 2 *", "UTC").is_err());
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn invalid_time_zones_name_the_timezone_field() {
        assert_invalid(
            "* * * * *",
            "Mars/Base",
            "timezone",
            "unknown time zone \"Mars/Base\"",
        );
        assert_invalid("* * * * *", "", "timezone", "must not be empty");
        assert_invalid(
            "* * * * *",
            "europe/berlin",
            "timezone",
            "unknown time zone",
        );
        assert_invalid("* * * * *", "+02:00", "timezone", "unknown time zone");
        assert_invalid(
            "* * * * *",
            &"A".repeat(300),
            "timezone",
            "above the limit of 256",
        );
        // A bad zone is reported even with a bad expression.
        assert_invalid("* *", "Mars/Base", "timezone", "unknown time zone");
    }

    #[test]
    fn nicknames_fire_as_their_five_fields() {
        let from = Utc.with_ymd_and_hms(2026, 12, 3, 10, 30, 0).unwrap();
        for (nick, fields) in [
            ("@hourly", "0 * * * *"),
            ("@daily", "0 0 * * *"),
            ("@midnight", "0 0 * * *"),
            ("@WEEKLY", "0 0 * * 0"),
            ("@monthly", "0 0 1 * *"),
            ("@yearly", "0 0 1 1 *"),
            ("@annually", "0 0 1 1 *"),
        ] {
            let a = CronSchedule::parse(nick, "Europe/Berlin").unwrap();
            let b = CronSchedule::parse(fields, "Europe/Berlin").unwrap();
            assert_eq!(a.upcoming(from, 3), b.upcoming(from, 3), "{nick}");
        }
        let hourly = CronSchedule::parse("@hourly", "UTC").unwrap();
        assert_eq!(
            hourly.upcoming(from, 2),
            [
                Utc.with_ymd_and_hms(2026, 12, 3, 11, 0, 0).unwrap(),
                Utc.with_ymd_and_hms(2026, 12, 3, 12, 0, 0).unwrap()
            ]
        );
    }
}
