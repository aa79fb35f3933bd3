//! The bounded multi-producer intake of a TX queue: producers push `(packet, meta)` pairs
//! without a lock, and the runner pops them into its qdisc.
//!
//! Normally this is crossbeam's `ArrayQueue` (a bounded lock-free MPMC ring). Under `cfg(loom)`
//! it is a `loom::sync::Mutex<VecDeque>` of the same capacity instead: `ArrayQueue` is built on
//! `std` atomics that loom cannot see, so loom would miss (or falsely report) races through it.
//! The loom model therefore checks the runner lock, the MISSED flag and the bypass decisions
//! around an intake that is linearizable by construction, which is what `ArrayQueue` promises.

#[cfg(not(loom))]
use crossbeam_queue::ArrayQueue;

/// A bounded MPMC FIFO; a push onto a full intake hands the item back.
pub(crate) struct IntakeRing<T> {
    #[cfg(not(loom))]
    ring: ArrayQueue<T>,
    #[cfg(loom)]
    ring: super::sync::Mutex<std::collections::VecDeque<T>>,
    #[cfg(loom)]
    capacity: usize,
}

impl<T> IntakeRing<T> {
    /// An empty intake holding at most `capacity` items (at least one).
    pub(crate) fn new(capacity: usize) -> IntakeRing<T> {
        let capacity = capacity.max(1);
        #[cfg(not(loom))]
        {
            IntakeRing {
                ring: ArrayQueue::new(capacity),
            }
        }
        #[cfg(loom)]
        {
            IntakeRing {
                ring: super::sync::Mutex::new(std::collections::VecDeque::with_capacity(capacity)),
                capacity,
            }
        }
    }

    /// Appends `item`, or returns it when the intake is full.
    pub(crate) fn push(&self, item: T) -> Result<(), T> {
        #[cfg(not(loom))]
        {
            self.ring.push(item)
        }
        #[cfg(loom)]
        {
            let mut ring = self.ring.lock().expect("intake mutex poisoned");
            if ring.len() >= self.capacity {
                return Err(item);
            }
            ring.push_back(item);
            Ok(())
        }
    }

    /// Removes the oldest item.
    pub(crate) fn pop(&self) -> Option<T> {
        #[cfg(not(loom))]
        {
            self.ring.pop()
        }
        #[cfg(loom)]
        {
            self.ring.lock().expect("intake mutex poisoned").pop_front()
        }
    }

    /// Returns true when nothing is waiting (a snapshot: pushes may race with it).
    pub(crate) fn is_empty(&self) -> bool {
        #[cfg(not(loom))]
        {
            self.ring.is_empty()
        }
        #[cfg(loom)]
        {
            self.ring.lock().expect("intake mutex poisoned").is_empty()
        }
    }

    /// Items waiting (a snapshot).
    pub(crate) fn len(&self) -> usize {
        #[cfg(not(loom))]
        {
            self.ring.len()
        }
        #[cfg(loom)]
        {
            self.ring.lock().expect("intake mutex poisoned").len()
        }
    }

    /// The capacity given to [`IntakeRing::new`] (at least one).
    pub(crate) fn capacity(&self) -> usize {
        #[cfg(not(loom))]
        {
            self.ring.capacity()
        }
        #[cfg(loom)]
        {
            self.capacity
        }
    }
}

// Small enough for miri (`scripts/test miri`).
#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_full_intake_hands_the_item_back_and_pops_in_order() {
        let ring = IntakeRing::new(2);
        assert_eq!(ring.capacity(), 2);
        assert!(ring.is_empty());
        assert_eq!(ring.push(1), Ok(()));
        assert_eq!(ring.push(2), Ok(()));
        assert_eq!(ring.len(), ring.capacity(), "full");
        assert_eq!(ring.push(3), Err(3));
        assert_eq!(ring.len(), 2);
        assert_eq!(
            (ring.pop(), ring.pop(), ring.pop()),
            (Some(1), Some(2), None)
        );
    }

    #[test]
    fn producers_on_several_threads_lose_and_duplicate_nothing() {
        const PRODUCERS: u32 = 3;
        const EACH: u32 = 16;
        let ring = IntakeRing::new(8);
        let mut seen: Vec<(u32, u32)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..PRODUCERS)
                .map(|p| {
                    let ring = &ring;
                    s.spawn(move || {
                        let mut refused = Vec::new();
                        for i in 0..EACH {
                            if let Err(item) = ring.push(Box::new((p, i))) {
                                refused.push(*item);
                            }
                        }
                        refused
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        while let Some(item) = ring.pop() {
            seen.push(*item);
        }
        seen.sort_unstable();
        let all: Vec<(u32, u32)> = (0..PRODUCERS)
            .flat_map(|p| (0..EACH).map(move |i| (p, i)))
            .collect();
        assert_eq!(seen, all);
    }
}
