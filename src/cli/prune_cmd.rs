//! `runner prune`: deletes old runs from the feedback store, with their tasks, samples and
//! events, then shrinks the file.

use runner_plugin::size::format_size;

use super::PruneArgs;
use super::record;
use crate::store::Prune;

pub fn prune(args: PruneArgs) -> anyhow::Result<u8> {
    let db = args.db.clone().unwrap_or_else(record::default_db);
    // An empty file is no store either (as `history` and `report` read it): nothing to prune,
    // and it is not made into one.
    if std::fs::metadata(&db).map_or(true, |m| m.is_file() && m.len() == 0) {
        anyhow::bail!("no feedback store at {} (pass --db PATH)", db.display());
    }
    let before = args.before.as_deref().map(parse_before).transpose().map_err(|e| super::UsageError(e.to_string()))?;
    let store = record::open_for_recording(&db)?;
    // Logs and kept values are written relative to the directory runs start in, as is the store by default.
    let prune =
        Prune { keep: args.keep.map(|n| n as usize), before, recipe: args.recipe.clone(), files_in: Some(".".into()) };
    let pruned = store.prune(&prune, |bytes| {
        say!("reclaiming the space of the deleted rows (rebuilding {}, {})…", db.display(), format_size(bytes));
    })?;
    if pruned.runs == 0 {
        show!("nothing to prune in {} ({})", db.display(), format_size(pruned.bytes_after));
    } else {
        show!(
            "pruned {} run{} ({} task rows) from {}: {} → {}",
            pruned.runs,
            if pruned.runs == 1 { "" } else { "s" },
            pruned.tasks,
            db.display(),
            format_size(pruned.bytes_before),
            format_size(pruned.bytes_after),
        );
    }
    if pruned.folders > 0 {
        show!(
            "removed {} folder{} of logs and kept values of cycles no run is left of ({})",
            pruned.folders,
            if pruned.folders == 1 { "" } else { "s" },
            format_size(pruned.folder_bytes)
        );
    }
    Ok(0)
}

/// `--before`: a date (`2026-11-01`, midnight UTC) or an RFC 3339 time, as the text
/// `runs.started_at` is compared with.
fn parse_before(text: &str) -> anyhow::Result<String> {
    let format = |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    if let Ok(date) = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return Ok(format(date.and_time(chrono::NaiveTime::MIN).and_utc()));
    }
    match chrono::DateTime::parse_from_rfc3339(text) {
        Ok(time) => Ok(format(time.with_timezone(&chrono::Utc))),
        Err(_) => anyhow::bail!(
            "invalid --before `{text}`: expected a date (2026-11-01) or an RFC 3339 time (2026-11-01T06:00:00Z)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_times_become_started_at_text() {
        assert_eq!(parse_before("2026-11-01").unwrap(), "2026-11-01T00:00:00.000Z");
        assert_eq!(parse_before("2026-11-01T06:30:00+01:00").unwrap(), "2026-11-01T05:30:00.000Z");
        let err = parse_before("yesterday").unwrap_err().to_string();
        assert!(err.contains("yesterday") && err.contains("2026-11-01"), "{err}");
    }
}
