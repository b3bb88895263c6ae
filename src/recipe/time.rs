//! Dates and times in recipes: the instants of date dims and cycle ids (`1981-09-01`,
//! `2026-11-01T00Z`, `20261101T0000Z`), strftime formats for templates (`{day:%Y%m%d}`), and
//! the units and formats of durations (`{lead h:PT%4HH%MM}` → `PT0003H00M`). Every time is UTC.

use std::fmt::Write as _;

use chrono::format::{Item, StrftimeItems};
use chrono::{DateTime, NaiveDate, Utc};

/// An instant as written: seconds since the epoch, and whether a time of day was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Instant {
    pub seconds: i64,
    pub has_time: bool,
}

/// What [`parse_instant`] accepts, for messages.
pub const INSTANT_FORMS: &str = "a date or date-time in UTC such as 1981-09-01, 2026-11-01T00Z, \
     2026-11-01T00:30Z or 20261101T0000Z";

/// Parses a date (`1981-09-01`, `19810901`) or a UTC date-time (`2026-11-01T00Z`,
/// `2026-11-01T00:30`, `2026-11-01T00:30:15Z`, `20261101T0030Z`); `None` for anything else,
/// including dates that do not exist (`2021-02-29`).
pub fn parse_instant(text: &str) -> Option<Instant> {
    let text = text.trim();
    let (date, time) = match text.find(['T', 't', ' ']) {
        Some(at) => (&text[..at], Some(&text[at + 1..])),
        None => (text, None),
    };
    let (year, month, day) = parse_date(date)?;
    let date = NaiveDate::from_ymd_opt(year, month, day)?;
    let (hour, minute, second) = match time {
        None => (0, 0, 0),
        Some(time) => parse_time(time.strip_suffix(['Z', 'z']).unwrap_or(time))?,
    };
    let seconds = date.and_hms_opt(hour, minute, second)?.and_utc().timestamp();
    Some(Instant { seconds, has_time: time.is_some() })
}

/// `YYYY-MM-DD` or `YYYYMMDD`.
fn parse_date(text: &str) -> Option<(i32, u32, u32)> {
    let digits = |s: &str| -> Option<u32> { s.bytes().all(|b| b.is_ascii_digit()).then(|| s.parse().ok())? };
    match text.len() {
        10 if text.as_bytes()[4] == b'-' && text.as_bytes()[7] == b'-' => {
            Some((digits(&text[..4])? as i32, digits(&text[5..7])?, digits(&text[8..])?))
        }
        8 => Some((digits(&text[..4])? as i32, digits(&text[4..6])?, digits(&text[6..])?)),
        _ => None,
    }
}

/// `HH`, `HH:MM`, `HH:MM:SS`, `HHMM` or `HHMMSS`.
fn parse_time(text: &str) -> Option<(u32, u32, u32)> {
    let compact: String = text.split(':').collect();
    let well_placed = !text.contains(':') || text.split(':').all(|part| part.len() == 2);
    if !well_placed || !compact.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let field = |at: usize| compact.get(at..at + 2).map_or(Some(0), |s| s.parse().ok());
    match compact.len() {
        2 | 4 | 6 => Some((field(0)?, field(2)?, field(4)?)),
        _ => None,
    }
}

/// A strftime format (`%Y%m%d`), checked when the recipe is compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeFormat {
    text: String,
    /// Most bytes one formatted value can take.
    max_len: usize,
}

impl TimeFormat {
    /// Checks `text`; the error names what chrono's strftime does not know.
    pub fn parse(text: &str) -> Result<TimeFormat, String> {
        let mut max_len = 0usize;
        for item in StrftimeItems::new(text) {
            max_len += match item {
                Item::Error => {
                    return Err(format!(
                        "bad date format `{text}`; expected strftime fields such as `%Y%m%d`, `%Y-%m`, `%H%M` or `%j`"
                    ));
                }
                Item::Literal(s) | Item::Space(s) => s.len(),
                Item::OwnedLiteral(s) | Item::OwnedSpace(s) => s.len(),
                // The longest field (a weekday or month name, a zone, a full date-time) is short.
                _ => 40,
            };
        }
        Ok(TimeFormat { text: text.to_string(), max_len })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Most bytes one value formats to.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Appends the instant `seconds` (since the epoch, UTC) in this format.
    pub fn write(&self, seconds: i64, out: &mut String) -> Result<(), String> {
        let time: DateTime<Utc> = DateTime::from_timestamp(seconds, 0)
            .ok_or_else(|| format!("{seconds} seconds since 1970 is beyond the dates that can be formatted"))?;
        write!(out, "{}", time.format(&self.text)).map_err(|_| format!("cannot format a date with `{}`", self.text))
    }
}

/// The least and most seconds a term of date-time arithmetic can add, or why it cannot be added.
pub type Extent = Result<(i64, i64), String>;

/// A unit of time after a number or name in a template (`6h`, `lead h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Unit {
    Second,
    Minute,
    Hour,
    Day,
}

