//! The global allocator: jemalloc, with a header in front of every block naming the task that
//! owns it.
//!
//! Block layout (what jemalloc sees), for a request of `size` bytes aligned to `align`:
//!
//! ```text
//! | header: max(16, align) bytes ... | tag: u32 | zeroed: u8 | 11 unused | user's `size` bytes |
//! ^ jemalloc's pointer, aligned to `align`                  ^ pointer handed out
//! ```
//!
//! The header is a whole number of alignment units, so the user's pointer keeps the requested
//! alignment; the tag sits in its last 16 bytes, right before the user's pointer. The bytes
//! counted for a block are the header plus the request: what jemalloc was asked for. `zeroed`
//! marks a zeroed block large enough that, when it is freed, the pages a reader mapped to the
//! kernel's zero page are released ([`super::zero_pages`]); a `realloc` of such a block moves it
//! here (allocate, copy, free), since jemalloc's own would free the old block without that.
//!
//! Ownership: a block is charged to the running task the allocating thread is tagged with, or to
//! nobody (`NO_TASK`, also written when that tag's task is not running). A free is credited to
//! the owner in the header, whichever thread frees it. A `realloc` is a free by the old owner
//! plus an allocation by the reallocating task: the task that grows a buffer is the one that
//! needs the memory. When the block moves, the new block is charged before the old one is
//! credited, because both existed during the copy; when it is resized in place, the old size is
//! credited first, so only the larger of the two counts towards the peak.

use std::alloc::{GlobalAlloc, Layout};

use tikv_jemallocator::Jemalloc;

use super::batch::{charge, release};
use super::zero_pages;

/// Header bytes before the user's pointer when the alignment is 16 or less; also where the tag
/// sits, counted back from the user's pointer. 16 keeps the usual `malloc` alignment.
const MIN_HEADER: usize = 16;

/// jemalloc under a counter that charges every block to the task that allocated it; see the
/// module docs of [`crate::measure`].
#[derive(Debug, Default, Clone, Copy)]
pub struct CountingAlloc {
    inner: Jemalloc,
}

impl CountingAlloc {
    pub const fn new() -> Self {
        Self { inner: Jemalloc }
    }

    /// Allocates through `raw` a block for `layout` and charges it.
    #[inline]
    fn alloc_with(&self, layout: Layout, zeroed: bool, raw: impl FnOnce(Layout) -> *mut u8) -> *mut u8 {
        let Some(block) = Block::for_layout(layout) else {
            return std::ptr::null_mut();
        };
        let base = raw(block.layout);
        if base.is_null() {
            return base;
        }
        let tag = charge(block.bytes());
        // SAFETY: `base` is a fresh block of `block.layout.size()` = header + size bytes, so
        // the user's pointer `header` bytes in stays inside it, and the tag slot before it too.
        unsafe {
            let user = base.add(block.header);
            write_tag(user, tag);
            write_zeroed(user, zeroed && block.layout.size() >= zero_pages::SCAN_FROM);
            user
        }
    }
}

impl CountingAlloc {
    /// Moves a marked zeroed block to a new one of `new`'s layout and frees it as `dealloc`
    /// does, its zero-page-mapped pages released: jemalloc's own `realloc` would free a moved
    /// block without that. Returns the new block's base, or null (the old one kept) when out of
    /// memory.
    ///
    /// # Safety
    /// `old_base` is jemalloc's block of `old.layout`, handed out by `alloc_with`.
    unsafe fn move_zeroed(&self, old_base: *mut u8, old: Block, new: Block) -> *mut u8 {
        // SAFETY: `new.layout` has a non-zero size; both blocks hold their header then user
        // bytes, and the copy is the user bytes both have; the old block is freed once.
        unsafe {
            let base = self.inner.alloc(new.layout);
            if base.is_null() {
                return base;
            }
            let kept = (old.layout.size() - old.header).min(new.layout.size() - new.header);
            std::ptr::copy_nonoverlapping(old_base.add(old.header), base.add(new.header), kept);
            zero_pages::release(old_base, old.layout.size());
            self.inner.dealloc(old_base, old.layout);
            base
        }
    }
}

/// The jemalloc block behind a user's layout.
#[derive(Clone, Copy)]
struct Block {
    /// The layout jemalloc is asked for: header + user size, user alignment.
    layout: Layout,
    /// Header bytes in front of the user's pointer.
    header: usize,
}

