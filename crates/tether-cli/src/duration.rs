//! Durations on the command line and in `TETHER_*` settings: `500ms`,
//! `30s`, `5m`, `2h`, `7d`, and combinations such as `1h30m`, as the
//! `humantime` crate reads them.

use std::time::Duration;

/// Parses a duration: one or more numbers, each with its unit (`ms`, `s`,
/// `m`, `h`, `d`, `w`, ...). A bare number has no unit and is refused.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    humantime::parse_duration(text)
        .map_err(|e| format!("{text:?} is not a duration ({e}); e.g. 500ms, 30s, 5m, 1h30m, 7d"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse(" 1m 30s "), Ok(Duration::from_secs(90)));
    }

    #[test]
    fn refusals() {
        for bad in ["30", "s", "3x", "-1s", "99999999999999999999d", ""] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("is not a duration"), "{bad}: {e}");
        }
    }
}
