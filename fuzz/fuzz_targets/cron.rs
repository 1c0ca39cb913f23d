//! Cron parsing and evaluation: any expression and zone either parse or are
//! refused as `invalid_argument` naming `cron` or `timezone`; a schedule
//! that parses yields strictly increasing instants after any start, and
//! `latest_in` stays inside its window and agrees with `next_after`.
#![no_main]

use chrono::{DateTime, Duration, Utc};
use libfuzzer_sys::fuzz_target;
use tether_core::cron::CronSchedule;
use tether_core::Error;

const ZONES: [&str; 6] = [
    "UTC",
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "Pacific/Apia",
    "Asia/Kolkata",
];

fuzz_target!(|data: &[u8]| {
    if data.len() < 9 {
        return;
    }
    // First byte: zone (or the raw text after a NUL for arbitrary zones);
    // next 8: the start instant; the rest: the expression.
    let zone_pick = data[0];
    let start_secs = i64::from_le_bytes(data[1..9].try_into().unwrap()) % 8_000_000_000;
    let Ok(text) = std::str::from_utf8(&data[9..]) else {
        return;
    };
    let (expr, zone) = match text.split_once('\0') {
        Some((e, z)) if zone_pick & 0x80 != 0 => (e, z.to_owned()),
        _ => (text, ZONES[usize::from(zone_pick) % ZONES.len()].to_owned()),
    };
    let schedule = match CronSchedule::parse(expr, &zone) {
        Ok(s) => s,
        Err(Error::Invalid { field, .. }) => {
            assert!(field == "cron" || field == "timezone", "odd field {field}");
            return;
        }
        Err(e) => panic!("parse failed with a non-validation error: {e:?}"),
    };
    let Some(start) = DateTime::<Utc>::from_timestamp(start_secs.abs(), 0) else {
        return;
    };
    let times = schedule.upcoming(start, 4);
    let mut previous = start;
    for t in &times {
        assert!(*t > previous, "{expr:?} in {zone}: {t} after {previous}");
        previous = *t;
    }
    if let Some(first) = times.first() {
        assert_eq!(schedule.next_after(start), Some(*first));
        let window_end = *first + Duration::seconds(1);
        let latest = schedule
            .latest_in(start, window_end)
            .expect("the first instant is in the window");
        assert!(latest >= *first && latest <= window_end);
    }
});
