//! systemd's notify protocol (`Type=notify`, through the `sd-notify` crate): `READY=1` once
//! the ports are open and every worker's loop runs, `STATUS=` with the live line each
//! interval, `WATCHDOG=1` only while every worker's loop keeps advancing (a worker stuck in a
//! port call stops the pings, and systemd restarts the service after `WatchdogSec`), and
//! `STOPPING=1` when the drain starts. Outside systemd (`NOTIFY_SOCKET` unset) every call is
//! a no-op.
//!
//! The supervisor calls [`Notifier::tick`] from its loop with the workers' heartbeats
//! ([`crate::engine::EngineShared::heartbeats`]); the watchdog check runs every half
//! `WATCHDOG_USEC`, as `sd_watchdog_enabled(3)` advises.

use std::time::{Duration, Instant};

use sd_notify::NotifyState;

use crate::engine::WORKER_DONE;

/// What the supervisor tells systemd.
#[derive(Debug)]
pub struct Notifier {
    enabled: bool,
    /// Half the watchdog timeout: how often the workers are checked and systemd pinged.
    check_every: Option<Duration>,
    ready: bool,
    next_check: Instant,
    last_beats: Vec<u64>,
    /// Workers found stalled at the last check (reported once per stall).
    stalled: Vec<usize>,
}

impl Notifier {
    /// From the environment systemd sets (`NOTIFY_SOCKET`, `WATCHDOG_USEC`, `WATCHDOG_PID`).
    pub fn from_env() -> Notifier {
        let mut usec = 0u64;
        let watchdog = sd_notify::watchdog_enabled(false, &mut usec) && usec > 0;
        Notifier {
            enabled: std::env::var_os("NOTIFY_SOCKET").is_some(),
            check_every: watchdog
                .then(|| Duration::from_micros(usec / 2).max(Duration::from_millis(1))),
            ready: false,
            next_check: Instant::now(),
            last_beats: Vec::new(),
            stalled: Vec::new(),
        }
    }

    fn send(&self, state: &[NotifyState<'_>]) {
        if self.enabled {
            if let Err(e) = sd_notify::notify(false, state) {
                crate::log_line!("warning: cannot notify systemd ({e}); check NOTIFY_SOCKET");
            }
        }
    }

    /// Sends `STATUS=` with `line` (one line; the live view).
    pub fn status(&self, line: &str) {
        if self.ready {
            self.send(&[NotifyState::Status(line.trim_end())]);
        }
    }

    /// Sends `STOPPING=1` with why.
    pub fn stopping(&self, why: &str) {
        let status = format!("stopping: {why}; draining");
        self.send(&[NotifyState::Stopping, NotifyState::Status(&status)]);
    }

    /// Called from the supervisor's loop with every worker's heartbeat: sends `READY=1` once
    /// every worker's loop has started, then `WATCHDOG=1` each half watchdog period in which
    /// every worker's loop advanced (a worker that left its loop counts as advancing: it is
    /// stopping, not stuck).
    pub fn tick(&mut self, now: Instant, beats: &[u64]) {
        if !self.enabled {
            return;
        }
        if !self.ready {
            if beats.iter().all(|b| *b != 0) {
                self.ready = true;
                self.send(&[
                    NotifyState::Ready,
                    NotifyState::Status("forwarding; the first report comes after stats.interval"),
                ]);
                self.last_beats = beats.to_vec();
                if let Some(every) = self.check_every {
                    self.send(&[NotifyState::Watchdog]);
                    self.next_check = now + every;
                }
            }
            return;
        }
        let Some(every) = self.check_every else {
            return;
        };
        if now < self.next_check {
            return;
        }
        self.next_check = now + every;
        let stalled = stalled_workers(&self.last_beats, beats);
        self.last_beats = beats.to_vec();
        if stalled.is_empty() {
            if !self.stalled.is_empty() {
                let again = format!(
                    "worker(s) {:?} advance again; watchdog pings resume",
                    self.stalled
                );
                crate::log_line!("{again}");
                self.send(&[NotifyState::Status(&again)]);
            }
            self.stalled.clear();
            self.send(&[NotifyState::Watchdog]);
        } else if stalled != self.stalled {
            let why = format!(
                "worker(s) {stalled:?} made no progress for {:?} (stuck in a port call?); watchdog pings withheld, systemd restarts the service after WatchdogSec",
                every
            );
            crate::log_line!("error: {why}");
            self.send(&[NotifyState::Status(&why)]);
            self.stalled = stalled;
        }
    }
}

/// The workers whose heartbeat did not move from `before` to `now` (and that had not left
/// their loop).
pub fn stalled_workers(before: &[u64], now: &[u64]) -> Vec<usize> {
    now.iter()
        .zip(before)
        .enumerate()
        .filter(|(_, (n, b))| **n != WORKER_DONE && n == b)
        .map(|(i, _)| i)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_whose_heartbeat_did_not_move_is_stalled_unless_it_left_its_loop() {
        assert!(stalled_workers(&[1, 5], &[2, 9]).is_empty());
        assert_eq!(stalled_workers(&[1, 5], &[2, 5]), vec![1]);
        assert!(stalled_workers(&[WORKER_DONE, 5], &[WORKER_DONE, 6]).is_empty());
    }
}
