//! The concurrency primitives of [`super::TxQueue`], in one place so that loom can swap them:
//! atomics and the mutex come from `loom::sync` under `cfg(loom)` and from `std::sync`
//! otherwise, and [`RunnerLock`] (the runner try-lock with its MISSED flag) owns the only
//! `unsafe` code of the qdisc crate, with one exception kept here too: [`prefetch`], the
//! cache hint the per-circuit shaper issues a burst ahead.
//!
//! It does not decide what a runner does; it only guarantees that at most one thread holds the
//! queue's state at a time and that a thread which lost the race leaves a flag the holder must
//! act on before it lets go.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::Mutex;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::Mutex;

#[cfg(loom)]
use loom::cell::UnsafeCell;
#[cfg(not(loom))]
use std::cell::UnsafeCell;

/// Asks the CPU to start loading the cache line that holds `*r`, without waiting for it: a
/// hint, with no effect on what the program computes. A no-op off x86_64 and under miri.
#[inline(always)]
pub(crate) fn prefetch<T>(r: &T) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `prefetcht0` never faults and changes no architectural state, whatever the
    // address; this one comes from a live reference anyway. The intrinsic is `unsafe` only
    // because it takes a raw pointer (and SSE, part of the x86_64 baseline).
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>((r as *const T).cast::<i8>());
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = r;
}

/// The lock bit: some thread holds the queue's state.
const LOCKED: u32 = 1;
/// The missed bit (Linux `__QDISC_STATE_MISSED`): a thread pushed work and could not take the
/// lock; whoever holds or next takes the lock must drain the intake again.
const MISSED: u32 = 2;

/// A try-lock around the runner's state with Linux's MISSED protocol (Linux a90c57f2cedd;
/// docs/design.md, "The bypass protocol").
///
/// Linux keeps the lock (`q->seqlock`) and MISSED in two words, which is why it needs a full
/// barrier between the unlock and the read of MISSED (2e8728c955ce, a54ce3703613). Here both bits
/// live in one atomic word and every change of it is a read-modify-write, so all changes fall in
/// one modification order: a thread that sets MISSED either does so before the holder's release
/// (and the release CAS fails and the holder goes round again) or after it (and sees the lock
/// free and takes it). No fence is needed, and loom can check the protocol with plain
/// acquire/release semantics.
pub(crate) struct RunnerLock<T> {
    state: AtomicU32,
    cell: UnsafeCell<T>,
}

// SAFETY: the cell is only reached through a `RunnerGuard`, and a guard exists only while its
// thread owns the LOCKED bit, so `&RunnerLock<T>` gives at most one thread `&mut T` at a time;
// moving that access between threads needs `T: Send`, nothing more.
unsafe impl<T: Send> Sync for RunnerLock<T> {}

impl<T> RunnerLock<T> {
    /// Wraps `value`, unlocked, with no MISSED flag.
    pub(crate) fn new(value: T) -> RunnerLock<T> {
        RunnerLock {
            state: AtomicU32::new(0),
            cell: UnsafeCell::new(value),
        }
    }

    /// Returns true when nobody holds the lock and no MISSED flag is pending (a racy hint).
    pub(crate) fn is_idle(&self) -> bool {
        self.state.load(Ordering::Relaxed) == 0
    }

    /// Takes the lock only when it is free and no MISSED work is pending (the bypass path).
    pub(crate) fn try_lock_idle(&self) -> Option<RunnerGuard<'_, T>> {
        self.state
            .compare_exchange(0, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| self.guard())
    }

    /// Takes the lock when nobody holds it, clearing MISSED (the new holder takes over the duty
    /// to drain); returns `None` without touching the word when it is held.
    pub(crate) fn try_lock(&self) -> Option<RunnerGuard<'_, T>> {
        let mut seen = self.state.load(Ordering::Relaxed);
        while seen & LOCKED == 0 {
            match self.state.compare_exchange_weak(
                seen,
                LOCKED,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(self.guard()),
                Err(now) => seen = now,
            }
        }
        None
    }

    /// Takes the lock (clearing MISSED: the new holder will drain) or, when another thread
    /// holds it, sets MISSED so that the holder drains again before it lets go.
    pub(crate) fn lock_or_flag_missed(&self) -> Option<RunnerGuard<'_, T>> {
        let mut seen = self.state.load(Ordering::Relaxed);
        loop {
            let held = seen & LOCKED != 0;
            let next = if held { seen | MISSED } else { LOCKED };
            // AcqRel: the release half publishes this thread's intake push to the holder that
            // later observes MISSED; the acquire half pairs with the previous holder's release.
            match self
                .state
                .compare_exchange_weak(seen, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) if held => return None,
                Ok(_) => return Some(self.guard()),
                Err(now) => seen = now,
            }
        }
    }

    fn guard(&self) -> RunnerGuard<'_, T> {
        RunnerGuard { lock: self }
    }
}

