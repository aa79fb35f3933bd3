//! [`TxQueue`]: one transmit queue that any number of threads feed, after Linux's lockless
//! qdisc (`TCQ_F_CAN_BYPASS`; docs/design.md, "The bypass protocol"): a bounded lock-free
//! intake, a runner try-lock with a MISSED flag, and an enqueue bypass for an idle queue with
//! shaper credit.
//!
//! It owns one qdisc and takes a share of a [`SharedRate`]; it never reads a clock (every call
//! takes `now_ns`) and never transmits by itself (the caller's `transmit` closure does).

use std::any::Any;
use std::marker::PhantomData;
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use super::intake::IntakeRing;
use super::shared_rate::{SharedRate, SyncConfig};
use super::sync::{AtomicBool, AtomicU32, AtomicU64, Mutex, Ordering, RunnerLock};
use super::MqQdisc;
use crate::{DropReason, Packet, PacketMeta, Rate};

mod runner;

/// What [`TxQueue::enqueue`] did with a packet.
#[derive(Debug, PartialEq, Eq)]
pub enum Intake<P> {
    /// The queue was idle and the shaper had credit: the packet was charged and the caller
    /// must transmit it now, before its next call into this queue (that keeps per-flow order).
    Bypass(P),
    /// The packet is queued; a later [`TxQueue::run`] sends it.
    Queued,
    /// The packet was dropped; it is handed back so the caller can free or count it.
    Dropped(DropReason, P),
}

/// Who offers a burst to [`TxQueue::enqueue_burst`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offerer {
    /// The thread that runs the queue (or any thread, where no thread owns it): an idle
    /// queue's bypass is taken, and otherwise the burst goes into the qdisc under the runner
    /// lock when that lock is free.
    Runner,
    /// A thread that does not run the queue (in the engine, a worker that receives packets
    /// for a TX queue another worker owns). While the queue holds packets (its published
    /// length, or anything in the intake) a peer never takes the runner lock: its burst goes
    /// to the intake, which the runner drains a few budgets at a time. Enqueuing into the
    /// qdisc directly would hold the lock for the whole burst (for an overloaded CAKE, a
    /// fattest-flow drop per packet), and a peer that receives faster than the queue drains
    /// would then hold it nearly all the time: the runner's own runs find it busy and the
    /// queue's output collapses (measured: 1 Gbit/s shaped to 20 Mbit/s with two workers on
    /// one flooded queue). Through the intake an overload drops at the intake, on the peer's
    /// core, and the runner's dequeues never wait behind a peer. An empty queue is offered
    /// as by a runner, so a peer's packets still take the bypass; except a queue whose
    /// discipline bypasses per class ([`crate::Qdisc::BYPASS_WHILE_BACKLOGGED`], the circuit
    /// shaper), whose classes' state the runner's core holds: a peer's bypass would pull a
    /// circuit's lines to its own core and back, and take the runner lock from the runner
    /// (10 000 circuits, two workers, half the packets crossing: 0.83 Mpps this way against
    /// 1.8 through the intake, once circuits had bursts and their queues were often empty).
    Peer,
}

/// What [`TxQueue::enqueue_burst`] did with a burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BurstOutcome {
    /// Packets that took the bypass (appended to `out`).
    pub bypassed: usize,
    /// Packets queued (in the qdisc or the intake).
    pub queued: usize,
    /// Packets the intake had no room for (dropped, and counted in
    /// [`TxQueueStats::intake_full`]).
    pub dropped: usize,
    /// Bytes ([`Packet::len`]) of the packets that took the bypass.
    pub bypassed_bytes: u64,
    /// Bytes of every packet of the burst, whatever became of it (what a caller that counts
    /// received bytes would otherwise sum itself).
    pub offered_bytes: u64,
    /// False only when the whole burst bypassed and nothing else is pending: the caller may
    /// then skip [`TxQueue::run`].
    pub run_needed: bool,
}

/// When to call [`TxQueue::run`] again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextRun {
    /// Nothing is queued: run again after the next enqueue.
    Idle,
    /// Work is left (budget used up or the MISSED loop was cut short): run again now.
    Now,
    /// The shaper holds packets until this time (ns).
    At(u64),
}

/// The result of [`TxQueue::run`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunResult {
    /// Another thread is the runner. It (or, if it was a bypass, the next runner) drains what
    /// this thread pushed before it lets go; a poll-mode caller simply runs again next poll.
    Busy,
    /// This thread ran the queue.
    Ran {
        /// Packets handed to `transmit`.
        sent: usize,
        /// When to run again.
        next: NextRun,
    },
}

/// Construction options of a [`TxQueue`] (and of every queue of a [`super::MultiQueue`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxQueueOptions {
    /// Capacity of the lock-free intake, in packets; a full intake drops with
    /// [`DropReason::IntakeFull`].
    pub intake_capacity: usize,
    /// Allow the enqueue bypass (off for the benchmark's no-bypass rows).
    pub bypass: bool,
    /// Rate-sync parameters.
    pub sync: SyncConfig,
}