impl Block {
    /// `None` when header + size would not make a valid layout (too large).
    #[inline]
    fn for_layout(layout: Layout) -> Option<Self> {
        Self::for_size(layout.size(), layout.align())
    }

    #[inline]
    fn for_size(size: usize, align: usize) -> Option<Self> {
        let header = align.max(MIN_HEADER);
        let total = size.checked_add(header)?;
        let layout = Layout::from_size_align(total, align).ok()?;
        Some(Self { layout, header })
    }

    /// Bytes counted for this block.
    #[inline]
    fn bytes(self) -> u64 {
        self.layout.size() as u64
    }
}

/// # Safety
/// `user` is a pointer this allocator handed out (so a header precedes it).
#[inline]
unsafe fn write_tag(user: *mut u8, tag: u32) {
    // SAFETY: the header is at least MIN_HEADER bytes, so `user - 16 .. user - 12` is inside
    // the block; unaligned access, so nothing depends on jemalloc's minimum alignment.
    unsafe { user.sub(MIN_HEADER).cast::<u32>().write_unaligned(tag) }
}

/// # Safety
/// As [`write_tag`].
#[inline]
unsafe fn write_zeroed(user: *mut u8, zeroed: bool) {
    // SAFETY: the byte after the tag, inside the header as the tag is.
    unsafe { user.sub(MIN_HEADER - 4).write(u8::from(zeroed)) }
}

/// # Safety
/// As [`read_tag`].
#[inline]
unsafe fn read_zeroed(user: *mut u8) -> bool {
    // SAFETY: as in `write_zeroed`, written before `user` was handed out.
    unsafe { user.sub(MIN_HEADER - 4).read() == 1 }
}

/// # Safety
/// `user` is a pointer this allocator handed out, not yet freed.
#[inline]
unsafe fn read_tag(user: *mut u8) -> u32 {
    // SAFETY: as in `write_tag`; `alloc_with` wrote the tag before handing `user` out.
    unsafe { user.sub(MIN_HEADER).cast::<u32>().read_unaligned() }
}

// SAFETY: every block comes from jemalloc with the requested alignment and `header` more bytes
// than requested; the user's pointer is `header` bytes in, a multiple of the alignment, so it is
// aligned and has `size` bytes behind it. Frees and reallocs get back the same layout, from
// which they recompute the same header and hand jemalloc its own pointer and layout.
unsafe impl GlobalAlloc for CountingAlloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: `block.layout` has a non-zero size (at least the header).
        self.alloc_with(layout, false, |block| unsafe { self.inner.alloc(block) })
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        self.alloc_with(layout, true, |block| unsafe { self.inner.alloc_zeroed(block) })
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // Never `None`: the same layout made a valid block when `ptr` was allocated.
        let Some(block) = Block::for_layout(layout) else {
            return;
        };
        // SAFETY: `ptr` came from `alloc_with` with this layout (GlobalAlloc's contract), so
        // its tag is readable and `ptr - header` is jemalloc's block of `block.layout`.
        unsafe {
            let tag = read_tag(ptr);
            if read_zeroed(ptr) {
                zero_pages::release(ptr.sub(block.header), block.layout.size());
            }
            self.inner.dealloc(ptr.sub(block.header), block.layout);
            release(tag, block.bytes());
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let (Some(old), Some(new)) = (Block::for_layout(layout), Block::for_size(new_size, layout.align())) else {
            return std::ptr::null_mut();
        };
        // SAFETY: `ptr` came from `alloc_with` with `layout`, so it has a tag and
        // `ptr - header` is jemalloc's block of `old.layout`; the header is the same for both
        // sizes (it depends on the alignment only) and `new.layout.size()` is non-zero.
        unsafe {
            let old_tag = read_tag(ptr);
            let old_base = ptr.sub(old.header);
            let base = if read_zeroed(ptr) {
                self.move_zeroed(old_base, old, new)
            } else {
                self.inner.realloc(old_base, old.layout, new.layout.size())
            };
            if base.is_null() {
                // The old block is untouched and still counted.
                return base;
            }
            let tag = if base == old_base {
                release(old_tag, old.bytes());
                charge(new.bytes())
            } else {
                let tag = charge(new.bytes());
                release(old_tag, old.bytes());
                tag
            };
            let user = base.add(new.header);
            write_tag(user, tag);
            // Not marked: a grown block's new part is not zeroed, and a moved zeroed block's
            // pages were all written by the copy.
            write_zeroed(user, false);
            user
        }
    }
}
