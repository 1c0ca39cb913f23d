//! Human output: aligned tables, key/value blocks, ages ("3m ago"),
//! durations ("2.1s") and truncation; and the one sanitiser every piece
//! of text the commands print passes through ([`visible`], and
//! [`json_text`] for `--json`), so that text a server or a tenant's worker
//! wrote (an error, a payload, a worker id) can never drive the terminal.

use std::borrow::Cow;
use std::fmt::Write as _;

use chrono::{DateTime, SecondsFormat, SubsecRound, Utc};

/// Width of a truncated cell when the terminal's width is unknown (output
/// to a pipe or a file).
const DEFAULT_FLEX_WIDTH: u16 = 60;
/// A flexible column never gets narrower than this.
const MIN_FLEX_WIDTH: u16 = 12;

/// A table with a header row; columns are separated by two spaces and
/// padded to their widest cell (in terminal columns: a wide character
/// takes two). One column may be marked flexible (an error message, a
/// detail): it is cut so the table fits the terminal. Laid out by
/// comfy-table.
pub(crate) struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
    flex: Option<usize>,
    right: Vec<bool>,
}

impl Table {
    pub(crate) fn new(headers: &[&'static str]) -> Table {
        Table {
            headers: headers.to_vec(),
            rows: Vec::new(),
            flex: None,
            right: vec![false; headers.len()],
        }
    }

    /// Marks the column named `header` as the one truncated to fit.
    pub(crate) fn flex(mut self, header: &str) -> Table {
        self.flex = self.headers.iter().position(|h| *h == header);
        self
    }

    /// Right-aligns the columns named in `headers` (numbers).
    pub(crate) fn numeric(mut self, headers: &[&str]) -> Table {
        for (i, h) in self.headers.iter().enumerate() {
            if headers.contains(h) {
                self.right[i] = true;
            }
        }
        self
    }

    /// Adds a row. Each cell is made [`visible`]: a line break or a tab
    /// in one would break the table's layout, and a control character
    /// would reach the terminal.
    pub(crate) fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.headers.len());
        self.rows
            .push(cells.iter().map(|c| visible(c).into_owned()).collect());
    }

    /// The table as text, fitted to `width` columns when given.
    pub(crate) fn render(&self, width: Option<usize>) -> String {
        use comfy_table::{
            presets, CellAlignment, ColumnConstraint, ContentArrangement, Row, Width,
        };
        let mut table = comfy_table::Table::new();
        table
            .load_preset(presets::NOTHING)
            .set_truncation_indicator("…")
            .set_header(self.headers.clone());
        for cells in &self.rows {
            let mut row = Row::from(cells.clone());
            // A cell too long for its column is cut, not wrapped.
            row.max_height(1);
            table.add_row(row);
        }
        match width {
            Some(total) => {
                table
                    .set_content_arrangement(ContentArrangement::Dynamic)
                    .set_width(u16::try_from(total).unwrap_or(u16::MAX));
            }
            None => {
                table.set_content_arrangement(ContentArrangement::Disabled);
            }
        }
        let last = self.headers.len().saturating_sub(1);
        for (i, column) in table.column_iter_mut().enumerate() {
            // Two spaces between columns, none around the table.
            column.set_padding((0, if i < last { 2 } else { 0 }));
            if self.right[i] {
                column.set_cell_alignment(CellAlignment::Right);
            }
            // Only the flexible column gives way; the others keep their
            // content's width.
            column.set_constraint(match (self.flex == Some(i), width) {
                (false, _) => ColumnConstraint::ContentWidth,
                (true, Some(_)) => ColumnConstraint::LowerBoundary(Width::Fixed(MIN_FLEX_WIDTH)),
                (true, None) => ColumnConstraint::UpperBoundary(Width::Fixed(DEFAULT_FLEX_WIDTH)),
            });
        }
        let mut text = table.trim_fmt();
        text.push('\n');
        text
    }

    /// The table fitted to the terminal when stdout is one.
    pub(crate) fn print(&self) {
        super::out(&self.render(terminal_width()));
    }
}

/// `key: value` lines with the values aligned; empty values are skipped.
/// Each value is text, shown on one line ([`visible`]: a line break in it
/// is shown as `\n`).
pub(crate) fn fields(pairs: &[(&str, String)]) -> String {
    fields_and_blocks(pairs, &[])
}