impl Default for TxQueueOptions {
    fn default() -> TxQueueOptions {
        TxQueueOptions {
            intake_capacity: 1024,
            bypass: true,
            sync: SyncConfig::default(),
        }
    }
}

/// Counters of one [`TxQueue`], published by its runner once per run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TxQueueStats {
    /// Packets taken into the qdisc (from the intake or directly).
    pub enqueued: u64,
    /// Packets that took the bypass.
    pub bypassed: u64,
    /// Packets dropped because the intake was full.
    pub intake_full: u64,
    /// Packets the qdisc dropped at enqueue, by reason (indexed like [`DropReason::ALL`]).
    pub qdisc_drops: [u64; DropReason::ALL.len()],
    /// Packets the qdisc dropped inside dequeue (AQM), derived by conservation.
    pub dequeue_drops: u64,
    /// Packets handed to `transmit` by runs.
    pub dequeued: u64,
    /// Bytes delivered (runs and bypass).
    pub sent_bytes: u64,
    /// Rate syncs done.
    pub syncs: u64,
    /// Active queues seen at the last sync (this one included).
    pub active_queues: u32,
    /// The share applied at the last sync.
    pub share: Rate,
}

impl TxQueueStats {
    /// Drops of one reason (the intake's included).
    pub fn drops(&self, reason: DropReason) -> u64 {
        self.qdisc_drops[reason.index()]
            + if reason == DropReason::IntakeFull {
                self.intake_full
            } else {
                0
            }
    }

    /// All drops: intake, enqueue and dequeue.
    pub fn total_drops(&self) -> u64 {
        self.intake_full + self.qdisc_drops.iter().sum::<u64>() + self.dequeue_drops
    }
}

/// Most times a runner goes round again for MISSED before it hands the work to the next run.
const MAX_MISSED_ROUNDS: u32 = 8;

/// A run moves at most this many dequeue budgets of packets from the intake into the qdisc.
const INTAKE_DRAINS_PER_BUDGET: usize = 4;

/// One TX queue: `&self` methods, `Send + Sync`, fed by any number of threads.
///
/// # Call protocol
/// * Offer packets from any thread with [`TxQueue::enqueue_burst`] (one lock per burst,
///   packets classified only when the queue needs their meta, a bypassed burst handed over
///   whole) or [`TxQueue::enqueue`] (one packet). Packets that took the bypass must be
///   transmitted before the next call into this queue.
/// * Then call [`TxQueue::run`] from the same thread (after a burst, only when its
///   [`BurstOutcome::run_needed`] says so; after `enqueue`, always). Every thread that
///   offered packets must do so before it goes idle; poll-mode workers run every poll (or
///   every poll on which [`TxQueue::run_wanted`] says so), and must call `run` again at once
///   when it returns [`NextRun::Now`] or [`RunResult::Busy`] on their next poll. `run` drains the intake (at most 4 x `budget` packets), applies pending
///   configuration, syncs the rate when due, dequeues what the shaper allows and calls
///   `transmit` with it **while it still holds the runner lock**: that is what keeps per-flow
///   order across threads, since a bypass can only happen once the previous runner's
///   packets are out.
/// * `now_ns` is the caller's monotonic clock, read once per burst; an older value than one
///   seen before is clamped. A packet that waited in the intake enters the qdisc with the
///   runner's `now_ns`, so the qdisc's sojourn time starts at the drain (the intake holds at
///   most one run's worth of packets; the qdisc's clock never goes backwards).
///
/// # Bypass (Linux `TCQ_F_CAN_BYPASS`, c4fef01ba479)
/// A packet takes the bypass only when the runner lock is free, the intake is empty and the
/// qdisc is empty (checked again under the lock), and the qdisc's
/// [`crate::Qdisc::bypass_burst`] finds shaper credit. When the lock is free but the intake is
/// not empty, the packet goes to the intake behind what waits there; when only the credit is
/// missing, it goes straight into the qdisc. Nothing is ever reordered.
///
/// # Cost
/// A burst on an idle queue: two uncontended atomic read-modify-writes per burst plus the
/// qdisc's bypass (for the FIFO: one check and a sum of the lengths per burst, no parse, no
/// packet moved). A queued packet: one intake push and pop (one CAS
/// each) plus the qdisc's enqueue and dequeue. Shared cache lines of other queues are read
/// once per sync interval; this queue's own are written once per run.
pub struct TxQueue<P, Q> {
    intake: IntakeRing<(P, PacketMeta)>,
    runner: RunnerLock<Runner<P, Q>>,
    shared: Arc<SharedRate>,
    index: usize,
    bypass: bool,
    intake_full: CachePadded<AtomicU64>,
    published: CachePadded<Published>,
    /// A `Q::Config` waiting for the runner (boxed so the struct needs no trait bounds).
    pending: Mutex<Option<Box<dyn Any + Send>>>,
    pending_flag: AtomicBool,
    /// Reads of the qdisc waiting for the runner ([`TxQueue::request_read`]), by ticket.
    reads: Mutex<Reads<Q>>,
    reads_flag: AtomicBool,
    _q: PhantomData<fn() -> Q>,
}

