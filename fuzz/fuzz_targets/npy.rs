//! Fuzzes the `.npy` reader (`read_npy`, in the plugin API crate) through its public functions:
//! the bytes are written to a file, whose header is peeked at and which is then read whole.
//! Errors are fine; a panic, an abort or an allocation beyond libFuzzer's limit is a crash.
#![no_main]

use std::path::PathBuf;
use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use runner_plugin::npy;

/// One file per process, rewritten for every input (in memory when /dev/shm exists).
static FILE: LazyLock<PathBuf> = LazyLock::new(|| {
    let dir = if std::path::Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    dir.join(format!("runner-fuzz-npy-{}.npy", std::process::id()))
});

fuzz_target!(|data: &[u8]| {
    if std::fs::write(&*FILE, data).is_err() {
        return;
    }
    let header = npy::peek_header(&FILE);
    let array = npy::read_array(&FILE);
    // A file whose header reads must either read whole, or say why not.
    if let (Ok(header), Ok(array)) = (&header, &array) {
        assert_eq!(array.shape(), header.shape.as_slice(), "the array read has the header's shape");
    }
});
