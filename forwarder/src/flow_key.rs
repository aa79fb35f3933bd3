//! The key of the flow hashes (CAKE's flow and host hashes, and the hash that picks a packet's
//! TX queue, which CAKE reuses as its flow hash). Whoever knows the key can craft 5-tuples
//! that fall into one set of flow buckets and defeat CAKE's flow isolation (hash flooding),
//! so unless `shaper.seed` fixes it, each process draws its key once from the OS random
//! source, as Linux keys its flow dissector at boot. A configured seed gives replays and tests
//! that classify identically on every run.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

/// The key of the queue-selection hash until [`install_queue_key`] sets the process's.
const DEFAULT_QUEUE_KEY: u64 = 0x7c5e_9a11_d00d_f00d;

/// Mixed into the configured seed for the queue hash, so that the queue hash and CAKE's flow
/// hash (which index different tables) never share a key.
const QUEUE_KEY_TWEAK: u64 = 0x9e37_79b9_7f4a_7c15;

static QUEUE_KEY: AtomicU64 = AtomicU64::new(DEFAULT_QUEUE_KEY);

/// This process's random key, drawn on first use and the same for the rest of its life (a
/// reload that rebuilt the queues with a new key would move every flow to another bucket).
pub fn process_key() -> u64 {
    static KEY: OnceLock<u64> = OnceLock::new();
    *KEY.get_or_init(|| {
        getrandom::u64().unwrap_or_else(|e| {
            // Only on a system without a random source at all; a fixed key is what cakewalk
            // used before, so say what that means rather than refuse to forward.
            crate::log_line!(
                "warning: no OS random source ({e}); the flow hash key is a fixed value that others can predict: set shaper.seed to a secret number"
            );
            DEFAULT_QUEUE_KEY ^ u64::from(std::process::id())
        })
    })
}

/// CAKE's flow and host hash key: `seed` when configured, else [`process_key`].
pub fn cake_key(seed: Option<u64>) -> u64 {
    seed.unwrap_or_else(process_key)
}

/// The queue-selection hash key for the same setting.
pub fn queue_key(seed: Option<u64>) -> u64 {
    cake_key(seed) ^ QUEUE_KEY_TWEAK
}

/// Makes [`current_queue_key`] return the key for `seed` (called once, before workers start).
pub fn install_queue_key(seed: Option<u64>) {
    QUEUE_KEY.store(queue_key(seed), Relaxed);
}

/// The queue-selection hash key in effect.
#[inline]
pub fn current_queue_key() -> u64 {
    QUEUE_KEY.load(Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configured_seed_is_the_key_and_without_one_the_process_key_is_drawn_once() {
        assert_eq!(cake_key(Some(1)), 1);
        assert_eq!(cake_key(None), process_key());
        assert_eq!(process_key(), process_key());
        assert_ne!(queue_key(Some(1)), cake_key(Some(1)));
        assert_ne!(process_key(), DEFAULT_QUEUE_KEY);
    }
}
