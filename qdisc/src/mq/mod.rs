//! cake_mq: per-TX-queue shapers sharing one global rate through atomics (Linux 7.0's
//! `cake_mq`, plus a work-conserving split), with a lockless intake and enqueue bypass after
//! Linux's lockless qdisc. docs/design.md ("cake_mq", "The bypass protocol") tells the whole
//! story.
//!
//! * [`SharedRate`] holds the global rate and each queue's published activity.
//! * [`TxQueue`] is one queue: a lock-free intake, a runner try-lock with a MISSED flag, the
//!   bypass, and the rate sync that rescales its own qdisc with `set_rate` only (a sync
//!   never purges tins or moves cursors).
//! * [`MultiQueue`] builds N queues over one config and one [`SharedRate`] and applies
//!   configuration changes to all of them without a restart.
//!
//! Nothing here reads a clock or starts a thread; the engine supplies `now_ns` and threads.
//!
//! ```
//! use qdisc::fifo::{Fifo, FifoConfig};
//! use qdisc::mq::{Intake, MultiQueue, RunResult, TxQueueOptions};
//! use qdisc::{Packet, PacketMeta, Rate};
//!
//! struct Frame(Vec<u8>);
//! impl Packet for Frame {
//!     fn len(&self) -> usize { self.0.len() }
//!     fn set_ce(&mut self) -> bool { false }
//! }
//!
//! let mq: MultiQueue<Frame, Fifo<Frame>> =
//!     MultiQueue::from_config(2, TxQueueOptions::default(), &FifoConfig { limit_packets: 128 })
//!         .unwrap();
//! let q = mq.queue(0);
//! let meta = PacketMeta::default();
//! // An idle FIFO takes the bypass: the caller transmits the packet itself, now.
//! assert!(matches!(q.enqueue(0, Frame(vec![0; 64]), &meta), Intake::Bypass(_)));
//! // With the runner lock held elsewhere it would queue; `run` then transmits under the lock.
//! let mut out = Vec::new();
//! let r = q.run(0, 32, &mut out, |sent: &mut Vec<Frame>| sent.clear());
//! assert!(matches!(r, RunResult::Ran { sent: 0, .. }));
//! assert_eq!(mq.rate(), Rate::UNLIMITED);
//! ```

mod cake;
mod fifo;
mod intake;
mod shared_rate;
// The runner lock: the crate's one module allowed `unsafe` (each block with its SAFETY note).
#[allow(unsafe_code)]
pub(crate) mod sync;
mod tx_queue;

use std::sync::Arc;

pub use shared_rate::{ActivitySnapshot, SharedRate, SyncConfig, SyncPolicy};
pub use tx_queue::{
    BurstOutcome, Intake, NextRun, Offerer, QdiscRead, RunResult, TxQueue, TxQueueOptions,
    TxQueueStats,
};

use crate::{Packet, Qdisc, Rate};

/// A qdisc that can serve as one queue of a [`MultiQueue`]: built from a shared config and
/// reconfigured in place.
pub trait MqQdisc<P: Packet>: Qdisc<P> + Send + Sized {
    /// The configuration every queue shares.
    type Config: Clone + Send + Sync + 'static;
    /// Why a configuration was refused.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Builds one instance from `config` (at the full configured rate).
    ///
    /// # Errors
    /// When `config` is invalid.
    fn build(config: &Self::Config) -> Result<Self, Self::Error>;

    /// Checks `config` without building anything.
    ///
    /// # Errors
    /// When `config` is invalid.
    fn validate(config: &Self::Config) -> Result<(), Self::Error>;

    /// Applies `config` in place at a safe point (called by the runner between dequeues). The
    /// rate it sets is the full configured rate; the rate sync scales it right after. The
    /// runner only passes configs that [`MqQdisc::validate`] accepted (on the thread that
    /// asked for the change), so an implementation need not check them again on the worker.
    ///
    /// # Errors
    /// When `config` is invalid; the instance is then unchanged.
    fn reconfigure(&mut self, config: &Self::Config) -> Result<(), Self::Error>;

    /// The global rate `config` asks for.
    fn config_rate(config: &Self::Config) -> Rate;

    /// Returns true when `new` differs from `old` in the rate at most, so that
    /// [`MultiQueue::reconfigure`] can take the `set_rate` path (a pure parameter write)
    /// instead of a full reconfigure. There is deliberately no default: a wrapper that
    /// forgot to answer would silently turn every rate step into a full reconfigure (the
    /// regression Linux's cake_mq had to fix: a rate step that cleared the tins).
    fn is_rate_only_change(old: &Self::Config, new: &Self::Config) -> bool;
}