/// A read of the qdisc that its runner makes between two runs ([`TxQueue::request_read`]).
pub type QdiscRead<Q> = Box<dyn FnOnce(&mut Q) + Send>;

/// The reads waiting for a queue's runner and the next ticket to give.
struct Reads<Q> {
    waiting: Vec<(u64, QdiscRead<Q>)>,
    next_ticket: u64,
}

/// The runner's counters as other threads see them.
#[derive(Default)]
struct Published {
    enqueued: AtomicU64,
    bypassed: AtomicU64,
    qdisc_drops: [AtomicU64; DropReason::ALL.len()],
    dequeue_drops: AtomicU64,
    dequeued: AtomicU64,
    sent_bytes: AtomicU64,
    syncs: AtomicU64,
    active_queues: AtomicU32,
    share_bps: AtomicU64,
    qlen: AtomicU64,
    /// When the runner last synced, and the `SharedRate` generation it applied then (for
    /// [`TxQueue::run_wanted`]).
    last_sync_ns: AtomicU64,
    generation: AtomicU64,
}

/// Everything only the lock holder touches.
struct Runner<P, Q> {
    qdisc: Q,
    counters: Counters,
    sync: SyncState,
    /// The last dequeue spent its whole budget with more ready to send: the runner is
    /// behind (its CPU, not the shaper, limits the queue).
    behind: bool,
    _p: PhantomData<fn(P)>,
}

#[derive(Default, Clone, Copy)]
struct Counters {
    enqueued: u64,
    bypassed: u64,
    qdisc_drops: [u64; DropReason::ALL.len()],
    /// Drops counted in `qdisc_drops` (at enqueue, and by a reconfigure's purge); the rest
    /// of what left the qdisc without being dequeued is the AQM's.
    reasoned_drops: u64,
    dequeued: u64,
    sent_bytes: u64,
    syncs: u64,
    active_queues: u32,
    share_bps: u64,
}

struct SyncState {
    /// Time of the last sync (cake_mq's `last_checked_active`).
    last_check_ns: u64,
    /// False until the first sync: the first window has no start.
    synced_once: bool,
    /// Bytes delivered since the last sync.
    window_bytes: u64,
    /// `SharedRate` generation applied.
    generation: u64,
    /// Forces a sync at the next run (after a reconfigure).
    force: bool,
    /// Newest `now_ns` seen; older values are clamped to it.
    now_ns: u64,
    /// Bytes delivered as of the last publish of `last_active_ns`.
    published_bytes: u64,
    /// Backlog bytes as of the last publish.
    published_backlog: u64,
    /// When the counters were last published.
    counters_published_ns: u64,
    /// Delivered bytes and elapsed time, each decayed over `SPARSE_HORIZON_NS`: their ratio
    /// is the queue's long-run rate.
    average_bytes: u64,
    average_ns: u64,
    /// The same over `FAST_HORIZON_NS`.
    recent_bytes: u64,
    recent_ns: u64,
}

impl<P: Packet + Send, Q: MqQdisc<P>> TxQueue<P, Q> {
    /// A queue of its own (not shared with siblings) around `qdisc`, shaping to `qdisc`'s rate.
    pub fn new(qdisc: Q, options: TxQueueOptions) -> TxQueue<P, Q> {
        let shared = Arc::new(SharedRate::new(1, qdisc.rate(), options.sync));
        TxQueue::with_shared(qdisc, options, shared, 0)
    }

    /// Queue `index` of the queues sharing `shared`.
    ///
    /// # Panics
    /// When `index` is not below `shared.queues()` (a programming error).
    pub fn with_shared(
        qdisc: Q,
        options: TxQueueOptions,
        shared: Arc<SharedRate>,
        index: usize,
    ) -> TxQueue<P, Q> {
        assert!(index < shared.queues(), "queue index {index} out of range");
        let share = qdisc.rate().bytes_per_sec();
        TxQueue {
            intake: IntakeRing::new(options.intake_capacity),
            runner: RunnerLock::new(Runner {
                qdisc,
                counters: Counters {
                    share_bps: share,
                    active_queues: 1,
                    ..Counters::default()
                },
                sync: SyncState {
                    last_check_ns: 0,
                    synced_once: false,
                    window_bytes: 0,
                    generation: u64::MAX,
                    force: true,
                    now_ns: 0,
                    published_bytes: 0,
                    published_backlog: 0,
                    counters_published_ns: 0,
                    average_bytes: 0,
                    average_ns: 0,
                    recent_bytes: 0,
                    recent_ns: 0,
                },
                behind: false,
                _p: PhantomData,
            }),
            shared,
            index,
            bypass: options.bypass,
            intake_full: CachePadded::new(AtomicU64::new(0)),
            published: CachePadded::new(Published {
                // Matches `SyncState::generation`: no generation applied yet.
                generation: AtomicU64::new(u64::MAX),
                ..Published::default()
            }),
            pending: Mutex::new(None),
            pending_flag: AtomicBool::new(false),
            reads: Mutex::new(Reads {
                waiting: Vec::new(),
                next_ticket: 0,
            }),
            reads_flag: AtomicBool::new(false),
            _q: PhantomData,
        }
    }

