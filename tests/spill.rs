//! Spilling buffers to mapped files, checked against what the OS reports: the files on disk,
//! `/proc/self/status` (RssAnon), `/proc/self/smaps` (the mapping's resident pages) and `mincore`
//! (the file's pages in the page cache).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use runner::testing::measure;
use runner::testing::memory::spill::{self, MappedBuffer, SpillDir, SpillError};
use runner_plugin::{Array, DType, ExternalBytes, Storage, Value};

const MIB: u64 = 1 << 20;

/// A scratch folder on the same disk as the build (not a tmpfs, where pages cannot be dropped).
fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

/// The `.spill` files in a run's folder.
fn spill_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> =
        entries.map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "spill")).collect();
    files.sort();
    files
}

fn storage_of(value: &Value) -> &Storage {
    match value {
        Value::Array(array) => array.storage(),
        Value::Bytes(storage) => storage,
        other => panic!("not a buffer: {}", other.kind()),
    }
}

#[test]
fn round_trip_keeps_bytes_views_shape_and_attrs() {
    let parent = scratch();
    let dir = SpillDir::new(Some(parent.path()));
    assert!(!dir.path().exists(), "nothing spilled yet: no folder");
    assert!(!dir.is_on_tmpfs(), "the build's disk");

    let shape = vec![3, 5, 7];
    let n = 3 * 5 * 7;
    let f32s: Vec<f32> = (0..n).map(|i| i as f32 * 0.25 - 3.0).collect();
    let f64s: Vec<f64> = (0..n).map(|i| (i as f64).sqrt()).collect();
    let i32s: Vec<i32> = (0..n).map(|i| i as i32 * -7919).collect();
    let u8s: Vec<u8> = (0..n).map(|i| (i * 37 % 256) as u8).collect();
    let raw: Vec<u8> = (0..100_003u32).map(|i| (i % 251) as u8).collect();
    let arrays = [
        Array::from_vec(shape.clone(), f32s.clone()).unwrap(),
        Array::from_vec(shape.clone(), f64s.clone()).unwrap(),
        Array::from_vec(shape.clone(), i32s.clone()).unwrap(),
        Array::from_vec(shape.clone(), u8s.clone()).unwrap(),
    ];
    let mut values: Vec<Value> = arrays
        .into_iter()
        .map(|a| a.with_attr("units", "mm/h").with_attr("threshold", 0.5).into())
        .chain([Value::Bytes(Storage::U8(raw.clone()))])
        .collect();
    let originals: Vec<Vec<u8>> = values.iter().map(|v| v.as_bytes().unwrap().to_vec()).collect();

    let mut total = 0;
    for value in &mut values {
        let moved = spill::spill_value(&dir, value).unwrap();
        assert_eq!(moved, value.buffer_bytes());
        assert!(!storage_of(value).is_resident(), "now a mapped file");
        total += moved;
    }
    assert_eq!(dir.spilled_bytes(), total);
    assert_eq!(dir.spill_count(), 5);
    assert_eq!(spill_files(dir.path()).len(), 5, "one file per buffer while they live");

    for (value, original) in values.iter().zip(&originals) {
        assert_eq!(value.as_bytes().unwrap(), original.as_slice());
    }
    for value in &values[..4] {
        let array = value.as_array().unwrap();
        assert_eq!(array.shape(), shape.as_slice());
        assert_eq!(array.attrs()["units"], "mm/h");
        assert_eq!(array.attrs()["threshold"], 0.5);
    }
    let view = |i: usize| values[i].as_array().unwrap();
    assert_eq!(view(0).view::<f32>().unwrap().iter().copied().collect::<Vec<_>>(), f32s);
    assert_eq!(view(0).view::<f32>().unwrap()[[2, 4, 6]], f32s[n - 1]);
    assert_eq!(view(1).view::<f64>().unwrap().iter().copied().collect::<Vec<_>>(), f64s);
    assert_eq!(view(2).view::<i32>().unwrap().iter().copied().collect::<Vec<_>>(), i32s);
    assert_eq!(view(3).view::<u8>().unwrap().iter().copied().collect::<Vec<_>>(), u8s);
    assert!(view(1).view::<f32>().unwrap_err().contains("expected an array of f32, got f64"));

    // Already spilled: nothing more to move.
    assert_eq!(spill::spill_value(&dir, &mut values[0]).unwrap(), 0);
    assert_eq!(spill::spill_value(&dir, &mut Value::Json(serde_json::json!({"a": 1}))).unwrap(), 0);

    // Files go with their buffers.
    values.truncate(2);
    assert_eq!(spill_files(dir.path()).len(), 2);
    drop(values);
    assert!(spill_files(dir.path()).is_empty());

    // A buffer spilled directly: its file exists while it lives.
    let mapped = dir.spill(&Storage::F64(f64s.clone())).unwrap();
    let path = mapped.path().unwrap().to_path_buf();
    assert!(path.starts_with(dir.path()) && path.is_file());
    assert_eq!(fs::metadata(&path).unwrap().len(), n as u64 * 8);
    assert_eq!(mapped.bytes().as_ptr() as usize % 4096, 0, "page-aligned");
    let array = Array::from_storage(DType::F64, shape.clone(), Storage::External(Box::new(mapped))).unwrap();
    assert_eq!(array.view::<f64>().unwrap().iter().copied().collect::<Vec<_>>(), f64s);
    drop(array);
    assert!(!path.exists(), "deleted with its buffer");
}

