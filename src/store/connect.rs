//! Opening the file without touching what is not ours: a file is inspected through a read-only
//! connection (application id, schema version, tables) before anything is written to it, so a
//! foreign SQLite file is refused with its bytes unchanged; reading commands never write at all
//! (no journal mode switch, no `-wal`/`-shm` files left beside the file); and a writer that finds
//! the file locked by another run waits for it, saying so once, instead of failing.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::StoreError;
use super::schema::{APPLICATION_ID, SCHEMA_VERSION};

/// The page size of a new file: fewer, larger pages make recording about 15% cheaper.
pub const PAGE_SIZE: u32 = 16 * 1024;

/// How long a writer waits for another process's write lock before it says that it is waiting.
pub const BUSY_NOTICE_AFTER: Duration = Duration::from_secs(1);

/// What a file holds, seen before anything is written to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// No file, an empty one, or an SQLite file with no tables and no application id of another:
    /// a new store.
    Nothing,
    /// A runner store at this schema version (at most [`SCHEMA_VERSION`]).
    Store { version: u32 },
}

/// What `path` holds, read without changing it (and without leaving files beside it). Refuses a
/// file that is not a runner store, or one from a newer runner.
pub(crate) fn inspect(path: &Path) -> Result<Found, StoreError> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => {
            let error = std::io::Error::new(
                std::io::ErrorKind::IsADirectory,
                "it is a directory; expected a file, e.g. runner.db inside it",
            );
            return Err(StoreError::Io { path: path.to_path_buf(), what: "opening", error });
        }
        Ok(meta) if meta.len() == 0 => return Ok(Found::Nothing),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Nothing),
        Err(source) => return Err(StoreError::Io { path: path.to_path_buf(), what: "reading", error: source }),
    }
    let conn = open_reader(path)?;
    inspect_connection(&conn, path)
}

/// [`inspect`] through an open connection.
pub(crate) fn inspect_connection(conn: &Connection, path: &Path) -> Result<Found, StoreError> {
    let not_sqlite = |error: rusqlite::Error| {
        if error.sqlite_error_code() == Some(rusqlite::ErrorCode::NotADatabase) {
            StoreError::NotAStore { path: path.to_path_buf(), reason: "it is not an SQLite database".into() }
        } else {
            StoreError::sql(path, "reading the file header", error)
        }
    };
    let version: u32 = conn.pragma_query_value(None, "user_version", |row| row.get(0)).map_err(not_sqlite)?;
    let id: i32 = conn.pragma_query_value(None, "application_id", |row| row.get(0)).map_err(not_sqlite)?;
    let tables: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_schema WHERE type = 'table'", [], |r| r.get(0))
        .map_err(not_sqlite)?;
    if id != APPLICATION_ID && id != 0 {
        return Err(StoreError::NotAStore {
            path: path.to_path_buf(),
            reason: format!("its application id is {id:#x}, not runner's {APPLICATION_ID:#x}"),
        });
    }
    if version == 0 && tables == 0 {
        return Ok(Found::Nothing);
    }
    if id != APPLICATION_ID {
        let reason = if version == 0 {
            format!("it has {tables} tables but no runner schema version")
        } else {
            format!("it has schema version {version} but not runner's application id")
        };
        return Err(StoreError::NotAStore { path: path.to_path_buf(), reason });
    }
    if version > SCHEMA_VERSION {
        return Err(StoreError::TooNew { path: path.to_path_buf(), found: version, known: SCHEMA_VERSION });
    }
    Ok(Found::Store { version })
}

/// A read-only connection that writes nothing, not even beside the file. While a `-wal` file
/// exists (a writer is at work, or one died) its content matters, so SQLite's read-only mode
/// reads it; otherwise the file is opened `immutable`: no locks and no `-shm` file, which also
/// works in a directory this process cannot write. (A writer that starts while such a reader
/// reads writes into its own new `-wal`, which the reader does not see: it reads the file as it
/// was when it opened it.)
pub(crate) fn open_reader(path: &Path) -> Result<Connection, StoreError> {
    let mode = if wal_path(path).exists() { "mode=ro" } else { "immutable=1" };
    let uri = format!("{}?{mode}", file_uri(path));
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut conn = Connection::open_with_flags(&uri, flags)
        .map_err(|error| StoreError::Open { path: path.to_path_buf(), error })?;
    install_busy_handler(&mut conn, path).map_err(|error| StoreError::Open { path: path.to_path_buf(), error })?;
    Ok(conn)
}

