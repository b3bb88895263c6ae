//! Tests of the counters against real allocations through the global allocator.
//!
//! Tests share the allocator and run in parallel threads of one process, so each uses its own
//! task tags and asserts on its own task's counters. Tests that allocate tens of MiB, or read
//! process-wide figures, hold `HEAVY` so those figures are not swamped by another test's
//! buffers (the others allocate a few KiB at most).

use std::alloc::{GlobalAlloc, Layout};
use std::hint::black_box;
use std::sync::{Barrier, Mutex, MutexGuard, PoisonError};

use runner_plugin::task_tag;

use super::alloc::CountingAlloc;
use super::system::parse_status;
use super::zero_pages::tests::resident;
use super::*;

const MIB: usize = 1 << 20;
/// Header bytes per block (alignment ≤ 16).
const HEADER: u64 = 16;

static HEAVY: Mutex<()> = Mutex::new(());

fn heavy() -> MutexGuard<'static, ()> {
    HEAVY.lock().unwrap_or_else(PoisonError::into_inner)
}

fn new_task() -> u32 {
    begin_new_task().expect("a free counter slot")
}

/// Bytes counted for a block of `size` bytes aligned to at most 16.
fn counted(size: usize) -> u64 {
    size as u64 + HEADER
}

fn assert_close(actual: u64, expected: u64, tolerance: f64, what: &str) {
    let diff = actual.abs_diff(expected) as f64;
    assert!(
        diff <= expected as f64 * tolerance,
        "{what}: {actual} is not within {:.1}% of {expected}",
        tolerance * 100.0
    );
}

fn jemalloc_allocated() -> u64 {
    jemalloc_stats().expect("jemalloc stats").allocated
}

/// The size class jemalloc rounds a plain request of `size` bytes up to.
fn size_class(size: u64) -> u64 {
    // SAFETY: nallocx only computes a size; flags 0 is a plain request.
    unsafe { tikv_jemalloc_sys::nallocx(size as usize, 0) as u64 }
}

#[test]
fn a_large_buffer_sets_the_peak_and_its_free_empties_the_task() {
    let _heavy = heavy();
    let tag = new_task();
    let size = 64 * MIB;
    let before = jemalloc_allocated();
    let (live_holding, allocated_holding) = task_tag::with(tag, || {
        let buffer = black_box(vec![1u8; size]);
        let live = task_live(tag);
        let allocated = jemalloc_allocated();
        drop(buffer);
        (live, allocated)
    });
    assert_eq!(live_holding, counted(size));
    assert_close(task_peak(tag), size as u64, 0.01, "peak");
    assert_eq!(task_live(tag), 0);
    // jemalloc saw the same block, rounded up to its size class: the 16-byte header pushes an
    // exact 64 MiB into the 80 MiB class. Other tests allocate a little meanwhile.
    let class = size_class(counted(size));
    assert_close(allocated_holding - before, class, 0.02, "jemalloc's allocated bytes");
    let memory = end_task(tag).expect("running");
    assert_eq!(memory.retained_bytes, 0);
    assert_close(memory.peak_bytes, size as u64, 0.01, "peak at end");
}

#[test]
fn a_free_on_another_thread_is_credited_to_the_allocating_task() {
    let _heavy = heavy();
    let (a, b) = (new_task(), new_task());
    let size = 8 * MIB;

    let buffer = task_tag::with(a, || vec![7u8; size]);
    assert_eq!(task_live(a), counted(size));
    std::thread::spawn(move || task_tag::with(b, || drop(buffer))).join().expect("freeing thread");
    assert_eq!(task_live(a), 0);
    assert_eq!((task_live(b), task_peak(b)), (0, 0), "B only freed");

    // An untagged thread freeing it is the same.
    let buffer = task_tag::with(a, || vec![7u8; size]);
    std::thread::spawn(move || drop(buffer)).join().expect("freeing thread");
    assert_eq!(task_live(a), 0);
    assert_close(task_peak(a), size as u64, 0.01, "A's peak");
    end_task(a).expect("A running");
    end_task(b).expect("B running");
}