/// Spills an array of `values` and views it back from the mapped file.
fn spilled_view_gives_back<T: runner_plugin::Element + PartialEq + std::fmt::Debug>(dir: &SpillDir, values: Vec<T>) {
    let shape = vec![values.len() / 2, 2];
    let mut value = Value::Array(Array::from_vec(shape, values.clone()).unwrap());
    assert_eq!(spill::spill_value(dir, &mut value).unwrap(), (values.len() * T::DTYPE.size()) as u64);
    let array = value.as_array().unwrap();
    assert!(!array.storage().is_resident(), "{} now in a mapped file", T::DTYPE);
    assert_eq!(array.dtype(), T::DTYPE);
    assert_eq!(array.view::<T>().unwrap().iter().copied().collect::<Vec<_>>(), values, "{}", T::DTYPE);
}

#[test]
fn every_dtype_views_back_from_its_spill_file() {
    let parent = scratch();
    let dir = SpillDir::new(Some(parent.path()));
    spilled_view_gives_back(&dir, vec![i8::MIN, -1, 0, i8::MAX]);
    spilled_view_gives_back(&dir, vec![i16::MIN, -1, 0, i16::MAX]);
    spilled_view_gives_back(&dir, vec![i64::MIN, -1, 1 << 40, i64::MAX]);
    spilled_view_gives_back(&dir, vec![0u16, 1, 258, u16::MAX]);
    spilled_view_gives_back(&dir, vec![0u32, 1, 1 << 31, u32::MAX]);
    spilled_view_gives_back(&dir, vec![0u64, 1, 1 << 63, u64::MAX]);
    spilled_view_gives_back(&dir, (0..10_000).map(|i| i % 3 == 0).collect::<Vec<bool>>());
    assert_eq!(dir.spill_count(), 7);
}

#[test]
fn empty_buffers_need_no_file() {
    let parent = scratch();
    let dir = SpillDir::new(Some(parent.path()));
    let mut empty = Value::Array(Array::from_vec::<f64>(vec![0, 3], Vec::new()).unwrap());
    assert_eq!(spill::spill_value(&dir, &mut empty).unwrap(), 0);
    let mapped = dir.spill(&Storage::F64(Vec::new())).unwrap();
    assert!(mapped.path().is_none() && mapped.is_empty());
    // Still viewable as any element type.
    let array = Array::from_storage(DType::F64, vec![0, 3], Storage::External(Box::new(mapped))).unwrap();
    assert_eq!(array.view::<f64>().unwrap().shape(), &[0, 3]);
    assert!(!dir.path().exists(), "no folder for empty buffers");
    assert_eq!(dir.spill_count(), 0);
}

