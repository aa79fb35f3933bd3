//! The engine's one clock: monotonic nanoseconds since the process's first reading.
//!
//! Workers read the real clock once per loop iteration with [`now_ns`]; everything else on
//! that thread (the generator's send stamp, the sink's delay, the pcap writer's timestamps)
//! uses [`recent_ns`], the value of that read, so the data path never reads the clock per
//! packet. Code that runs outside a worker loop simply gets a fresh reading from
//! [`recent_ns`] the first time.

use std::cell::Cell;
use std::sync::OnceLock;
use std::time::Instant;

static EPOCH: OnceLock<Instant> = OnceLock::new();

thread_local! {
    static RECENT: Cell<u64> = const { Cell::new(0) };
}

/// Reads the monotonic clock (ns since the process's first reading, at least 1) and
/// remembers it as this thread's [`recent_ns`].
#[inline]
pub fn now_ns() -> u64 {
    let epoch = *EPOCH.get_or_init(Instant::now);
    let ns = (epoch.elapsed().as_nanos() as u64).max(1);
    RECENT.with(|r| r.set(ns));
    ns
}

/// This thread's last [`now_ns`] reading (reads the clock if this thread never has).
#[inline]
pub fn recent_ns() -> u64 {
    let ns = RECENT.with(|r| r.get());
    if ns == 0 {
        now_ns()
    } else {
        ns
    }
}

/// Wall-clock time (ns since the Unix epoch) that corresponds to monotonic `mono_ns`, for
/// file timestamps. Reads both clocks; not for the data path.
pub fn wall_ns_at(mono_ns: u64) -> u64 {
    let wall_now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mono_now = now_ns();
    wall_now.saturating_sub(mono_now.saturating_sub(mono_ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_never_goes_backwards_and_recent_follows_it() {
        let a = now_ns();
        let b = now_ns();
        assert!(b >= a && a >= 1);
        assert_eq!(recent_ns(), b);
    }
}