#[test]
fn nested_parallel_work_counts_towards_the_task() {
    let _heavy = heavy();
    let workers = 8;
    let pool = rayon::ThreadPoolBuilder::new().num_threads(workers).build().expect("rayon pool");
    // Every closure holds its buffer until all are allocated, so they are live together; the
    // pool has a thread per closure, so the barrier cannot deadlock.
    let barrier = Barrier::new(workers);
    let tag = new_task();
    let size = 16 * MIB;
    task_tag::with(tag, || {
        pool.scope(|scope| {
            for _ in 0..workers {
                // As the plugin API's parallel helpers do: the closure carries the task's tag.
                scope.spawn(|_| {
                    task_tag::with(tag, || {
                        let buffer = black_box(vec![1u8; size]);
                        barrier.wait();
                        drop(buffer);
                    })
                });
            }
        })
    });
    assert_close(task_peak(tag), (workers * size) as u64, 0.01, "peak");
    assert!(task_peak(tag) >= (workers as u64) * counted(size));
    // Rayon's job bookkeeping is freed when the scope ends.
    assert_eq!(task_live(tag), 0);
    end_task(tag).expect("running");
}

#[test]
fn an_output_outlives_its_task_without_touching_the_next_owner_of_its_slot() {
    let _heavy = heavy();
    let a = new_task();
    let size = 32 * MIB;
    let output = task_tag::with(a, || vec![3u8; size]);
    let memory = end_task(a).expect("A running");
    assert_eq!(memory.retained_bytes, counted(size));
    assert_close(memory.peak_bytes, size as u64, 0.01, "A's peak");
    assert!(retired_bytes() >= counted(size), "A's output is retired");
    assert_eq!((task_live(a), task_peak(a)), (0, 0), "A has ended");

    // The next task on A's slot: A's output freed under it is not credited to it.
    let c = a + SLOTS as u32;
    begin_task(c).expect("A's slot is free");
    task_tag::with(c, || {
        let own = black_box(vec![1u8; MIB]);
        drop(output);
        assert_eq!(task_live(c), counted(MIB));
        drop(own);
    });
    assert_eq!(task_live(c), 0);
    assert_eq!(task_peak(c), counted(MIB));
    assert_eq!(end_task(c).expect("C running"), TaskMemory { peak_bytes: counted(MIB), retained_bytes: 0 });
}

#[test]
fn a_consumer_freeing_its_input_keeps_its_own_counts() {
    let _heavy = heavy();
    // The producer has ended: its output is retired.
    let a = new_task();
    let input = task_tag::with(a, || vec![5u8; 16 * MIB]);
    end_task(a).expect("A running");
    let b = new_task();
    task_tag::with(b, || {
        let first = black_box(vec![1u8; 4 * MIB]);
        drop(input);
        assert_eq!(task_live(b), counted(4 * MIB));
        let second = black_box(vec![1u8; 2 * MIB]);
        assert_eq!(task_live(b), counted(4 * MIB) + counted(2 * MIB));
        drop((first, second));
    });
    assert_eq!(task_live(b), 0);
    assert_eq!(task_peak(b), counted(4 * MIB) + counted(2 * MIB));
    end_task(b).expect("B running");

    // The producer still runs: the free is credited to it, not to the consumer.
    let (a, b) = (new_task(), new_task());
    let input = task_tag::with(a, || vec![5u8; 16 * MIB]);
    task_tag::with(b, || {
        let own = black_box(vec![1u8; MIB]);
        drop(input);
        assert_eq!(task_live(b), counted(MIB));
        drop(own);
    });
    assert_eq!(task_live(a), 0);
    assert_eq!((task_live(b), task_peak(b)), (0, counted(MIB)));
    assert_eq!(end_task(a).expect("A running").retained_bytes, 0);
    end_task(b).expect("B running");
}

