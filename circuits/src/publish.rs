//! Hands a read-only value (the prefix table) from the thread that builds it to the threads
//! that read it, without a lock on the read path: the publisher swaps an `Arc` under a mutex
//! and bumps a generation counter; each reader keeps its own `Arc` and, once per burst, compares
//! the generation with one atomic load. Only a reader that sees a new generation takes the
//! mutex, once, to clone the new `Arc`. The old value is freed when the last reader lets go.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// The current value and its generation.
#[derive(Debug)]
pub struct Published<T> {
    current: Mutex<Arc<T>>,
    generation: AtomicU64,
}

impl<T> Published<T> {
    /// Publishes `value` as generation 0.
    pub fn new(value: T) -> Published<T> {
        Published {
            current: Mutex::new(Arc::new(value)),
            generation: AtomicU64::new(0),
        }
    }

    /// Replaces the value; readers pick it up at their next [`Reader::refresh`].
    pub fn publish(&self, value: T) {
        let value = Arc::new(value);
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        *current = value;
        // Release: a reader that sees the new generation finds the new value under the mutex.
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// The current value.
    pub fn load(&self) -> Arc<T> {
        Arc::clone(&self.current.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A reader holding the current value.
    pub fn reader(&self) -> Reader<T> {
        let generation = self.generation.load(Ordering::Acquire);
        Reader {
            value: self.load(),
            generation,
        }
    }
}

/// One thread's view: lookups go through [`Reader::get`] without touching shared state.
#[derive(Debug)]
pub struct Reader<T> {
    value: Arc<T>,
    generation: u64,
}

impl<T> Reader<T> {
    /// Picks up a newer value if one was published (one atomic load when none was). Returns
    /// true when the value changed.
    #[inline]
    pub fn refresh(&mut self, from: &Published<T>) -> bool {
        let generation = from.generation.load(Ordering::Acquire);
        if generation == self.generation {
            return false;
        }
        self.value = from.load();
        self.generation = generation;
        true
    }

    /// The value this reader holds.
    #[inline]
    pub fn get(&self) -> &T {
        &self.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_see_a_new_value_after_refresh_and_the_old_one_is_freed() {
        let p = Published::new(vec![1]);
        let mut r = p.reader();
        let old = Arc::downgrade(&p.load());
        assert!(!r.refresh(&p));
        p.publish(vec![2]);
        assert_eq!(r.get(), &vec![1], "no change until refresh");
        assert!(r.refresh(&p));
        assert_eq!(r.get(), &vec![2]);
        assert!(old.upgrade().is_none(), "nobody holds the old value");
    }

    #[test]
    fn threads_pick_up_every_publication() {
        let p = Arc::new(Published::new(0u64));
        let reader = {
            let p = Arc::clone(&p);
            std::thread::spawn(move || {
                let mut r = p.reader();
                let mut last = *r.get();
                while last < 1000 {
                    r.refresh(&p);
                    assert!(*r.get() >= last, "values never go back");
                    last = *r.get();
                    std::thread::yield_now();
                }
            })
        };
        for v in 1..=1000 {
            p.publish(v);
        }
        reader.join().unwrap();
    }
}