    /// Offers one packet. See the type's call protocol.
    pub fn enqueue(&self, now_ns: u64, pkt: P, meta: &PacketMeta) -> Intake<P> {
        if self.bypass
            && self.runner.is_idle()
            && self.activity_backlog() == 0
            && self.intake.is_empty()
        {
            if let Some(mut guard) = self.runner.try_lock_idle() {
                return guard.with(|r| {
                    let now_ns = r.sync.clamp(now_ns);
                    if !self.intake.is_empty() {
                        // Another producer got there first: queue behind it, in order.
                        return self.push_intake(pkt, meta);
                    }
                    if r.qdisc.is_empty() && r.qdisc.try_bypass(now_ns, &pkt, meta) {
                        let mut pkt = pkt;
                        r.qdisc.rewrite_passed(
                            std::slice::from_mut(&mut pkt),
                            std::slice::from_ref(meta),
                        );
                        r.counters.bypassed += 1;
                        r.counters.sent_bytes += pkt.len() as u64;
                        return Intake::Bypass(pkt);
                    }
                    // No credit (or a backlog): straight into the qdisc, behind what it holds.
                    r.enqueue_one(now_ns, pkt, meta);
                    self.publish_backlog(r);
                    Intake::Queued
                });
            }
        }
        self.push_intake(pkt, meta)
    }

    fn push_intake(&self, pkt: P, meta: &PacketMeta) -> Intake<P> {
        match self.intake.push((pkt, *meta)) {
            Ok(()) => Intake::Queued,
            Err((pkt, _)) => {
                self.intake_full.fetch_add(1, Ordering::Relaxed);
                Intake::Dropped(DropReason::IntakeFull, pkt)
            }
        }
    }

