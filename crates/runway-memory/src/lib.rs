//! The process's allocator (jemalloc), and the memory it gives back to the system.
//!
//! Linking this crate makes jemalloc the process's global allocator: every binary that carries
//! the ingress (`runway`, `runway-ingress`) and their tests. It was chosen over glibc's
//! allocator for the request path (a new connection and an HTTP/2 stream allocate blocks of
//! 1–8 KiB, past glibc's thread cache) and because it returns freed memory by itself: its
//! background thread purges the pages freed more than [`DIRTY_DECAY_MS`] ago, where glibc kept
//! a flood's peak resident until `malloc_trim` (decision 0036 in `docs/decisions/`).
//!
//! The configuration below is compiled in (`malloc_conf`); an operator may still override it
//! with jemalloc's environment variable, `_RJEM_MALLOC_CONF` (this build's symbols are
//! prefixed, so C code in the process keeps the system's allocator).
//!
//! This crate is the workspace's one exception to `unsafe_code = "forbid"`: the configuration's
//! exported symbol and jemalloc's `mallctl`, called with names this crate spells and values of
//! the types jemalloc documents for them.
//!
//! The ingress calls [`give_back`] after a flood of connections, and when the allocator holds
//! much memory free ([`free_held_bytes`]), on a blocking thread, and logs what came back.
//! [`resident_bytes`] reads the process's resident size.

use std::ffi::{CStr, c_char, c_void};

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// How long a freed page stays resident before the background thread returns it: long enough
/// that a steady load reuses its pages (a shorter decay costs a purge and a page fault per
/// reuse), short enough that the memory a burst took is back within a second or two.
pub const DIRTY_DECAY_MS: u64 = 1000;

/// Bytes a thread allocates between two collections of its cache of freed blocks (jemalloc's
/// `tcache_gc_incr_bytes`, 64 KiB by default). A connection allocates its buffers (8 KiB and
/// more) and frees them when it closes, so at the default a collection ran every few
/// connections and cost about 1,000 of the 17,300 instructions the ingress spent on a new
/// connection; at 1 MiB it runs sixteen times less often. What the caches hold stays bounded
/// by their slots per size, as before.
pub const TCACHE_GC_INCR_BYTES: usize = 1 << 20;

/// jemalloc's options, read when it starts, before `main`: a background thread that purges
/// freed pages (rather than the allocating threads, on their requests' time), freed pages
/// returned after [`DIRTY_DECAY_MS`], and returned outright (`MADV_DONTNEED`) rather than
/// kept as lazily freed pages (`muzzy`), so that the resident size says what is in use; and
/// thread caches collected every [`TCACHE_GC_INCR_BYTES`].
const CONF: &CStr =
    c"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0,tcache_gc_incr_bytes:1048576";

#[allow(
    unsafe_code,
    reason = "jemalloc reads its compiled-in options from this symbol"
)]
// SAFETY: the symbol is jemalloc's documented `malloc_conf` under this build's prefix, of the
// type it reads (a nullable pointer to a NUL-terminated string), and the string is 'static.
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: Option<&'static c_char> = Some({
    #[allow(
        unsafe_code,
        reason = "a pointer into a 'static string, made a reference"
    )]
    // SAFETY: `CONF` is a 'static C string; its first byte lives as long as the program.
    unsafe {
        &*CONF.as_ptr()
    }
});

/// Calls `mallctl(name, old, new)`: reads into `old` and writes `new` when given; true when
/// jemalloc accepted the call.
fn mallctl<T: Copy>(name: &CStr, old: Option<&mut T>, new: Option<&mut T>) -> bool {
    let size = std::mem::size_of::<T>();
    let mut old_len = size;
    let (old_ptr, old_len_ptr) = match old {
        Some(old) => (std::ptr::from_mut(old).cast::<c_void>(), &raw mut old_len),
        None => (std::ptr::null_mut(), std::ptr::null_mut()),
    };
    let (new_ptr, new_len) = match new {
        Some(new) => (std::ptr::from_mut(new).cast::<c_void>(), size),
        None => (std::ptr::null_mut(), 0),
    };
    #[allow(unsafe_code, reason = "jemalloc's control interface, one FFI call")]
    // SAFETY: `name` is NUL-terminated; each pointer is null or points to a live `T` whose size
    // is passed beside it, and jemalloc checks that size against the control's own type
    // (EINVAL when they differ) before it reads or writes; it serializes controls itself.
    let status = unsafe {
        tikv_jemalloc_sys::mallctl(name.as_ptr(), old_ptr, old_len_ptr, new_ptr, new_len)
    };
    status == 0
}

