//! How much memory a run may use: `--budget` parsing and the default of 80% of the memory
//! available to this process, honouring a cgroup limit (v2 `memory.max`, v1
//! `memory.limit_in_bytes`) as containers and batch schedulers set them.

use runner_plugin::size::parse_size;

/// Share of the available memory used when `--budget` is not given.
pub const DEFAULT_SHARE: f64 = 0.8;

/// Parses `--budget`: a size (`1GiB`, `800MB`, bytes) or a percentage of available memory.
pub fn parse_budget(text: &str) -> Result<u64, String> {
    if let Some(percent) = text.trim().strip_suffix('%') {
        let percent: f64 = percent
            .trim()
            .parse()
            .ok()
            .filter(|p: &f64| *p > 0.0 && *p <= 100.0)
            .ok_or_else(|| format!("invalid budget `{text}`: a percentage must be in (0, 100], e.g. `50%`"))?;
        let available =
            available_memory().map_err(|e| format!("cannot read the available memory for `{text}`: {e}"))?;
        return Ok((available as f64 * percent / 100.0) as u64);
    }
    let bytes = parse_size(text)?;
    if bytes == 0 {
        return Err(format!("invalid budget `{text}`: it must be more than 0 bytes"));
    }
    Ok(bytes)
}

/// The default budget: [`DEFAULT_SHARE`] of [`available_memory`].
pub fn default_budget() -> Result<u64, String> {
    Ok((available_memory()? as f64 * DEFAULT_SHARE) as u64)
}

/// Memory this process can still use: the system's `MemAvailable`, capped by the room left
/// under the process's cgroup limit, if any.
pub fn available_memory() -> Result<u64, String> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").map_err(|e| format!("/proc/meminfo: {e}"))?;
    let available = meminfo_field(&meminfo, "MemAvailable:").ok_or("/proc/meminfo has no MemAvailable")?;
    Ok(match cgroup_room() {
        Some(room) => available.min(room),
        None => available,
    })
}

fn meminfo_field(meminfo: &str, field: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line[field.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

/// Limit minus usage of the process's memory cgroup, if it has a limit.
fn cgroup_room() -> Option<u64> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    for line in cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let (limit_file, usage_file) = match controllers {
            "" => (format!("/sys/fs/cgroup{path}/memory.max"), format!("/sys/fs/cgroup{path}/memory.current")),
            c if c.split(',').any(|c| c == "memory") => (
                format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes"),
                format!("/sys/fs/cgroup/memory{path}/memory.usage_in_bytes"),
            ),
            _ => continue,
        };
        let limit = read_number(&limit_file)?;
        let usage = read_number(&usage_file).unwrap_or(0);
        // cgroup v1 reports "no limit" as a huge number.
        if limit >= 1 << 60 {
            return None;
        }
        return Some(limit.saturating_sub(usage));
    }
    None
}

fn read_number(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_percentages() {
        assert_eq!(parse_budget("1GiB").unwrap(), 1 << 30);
        let half = parse_budget("50%").unwrap();
        let all = available_memory().unwrap();
        assert!(half > 0 && half <= all);
        assert!(parse_budget("0").unwrap_err().contains("more than 0"));
        assert!(parse_budget("150%").unwrap_err().contains("(0, 100]"));
        assert!(parse_budget("lots").unwrap_err().contains("invalid size"));
    }

    #[test]
    fn reads_meminfo() {
        let text = "MemTotal:       24000000 kB\nMemAvailable:   12000000 kB\n";
        assert_eq!(meminfo_field(text, "MemAvailable:"), Some(12_000_000 * 1024));
    }
}
