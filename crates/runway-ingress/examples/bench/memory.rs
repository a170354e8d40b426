//! A target's memory while a load runs: PSS (proportional set size: a page shared by N
//! processes counts 1/N in each, so nginx's workers do not count their shared pages once
//! each), summed over the process and its descendants, sampled every 200 ms.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The peak of a target's memory over the samples taken.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Memory {
    /// The highest PSS of the process and its descendants together.
    pub(crate) pss_kib: u64,
    /// The highest RSS of any one of them, for reference.
    pub(crate) largest_rss_kib: u64,
}

impl Memory {
    fn max(self, other: Self) -> Self {
        Self {
            pss_kib: self.pss_kib.max(other.pss_kib),
            largest_rss_kib: self.largest_rss_kib.max(other.largest_rss_kib),
        }
    }
}

const EVERY: Duration = Duration::from_millis(200);

/// Runs `work` while a thread samples the memory of `pid` and its descendants; gives `work`'s
/// result and the peak (None without a process, or if it could not be read).
pub(crate) fn peak_during<T>(pid: Option<u32>, work: impl FnOnce() -> T) -> (T, Option<Memory>) {
    let Some(pid) = pid else {
        return (work(), None);
    };
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let sampler = scope.spawn(|| {
            let mut peak: Option<Memory> = None;
            loop {
                // One last sample after the work is done.
                let last = done.load(Ordering::Acquire);
                if let Some(now) = sample(pid) {
                    peak = Some(peak.unwrap_or_default().max(now));
                }
                if last {
                    return peak;
                }
                std::thread::sleep(EVERY);
            }
        });
        let result = work();
        done.store(true, Ordering::Release);
        (result, sampler.join().ok().flatten())
    })
}

/// The memory of `pid` and its descendants now.
pub(crate) fn sample(pid: u32) -> Option<Memory> {
    let mut memory = Memory::default();
    let mut pids = vec![pid];
    let mut index = 0;
    while let Some(&process) = pids.get(index) {
        let rollup = std::fs::read_to_string(format!("/proc/{process}/smaps_rollup")).ok();
        // The process itself must be readable; a child may have just exited.
        if rollup.is_none() && process == pid {
            return None;
        }
        let rollup = rollup.unwrap_or_default();
        memory.pss_kib += field_kib(&rollup, "Pss:");
        memory.largest_rss_kib = memory.largest_rss_kib.max(field_kib(&rollup, "Rss:"));
        pids.extend(children(process));
        index += 1;
    }
    Some(memory)
}

/// `Pss:   1234 kB` to 1234.
fn field_kib(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|line| line.strip_prefix(name))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap_or(0)
}

/// The children of every thread of `pid`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|child| child.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}
