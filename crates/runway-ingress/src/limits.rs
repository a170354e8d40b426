//! The process's file-descriptor limit, and the client connections it allows.
//!
//! Every client connection costs a descriptor, and a proxied request usually another (its
//! connection to an instance); the API, the store, the access log and the runtime's sockets
//! need theirs too. So the ingress takes clients only up to a budget computed from the limit,
//! and refuses more at accept, rather than running out of descriptors (at which point nothing
//! in the process can accept, open or connect).

use std::io;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// Descriptors kept for everything but the ingress's connections: the listeners, the API and
/// its clients, the store, log files, the runtime's sockets. At least this many, and at
/// least an eighth of the limit.
pub const RESERVED_FDS: u64 = 512;

/// The most client connections [`connections_for_fd_limit`] allows however high the limit:
/// beyond, memory (tens of KiB per connection) is the bound.
pub const MAX_CONNECTIONS: usize = 50_000;

/// Raises the soft limit on open files to the hard limit, and returns the limit in force.
/// A process starts with the soft limit its parent had (often 1024), far below what a proxy
/// needs; the hard limit is what the operator allows it.
pub fn raise_fd_limit() -> std::io::Result<u64> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(std::io::Error::from)?;
    if soft >= hard {
        return Ok(soft);
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => Ok(hard),
        // An unlimited hard limit is not a valid soft one for files (Linux caps it at
        // `fs.nr_open`): keep the soft limit then.
        Err(_) => Ok(soft),
    }
}

/// The soft limit on open files now (1024 when it cannot be read).
pub fn fd_limit() -> u64 {
    getrlimit(Resource::RLIMIT_NOFILE).map_or(1024, |(soft, _)| soft)
}

/// The client connections the ingress may hold at once, across all its listeners and event
/// loops, with `fd_limit` descriptors: what [`RESERVED_FDS`] (or an eighth) leaves, halved
/// (a client's connection and its request's connection to an instance), at most
/// [`MAX_CONNECTIONS`], at least 16.
pub fn connections_for_fd_limit(fd_limit: u64) -> usize {
    let reserve = (fd_limit / 8).max(RESERVED_FDS);
    let usable = fd_limit.saturating_sub(reserve) / 2;
    usize::try_from(usable)
        .unwrap_or(MAX_CONNECTIONS)
        .clamp(16, MAX_CONNECTIONS)
}

/// How long a connection may wait to be served (its TLS handshake done, or its first request's
/// head read) while the connection budget is [`under_pressure`]; past it, it is closed. The
/// bound otherwise is the head-read timeout (30 s by default), which a flood of clients that
/// connect and say nothing would hold the budget for. A client completes a TLS handshake in
/// two round trips.
pub const PRESSURE_WAIT: Duration = Duration::from_secs(3);

/// Whether `held` connections of a budget of `total` put it under pressure: three quarters
/// of it held.
pub fn under_pressure(held: usize, total: usize) -> bool {
    held.saturating_mul(4) >= total.saturating_mul(3)
}

/// The first pause after an accept failed for want of descriptors or memory; it doubles
/// while they keep failing, up to [`ACCEPT_BACKOFF_MAX`].
pub const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
pub const ACCEPT_BACKOFF_MAX: Duration = Duration::from_millis(500);

/// Whether an accept failed for want of resources (`EMFILE`, `ENFILE`, `ENOBUFS`,
/// `ENOMEM`), which lasts until some are freed: the listener stays readable, so retrying at
/// once would spin.
pub fn out_of_resources(error: &io::Error) -> bool {
    error.raw_os_error().is_some_and(|code| {
        [Errno::EMFILE, Errno::ENFILE, Errno::ENOBUFS, Errno::ENOMEM]
            .iter()
            .any(|errno| *errno as i32 == code)
    })
}

/// How long to pause after `accept` failed with `error`, when the pause before was
/// `previous` (zero after an accept that worked); `None` to go on at once, for a connection's
/// own failure (reset or aborted before it was accepted). Out of resources, the pause doubles
/// from [`ACCEPT_BACKOFF_MIN`] to [`ACCEPT_BACKOFF_MAX`]; anything else waits the minimum.
/// Every server in the process (the ingress's listeners, the API) backs off the same way.
pub fn accept_pause(error: &io::Error, previous: Duration) -> Option<Duration> {
    if out_of_resources(error) {
        return Some((previous * 2).clamp(ACCEPT_BACKOFF_MIN, ACCEPT_BACKOFF_MAX));
    }
    match error.kind() {
        io::ErrorKind::ConnectionAborted
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::Interrupted => None,
        _ => Some(ACCEPT_BACKOFF_MIN),
    }
}

/// Connections that must have closed since the most held at once before the memory they took
/// is given back to the system at once (`runway_memory::give_back`): a flood is over. At 2–23
/// KiB a connection (a silent one, one with hyper's buffers), a thousand held 2–23 MiB; fewer
/// are left to the allocator's own decay, and ordinary churn never comes near.
pub const FLOOD_CLOSED: usize = 1_000;

/// How often the connections held are compared with their peak.
pub const FLOOD_CHECK: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_keeps_room_for_the_rest_of_the_process() {
        assert_eq!(connections_for_fd_limit(1024), 256);
        assert_eq!(connections_for_fd_limit(20_000), 8750);
        assert_eq!(connections_for_fd_limit(1 << 20), MAX_CONNECTIONS);
        assert_eq!(connections_for_fd_limit(100), 16);
        for limit in [600, 1024, 4096, 20_000, 65_536] {
            let clients = connections_for_fd_limit(limit) as u64;
            // Each client and one instance connection for each still leave the reserve.
            assert!(
                2 * clients + RESERVED_FDS.min(limit) <= limit.max(2 * 16),
                "{limit}"
            );
        }
    }

    #[test]
    fn pressure_is_three_quarters_of_the_budget() {
        assert!(!under_pressure(74, 100));
        assert!(under_pressure(75, 100));
        assert!(under_pressure(1, 1));
        assert!(under_pressure(usize::MAX, usize::MAX));
    }

    #[test]
    fn only_resource_errors_back_off_longer_and_longer() {
        let emfile = io::Error::from_raw_os_error(Errno::EMFILE as i32);
        assert!(out_of_resources(&emfile));
        assert!(out_of_resources(&io::Error::from_raw_os_error(
            Errno::ENFILE as i32
        )));
        let mut pause = Duration::ZERO;
        let mut pauses = Vec::new();
        for _ in 0..8 {
            pause = accept_pause(&emfile, pause).unwrap_or_default();
            pauses.push(pause.as_millis());
        }
        assert_eq!(pauses, [10, 20, 40, 80, 160, 320, 500, 500]);
        let aborted = io::Error::from_raw_os_error(Errno::ECONNABORTED as i32);
        assert!(!out_of_resources(&aborted));
        assert_eq!(accept_pause(&aborted, pause), None);
        let other = io::Error::from_raw_os_error(Errno::EINVAL as i32);
        assert_eq!(accept_pause(&other, pause), Some(ACCEPT_BACKOFF_MIN));
    }

    #[test]
    fn the_limit_is_raised_to_the_hard_limit() {
        let raised = raise_fd_limit().unwrap_or(0);
        assert_eq!(raised, fd_limit());
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap_or((0, 0));
        assert!(raised == hard || hard == nix::sys::resource::RLIM_INFINITY);
    }
}