    /// Offers a burst, taking the runner lock once for all of it (two atomic operations per
    /// burst instead of per packet), classifying packets only when needed and handing the
    /// bypassed ones over without moving them one by one: the engine's path.
    ///
    /// * `classify(pkt, meta)` writes `metas[i]` for `pkts[i]`. It is called at most once per
    ///   packet, before that meta is read: for every packet when the qdisc's bypass reads the
    ///   meta ([`crate::Qdisc::BYPASS_READS_META`]: CAKE), otherwise only for the packets
    ///   that are queued or dropped, so a burst that bypasses an empty FIFO is never
    ///   classified (Linux's `TCQ_F_CAN_BYPASS` does the same for pfifo_fast). A caller
    ///   that has classified the burst already passes a no-op.
    /// * When the lock is free and the intake empty, packets bypass while the qdisc stays
    ///   empty and the shaper has credit; the first one that cannot is enqueued straight
    ///   into the qdisc, with everything after it (order is kept; with the bypass disabled
    ///   every packet takes that path). A qdisc that bypasses per class
    ///   ([`crate::Qdisc::BYPASS_WHILE_BACKLOGGED`]) is offered the rest of the burst again
    ///   after each packet it queued, so only that packet's class loses the bypass. When
    ///   another thread holds the lock, or other producers' packets wait in the intake, the
    ///   burst goes to the intake behind them.
    ///   A [`Offerer::Peer`] also sends it there while the queue holds packets, and always
    ///   for a discipline that bypasses per class.
    /// * The packets that take the bypass are appended to `out`, in order, and must be
    ///   transmitted before the caller's next call into this queue. When `out` is empty and
    ///   the whole burst bypasses, the two vectors are swapped instead (no packet is moved;
    ///   `pkts` gets `out`'s buffer).
    /// * Packets the intake has no room for are dropped here (counted in
    ///   [`BurstOutcome::dropped`] and [`TxQueueStats::intake_full`]); every other packet is
    ///   queued. `pkts` is empty on return.
    ///
    /// # Panics
    /// When `metas` is shorter than `pkts` (a programming error).
    pub fn enqueue_burst<C>(
        &self,
        now_ns: u64,
        pkts: &mut Vec<P>,
        metas: &mut [PacketMeta],
        mut classify: C,
        out: &mut Vec<P>,
        offerer: Offerer,
    ) -> BurstOutcome
    where
        C: FnMut(&P, &mut PacketMeta),
    {
        let metas = &mut metas[..pkts.len()];
        let mut outcome = BurstOutcome::default();
        if offerer == Offerer::Peer
            && (Q::BYPASS_WHILE_BACKLOGGED
                || self.published.qlen.load(Ordering::Relaxed) != 0
                || !self.intake.is_empty())
        {
            self.classified_to_intake(pkts, metas, &mut classify, &mut outcome);
            return outcome;
        }
        let lazy = !<Q as crate::Qdisc<P>>::BYPASS_READS_META;
        let Some(mut guard) = self.runner.try_lock() else {
            self.classified_to_intake(pkts, metas, &mut classify, &mut outcome);
            return outcome;
        };
        if !self.intake.is_empty() {
            // Other producers' packets wait in the intake: queue behind them, in order.
            self.classified_to_intake(pkts, metas, &mut classify, &mut outcome);
            if let Err(guard) = guard.try_unlock() {
                guard.unlock_with_missed();
            }
            return outcome;
        }
        let pending = guard.with(|r| {
            let now_ns = r.sync.clamp(now_ns);
            if !lazy {
                // Classified under the lock, so that the discipline's prefetch can start on
                // each packet as soon as its class is known (a circuit's state is cold: its
                // first loads get the classification of the packets after it to arrive in).
                for i in 0..metas.len() {
                    classify(&pkts[i], &mut metas[i]);
                    r.qdisc.prefetch_classified(metas, i);
                }
            }
            // The offers hinted so far (`Qdisc::prefetch_before_offer`): each packet's hint
            // comes before it is passed or queued, those passed at once by a bypass right
            // after it.
            let mut hinted = 0;
            hint_offers(lazy, &r.qdisc, metas, &mut hinted, 1);
            let done = if self.bypass
                && (<Q as crate::Qdisc<P>>::BYPASS_WHILE_BACKLOGGED || r.qdisc.is_empty())
            {
                r.qdisc.bypass_burst(now_ns, pkts, metas)
            } else {
                crate::BurstBypass::default()
            };
            let first = done.packets.min(pkts.len());
            if first > 0 {
                r.qdisc.rewrite_passed(&mut pkts[..first], &metas[..first]);
            }
            hint_offers(lazy, &r.qdisc, metas, &mut hinted, first + 1);
            let (mut passed, mut passed_bytes, mut queued_bytes) = (first, done.bytes, 0u64);
            if first == pkts.len() || !(self.bypass && Q::BYPASS_WHILE_BACKLOGGED) {
                for (i, pkt) in (first..).zip(pkts.drain(first..)) {
                    if lazy {
                        classify(&pkt, &mut metas[i]);
                    }
                    hint_offers(lazy, &r.qdisc, metas, &mut hinted, i + 1);
                    queued_bytes += pkt.len() as u64;
                    r.enqueue_one(now_ns, pkt, &metas[i]);
                }
                if out.is_empty() {
                    std::mem::swap(pkts, out);
                } else {
                    out.append(pkts);
                }
            } else {
                // A discipline that bypasses per class (per circuit) only keeps order within
                // a class: the packet that could not pass is queued, so its class is
                // backlogged, and the rest of the burst is offered again (a later packet of
                // that class then cannot pass; one of another class still can).
                out.extend(pkts.drain(..first));
                let mut rest = pkts.drain(..);
                let mut i = first;
                while let Some(pkt) = rest.next() {
                    if lazy {
                        classify(&pkt, &mut metas[i]);
                    }
                    queued_bytes += pkt.len() as u64;
                    r.enqueue_one(now_ns, pkt, &metas[i]);
                    i += 1;
                    hint_offers(lazy, &r.qdisc, metas, &mut hinted, i + 1);
                    let more = r.qdisc.bypass_burst(now_ns, rest.as_slice(), &metas[i..]);
                    let k = more.packets.min(rest.as_slice().len());
                    hint_offers(lazy, &r.qdisc, metas, &mut hinted, i + k + 1);
                    if k > 0 {
                        let at = out.len();
                        out.extend(rest.by_ref().take(k));
                        r.qdisc.rewrite_passed(&mut out[at..], &metas[i..i + k]);
                        i += k;
                        passed += k;
                        passed_bytes += more.bytes;
                    }
                }
            }
            outcome.bypassed = passed;
            outcome.queued = metas.len() - passed;
            outcome.bypassed_bytes = passed_bytes;
            outcome.offered_bytes = passed_bytes + queued_bytes;
            self.settle_burst(r, now_ns, passed as u64, passed_bytes)
        });
        outcome.run_needed = Self::unlock_after_burst(guard, pending);
        outcome
    }

    /// Whether a burst of `burst` packets offered now could meet an intake without room for
    /// all of it (fewer than `burst` places free, or none when the intake is smaller than a
    /// burst). A snapshot that takes no lock, for a thread that polls a receive queue for
    /// this TX queue: it can leave the packets in the receive ring instead, where the NIC
    /// holds them (or drops an overload for free), and spend the time on other queues. The
    /// intake fills while another thread holds the runner lock: a peer worker that runs the
    /// queue, or a statistics read ([`TxQueue::try_with_qdisc`]) that its own runner waits
    /// out.
    pub fn offer_would_overflow(&self, burst: usize) -> bool {
        let capacity = self.intake.capacity();
        capacity - self.intake.len().min(capacity) < burst.clamp(1, capacity)
    }

