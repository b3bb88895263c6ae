//! Dates and times in recipes: the instants of date dims and cycle ids (`1981-09-01`,
//! `2026-11-01T00Z`, `20261101T0000Z`), and strftime formats for templates (`{day:%Y%m%d}`).
//! Every time is UTC.

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
}