/// RssAnon from `/proc/self/status`, in bytes.
fn rss_anon() -> u64 {
    measure::process_memory().unwrap().rss_anon_bytes.expect("RssAnon in /proc/self/status")
}

/// `Rss` of the mapping starting at `addr`, from `/proc/self/smaps`, in bytes.
fn mapping_rss(addr: *const u8) -> u64 {
    let smaps = fs::read_to_string("/proc/self/smaps").unwrap();
    let header = format!("{:x}-", addr as usize);
    let mut lines = smaps.lines().skip_while(|line| !line.starts_with(&header));
    assert!(lines.next().is_some(), "mapping at {addr:?} not in smaps");
    let rss = lines.find_map(|line| line.strip_prefix("Rss:")).expect("Rss line");
    rss.trim().strip_suffix("kB").unwrap().trim().parse::<u64>().unwrap() * 1024
}

#[test]
fn spilled_pages_are_released_not_just_unmapped() {
    const SIZE: u64 = 512 * MIB;
    let parent = scratch();
    let dir = SpillDir::new(Some(parent.path()));
    let n = (SIZE / 4) as usize;

    measure::purge_free_pages().unwrap();
    let before = rss_anon();
    let data: Vec<f32> = (0..n).map(|i| (i % 1_000_003) as f32).collect();
    let mut value = Value::Array(Array::from_vec(vec![n / 1024, 1024], data).unwrap());
    let with_heap = rss_anon();
    assert!(with_heap >= before + SIZE - 16 * MIB, "the heap copy is resident: {} MiB", (with_heap - before) / MIB);

    assert_eq!(spill::spill_value(&dir, &mut value).unwrap(), SIZE);
    let after_spill = rss_anon();
    let freed = with_heap.saturating_sub(after_spill);
    eprintln!(
        "RssAnon: {} MiB before, {} MiB with the heap copy, {} MiB after the spill",
        before / MIB,
        with_heap / MIB,
        after_spill / MIB
    );
    assert!(freed >= SIZE - 32 * MIB, "the spill gave back only {} MiB of anonymous memory", freed / MIB);

    let array = value.as_array().unwrap();
    let addr = array.bytes().as_ptr();
    assert_eq!(mapping_rss(addr), 0, "nothing read yet, nothing mapped");
    let cached = mincore_bytes(addr, SIZE as usize);
    assert!(cached <= 16 * MIB, "the page cache kept {} MiB of the written file", cached / MIB);

    // Read it all once through the view.
    let view = array.view::<f32>().unwrap();
    let slice = view.as_slice().unwrap();
    let mismatches = slice.iter().enumerate().filter(|&(i, &x)| x != (i % 1_000_003) as f32).count();
    assert_eq!(mismatches, 0);
    let read_rss = mapping_rss(addr);
    assert!(read_rss >= SIZE - 16 * MIB, "after reading, {} MiB of the mapping are resident", read_rss / MIB);
    let anon_after_read = rss_anon();
    assert!(anon_after_read < after_spill + 32 * MIB, "reading a mapped file adds no anonymous memory");

    assert_eq!(spill::release_value_pages(&value), SIZE);
    let released_rss = mapping_rss(addr);
    let released_cache = mincore_bytes(addr, SIZE as usize);
    eprintln!(
        "mapping Rss: {} MiB after reading, {} MiB after release; in page cache after release: {} MiB",
        read_rss / MIB,
        released_rss / MIB,
        released_cache / MIB
    );
    assert!(released_rss <= 4 * MIB, "the mapping still holds {} MiB", released_rss / MIB);
    assert!(released_cache <= 16 * MIB, "the page cache still holds {} MiB", released_cache / MIB);

    // Still readable: the pages come back from the file.
    let view = value.as_array().unwrap().view::<f32>().unwrap();
    assert_eq!(view[[n / 1024 - 1, 1023]], ((n - 1) % 1_000_003) as f32);
}