    /// The intake path of [`TxQueue::enqueue_burst`]: classifies what is not yet,
    /// pushes everything, drops what does not fit.
    fn classified_to_intake<C>(
        &self,
        pkts: &mut Vec<P>,
        metas: &mut [PacketMeta],
        classify: &mut C,
        outcome: &mut BurstOutcome,
    ) where
        C: FnMut(&P, &mut PacketMeta),
    {
        // The room is read once per burst: under overload the intake stays full, and a
        // packet it cannot take is dropped without being classified or tried (each try
        // reads the ring's indices, which the runner's pops keep moving between cores).
        // Pops only add room, so a packet within it fails only to a racing producer.
        let room = self.intake.capacity().saturating_sub(self.intake.len());
        let mut refused = 0u64;
        for (i, (pkt, meta)) in pkts.drain(..).zip(metas.iter_mut()).enumerate() {
            outcome.offered_bytes += pkt.len() as u64;
            if i >= room {
                refused += 1;
                drop(pkt);
                continue;
            }
            classify(&pkt, meta);
            match self.push_intake(pkt, meta) {
                Intake::Dropped(_, pkt) => {
                    outcome.dropped += 1;
                    drop(pkt);
                }
                _ => outcome.queued += 1,
            }
        }
        if refused > 0 {
            outcome.dropped += refused as usize;
            self.intake_full.fetch_add(refused, Ordering::Relaxed);
        }
        outcome.run_needed = true;
    }

    /// The bookkeeping at the end of a burst offered under the runner lock: counts the
    /// bypass, syncs and publishes when due (a queue that only ever bypasses must still
    /// sync and publish its activity), otherwise keeps the counters a skipped run would
    /// publish current. Returns whether a run is needed.
    fn settle_burst(
        &self,
        r: &mut Runner<P, Q>,
        now_ns: u64,
        bypassed: u64,
        bypassed_bytes: u64,
    ) -> bool {
        r.counters.bypassed += bypassed;
        r.counters.sent_bytes += bypassed_bytes;
        let interval = self.shared.sync_interval_ns();
        if bypassed > 0 && now_ns.saturating_sub(r.sync.last_check_ns) >= interval {
            // The burst's bytes, delivered at `now_ns`, reach the window in `publish`, after
            // the sync closed it: they count in the next window. `run` does the same with
            // what it dequeues after its sync, so every window holds the bytes of
            // [start, end) and none is counted twice or lost.
            self.sync_if_due(r, now_ns);
            self.publish(r, now_ns);
        } else {
            self.publish_backlog(r);
            if now_ns.saturating_sub(r.sync.counters_published_ns) >= interval {
                // While the shaper waits (a low rate, or a long wait still to come) the
                // engine skips this queue's runs, so nothing else publishes what bursts did
                // to it: drops would show only once the wait is over. At most once per sync
                // interval, so a busy queue pays nothing per burst.
                self.publish_counters(r);
                r.sync.counters_published_ns = now_ns;
            }
            if bypassed > 0 {
                // The caller may skip its run (see `run_wanted`): publish what a run would
                // have, the delivery time included, which siblings' syncs read to count
                // this queue as active.
                self.note_delivery(r, now_ns);
                let p = &self.published;
                p.bypassed.store(r.counters.bypassed, Ordering::Relaxed);
                p.sent_bytes.store(r.counters.sent_bytes, Ordering::Relaxed);
            }
        }
        let run_needed = !r.qdisc.is_empty() || self.pending_flag.load(Ordering::Relaxed);
        if !run_needed && r.counters.enqueued != self.published.enqueued.load(Ordering::Relaxed) {
            // Packets went into the qdisc and none is left: it dropped them all (a packet
            // over the memory limit, say). No run follows to publish that, so do it here.
            self.publish_counters(r);
        }
        run_needed
    }

    /// Lets go of the runner lock after a burst; returns whether the caller must run.
    fn unlock_after_burst(
        guard: super::sync::RunnerGuard<'_, Runner<P, Q>>,
        pending: bool,
    ) -> bool {
        match guard.try_unlock() {
            Ok(()) => pending,
            Err(guard) => {
                // A run lost the race to this burst: leave MISSED for our caller's run.
                guard.unlock_with_missed();
                true
            }
        }
    }

