//! Fuzzes the result file a task of `--executor slurm` writes in its job (`runner task`:
//! `results/<step>/<index>.json` in the run folder) and the submitting runner reads back: the
//! bytes are written there and read with `RunFolder::read_result`, as the Slurm executor settles
//! a unit; what it then takes from a result (the peak's source, the failure's kind, the value
//! file in the run folder, the wall time) is taken here too, and a result read must write and
//! read back the same. Errors are fine; a panic, an abort or a hang is a crash.
#![no_main]

use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use runner::testing::executor::job::{RunFolder, TaskResult, failure_kind};
use runner::testing::measure::PeakSource;
use runner_plugin::serde_json;

/// One run folder per process (in memory when /dev/shm exists), with the folder of step `s`'s results.
static FOLDER: LazyLock<RunFolder> = LazyLock::new(|| {
    let dir = if std::path::Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    let folder = RunFolder { root: dir.join(format!("runner-fuzz-result-{}", std::process::id())) };
    std::fs::create_dir_all(folder.result("s", 0).parent().expect("a result file has a folder"))
        .expect("the run folder can be made");
    folder
});

fuzz_target!(|data: &[u8]| {
    if std::fs::write(FOLDER.result("s", 0), data).is_err() {
        return;
    }
    let Some(result) = FOLDER.read_result("s", 0) else { return };
    let _ = PeakSource::parse(&result.peak_source).unwrap_or_default();
    let _ = failure_kind(result.failure.as_deref().unwrap_or("error"));
    if let Some(value) = &result.value {
        let _ = FOLDER.root.join(value);
    }
    let _ = Duration::from_millis(result.wall_ms);
    let text = serde_json::to_vec(&result).expect("a result serialises");
    let again: TaskResult = serde_json::from_slice(&text).expect("a result written reads back");
    assert_eq!(again, result, "a result reads back as it was written");
});