/// [`fields`], then `blocks`: [`pretty_json`] renderings, whose lines are
/// indented under the first.
pub(crate) fn fields_and_blocks(pairs: &[(&str, String)], blocks: &[(&str, String)]) -> String {
    let pairs: Vec<(&str, Cow<'_, str>)> = pairs
        .iter()
        .map(|(k, v)| (*k, visible(v)))
        .chain(blocks.iter().map(|(k, v)| (*k, visible_lines(v))))
        .filter(|(_, v)| !v.is_empty())
        .collect();
    let width = pairs
        .iter()
        .map(|(k, _)| k.chars().count() + 1)
        .max()
        .unwrap_or(0);
    let mut text = String::new();
    for (k, v) in &pairs {
        let key = format!("{k}:");
        let mut lines = v.split('\n');
        text.push_str(&format!(
            "{key:<width$}  {}\n",
            lines.next().unwrap_or_default()
        ));
        for line in lines {
            text.push_str(&format!("{:width$}  {line}\n", ""));
        }
    }
    text
}

/// The width of the terminal stdout is, if it is one: `COLUMNS`, else
/// what `stty size` says, else 120.
pub(crate) fn terminal_width() -> Option<usize> {
    if !super::stdout_is_tty() {
        return None;
    }
    if let Some(n) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse().ok())
    {
        return Some(n);
    }
    let size = console::Term::stdout().size_checked();
    Some(size.map_or(120, |(_, columns)| usize::from(columns)))
}

/// Whether `c` must not reach a terminal as it is: the C0 controls (tab,
/// line feed and carriage return included: in a table cell they break the
/// layout), DEL, the C1 controls U+0080–U+009F (some terminals obey U+009B
/// as CSI), and the invisible bidirectional formatting characters (marks,
/// embeddings, overrides and isolates, which reorder what is shown) and the
/// Unicode line and paragraph separators.
pub(crate) fn is_unsafe(c: char) -> bool {
    // `is_control` is the Cc category: U+0000–U+001F, U+007F, U+0080–U+009F.
    c.is_control()
        || matches!(
            c,
            '\u{061C}'
                | '\u{200E}'
                | '\u{200F}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// `text` made safe to print: every [`is_unsafe`] character is written as
/// an escape, `\n`, `\r` and `\t` by name, the other ASCII controls and
/// DEL as `\x1b`, the rest as `\u{9b}`. The one sanitiser of text a
/// server sent, used for every table cell, every field value, every error
/// message and, keeping line breaks, everything written to stdout and
/// stderr.
pub(crate) fn visible(text: &str) -> Cow<'_, str> {
    escape(text, false)
}

/// Like [`visible`], but line feeds stay line breaks: for text whose line
/// breaks are the layout's (a whole table, a pretty JSON block, a message).
pub(crate) fn visible_lines(text: &str) -> Cow<'_, str> {
    escape(text, true)
}

fn escape(text: &str, keep_line_feeds: bool) -> Cow<'_, str> {
    let unsafe_char = |c: char| is_unsafe(c) && !(keep_line_feeds && c == '\n');
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if !unsafe_char(c) {
            out.push(c);
            continue;
        }
        let _ = match c {
            '\n' => out.write_str("\\n"),
            '\r' => out.write_str("\\r"),
            '\t' => out.write_str("\\t"),
            c if c.is_ascii() => write!(out, "\\x{:02x}", u32::from(c)),
            c => write!(out, "\\u{{{:x}}}", u32::from(c)),
        };
    }
    Cow::Owned(out)
}