/// N [`TxQueue`]s sharing one configuration and one [`SharedRate`].
pub struct MultiQueue<P, Q: MqQdisc<P>>
where
    P: Packet,
{
    shared: Arc<SharedRate>,
    queues: Box<[TxQueue<P, Q>]>,
    /// The configuration in force, when the queues were built from one.
    config: std::sync::Mutex<Option<Q::Config>>,
}

impl<P: Packet + Send, Q: MqQdisc<P>> MultiQueue<P, Q> {
    /// `queues` queues (at least one) built from `config`.
    ///
    /// # Errors
    /// When `Q` refuses `config`.
    pub fn from_config(
        queues: usize,
        options: TxQueueOptions,
        config: &Q::Config,
    ) -> Result<MultiQueue<P, Q>, Q::Error> {
        let rate = Q::config_rate(config);
        let mut qdiscs = Vec::with_capacity(queues.max(1));
        for _ in 0..queues.max(1) {
            qdiscs.push(Q::build(config)?);
        }
        let mq = MultiQueue::from_qdiscs(qdiscs, options, rate);
        *mq.config.lock().expect("config lock poisoned") = Some(config.clone());
        Ok(mq)
    }

    /// One queue per qdisc in `qdiscs` (at least one expected), sharing `rate`.
    pub fn from_qdiscs(qdiscs: Vec<Q>, options: TxQueueOptions, rate: Rate) -> MultiQueue<P, Q> {
        let shared = Arc::new(SharedRate::new(qdiscs.len(), rate, options.sync));
        let queues = qdiscs
            .into_iter()
            .enumerate()
            .map(|(i, q)| TxQueue::with_shared(q, options, Arc::clone(&shared), i))
            .collect();
        MultiQueue {
            shared,
            queues,
            config: std::sync::Mutex::new(None),
        }
    }

    /// Number of queues.
    pub fn len(&self) -> usize {
        self.queues.len()
    }

    /// Always false: a `MultiQueue` has at least one queue.
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// Queue `index`.
    ///
    /// # Panics
    /// When `index >= self.len()`.
    pub fn queue(&self, index: usize) -> &TxQueue<P, Q> {
        &self.queues[index]
    }

    /// All queues.
    pub fn queues(&self) -> &[TxQueue<P, Q>] {
        &self.queues
    }

    /// The shared rate state.
    pub fn shared(&self) -> &Arc<SharedRate> {
        &self.shared
    }

    /// The configured global rate.
    pub fn rate(&self) -> Rate {
        self.shared.rate()
    }

    /// Changes the global rate; each queue rescales with `set_rate` at its next run.
    pub fn set_rate(&self, rate: Rate) {
        self.shared.set_rate(rate);
    }

    /// Changes the sync policy or interval for all queues.
    pub fn set_sync_config(&self, sync: SyncConfig) {
        self.shared.set_sync_config(sync);
    }

    /// Applies `config` to every queue without a restart: the global rate changes at once,
    /// and each runner applies the rest at its next run, then resyncs its share. A change of
    /// the rate alone (see [`MqQdisc::is_rate_only_change`]) only goes through `set_rate`;
    /// anything else (diffserv mode, overhead, ...) is a full reconfigure of every qdisc.
    ///
    /// # Errors
    /// When `Q` refuses `config`; nothing changes then.
    pub fn reconfigure(&self, config: &Q::Config) -> Result<(), Q::Error> {
        Q::validate(config)?;
        let mut current = self.config.lock().expect("config lock poisoned");
        let rate_only = current
            .as_ref()
            .is_some_and(|old| Q::is_rate_only_change(old, config));
        if !rate_only {
            for q in self.queues.iter() {
                q.request_reconfigure(config.clone())?;
            }
        }
        self.shared.set_rate(Q::config_rate(config));
        *current = Some(config.clone());
        Ok(())
    }

    /// The sum of all queues' counters.
    pub fn stats(&self) -> TxQueueStats {
        let mut total = TxQueueStats::default();
        for q in self.queues.iter() {
            let s = q.stats();
            total.enqueued += s.enqueued;
            total.bypassed += s.bypassed;
            total.intake_full += s.intake_full;
            for (t, d) in total.qdisc_drops.iter_mut().zip(s.qdisc_drops) {
                *t += d;
            }
            total.dequeue_drops += s.dequeue_drops;
            total.dequeued += s.dequeued;
            total.sent_bytes += s.sent_bytes;
            total.syncs += s.syncs;
            total.active_queues = total.active_queues.max(s.active_queues);
            total.share =
                Rate::from_bytes_per_sec(total.share.bytes_per_sec() + s.share.bytes_per_sec());
        }
        total
    }
}