impl Unit {
    /// What the units are written as, for messages.
    pub const WRITTEN: &'static str = "`s`, `m`, `h` or `d`";

    /// `s`, `m`, `h` or `d`.
    pub fn parse(text: &str) -> Option<Unit> {
        match text {
            "s" => Some(Unit::Second),
            "m" => Some(Unit::Minute),
            "h" => Some(Unit::Hour),
            "d" => Some(Unit::Day),
            _ => None,
        }
    }

    pub fn seconds(self) -> i64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3600,
            Unit::Day => 86_400,
        }
    }
}

/// How a duration is written: `iso` (ISO 8601 in hours, minutes and seconds: `PT3H`, `PT1H30M`,
/// `PT36H`, `PT0S`; the default), or a pattern of literal text and fields `%d`, `%H`, `%M`,
/// `%S` (days, hours, minutes, seconds), each zero-padded to 2 digits or to the width written
/// after the `%` (`%4H`). A field counts what the larger fields of the same pattern leave:
/// `PT%4HH%MM` writes 27 hours 30 minutes as `PT0027H30M`, `%dd%HH` as `01d03H`, `%M` alone as
/// the whole minutes (`1650`). A negative duration starts with `-`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurationFormat {
    text: String,
    /// `None` for `iso`.
    items: Option<Vec<DurationItem>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum DurationItem {
    Literal(String),
    Field { unit: Unit, width: usize },
}

impl Default for DurationFormat {
    fn default() -> DurationFormat {
        DurationFormat { text: "iso".to_string(), items: None }
    }
}

impl DurationFormat {
    /// What a duration format may be, for messages.
    pub const EXPECTED: &'static str = "`iso` or a pattern of fields `%d`, `%H`, `%M`, `%S` (days, hours, \
        minutes, seconds) with an optional width, e.g. `PT%4HH%MM` for `PT0003H00M`";
    /// Widest field.
    const MAX_WIDTH: usize = 20;

    /// Checks `text`; the error says what is wrong and what a duration format is.
    pub fn parse(text: &str) -> Result<DurationFormat, String> {
        if text == "iso" || text.is_empty() {
            return Ok(DurationFormat::default());
        }
        let bad = |why: String| format!("bad duration format `{text}`: {why}; expected {}", Self::EXPECTED);
        let mut items = Vec::new();
        let mut literal = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            if c != '%' {
                literal.push(c);
                continue;
            }
            let mut width = String::new();
            while let Some(digit) = chars.next_if(char::is_ascii_digit) {
                width.push(digit);
            }
            let unit = match chars.next() {
                Some('%') if width.is_empty() => {
                    literal.push('%');
                    continue;
                }
                Some('d') => Unit::Day,
                Some('H') => Unit::Hour,
                Some('M') => Unit::Minute,
                Some('S') => Unit::Second,
                Some(other) => return Err(bad(format!("`%{width}{other}` is not a field"))),
                None => return Err(bad("it ends in `%`".into())),
            };
            let width = match width.parse::<usize>() {
                Err(_) => 2,
                Ok(w) if (1..=Self::MAX_WIDTH).contains(&w) => w,
                Ok(w) => return Err(bad(format!("width {w} is not between 1 and {}", Self::MAX_WIDTH))),
            };
            if items.iter().any(|i| matches!(i, DurationItem::Field { unit: u, .. } if *u == unit)) {
                return Err(bad(format!("`%{}` is used twice", unit_letter(unit))));
            }
            if !literal.is_empty() {
                items.push(DurationItem::Literal(std::mem::take(&mut literal)));
            }
            items.push(DurationItem::Field { unit, width });
        }
        if !items.iter().any(|i| matches!(i, DurationItem::Field { .. })) {
            return Err(bad("it has no field".into()));
        }
        if !literal.is_empty() {
            items.push(DurationItem::Literal(literal));
        }
        Ok(DurationFormat { text: text.to_string(), items: Some(items) })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Most bytes one duration formats to.
    pub fn max_len(&self) -> usize {
        // A sign, and at most 19 digits (or the width) per field.
        let field = |width: usize| width.max(19);
        match &self.items {
            None => "-PT".len() + 3 * (field(0) + 1),
            Some(items) => {
                1 + items
                    .iter()
                    .map(|i| match i {
                        DurationItem::Literal(l) => l.len(),
                        DurationItem::Field { width, .. } => field(*width),
                    })
                    .sum::<usize>()
            }
        }
    }

