//! Gives the system back the memory the allocator keeps after the process freed it.
//!
//! glibc's allocator returns freed memory to the system only from the top of each arena, and
//! only past its trim threshold: after a flood of connections, whose buffers were freed in an
//! order of their own, the resident size stays at the flood's peak. `malloc_trim(0)` walks
//! every arena and gives back each free page (`madvise(MADV_DONTNEED)`), which is what brings
//! it down. It locks each arena in turn while it walks it, so it is called after a burst, not
//! on a schedule, and from a thread where a pause harms no one.
//!
//! This crate is the workspace's one exception to `unsafe_code = "forbid"`: two FFI calls with
//! no argument that points anywhere. Elsewhere than glibc (musl, whose allocator unmaps freed
//! memory itself) it does nothing.
//!
//! The ingress calls `give_back` after a flood of connections, or when the allocator holds much
//! memory free ([`free_held_bytes`]: after a burst of requests), on a blocking thread, and logs
//! what came back (see decision 0036 in `docs/decisions/`). `resident_bytes` reads the process's
//! resident size.

/// Asks the allocator to return its free pages to the system; true when it returned some.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[must_use]
pub fn give_back() -> bool {
    #[allow(unsafe_code, reason = "the one FFI call this crate exists for")]
    // SAFETY: `malloc_trim` takes a size (how much free space to keep at the top of the main
    // arena), no pointer; glibc serializes it with every other allocator call by the arenas'
    // own locks, so it may be called from any thread at any time.
    let released = unsafe { libc::malloc_trim(0) };
    released == 1
}

/// Does nothing: this allocator has no such call, or returns memory by itself.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
#[must_use]
pub fn give_back() -> bool {
    false
}

/// The bytes the allocator holds free in its arenas (glibc's `mallinfo2`: `fordblks`, the free
/// chunks, which include the top of each arena), none elsewhere: what [`give_back`] could
/// return. It walks every arena under its lock, as `give_back` does, so it is read once in a
/// while, not per request.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[must_use]
pub fn free_held_bytes() -> Option<u64> {
    #[allow(unsafe_code, reason = "the allocator's own figures, one FFI call")]
    // SAFETY: `mallinfo2` takes no argument and returns a struct by value; glibc serializes it
    // with the allocator by the arenas' own locks.
    let info = unsafe { libc::mallinfo2() };
    u64::try_from(info.fordblks).ok()
}

/// None: this allocator has no such figure.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
#[must_use]
pub fn free_held_bytes() -> Option<u64> {
    None
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

    /// Memory freed in the middle of the heap (a later allocation kept, as a connection that
    /// outlives a flood keeps its buffers) stays resident until `give_back`, which returns it.
    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn freed_memory_is_given_back() {
        // Small blocks (below the mmap threshold) come from the heap, like connection buffers.
        let mut blocks: Vec<Vec<u8>> = (0..16 * 1024).map(|_| vec![1u8; 8 * 1024]).collect();
        let kept = vec![1u8; 8 * 1024];
        let before_free = resident_bytes().unwrap();
        blocks.clear();
        blocks.shrink_to_fit();
        let after_free = resident_bytes().unwrap();
        assert!(give_back());
        let after = resident_bytes().unwrap();
        eprintln!(
            "128 MiB of 8 KiB blocks: resident {} MiB, still {} MiB once freed, {} MiB after \
             give_back",
            before_free >> 20,
            after_free >> 20,
            after >> 20
        );
        assert!(
            after + (64 << 20) < after_free,
            "{after} bytes resident after give_back, {after_free} before"
        );
        assert_eq!(kept.len(), 8 * 1024);
    }

    /// Freed memory shows as held free until it is given back.
    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn memory_freed_shows_as_held_free() {
        let mut blocks: Vec<Vec<u8>> = (0..4 * 1024).map(|_| vec![1u8; 8 * 1024]).collect();
        let kept = vec![1u8; 8 * 1024];
        let before = free_held_bytes().unwrap();
        blocks.clear();
        blocks.shrink_to_fit();
        let freed = free_held_bytes().unwrap();
        assert!(
            freed >= before + (16 << 20),
            "32 MiB freed, {before} bytes held free before, {freed} after"
        );
        assert_eq!(kept.len(), 8 * 1024);
    }
}