    /// Runs the queue if no other thread does: drains the intake, applies pending
    /// configuration, syncs the rate when due, dequeues up to `budget` packets into `out` and
    /// calls `transmit(out)` under the runner lock. `transmit` takes what it sent out of `out`;
    /// anything it leaves stays there for the caller.
    pub fn run<F>(&self, now_ns: u64, budget: usize, out: &mut Vec<P>, mut transmit: F) -> RunResult
    where
        F: FnMut(&mut Vec<P>),
    {
        let Some(mut guard) = self.runner.lock_or_flag_missed() else {
            return RunResult::Busy;
        };
        let mut sent = 0;
        let mut drained = 0;
        let mut rounds = 0;
        loop {
            let next = guard.with(|r| {
                let now_ns = r.sync.clamp(now_ns);
                self.apply_pending(r);
                if rounds == 0 {
                    self.serve_reads(r);
                }
                // Bounded like Linux's quota, but several dequeue budgets' worth: packets
                // that wait in the intake are past the qdisc's flow-fair drops (a full
                // intake drops whatever arrives next), so the intake should only buffer
                // between runs. Only a CPU overload that outpaces these drains fills it,
                // and then it drops at the intake, before the qdisc's costlier drops.
                // While the runner is behind, though, it takes in no more than it can send:
                // the qdisc would only grow (every packet an enqueue and a costlier drop,
                // COBALT's or the limit's), and the intake's drops are the cheap ones, on
                // the offering core. Behind on two workers flat out, a queue fed four
                // budgets a run from its peer's intake and sending one grew to the packet
                // limit and forwarded a quarter of what its sibling did.
                let drain_limit = if r.behind {
                    budget
                } else {
                    budget.saturating_mul(INTAKE_DRAINS_PER_BUDGET)
                };
                drained += self.drain_intake(r, now_ns, drain_limit.saturating_sub(drained));
                self.sync_if_due(r, now_ns);
                let before = out.len();
                let want = budget.saturating_sub(sent);
                let mut next = r.dequeue_into(now_ns, want, out);
                let added = out.len() - before;
                r.behind = want > 0 && added == want && next == NextRun::Now;
                sent += added;
                if added > 0 {
                    transmit(out);
                }
                self.publish(r, now_ns);
                if next != NextRun::Now && !self.intake.is_empty() {
                    next = NextRun::Now;
                }
                next
            });
            match guard.try_unlock() {
                Ok(()) => return RunResult::Ran { sent, next },
                Err(g) => {
                    guard = g;
                    rounds += 1;
                    if rounds >= MAX_MISSED_ROUNDS
                        || sent >= budget
                        || drained >= budget.saturating_mul(INTAKE_DRAINS_PER_BUDGET)
                    {
                        guard.unlock_with_missed();
                        return RunResult::Ran {
                            sent,
                            next: NextRun::Now,
                        };
                    }
                }
            }
        }
    }

    /// Whether [`TxQueue::run`] at `now_ns` has anything to do: packets in the intake or the
    /// qdisc, a configuration to apply, a rate sync due, or a MISSED flag (or a holder) on
    /// the runner lock. Takes no lock and only reads atomics, so a poll-mode thread that is
    /// this queue's runner may skip the run when it says no: everything that makes it say
    /// yes again is visible to that thread's next poll. After a skipped run the counters
    /// in [`TxQueue::stats`] are still current (the burst paths publish what they change).
    pub fn run_wanted(&self, now_ns: u64) -> bool {
        let p = &self.published;
        !self.runner.is_idle()
            || !self.intake.is_empty()
            || p.qlen.load(Ordering::Relaxed) != 0
            || self.pending_flag.load(Ordering::Relaxed)
            || self.reads_flag.load(Ordering::Relaxed)
            || p.generation.load(Ordering::Relaxed) != self.shared.generation()
            || now_ns.saturating_sub(p.last_sync_ns.load(Ordering::Relaxed))
                >= self.shared.sync_interval_ns()
    }

    /// Whether a run has work that must not wait for the qdisc's next send time: packets in
    /// the intake (the qdisc, not the intake, must choose what to drop, and later offers
    /// queue behind them there), a configuration to apply, a read waiting (its reader
    /// waits too), a rate change, or (with siblings to share with) a sync due at `now_ns`,
    /// which may grow this queue's share. A rate change moves the next send time: the
    /// qdisc rescales the wait still pending to the new rate, so a raised rate or a grown
    /// share takes effect at once. A worker that skips runs until that time runs at once
    /// when this says so; [`TxQueue::run_wanted`] still decides whether there is anything
    /// at all.
    pub fn run_urgent(&self, now_ns: u64) -> bool {
        let p = &self.published;
        !self.intake.is_empty()
            || self.pending_flag.load(Ordering::Relaxed)
            || self.reads_flag.load(Ordering::Relaxed)
            || p.generation.load(Ordering::Relaxed) != self.shared.generation()
            || (self.shared.queues() > 1
                && now_ns.saturating_sub(p.last_sync_ns.load(Ordering::Relaxed))
                    >= self.shared.sync_interval_ns())
    }

    /// Changes this queue's global rate (all siblings of its [`SharedRate`] follow); runners
    /// apply it at their next run through `set_rate`, never purging anything.
    pub fn set_rate(&self, rate: Rate) {
        self.shared.set_rate(rate);
    }