/// Bytes of a mapping in the page cache, from `mincore`.
fn mincore_bytes(addr: *const u8, len: usize) -> u64 {
    let page = 4096;
    let mut vec = vec![0u8; len.div_ceil(page)];
    // SAFETY: `addr` starts a live mapping of `len` bytes (the spilled buffer, borrowed by the
    // caller); `vec` has one byte per page.
    let status = unsafe { libc::mincore(addr as *mut libc::c_void, len, vec.as_mut_ptr()) };
    assert_eq!(status, 0, "mincore: {}", std::io::Error::last_os_error());
    vec.iter().filter(|&&v| v & 1 != 0).count() as u64 * page as u64
}

#[test]
fn release_pages_of_a_mapped_buffer() {
    let parent = scratch();
    let dir = SpillDir::new(Some(parent.path()));
    let data: Vec<u8> = (0..(8 * MIB) as usize).map(|i| (i % 253) as u8).collect();
    let mapped: MappedBuffer = dir.spill_bytes(&data).unwrap();
    assert!(mapped.resident_bytes().unwrap() <= MIB);
    assert_eq!(mapped.bytes(), data.as_slice());
    assert!(mapped.resident_bytes().unwrap() >= 7 * MIB);
    mapped.release_pages();
    assert!(mapped.resident_bytes().unwrap() <= MIB);
    assert_eq!(mapped.bytes(), data.as_slice());
    // Resident buffers and other values are not ours to release.
    assert_eq!(spill::release_value_pages(&Value::Bytes(Storage::U8(data))), 0);
    assert_eq!(spill::release_value_pages(&Value::None), 0);
}

/// Writes a folder as a run of `pid` started at `start` would have left it.
fn fake_run_folder(parent: &Path, pid: u32, start: u64) -> PathBuf {
    let path = parent.join(format!("{pid}-{start}-5eed"));
    fs::create_dir(&path).unwrap();
    fs::write(path.join("owner"), format!("pid={pid}\nstart={start}\n")).unwrap();
    fs::write(path.join("000000.spill"), [0u8; 4096]).unwrap();
    path
}

#[test]
fn stale_folders_of_dead_runs_are_removed_and_live_ones_kept() {
    let parent = scratch();
    let ours = SpillDir::new(Some(parent.path()));
    let _kept = ours.spill_bytes(&[1, 2, 3]).unwrap();
    assert!(ours.path().is_dir());

    // A run whose process is gone.
    let mut gone = Command::new("true").spawn().unwrap();
    let dead_pid = gone.id();
    gone.wait().unwrap();
    let dead = fake_run_folder(parent.path(), dead_pid, 12345);

    // A pid that is alive but belongs to another process than the one that made the folder.
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let live_pid = sleeper.id();
    let live_start = spill::process_start_time(live_pid).expect("start time of a live child");
    let recycled = fake_run_folder(parent.path(), live_pid, live_start + 1);
    // ... and a folder that process really owns.
    let owned_by_sleeper = fake_run_folder(parent.path(), live_pid, live_start);

    // Things that are not run folders stay whatever their names say.
    let unrelated = parent.path().join("notes");
    fs::create_dir(&unrelated).unwrap();
    let file = parent.path().join(format!("{dead_pid}-1-ff"));
    fs::write(&file, "not a folder").unwrap();

    let mut removed = SpillDir::remove_stale(parent.path()).unwrap();
    removed.sort();
    let mut expected = vec![dead.clone(), recycled.clone()];
    expected.sort();
    assert_eq!(removed, expected);
    assert!(!dead.exists() && !recycled.exists());
    assert!(ours.path().is_dir() && owned_by_sleeper.is_dir() && unrelated.is_dir() && file.is_file());
    assert_eq!(spill_files(ours.path()).len(), 1, "the live run's file is untouched");

    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    assert_eq!(SpillDir::remove_stale(parent.path()).unwrap(), vec![owned_by_sleeper]);
    assert!(SpillDir::remove_stale(&parent.path().join("missing")).unwrap().is_empty());
}

/// Set for the child copies of this test binary that the tests below start.
const CHILD_ENV: &str = "RUNNER_SPILL_TEST_CHILD";

