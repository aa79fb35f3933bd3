//! For tests only: a receive queue that hangs once inside `rx_burst`, as a port call that
//! never returns would, so that the watchdog's handling of a stuck worker can be tested with
//! the real binary. Enabled by the environment variable [`STALL_ENV`] =
//! `AFTER_MS:FOR_MS` (the first receive queue of port A stalls once for `FOR_MS` after
//! `AFTER_MS` of running); never set in production.

use std::time::{Duration, Instant};

use super::{PortBuf, PortRx};

/// The variable that enables the stall (tests only).
pub const STALL_ENV: &str = "CAKEWALK_TEST_STALL_RX";

/// A receive queue that stalls once.
pub struct StallingRx<B> {
    inner: Box<dyn PortRx<Buf = B>>,
    at: Instant,
    stall_for: Duration,
    done: bool,
}

impl<B: PortBuf> PortRx for StallingRx<B> {
    type Buf = B;

    fn rx_burst(&mut self, burst: &mut Vec<Self::Buf>, max: usize) -> usize {
        if !self.done && Instant::now() >= self.at {
            self.done = true;
            std::thread::sleep(self.stall_for);
        }
        self.inner.rx_burst(burst, max)
    }

    fn is_finished(&self) -> bool {
        self.inner.is_finished()
    }
}

/// Parses [`STALL_ENV`]'s `AFTER_MS:FOR_MS`; `None` when unset.
///
/// # Errors
/// A value that is not two numbers of milliseconds.
pub fn from_env() -> Result<Option<(Duration, Duration)>, String> {
    let Ok(v) = std::env::var(STALL_ENV) else {
        return Ok(None);
    };
    let parse = |s: &str| s.trim().parse::<u64>().map(Duration::from_millis);
    match v.split_once(':').map(|(a, f)| (parse(a), parse(f))) {
        Some((Ok(after), Ok(stall_for))) => Ok(Some((after, stall_for))),
        _ => Err(format!(
            "{STALL_ENV}='{v}' is not AFTER_MS:FOR_MS (a test hook; unset it)"
        )),
    }
}

/// Wraps `rx` so that it stalls for `stall_for` once `after` has passed.
pub fn stalling<B: PortBuf>(
    rx: Box<dyn PortRx<Buf = B>>,
    after: Duration,
    stall_for: Duration,
) -> StallingRx<B> {
    StallingRx {
        inner: rx,
        at: Instant::now() + after,
        stall_for,
        done: false,
    }
}