    /// Asks the runner to apply `config` at its next run (a safe point between dequeues). The
    /// global rate is not changed here: use [`super::MultiQueue::reconfigure`] or
    /// [`TxQueue::set_rate`] for that.
    ///
    /// # Errors
    /// When `Q` refuses `config`; nothing is queued then.
    pub fn request_reconfigure(&self, config: Q::Config) -> Result<(), Q::Error> {
        Q::validate(&config)?;
        let mut slot = self.pending.lock().expect("config slot poisoned");
        *slot = Some(Box::new(config));
        self.pending_flag.store(true, Ordering::Release);
        Ok(())
    }

    /// Hands `read` to the runner, which calls it on the qdisc at the start of a run, between
    /// dequeues (one read per run, oldest first); until then the queue counts as having
    /// urgent work ([`TxQueue::run_wanted`], [`TxQueue::run_urgent`]). Returns a ticket for
    /// [`TxQueue::withdraw_read`].
    ///
    /// For a read from a thread that is not the queue's runner: [`TxQueue::try_with_qdisc`]
    /// holds the runner lock from that thread, and a thread that the scheduler preempts while
    /// it holds the lock (a control thread on a shared core, say) stalls the queue for as long
    /// as it is off its core; the runner's own thread does the same read without that risk.
    pub fn request_read(&self, read: QdiscRead<Q>) -> u64 {
        let mut reads = self.reads.lock().expect("read slot poisoned");
        let ticket = reads.next_ticket;
        reads.next_ticket += 1;
        reads.waiting.push((ticket, read));
        self.reads_flag.store(true, Ordering::Release);
        ticket
    }

    /// Takes back the read of `ticket` if the runner has not started it; false when it has
    /// (it is being made or done), or the ticket is unknown.
    pub fn withdraw_read(&self, ticket: u64) -> bool {
        let mut reads = self.reads.lock().expect("read slot poisoned");
        let Some(at) = reads.waiting.iter().position(|(t, _)| *t == ticket) else {
            return false;
        };
        drop(reads.waiting.remove(at));
        if reads.waiting.is_empty() {
            self.reads_flag.store(false, Ordering::Relaxed);
        }
        true
    }

    /// Counters as of the last run (intake drops are live).
    pub fn stats(&self) -> TxQueueStats {
        let p = &self.published;
        let mut qdisc_drops = [0; DropReason::ALL.len()];
        for (d, a) in qdisc_drops.iter_mut().zip(&p.qdisc_drops) {
            *d = a.load(Ordering::Relaxed);
        }
        TxQueueStats {
            enqueued: p.enqueued.load(Ordering::Relaxed),
            bypassed: p.bypassed.load(Ordering::Relaxed),
            intake_full: self.intake_full.load(Ordering::Relaxed),
            qdisc_drops,
            dequeue_drops: p.dequeue_drops.load(Ordering::Relaxed),
            dequeued: p.dequeued.load(Ordering::Relaxed),
            sent_bytes: p.sent_bytes.load(Ordering::Relaxed),
            syncs: p.syncs.load(Ordering::Relaxed),
            active_queues: p.active_queues.load(Ordering::Relaxed),
            share: Rate::from_bytes_per_sec(p.share_bps.load(Ordering::Relaxed)),
        }
    }

    /// Packets waiting: in the intake now, plus in the qdisc as of the last run or offer.
    pub fn backlog(&self) -> usize {
        self.intake.len() + self.published.qlen.load(Ordering::Relaxed) as usize
    }

    /// Bytes in the qdisc as of the last run.
    pub fn backlog_bytes(&self) -> u64 {
        self.activity_backlog()
    }

    /// Capacity of the intake.
    pub fn intake_capacity(&self) -> usize {
        self.intake.capacity()
    }

    /// This queue's index in its [`SharedRate`].
    pub fn index(&self) -> usize {
        self.index
    }

    /// The rate state shared with the sibling queues.
    pub fn shared(&self) -> &Arc<SharedRate> {
        &self.shared
    }

    /// Runs `f` on the qdisc when no runner holds the queue (for statistics and tests);
    /// returns `None` when the queue is busy. A `run` that loses the race to this call sees
    /// `Busy` and leaves its work for the next run.
    pub fn try_with_qdisc<R>(&self, f: impl FnOnce(&mut Q) -> R) -> Option<R> {
        let mut guard = self.runner.try_lock_idle()?;
        Some(guard.with(|r| f(&mut r.qdisc)))
    }
}

/// Gives [`crate::Qdisc::prefetch_before_offer`] for the offers `*hinted..end` of a burst
/// whose classification the discipline's prefetch has seen; nothing when the burst is
/// classified `lazy`ly, one packet at a time as it is offered (no prefetch saw it).
#[inline(always)]
fn hint_offers<P: crate::Packet, Q: crate::Qdisc<P>>(
    lazy: bool,
    qdisc: &Q,
    metas: &[PacketMeta],
    hinted: &mut usize,
    end: usize,
) {
    if lazy {
        return;
    }
    while *hinted < end.min(metas.len()) {
        qdisc.prefetch_before_offer(metas, *hinted);
        *hinted += 1;
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