    /// Appends `seconds` in this format.
    pub fn write(&self, seconds: i64, out: &mut String) {
        if seconds < 0 {
            out.push('-');
        }
        let magnitude = seconds.unsigned_abs();
        let Some(items) = &self.items else {
            let (hours, minutes, secs) = (magnitude / 3600, magnitude / 60 % 60, magnitude % 60);
            out.push_str("PT");
            if hours > 0 {
                let _ = write!(out, "{hours}H");
            }
            if minutes > 0 {
                let _ = write!(out, "{minutes}M");
            }
            if secs > 0 || magnitude == 0 {
                let _ = write!(out, "{secs}S");
            }
            return;
        };
        for item in items {
            match item {
                DurationItem::Literal(text) => out.push_str(text),
                DurationItem::Field { unit, width } => {
                    let _ = write!(out, "{:0width$}", self.field(*unit, magnitude));
                }
            }
        }
    }

    /// The value of field `unit` for a duration of `magnitude` seconds: what the next larger
    /// field of the pattern leaves, in `unit`s.
    fn field(&self, unit: Unit, magnitude: u64) -> u64 {
        let larger = self.items.iter().flatten().filter_map(|i| match i {
            DurationItem::Field { unit: u, .. } if *u > unit => Some(u.seconds() as u64),
            _ => None,
        });
        let within = larger.min().map_or(magnitude, |next| magnitude % next);
        within / unit.seconds() as u64
    }
}

fn unit_letter(unit: Unit) -> char {
    match unit {
        Unit::Day => 'd',
        Unit::Hour => 'H',
        Unit::Minute => 'M',
        Unit::Second => 'S',
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seconds(text: &str) -> i64 {
        parse_instant(text).unwrap_or_else(|| panic!("{text} does not parse")).seconds
    }

    #[test]
    fn instants_in_every_written_form() {
        assert_eq!(seconds("1970-01-01"), 0);
        assert_eq!(seconds("1981-09-01"), 4261 * 86_400);
        assert_eq!(seconds("19810901"), 4261 * 86_400);
        let three = 20_758 * 86_400 + 3 * 3600;
        for form in ["2026-11-01T03Z", "2026-11-01T03", "2026-11-01T03:00Z", "2026-11-01T03:00:00Z", "20261101T0300Z"] {
            assert_eq!(seconds(form), three, "{form}");
        }
        assert!(parse_instant("2026-11-01").is_some_and(|i| !i.has_time));
        assert!(parse_instant("2026-11-01T00Z").is_some_and(|i| i.has_time));
        for bad in
            ["2021-02-29", "2026-13-01", "2026-11-01T24Z", "2026-11-01T3Z", "abc", "", "2026-11-01T00+01:00", "1"]
        {
            assert_eq!(parse_instant(bad), None, "{bad}");
        }
    }

    #[test]
    fn formats_are_checked_and_bounded() {
        let format = TimeFormat::parse("%Y%m%d").unwrap();
        let mut out = String::new();
        format.write(4261 * 86_400, &mut out).unwrap();
        assert_eq!(out, "19810901");
        assert!(format.max_len() >= 8);
        assert!(TimeFormat::parse("%Q").unwrap_err().contains("bad date format `%Q`"));
        assert!(TimeFormat::parse("%").is_err());
    }

    #[test]
    fn durations_in_iso_and_patterns() {
        let written = |format: &str, seconds: i64| {
            let mut out = String::new();
            DurationFormat::parse(format).unwrap_or_else(|e| panic!("{e}")).write(seconds, &mut out);
            out
        };
        let (h, m) = (3600, 60);
        assert_eq!(written("PT%4HH%MM", 3 * h), "PT0003H00M");
        assert_eq!(written("PT%4HH%MM", 27 * h + 30 * m), "PT0027H30M");
        assert_eq!(written("PT%4HH%MM", -6 * h), "-PT0006H00M");
        assert_eq!(written("%dd%HH", 27 * h), "01d03H");
        assert_eq!(written("%M", 27 * h + 30 * m + 59), "1650");
        assert_eq!(written("%1H:%M:%S 100%%", h + 2 * m + 3), "1:02:03 100%");
        assert_eq!(written("iso", 3 * h), "PT3H");
        assert_eq!(written("", 36 * h + 90), "PT36H1M30S");
        assert_eq!(written("iso", 0), "PT0S");
        assert_eq!(written("iso", -30 * m), "-PT30M");
        assert!(written("%20S", i64::MIN).len() <= DurationFormat::parse("%20S").unwrap().max_len());
        for (bad, says) in [
            ("PT%QH", "`%Q` is not a field"),
            ("PT%H%", "it ends in `%`"),
            ("hours", "it has no field"),
            ("%H%H", "`%H` is used twice"),
            ("%30H", "width 30 is not between 1 and 20"),
        ] {
            let error = DurationFormat::parse(bad).unwrap_err();
            assert!(error.contains(says) && error.contains("expected `iso` or a pattern"), "{bad}: {error}");
        }
    }
}