/// JSON text made safe to print and still the same JSON: every
/// [`is_unsafe`] character but the layout's line feeds is written as a
/// `\u` escape (`\u009b`). serde_json escapes the C0 controls inside
/// strings but writes DEL, the C1 controls and the bidirectional
/// characters as they are; outside strings JSON holds only spaces and line
/// feeds, so each one left is inside a string, where the escape means the
/// same character. (All of them are in the Basic Multilingual Plane: one
/// `\uXXXX` each.)
pub(crate) fn json_text(json: &str) -> Cow<'_, str> {
    let unsafe_char = |c: char| is_unsafe(c) && c != '\n';
    if !json.chars().any(unsafe_char) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if unsafe_char(c) {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// How long ago `t` was, coarsely: "just now", "45s ago", "3m ago",
/// "2h ago", "5d ago"; a future instant reads "in 3m".
pub(crate) fn ago(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let ms = (now - t).num_milliseconds();
    if ms.abs() < 1_000 {
        return "just now".to_owned();
    }
    let span = coarse(ms.unsigned_abs());
    if ms > 0 {
        format!("{span} ago")
    } else {
        format!("in {span}")
    }
}

/// `ago` of an optional instant ("" when absent).
pub(crate) fn ago_opt(t: Option<DateTime<Utc>>, now: DateTime<Utc>) -> String {
    t.map(|t| ago(t, now)).unwrap_or_default()
}

/// One unit, rounded to the nearest: "45s", "3m", "2h", "5d".
fn coarse(ms: u64) -> String {
    let s = (ms + 500) / 1_000;
    if s < 60 {
        return format!("{s}s");
    }
    let m = (s + 30) / 60;
    if m < 60 {
        return format!("{m}m");
    }
    let h = (s + 1_800) / 3_600;
    if h < 24 {
        return format!("{h}h");
    }
    format!("{}d", (s + 43_200) / 86_400)
}

/// A duration for humans: "850ms", "2.1s", "3m20s", "2h05m", "3d4h".
pub(crate) fn duration_ms(ms: i64) -> String {
    if ms < 0 {
        return format!("-{}", duration_ms(ms.saturating_neg()));
    }
    let ms = ms as u64;
    match ms {
        0..=999 => format!("{ms}ms"),
        1_000..=59_999 => {
            let tenths = (ms + 50) / 100;
            if tenths.is_multiple_of(10) {
                format!("{}s", tenths / 10)
            } else {
                format!("{}.{}s", tenths / 10, tenths % 10)
            }
        }
        60_000..=3_599_999 => {
            let s = ms / 1_000;
            match s % 60 {
                0 => format!("{}m", s / 60),
                r => format!("{}m{r}s", s / 60),
            }
        }
        3_600_000..=86_399_999 => {
            let m = ms / 60_000;
            match m % 60 {
                0 => format!("{}h", m / 60),
                r => format!("{}h{r:02}m", m / 60),
            }
        }
        _ => {
            let h = ms / 3_600_000;
            match h % 24 {
                0 => format!("{}d", h / 24),
                r => format!("{}d{r}h", h / 24),
            }
        }
    }
}

/// An instant as the API writes it, to the second: `2026-11-29T23:00:00Z`
/// (sub-second digits only when present).
pub(crate) fn time(t: DateTime<Utc>) -> String {
    t.trunc_subsecs(3)
        .to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// An instant and how far from now: `2026-11-29T23:00:00Z (3m ago)`.
pub(crate) fn time_ago(t: Option<DateTime<Utc>>, now: DateTime<Utc>) -> String {
    match t {
        Some(t) => format!("{} ({})", time(t), ago(t, now)),
        None => String::new(),
    }
}

/// JSON for humans: indented, `null` shown as nothing, safe to print
/// ([`json_text`]).
pub(crate) fn pretty_json(value: &serde_json::Value) -> String {
    if value.is_null() {
        return String::new();
    }
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    json_text(&text).into_owned()
}

/// `n` and the noun, singular for one: "1 queue", "2 queues", "0 jobs".
pub(crate) fn plural(n: impl Into<i128>, noun: &str) -> String {
    let n = n.into();
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages() {
        let now: DateTime<Utc> = "2026-01-01T12:00:00Z".parse().unwrap();
        let at = |s: i64| now - chrono::Duration::seconds(s);
        assert_eq!(ago(now, now), "just now");
        assert_eq!(ago(at(45), now), "45s ago");
        assert_eq!(ago(at(200), now), "3m ago");
        assert_eq!(ago(at(299), now), "5m ago");
        assert_eq!(ago(at(3_590), now), "1h ago");
        assert_eq!(ago(at(7_300), now), "2h ago");
        assert_eq!(ago(at(5 * 86_400 + 10), now), "5d ago");
        assert_eq!(ago(at(-300), now), "in 5m");
        assert_eq!(
            time(now + chrono::Duration::nanoseconds(123_456_789)),
            "2026-01-01T12:00:00.123Z"
        );
    }

    #[test]
    fn durations() {
        assert_eq!(duration_ms(850), "850ms");
        assert_eq!(duration_ms(2_100), "2.1s");
        assert_eq!(duration_ms(2_049), "2s");
        assert_eq!(duration_ms(30_000), "30s");
        assert_eq!(duration_ms(200_000), "3m20s");
        assert_eq!(duration_ms(300_000), "5m");
        assert_eq!(duration_ms(3_600_000), "1h");
        assert_eq!(duration_ms(7_500_000), "2h05m");
        assert_eq!(duration_ms(3 * 86_400_000 + 4 * 3_600_000), "3d4h");
        assert_eq!(duration_ms(-1_500), "-1.5s");
    }

    #[test]
    fn a_flexible_cell_is_cut_to_fit_by_display_width() {
        let cut = |text: &str, width| {
            let mut t = Table::new(&["ID", "DETAIL"]).flex("DETAIL");
            t.row(vec!["a".into(), text.into()]);
            let text = t.render(Some(width));
            text.lines().nth(1).unwrap().to_owned()
        };
        // 4 columns for the id and its gap, the rest for the detail.
        assert_eq!(cut("short", 40), "a   short");
        // A line break or a tab is shown, not obeyed.
        assert_eq!(cut("line one\nline two", 40), "a   line one\\nline two");
        assert_eq!(cut("a\tb\r", 40), "a   a\\tb\\r");
        assert_eq!(
            cut("a long error message, longer than fits", 20),
            "a   a long error…"
        );
        // Never narrower than 12, whatever the terminal.
        assert_eq!(cut("a long error message", 8), "a   a long erro…");
        // Wide characters take two columns each.
        let wide = cut("日本語のエラーメッセージです", 20);
        assert!(wide.ends_with('…'), "{wide}");
        assert!(console::measure_text_width(&wide) <= 20, "{wide}");
    }

    #[test]
    fn wide_text_is_aligned_by_its_columns() {
        let mut t = Table::new(&["QUEUE", "N"]).numeric(&["N"]);
        t.row(vec!["メール".into(), "1".into()]);
        t.row(vec!["mail".into(), "22".into()]);
        let text = t.render(None);
        let lines: Vec<&str> = text.lines().collect();
        let ends: Vec<usize> = lines
            .iter()
            .map(|l| console::measure_text_width(l))
            .collect();
        assert!(ends.iter().all(|e| *e == ends[0]), "{text}");
    }

    #[test]
    fn tables_align_and_fit() {
        let mut t = Table::new(&["ID", "N", "ERROR"])
            .flex("ERROR")
            .numeric(&["N"]);
        t.row(vec!["a".into(), "1".into(), "boom".into()]);
        t.row(vec![
            "bbb".into(),
            "100".into(),
            "a very long error message that does not fit".into(),
        ]);
        let text = t.render(Some(30));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "ID     N  ERROR");
        assert_eq!(lines[1], "a      1  boom");
        assert!(lines[2].starts_with("bbb  100  a very long"), "{text}");
        assert!(lines[2].ends_with('…'), "{text}");
        assert!(lines.iter().all(|l| l.chars().count() <= 30), "{text}");
    }

    #[test]
    fn field_blocks_skip_empty_values() {
        let text = fields_and_blocks(
            &[
                ("id", "x".into()),
                ("nothing", String::new()),
                ("error", "two\nlines".into()),
            ],
            &[
                ("payload", "{\n  \"a\": 1\n}".into()),
                ("result", String::new()),
            ],
        );
        assert_eq!(
            text,
            "id:       x\nerror:    two\\nlines\npayload:  {\n            \"a\": 1\n          }\n"
        );
    }

    #[test]
    fn control_characters_are_shown_not_obeyed() {
        assert_eq!(
            visible("plain text, ünïcödé 日本"),
            "plain text, ünïcödé 日本"
        );
        assert!(matches!(visible("plain"), Cow::Borrowed(_)));
        assert_eq!(
            visible("\x1b[2J\x1b]0;title\x07\x1b]52;c;aGk=\x07"),
            "\\x1b[2J\\x1b]0;title\\x07\\x1b]52;c;aGk=\\x07"
        );
        assert_eq!(
            visible("a\u{9b}31mb\u{85}c\u{7f}"),
            "a\\u{9b}31mb\\u{85}c\\x7f"
        );
        assert_eq!(visible("\0\x01\x1f"), "\\x00\\x01\\x1f");
        assert_eq!(visible("a\nb\tc\rd"), "a\\nb\\tc\\rd");
        assert_eq!(visible_lines("a\nb\tc\rd"), "a\nb\\tc\\rd");
        // Bidirectional overrides, isolates and marks, and U+2028/9.
        assert_eq!(
            visible("x\u{202e}y\u{2066}z\u{200f}\u{2028}"),
            "x\\u{202e}y\\u{2066}z\\u{200f}\\u{2028}"
        );
        // Every C0, DEL and C1 control is caught, and nothing else below U+00A0.
        for c in (0u32..0xa0).filter_map(char::from_u32) {
            let bad = c < ' ' || ('\u{7f}'..='\u{9f}').contains(&c);
            assert_eq!(is_unsafe(c), bad, "{c:?}");
            assert_eq!(visible(&c.to_string()) == c.to_string(), !bad, "{c:?}");
        }
    }

    #[test]
    fn json_output_escapes_what_serde_json_leaves_raw() {
        let value = serde_json::json!({
            "e\u{9b}": "\x1b[2J \u{9b}31m \u{7f} \u{202e} ü",
            "n": [1, null]
        });
        let raw = serde_json::to_string_pretty(&value).unwrap();
        assert!(raw.contains('\u{9b}'), "serde_json writes C1 raw: {raw}");
        let safe = json_text(&raw);
        assert!(!safe.chars().any(|c| is_unsafe(c) && c != '\n'), "{safe}");
        assert!(
            safe.contains("\\u009b31m") && safe.contains("\\u202e") && safe.contains("\\u007f")
        );
        assert!(safe.contains("\\u001b[2J"), "{safe}");
        assert!(safe.contains('ü'), "{safe}");
        // Still JSON, and the same value.
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, value);
        assert_eq!(pretty_json(&value), safe);
    }
}