#[test]
fn realloc_growth_is_counted_including_the_copy() {
    let _heavy = heavy();
    let tag = new_task();
    let items = 1 << 20;
    let (bytes, live) = task_tag::with(tag, || {
        let mut growing = Vec::<u64>::new();
        for i in 0..items {
            growing.push(i);
        }
        let bytes = (growing.capacity() * size_of::<u64>()) as u64;
        let live = task_live(tag);
        drop(black_box(growing));
        (bytes, live)
    });
    assert_eq!(live, bytes + HEADER);
    // Doubling growth: the last step held the old half and the new block together, unless
    // jemalloc grew the block in place.
    let peak = task_peak(tag);
    assert!((bytes + HEADER..=bytes + bytes / 2 + 2 * HEADER).contains(&peak), "peak {peak} for {bytes} bytes");
    assert_eq!(task_live(tag), 0);

    // Shrinking is a realloc too.
    task_tag::with(tag, || {
        let mut shrinking = vec![1u8; MIB];
        shrinking.truncate(100);
        shrinking.shrink_to_fit();
        assert_eq!(task_live(tag), counted(100));
    });
    assert_eq!(task_live(tag), 0);
    end_task(tag).expect("running");
}

#[test]
fn realloc_moves_the_block_to_the_reallocating_task() {
    let _heavy = heavy();
    let (a, b) = (new_task(), new_task());
    let mut buffer = task_tag::with(a, || Vec::<u8>::with_capacity(MIB));
    assert_eq!(task_live(a), counted(MIB));
    task_tag::with(b, || buffer.reserve_exact(3 * MIB));
    assert_eq!(task_live(a), 0);
    assert_eq!(task_live(b), counted(buffer.capacity()));
    drop(buffer);
    assert_eq!(task_live(b), 0);
    end_task(a).expect("A running");
    end_task(b).expect("B running");
}

#[test]
fn zeroed_and_highly_aligned_blocks_work_and_are_counted() {
    let _heavy = heavy();
    let tag = new_task();
    task_tag::with(tag, || {
        // vec![0; n] allocates with alloc_zeroed.
        let zeros = black_box(vec![0u8; 3 * MIB]);
        assert!(zeros.iter().all(|&b| b == 0));
        assert_eq!(task_live(tag), counted(3 * MIB));
        drop(zeros);

        for align in [32, 64, 4096] {
            check_aligned_block(tag, align);
        }
    });
    assert_eq!(task_live(tag), 0);
    end_task(tag).expect("running");
}

/// Allocates, zero-allocates and grows a block aligned to `align` under task `tag`, which holds
/// nothing else.
fn check_aligned_block(tag: u32, align: usize) {
    let layout = Layout::from_size_align(10_000, align).expect("layout");
    let header = align as u64; // align > 16: the header is one alignment unit
    // SAFETY: a non-zero-size layout; the block is written within its size, reallocated and
    // freed with the layout it has, once.
    unsafe {
        let zeroed = std::alloc::alloc_zeroed(layout);
        assert!(!zeroed.is_null());
        assert_eq!(zeroed.addr() % align, 0);
        assert!(std::slice::from_raw_parts(zeroed, layout.size()).iter().all(|&b| b == 0));
        std::alloc::dealloc(zeroed, layout);

        let block = std::alloc::alloc(layout);
        assert!(!block.is_null());
        assert_eq!(block.addr() % align, 0);
        assert_eq!(task_live(tag), layout.size() as u64 + header);
        block.write_bytes(0xAB, layout.size());
        let grown = std::alloc::realloc(block, layout, 50_000);
        assert!(!grown.is_null());
        assert_eq!(grown.addr() % align, 0);
        assert!(std::slice::from_raw_parts(grown, layout.size()).iter().all(|&b| b == 0xAB));
        assert_eq!(task_live(tag), 50_000 + header);
        std::alloc::dealloc(grown, Layout::from_size_align_unchecked(50_000, align));
    }
    assert_eq!(task_live(tag), 0);
}

#[test]
fn blocks_of_no_running_task_are_charged_to_nobody() {
    // A tag whose task has ended allocates: charged to nobody, so its free, under a running
    // task that reuses nothing, changes nothing either.
    let stale = new_task();
    end_task(stale).expect("running");
    let block = task_tag::with(stale, || vec![1u8; 1000]);
    assert_eq!(task_live(stale), 0);
    let tag = new_task();
    task_tag::with(tag, || {
        let own = black_box(vec![1u8; 1000]);
        drop(block);
        let untagged = task_tag::with(task_tag::NO_TASK, || vec![1u8; 1000]);
        assert_eq!(task_live(tag), counted(1000));
        drop((own, untagged));
    });
    assert_eq!(task_live(tag), 0);
    assert_eq!(task_peak(tag), counted(1000));
    end_task(tag).expect("running");
}