/// Runs one test of this binary in a child process with `CHILD_ENV=arg`.
fn run_child(test: &str, arg: &Path) -> std::process::Output {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, arg)
        .output()
        .unwrap()
}

/// Child: spills into the parent folder given, then dies without running destructors.
#[test]
fn child_spills_and_aborts() {
    let Some(parent) = std::env::var_os(CHILD_ENV) else { return };
    let dir = SpillDir::new(Some(Path::new(&parent)));
    let _mapped = dir.spill_bytes(&[7u8; 10_000]).unwrap();
    std::process::abort();
}

#[test]
fn a_killed_runs_folder_is_removed_at_the_next_start() {
    let parent = scratch();
    let output = run_child("child_spills_and_aborts", parent.path());
    assert!(!output.status.success(), "the child aborted");
    let left: Vec<PathBuf> = fs::read_dir(parent.path()).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(left.len(), 1, "the killed run left its folder: {left:?}");
    assert_eq!(spill_files(&left[0]).len(), 1);
    assert_eq!(SpillDir::remove_stale(parent.path()).unwrap(), left);
    assert!(fs::read_dir(parent.path()).unwrap().next().is_none());
}

#[test]
fn a_spill_dir_that_cannot_be_created_is_an_error_naming_it() {
    let parent = scratch();
    // A path under a regular file: fails for root too (permissions are not enforced for root).
    fs::write(parent.path().join("afile"), "x").unwrap();
    let bad = parent.path().join("afile").join("sub");
    let dir = SpillDir::new(Some(&bad));
    let data: Vec<f32> = (0..1000).map(|i| i as f32).collect();
    let mut value = Value::Array(Array::from_vec(vec![1000], data.clone()).unwrap());

    let error = spill::spill_value(&dir, &mut value).unwrap_err();
    let message = error.to_string();
    assert!(message.contains(&bad.display().to_string()), "{message}");
    assert!(message.contains("Not a directory"), "{message}");
    assert!(matches!(error, SpillError::CreateDir { .. }));
    assert_eq!(error.os_error().and_then(|e| e.raw_os_error()), Some(libc::ENOTDIR));
    // The value keeps its in-memory buffer.
    assert!(storage_of(&value).is_resident());
    assert_eq!(value.as_array().unwrap().view::<f32>().unwrap().as_slice().unwrap(), data.as_slice());
    assert_eq!((dir.spill_count(), dir.spilled_bytes()), (0, 0));
    assert!(!dir.is_created());
}

/// A small tmpfs mounted for the test, unmounted when dropped.
struct TinyDisk {
    dir: tempfile::TempDir,
}

impl TinyDisk {
    /// Mounts a 1 MiB tmpfs; `None` (with the reason) when this process may not mount.
    fn mount() -> Result<TinyDisk, String> {
        let dir = scratch();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if out.status.success() { Ok(TinyDisk { dir }) } else { Err(String::from_utf8_lossy(&out.stderr).into_owned()) }
    }
}

impl Drop for TinyDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

#[test]
fn a_full_disk_is_an_error_and_leaves_no_partial_file() {
    let disk = match TinyDisk::mount() {
        Ok(disk) => disk,
        Err(why) => {
            eprintln!("skipped: cannot mount a 1 MiB tmpfs to fill ({})", why.trim());
            return;
        }
    };
    let dir = SpillDir::new(Some(disk.dir.path()));
    let small = dir.spill_bytes(&[5u8; 256 << 10]).unwrap();

    let data: Vec<u8> = (0..(4 * MIB) as usize).map(|i| (i % 241) as u8).collect();
    let mut value = Value::Bytes(Storage::U8(data.clone()));
    let error = spill::spill_value(&dir, &mut value).unwrap_err();
    let message = error.to_string();
    assert!(error.is_disk_full(), "{message}");
    assert!(message.contains("No space left on device"), "{message}");
    assert!(error.path().starts_with(dir.path()) && message.contains(&error.path().display().to_string()));
    assert!(!error.path().exists(), "the partial file is removed");
    assert_eq!(spill_files(dir.path()), vec![small.path().unwrap().to_path_buf()]);
    // The value keeps its in-memory buffer, intact.
    assert!(storage_of(&value).is_resident());
    assert_eq!(value.as_bytes().unwrap(), data.as_slice());
    assert_eq!(dir.spill_count(), 1);

    assert!(dir.is_on_tmpfs(), "a tmpfs spill dir is recognised (spilling there frees no memory)");

    // Once space is free again, spilling works.
    drop(small);
    let again = dir.spill_bytes(&data[..512 << 10]).unwrap();
    assert_eq!(again.bytes(), &data[..512 << 10]);
}