/// Reads a `size_t` control's value.
fn read_size(name: &CStr) -> Option<usize> {
    let mut value = 0usize;
    mallctl(name, Some(&mut value), None).then_some(value)
}

/// Asks the allocator to return its free pages to the system now, rather than when they
/// decay; true when it held some to return.
#[must_use]
pub fn give_back() -> bool {
    let held = free_held_bytes().unwrap_or(0);
    // 4096: every arena at once (jemalloc's `MALLCTL_ARENAS_ALL`).
    mallctl::<()>(c"arena.4096.purge", None, None) && held > 0
}

/// The bytes the allocator holds free and resident (its arenas' dirty pages, and lazily freed
/// ones): what [`give_back`] would return now, and the background thread within
/// [`DIRTY_DECAY_MS`]. None when jemalloc does not say.
#[must_use]
pub fn free_held_bytes() -> Option<u64> {
    // jemalloc's figures are as of its last epoch: a new one first.
    let mut epoch = 1u64;
    if !mallctl(c"epoch", None, Some(&mut epoch)) {
        return None;
    }
    let page = read_size(c"arenas.page")?;
    let dirty = read_size(c"stats.arenas.4096.pdirty")?;
    let muzzy = read_size(c"stats.arenas.4096.pmuzzy")?;
    u64::try_from(dirty.saturating_add(muzzy).saturating_mul(page)).ok()
}

/// The process's resident memory now, in bytes (`/proc/self/statm`); none where it cannot be
/// read.
#[must_use]
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    /// The tests below free and purge memory of one process-wide allocator: one at a time.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// The compiled-in options are in force: the background thread runs, freed pages decay
    /// in a second, returned outright, and thread caches are collected every megabyte.
    #[test]
    fn the_options_are_in_force() {
        let mut on = false;
        assert!(mallctl(c"background_thread", Some(&mut on), None));
        assert!(on, "jemalloc's background thread is off");
        let mut decay = 0isize;
        assert!(mallctl(c"opt.dirty_decay_ms", Some(&mut decay), None));
        assert_eq!(u64::try_from(decay).unwrap(), DIRTY_DECAY_MS);
        assert!(mallctl(c"opt.muzzy_decay_ms", Some(&mut decay), None));
        assert_eq!(decay, 0);
        let mut gc_bytes = 0usize;
        assert!(mallctl(
            c"opt.tcache_gc_incr_bytes",
            Some(&mut gc_bytes),
            None
        ));
        assert_eq!(gc_bytes, TCACHE_GC_INCR_BYTES);
    }

    /// Memory freed in the middle of the heap (a later allocation kept, as a connection that
    /// outlives a flood keeps its buffers) shows as held free, and `give_back` returns it at
    /// once.
    #[test]
    fn freed_memory_is_given_back() {
        let _one = ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Blocks of the size of connection buffers.
        let mut blocks: Vec<Vec<u8>> = (0..16 * 1024).map(|_| vec![1u8; 8 * 1024]).collect();
        let kept = vec![1u8; 8 * 1024];
        let before_free = resident_bytes().unwrap();
        blocks.clear();
        blocks.shrink_to_fit();
        let held = free_held_bytes().unwrap();
        let after_free = resident_bytes().unwrap();
        let given = give_back();
        let after = resident_bytes().unwrap();
        eprintln!(
            "128 MiB of 8 KiB blocks: resident {} MiB, still {} MiB once freed ({} MiB held \
             free), {} MiB after give_back",
            before_free >> 20,
            after_free >> 20,
            held >> 20,
            after >> 20
        );
        // The background thread may have returned some already; not all of it, so soon.
        assert!(given, "nothing was held free to give back");
        assert!(
            after + (32 << 20) < before_free,
            "{after} bytes resident after give_back, {before_free} before the blocks were freed"
        );
        assert!(free_held_bytes().unwrap() < 8 << 20);
        assert_eq!(kept.len(), 8 * 1024);
    }

    /// Freed pages the process does not reuse go back by themselves, within the decay time
    /// (jemalloc's default, 10 s, would not be done by the deadline).
    #[test]
    fn freed_memory_decays_by_itself() {
        let _one = ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut blocks: Vec<Vec<u8>> = (0..8 * 1024).map(|_| vec![1u8; 8 * 1024]).collect();
        let kept = vec![1u8; 8 * 1024];
        blocks.clear();
        blocks.shrink_to_fit();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(4);
        let mut held = free_held_bytes().unwrap();
        while held >= 8 << 20 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(100));
            held = free_held_bytes().unwrap();
        }
        assert!(held < 8 << 20, "{held} bytes still held free after 4 s");
        assert_eq!(kept.len(), 8 * 1024);
    }
}