#[test]
fn task_lifecycle_errors() {
    assert!(matches!(begin_task(task_tag::NO_TASK), Err(MeasureError::NoTask)));
    let tag = new_task();
    assert!(matches!(
        begin_task(tag),
        Err(MeasureError::SlotBusy { holder, .. }) if holder == tag
    ));
    let same_slot = tag + SLOTS as u32;
    let busy = begin_task(same_slot).expect_err("slot held by a running task");
    assert!(matches!(busy, MeasureError::SlotBusy { holder, .. } if holder == tag));
    assert!(busy.to_string().contains(&tag.to_string()));
    assert!(matches!(end_task(same_slot), Err(MeasureError::NotRunning { .. })));
    end_task(tag).expect("running");
    assert!(matches!(end_task(tag), Err(MeasureError::NotRunning { .. })));
    assert!(matches!(end_task(task_tag::NO_TASK), Err(MeasureError::NotRunning { .. })));
    let other = new_task();
    assert_ne!(other, tag);
    end_task(other).expect("running");
}

#[test]
fn process_live_bytes_and_peak_follow_untagged_blocks() {
    let _heavy = heavy();
    let size = 32 * MIB;
    let before = live_bytes();
    let buffer = black_box(vec![1u8; size]);
    // Other tests allocate a little meanwhile (the heavy ones wait for the lock).
    assert_close(live_bytes().saturating_sub(before), counted(size), 0.05, "live bytes");
    assert!(peak_live_bytes() >= before + counted(size));
    drop(buffer);
    reset_peak();
    assert!(peak_live_bytes() < before + counted(size) / 2);
}

#[test]
fn jemalloc_and_os_figures_are_readable() {
    let stats = jemalloc_stats().expect("jemalloc stats");
    assert!(stats.allocated > 0 && stats.active >= stats.allocated);
    assert!(stats.resident >= stats.active);
    let memory = process_memory().expect("/proc/self/status");
    assert!(memory.rss_bytes > 0 && memory.peak_rss_bytes >= memory.rss_bytes);
    assert!(memory.rss_anon_bytes.is_some_and(|anon| anon <= memory.rss_bytes));
}

#[test]
fn the_peak_rss_resets_after_memory_is_returned() {
    let _heavy = heavy();
    let size = 256 * MIB;
    let buffer = black_box(vec![1u8; size]);
    drop(buffer);
    purge_free_pages().expect("purge");
    let high = process_memory().expect("status").peak_rss_bytes;
    reset_peak_rss().expect("clear_refs");
    let after = process_memory().expect("status");
    assert!(
        after.peak_rss_bytes + (size as u64) / 2 < high,
        "peak RSS {} after reset, {high} before",
        after.peak_rss_bytes
    );
    assert!(after.peak_rss_bytes >= after.rss_bytes);
}

#[test]
fn status_text_parses_and_reports_what_is_missing() {
    let text = "Name:\trunner\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nRssAnon:\t   51200 kB\n";
    assert_eq!(
        parse_status(text).expect("complete"),
        ProcessMemory {
            rss_bytes: 100 * MIB as u64,
            peak_rss_bytes: 200 * MIB as u64,
            rss_anon_bytes: Some(50 * MIB as u64),
        }
    );
    let old_kernel = "VmHWM:\t 8 kB\nVmRSS:\t 4 kB\n";
    assert_eq!(parse_status(old_kernel).expect("parses").rss_anon_bytes, None);
    let broken = "VmHWM:\t lots kB\nVmRSS:\t 4 kB\n";
    let error = parse_status(broken).expect_err("VmHWM unreadable");
    assert!(error.to_string().contains("VmHWM"), "{error}");
    assert!(parse_status("").is_err());
}

