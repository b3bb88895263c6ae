//! Byte sizes and durations as written in recipes and on the command line: `1048576`, `600MiB`,
//! `2GB`; `500ms`, `30s`, `10m`, `2h`, `1d`.

use std::time::Duration;

/// Parses a size: a whole number of bytes, or a number (decimals allowed) followed by one of
/// `B`, `KiB`, `MiB`, `GiB`, `TiB` (powers of 1024) or `KB`, `MB`, `GB`, `TB` (powers of 1000).
/// The error says what was expected.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let split = trimmed.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let unit = unit.trim();
    let multiplier: u64 = match unit {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        _ => return Err(size_expectation(text)),
    };
    if number.is_empty() {
        return Err(size_expectation(text));
    }
    if let Ok(whole) = number.parse::<u64>() {
        return whole.checked_mul(multiplier).ok_or_else(|| size_too_large(text));
    }
    let value: f64 = number.parse().map_err(|_| size_expectation(text))?;
    let bytes = value * multiplier as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(size_too_large(text));
    }
    Ok(bytes.round() as u64)
}

fn size_too_large(text: &str) -> String {
    format!("size `{text}` is out of range: at most {} bytes (16 EiB)", u64::MAX)
}

fn size_expectation(text: &str) -> String {
    format!(
        "invalid size `{text}`: expected a number of bytes or a number with a unit \
         (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB), e.g. `600MiB`"
    )
}

/// Parses a duration: a number (decimals allowed) followed by one of `ms`, `s`, `m` (minutes),
/// `h` or `d` (days of 24 hours), e.g. `500ms`, `30s`, `1.5h`. A bare number has no unit and is
/// refused, since seconds and milliseconds are both common. The error says what was expected.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    let split = trimmed.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let nanos_per_unit: u128 = match unit.trim() {
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" | "min" => 60 * 1_000_000_000,
        "h" => 3600 * 1_000_000_000,
        "d" => 86_400 * 1_000_000_000,
        _ => return Err(duration_expectation(text)),
    };
    if number.is_empty() {
        return Err(duration_expectation(text));
    }
    let too_long = || format!("duration `{text}` is too long: at most {} days", MAX_DURATION.as_secs() / 86_400);
    let nanos = match number.parse::<u64>() {
        Ok(whole) => u128::from(whole).checked_mul(nanos_per_unit).ok_or_else(too_long)?,
        Err(_) => {
            let value: f64 = number.parse().map_err(|_| duration_expectation(text))?;
            let nanos = value * nanos_per_unit as f64;
            if !nanos.is_finite() || nanos >= MAX_DURATION.as_nanos() as f64 * 2.0 {
                return Err(too_long());
            }
            nanos.round() as u128
        }
    };
    if nanos > MAX_DURATION.as_nanos() {
        return Err(too_long());
    }
    Ok(Duration::from_nanos(nanos as u64))
}

/// The longest duration [`parse_duration`] accepts: 10 years of days, far beyond any timeout
/// or time step, and far below where arithmetic on it could overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(3650 * 86_400);

fn duration_expectation(text: &str) -> String {
    format!(
        "invalid duration `{text}`: expected a number with a unit (ms, s, m, h, d), e.g. `500ms`, `30s`, `10m` or `2h`"
    )
}

/// Formats bytes for people: `0 B`, `512 B`, `1.5 KiB`, `600.0 MiB`, `2.00 GiB`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    match unit {
        0 => format!("{bytes} B"),
        _ if value >= 100.0 => format!("{value:.0} {}", UNITS[unit]),
        _ if value >= 10.0 => format!("{value:.1} {}", UNITS[unit]),
        _ => format!("{value:.2} {}", UNITS[unit]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_size("123").unwrap(), 123);
        assert_eq!(parse_size("600MiB").unwrap(), 600 << 20);
        assert_eq!(parse_size("1.5 KiB").unwrap(), 1536);
        assert_eq!(parse_size("2GB").unwrap(), 2_000_000_000);
        assert_eq!(parse_size("4 GiB").unwrap(), 4 << 30);
    }

    #[test]
    fn rejects_garbage_with_expectation() {
        let err = parse_size("12 parsecs").unwrap_err();
        assert!(err.contains("expected a number of bytes"), "{err}");
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("-3MiB").is_err());
        assert!(parse_size("99999999999TiB").unwrap_err().contains("out of range: at most 18446744073709551615 bytes"));
    }

    #[test]
    fn parses_durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse_duration("1d").unwrap(), Duration::from_secs(86_400));
        assert_eq!(parse_duration("1.5 h").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("0s").unwrap(), Duration::ZERO);
    }

    #[test]
    fn rejects_bad_durations_with_expectation() {
        for bad in ["10", "10 parsecs", "m", "-3s", "1e3s", ""] {
            let err = parse_duration(bad).unwrap_err();
            assert!(err.contains("expected a number with a unit (ms, s, m, h, d)"), "{bad}: {err}");
        }
        assert!(parse_duration("18446744073709551615d").unwrap_err().contains("too long: at most 3650 days"));
        assert!(parse_duration("3651d").unwrap_err().contains("too long"));
        assert!(parse_duration("1e300s").is_err());
    }

    #[test]
    fn formats() {
        assert_eq!(format_size(512), "512 B");
        assert_eq!(format_size(1536), "1.50 KiB");
        assert_eq!(format_size(600 << 20), "600 MiB");
    }
}