/// A read-write connection to a file [`inspect`] has accepted (or to a new one), in WAL mode
/// with `synchronous=NORMAL`, waiting for other writers' locks.
pub(crate) fn open_writer(path: &Path, found: Found) -> Result<Connection, StoreError> {
    let open_err = |error| StoreError::Open { path: path.to_path_buf(), error };
    check_writable(path)?;
    let mut conn = Connection::open(path).map_err(open_err)?;
    install_busy_handler(&mut conn, path).map_err(open_err)?;
    if found == Found::Nothing {
        // Only a new file takes it, and only before WAL is set (which fixes the page size).
        conn.pragma_update(None, "page_size", PAGE_SIZE).map_err(open_err)?;
    }
    let mode = switch_to_wal(&conn).map_err(open_err)?;
    if !mode.eq_ignore_ascii_case("wal") {
        tracing::warn!("feedback store {}: journal mode is {mode}, not WAL", path.display());
    }
    conn.pragma_update(None, "synchronous", "NORMAL").map_err(open_err)?;
    Ok(conn)
}

/// Switches the file to WAL. The switch needs the file to itself: when two runs open a new file
/// at once, each holds a read lock while it asks for that, and SQLite tells one of them "busy"
/// at once rather than call the busy handler (which could deadlock). That one waits as the busy
/// handler would, and asks again; the other's switch has then usually made it a no-op.
fn switch_to_wal(conn: &Connection) -> rusqlite::Result<String> {
    let mut attempt = 0;
    loop {
        match conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0)) {
            Err(error) if error.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) => {
                wait_for_lock(attempt);
                attempt += 1;
            }
            done => return done,
        }
    }
}

/// A writer changes the file and creates `-wal` and `-shm` beside it: both are tried first, so
/// that a read-only file or folder is told as such ("Permission denied", "Read-only file
/// system") rather than as SQLite's "unable to open database file".
fn check_writable(path: &Path) -> Result<(), StoreError> {
    let failed = |what, error| StoreError::Io { path: path.to_path_buf(), what, error };
    if path.exists() {
        std::fs::OpenOptions::new().write(true).open(path).map_err(|e| failed("opening it for writing", e))?;
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    runner_plugin::files::probe_folder(dir).map_err(|e| failed("creating its -wal and -shm files in its folder", e))
}

fn wal_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push("-wal");
    PathBuf::from(name)
}

/// `file:` URI of `path`, absolute, with the characters a URI gives a meaning to escaped.
fn file_uri(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt as _;
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut uri = String::from("file:");
    for &byte in absolute.as_os_str().as_bytes() {
        if byte.is_ascii_alphanumeric() || b"/-._~".contains(&byte) {
            uri.push(byte as char);
        } else {
            uri.push_str(&format!("%{byte:02X}"));
        }
    }
    uri
}

thread_local! {
    /// The file the current thread's connection waits for, and whether it already said so.
    static WAITING_FOR: RefCell<(String, bool)> = const { RefCell::new((String::new(), false)) };
}

/// Makes connections used on this thread wait for `path`'s lock (and name it when they do).
/// SQLite's busy handler is a plain function, so the file it names is kept per thread; a
/// connection used on another thread must call this there.
pub(crate) fn waiting_on_this_thread(path: &Path) {
    let name = path.display().to_string();
    WAITING_FOR.with(|w| *w.borrow_mut() = (name, false));
}

fn install_busy_handler(conn: &mut Connection, path: &Path) -> rusqlite::Result<()> {
    waiting_on_this_thread(path);
    conn.busy_handler(Some(wait_for_lock))
}

/// SQLite calls this with 0, 1, 2, ... while another connection holds the lock: sleep a little
/// longer each time (2 ms, then 10 ms, then 50 ms), say once after about a second that this
/// process is waiting, and never give up (Ctrl-C stops a run that waits too long).
fn wait_for_lock(attempt: i32) -> bool {
    let (sleep, waited) = match attempt {
        0..10 => (2, 2 * attempt),
        10..20 => (10, 20 + 10 * (attempt - 10)),
        _ => (50, 120 + 50 * (attempt - 20)),
    };
    if u128::from(waited.unsigned_abs()) >= BUSY_NOTICE_AFTER.as_millis() {
        WAITING_FOR.with(|w| {
            let mut w = w.borrow_mut();
            if !w.1 {
                w.1 = true;
                eprintln!("waiting for another run's write lock on {}…", w.0);
            }
        });
    }
    std::thread::sleep(Duration::from_millis(sleep as u64));
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_escape_what_sqlite_would_read_as_query_or_fragment() {
        let uri = file_uri(Path::new("/tmp/a b?c#d%e.db"));
        assert_eq!(uri, "file:/tmp/a%20b%3Fc%23d%25e.db");
    }
}