#[test]
fn small_blocks_are_counted_through_per_thread_batches() {
    let tag = new_task();
    let (count, size) = (10_000, 100);
    let per_block = counted(size);
    // The list itself is one large block: counted at once.
    let list_bytes = counted(count * size_of::<Vec<u8>>());

    // This thread's own batch is part of what it reads, so its figures are exact.
    let mut blocks: Vec<Vec<u8>> = task_tag::with(tag, || (0..count).map(|_| vec![1u8; size]).collect());
    let mine = list_bytes + count as u64 * per_block;
    assert_eq!(task_live(tag), mine);
    assert_eq!(task_peak(tag), mine);
    // Publishing this thread's batch changes nothing for it, and lets other threads see it all.
    flush_thread();
    assert_eq!(task_live(tag), mine);

    // Another thread's small blocks show once it flushes (the engine flushes its threads when
    // their task ends); before that, they lag by less than one batch.
    let more = std::thread::spawn(move || {
        task_tag::with(tag, || {
            let more: Vec<Vec<u8>> = (0..1000).map(|_| vec![2u8; size]).collect();
            let seen = task_live(tag);
            flush_thread();
            (more, seen)
        })
    });
    let (more, seen_there) = more.join().expect("allocating thread");
    let theirs = counted(1000 * size_of::<Vec<u8>>()) + 1000 * per_block;
    assert_eq!(seen_there, mine + theirs, "a thread sees its own batch");
    assert_eq!(task_live(tag), mine + theirs);

    // Freeing under another task credits the maker; the other task's counts stay its own.
    let other = new_task();
    task_tag::with(other, || {
        let own = black_box(vec![3u8; size]);
        blocks.truncate(count / 2);
        drop(more);
        assert_eq!(task_live(other), per_block);
        drop(own);
    });
    flush_thread();
    let left = list_bytes + (count / 2) as u64 * per_block;
    assert_eq!(task_live(tag), left);
    assert_eq!((task_live(other), task_peak(other)), (0, per_block));
    assert!(task_peak(tag) >= mine + theirs);

    drop(blocks);
    let memory = end_task(tag).expect("running");
    assert_eq!(memory.retained_bytes, 0);
    assert!(memory.peak_bytes >= mine + theirs);
    end_task(other).expect("running");
}

/// A zeroed block large enough to be marked (`zero_pages::SCAN_FROM`), in pages.
const PAGES: usize = 512;

#[test]
fn a_zeroed_block_moved_by_realloc_leaves_no_zero_page_mappings_behind() {
    let _heavy = heavy();
    let alloc = CountingAlloc::new();
    let page = page_size();
    let old = Layout::from_size_align(PAGES * page, page).unwrap();
    // SAFETY: a valid layout; every pointer below is this allocator's, used within its size.
    unsafe {
        let ptr = alloc.alloc_zeroed(old);
        assert!(!ptr.is_null());
        // As fresh pages from the kernel (jemalloc may have zeroed a reused block by writing).
        assert_eq!(libc::madvise(ptr.cast(), PAGES * page, libc::MADV_DONTNEED), 0);
        // Read every page (the kernel maps its zero page there), write the first.
        let sum: u64 = (0..PAGES).map(|p| u64::from(std::ptr::read_volatile(ptr.add(p * page)))).sum();
        assert_eq!(sum, 0);
        ptr.write(7);
        let old_region = std::slice::from_raw_parts(ptr, PAGES * page);
        assert!(resident(old_region).iter().all(|&r| r), "read pages are mapped");

        let moved = alloc.realloc(ptr, old, 2 * PAGES * page);
        assert!(!moved.is_null());
        assert_ne!(moved, ptr, "a marked zeroed block is moved");
        let kept = std::slice::from_raw_parts(moved, PAGES * page);
        assert_eq!(kept[0], 7, "what was written is kept");
        assert!(kept[1..].iter().all(|&b| b == 0), "and the zeros");
        // The old block is jemalloc's again (kept for reuse, not returned to the OS): its
        // read-only pages are unmapped, the written first one stays.
        let after = resident(old_region);
        assert!(after[1..].iter().all(|&r| !r), "zero-page mappings left behind: {after:?}");
        alloc.dealloc(moved, Layout::from_size_align(2 * PAGES * page, page).unwrap());
    }
}