/// Exclusive access to the runner's state. Dropping it unlocks and leaves any MISSED flag set
/// for the next [`RunnerLock::lock_or_flag_missed`] caller.
pub(crate) struct RunnerGuard<'a, T> {
    lock: &'a RunnerLock<T>,
}

impl<'a, T> RunnerGuard<'a, T> {
    /// Runs `f` on the guarded state.
    pub(crate) fn with<R>(&mut self, f: impl FnOnce(&mut T) -> R) -> R {
        #[cfg(loom)]
        {
            self.lock.cell.with_mut(|ptr| {
                // SAFETY: this guard owns the LOCKED bit (see `RunnerLock`), so no other
                // thread reaches the cell until it is released, and `&mut self` stops a second
                // borrow through this guard.
                f(unsafe { &mut *ptr })
            })
        }
        #[cfg(not(loom))]
        {
            // SAFETY: as above: the LOCKED bit is ours and `&mut self` makes the borrow unique.
            f(unsafe { &mut *self.lock.cell.get() })
        }
    }

    /// Releases the lock unless MISSED was set meanwhile. In that case it clears MISSED, keeps
    /// the lock and hands the guard back: the caller must drain the intake again.
    pub(crate) fn try_unlock(self) -> Result<(), RunnerGuard<'a, T>> {
        let this = std::mem::ManuallyDrop::new(self);
        match this
            .lock
            .state
            .compare_exchange(LOCKED, 0, Ordering::Release, Ordering::Relaxed)
        {
            Ok(_) => Ok(()),
            Err(_) => {
                // Acquire: makes the intake pushes of the threads that set MISSED visible here.
                this.lock.state.fetch_and(!MISSED, Ordering::AcqRel);
                Err(std::mem::ManuallyDrop::into_inner(this))
            }
        }
    }

    /// Releases the lock and sets MISSED, so the next `lock_or_flag_missed` caller (which
    /// the caller of `run` is told to be) picks up the work left behind.
    pub(crate) fn unlock_with_missed(self) {
        let this = std::mem::ManuallyDrop::new(self);
        // Others only ever add MISSED while LOCKED is set, so a swap loses nothing.
        this.lock.state.swap(MISSED, Ordering::Release);
    }
}

impl<T> Drop for RunnerGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.state.fetch_and(!LOCKED, Ordering::Release);
    }
}

// Small enough for miri (`scripts/test miri`), which checks the `unsafe` cell access above
// for data races and aliasing; loom (tests/loom.rs) checks the protocol's interleavings.
#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_is_refused_and_flags_missed_for_its_holder() {
        let lock = RunnerLock::new(0u32);
        let mut guard = lock.try_lock_idle().expect("a new lock is free");
        assert!(lock.try_lock().is_none());
        assert!(lock.try_lock_idle().is_none());
        assert!(lock.lock_or_flag_missed().is_none(), "held: flags MISSED");
        guard.with(|v| *v += 1);
        // MISSED was set: the holder keeps the lock and must go round again.
        let mut guard = guard.try_unlock().expect_err("MISSED keeps the lock");
        guard.with(|v| *v += 1);
        assert!(guard.try_unlock().is_ok());
        assert!(lock.is_idle());
        let mut guard = lock.try_lock().expect("free again");
        assert_eq!(guard.with(|v| *v), 2);
        guard.unlock_with_missed();
        assert!(!lock.is_idle());
        assert!(lock.try_lock_idle().is_none(), "MISSED pending: no bypass");
        assert!(
            lock.lock_or_flag_missed().is_some(),
            "the next runner takes over"
        );
    }

    #[test]
    fn threads_that_take_the_lock_get_the_state_one_at_a_time() {
        const THREADS: u32 = 3;
        const ROUNDS: u32 = 20;
        let lock = RunnerLock::new(Vec::<u32>::new());
        let pushed: u32 = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let lock = &lock;
                    s.spawn(move || {
                        let mut done = 0;
                        while done < ROUNDS {
                            let Some(mut guard) = lock.lock_or_flag_missed() else {
                                std::thread::yield_now();
                                continue;
                            };
                            loop {
                                guard.with(|v| v.push(t));
                                done += 1;
                                match guard.try_unlock() {
                                    Ok(()) => break,
                                    Err(again) => guard = again,
                                }
                            }
                        }
                        done
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        let mut guard = lock.lock_or_flag_missed().expect("every thread let go");
        assert_eq!(guard.with(|v| v.len()) as u32, pushed);
        assert!(pushed >= THREADS * ROUNDS);
    }
}
