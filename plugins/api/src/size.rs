//! Byte sizes as written in recipes and on the command line: `1048576`, `600MiB`, `2GB`.

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
        return whole.checked_mul(multiplier).ok_or_else(|| format!("size `{text}` is too large"));
    }
    let value: f64 = number.parse().map_err(|_| size_expectation(text))?;
    let bytes = value * multiplier as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(format!("size `{text}` is too large"));
    }
    Ok(bytes.round() as u64)
}

fn size_expectation(text: &str) -> String {
    format!(
        "invalid size `{text}`: expected a number of bytes or a number with a unit \
         (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB), e.g. `600MiB`"
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
        assert!(parse_size("99999999999TiB").unwrap_err().contains("too large"));
    }

    #[test]
    fn formats() {
        assert_eq!(format_size(512), "512 B");
        assert_eq!(format_size(1536), "1.50 KiB");
        assert_eq!(format_size(600 << 20), "600 MiB");
    }
}
