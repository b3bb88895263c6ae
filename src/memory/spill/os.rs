//! The OS calls. All are advice: when one fails the data is still right, only memory stays in use
//! longer, so their errors are ignored (write errors surface at `fsync`).

pub(super) use imp::*;

#[cfg(target_os = "linux")]
mod imp {
    use std::ffi::CString;
    use std::fs::File;
    use std::io;
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    /// Whether `path` is on a tmpfs (false when that cannot be told).
    pub fn is_tmpfs(path: &Path) -> bool {
        let Ok(name) = CString::new(path.as_os_str().as_bytes()) else { return false };
        // SAFETY: `statfs` is plain old data for the call to fill in.
        let mut info: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: a NUL-terminated path and a valid buffer to write.
        unsafe { libc::statfs(name.as_ptr(), &mut info) == 0 && info.f_type == libc::TMPFS_MAGIC }
    }

    /// Starts writing back a range without waiting.
    pub fn start_writeback(file: &File, offset: u64, len: u64) {
        // SAFETY: plain syscall on an open descriptor.
        unsafe { libc::sync_file_range(file.as_raw_fd(), offset as i64, len as i64, libc::SYNC_FILE_RANGE_WRITE) };
    }

    /// Waits until a range is written back.
    pub fn finish_writeback(file: &File, offset: u64, len: u64) {
        let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER;
        // SAFETY: plain syscall on an open descriptor.
        unsafe { libc::sync_file_range(file.as_raw_fd(), offset as i64, len as i64, flags) };
    }

    /// Drops a range's clean, unmapped pages from the page cache (`len` 0: to the end).
    pub fn drop_cached(file: &File, offset: u64, len: u64) {
        // SAFETY: plain syscall on an open descriptor.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), offset as i64, len as i64, libc::POSIX_FADV_DONTNEED) };
    }

    /// Unmaps a read-only file mapping's pages from this process; they fault back in from the file.
    pub fn drop_mapped(addr: *const u8, len: usize) {
        // SAFETY: `addr..addr+len` is a live read-only shared file mapping (page-aligned start);
        // MADV_DONTNEED on it loses no data, later reads fault the pages back in from the file.
        unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_DONTNEED) };
    }

    /// Asks the kernel to reclaim a file mapping's pages (Linux 5.4+; ignored before).
    pub fn page_out(addr: *const u8, len: usize) {
        // SAFETY: as in `drop_mapped`; MADV_PAGEOUT only reclaims, clean file pages are re-read.
        unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_PAGEOUT) };
    }

    /// Fills `pages` with one byte per page of the mapping at `addr` (`len` bytes), whose
    /// lowest bit is set where the page is in memory (in the page cache, mapped or not).
    pub fn page_residency(addr: *const u8, len: usize, pages: &mut Vec<u8>) -> io::Result<()> {
        pages.clear();
        pages.resize(len.div_ceil(crate::measure::page_size()), 0);
        // SAFETY: `addr` is the page-aligned start of a live mapping of `len` bytes and `pages`
        // has one byte per page of it.
        if unsafe { libc::mincore(addr as *mut libc::c_void, len, pages.as_mut_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::fs::File;
    use std::io;
    use std::path::Path;

    pub fn is_tmpfs(_: &Path) -> bool {
        false
    }
    pub fn start_writeback(_: &File, _: u64, _: u64) {}
    pub fn finish_writeback(_: &File, _: u64, _: u64) {}
    pub fn drop_cached(_: &File, _: u64, _: u64) {}
    pub fn drop_mapped(addr: *const u8, len: usize) {
        // SAFETY: as on Linux: a live read-only shared file mapping.
        unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_DONTNEED) };
    }
    pub fn page_out(_: *const u8, _: usize) {}
    pub fn page_residency(_: *const u8, _: usize, _: &mut Vec<u8>) -> io::Result<()> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "mincore is only used on Linux"))
    }
}