#[test]
fn the_folder_goes_when_the_spill_dir_is_dropped_or_removed() {
    let parent = scratch();
    let dir = SpillDir::new(Some(parent.path()));
    let mapped = dir.spill_bytes(&[9u8; 5000]).unwrap();
    let path = dir.path().to_path_buf();
    assert!(path.is_dir() && path.join("owner").is_file());
    drop(dir);
    assert!(!path.exists(), "removed on drop");
    // A buffer that outlives its folder stays readable; its file is already gone.
    assert_eq!(mapped.bytes(), &[9u8; 5000][..]);
    drop(mapped);

    let dir = SpillDir::new(Some(parent.path()));
    let mut value = Value::Bytes(Storage::U8(vec![3; 9000]));
    spill::spill_value(&dir, &mut value).unwrap();
    dir.remove_now().unwrap();
    assert!(!dir.path().exists(), "removed now");
    assert_eq!(value.as_bytes().unwrap(), &[3u8; 9000][..]);
    assert_eq!(spill::release_value_pages(&value), 9000, "release still works without the file");
    assert_eq!(value.as_bytes().unwrap(), &[3u8; 9000][..]);
    let error = dir.spill_bytes(&[1]).unwrap_err();
    assert!(matches!(error, SpillError::Closed { .. }), "{error}");
    assert!(!dir.path().exists(), "no folder made again after removal");
    drop(value);
    drop(dir);
    assert!(fs::read_dir(parent.path()).unwrap().next().is_none());
}

/// Child: two spill dirs with files, then the Ctrl-C path removes both.
#[test]
fn child_removes_active_dirs() {
    let Some(parent) = std::env::var_os(CHILD_ENV) else { return };
    let parent = Path::new(&parent);
    let a = SpillDir::new(Some(&parent.join("a")));
    let b = SpillDir::new(Some(&parent.join("b")));
    let never_spilled = SpillDir::new(Some(&parent.join("c")));
    let _x = a.spill_bytes(&[1; 100]).unwrap();
    let _y = b.spill_bytes(&[2; 100]).unwrap();
    assert!(a.path().is_dir() && b.path().is_dir());
    assert_eq!(spill::remove_active_dirs(), 2);
    assert!(!a.path().exists() && !b.path().exists() && !never_spilled.path().exists());
    assert!(matches!(a.spill_bytes(&[1]), Err(SpillError::Closed { .. })));
    println!("CHILD OK");
    // Exit as a Ctrl-C handler would, without destructors.
    std::process::exit(0);
}

#[test]
fn the_ctrl_c_path_removes_every_active_folder() {
    let parent = scratch();
    let output = run_child("child_removes_active_dirs", parent.path());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("CHILD OK"),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for sub in ["a", "b"] {
        assert!(fs::read_dir(parent.path().join(sub)).unwrap().next().is_none(), "{sub} is empty");
    }
    assert!(!parent.path().join("c").exists(), "a spill dir that never spilled made nothing");
}

#[test]
fn default_parent_is_under_the_temp_dir() {
    let dir = SpillDir::new(None);
    assert_eq!(dir.parent(), std::env::temp_dir().join("runner-spill"));
    let name = dir.path().file_name().unwrap().to_str().unwrap().to_string();
    let pid = std::process::id();
    let start = spill::process_start_time(pid).unwrap();
    assert!(name.starts_with(&format!("{pid}-{start}-")), "{name}");
    assert!(!dir.path().exists());
    let other = SpillDir::new(None);
    assert_ne!(dir.path(), other.path(), "two dirs of one process differ");
}
