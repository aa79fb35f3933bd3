//! Sans-I/O queueing disciplines for cakewalk: one CAKE instance ([`cake::Cake`]), one CAKE
//! per subscriber under a link cap ([`circuit::CircuitShaper`], docs/design.md "Circuits:
//! one CAKE per subscriber"), the cake_mq multi-queue layer ([`mq`]), rate trees that share
//! node caps among many shapers ([`rate_tree`]) and a pfifo_fast-style baseline
//! ([`fifo::Fifo`]).
//!
//! Nothing here reads a clock, starts a thread or allocates per packet. Every call that needs
//! time takes `now_ns`, a monotonic nanosecond count chosen by the caller; header facts arrive
//! already parsed in a [`PacketMeta`]. That keeps the crate deterministic: virtual-time tests
//! run ten simulated seconds of a 1 Gbit/s shaper in milliseconds, and a replay of the same
//! calls gives the same output.
//!
//! # Call protocol
//! * `now_ns` must not go backwards between calls on one instance; an older value is clamped to
//!   the newest seen.
//! * [`Qdisc::enqueue`] and [`Qdisc::dequeue`] may interleave freely on one thread. Sharing an
//!   instance between threads is the job of [`mq::TxQueue`].
//! * A rate-only change ([`Qdisc::set_rate`]) is a pure parameter write: it never purges
//!   queues, moves the dequeue cursors or walks the flow tables (docs/design.md, "cake_mq").
#![deny(unsafe_code)]

pub mod cake;
pub mod circuit;
pub mod fifo;
pub mod mq;
mod packet;
mod rate;
pub mod rate_tree;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use cake::{Cake, CakeConfig};
pub use packet::{FlowKeys, L3Kind, Packet, PacketMeta, TcpAckInfo};
pub use rate::Rate;

/// What [`Qdisc::dequeue`] produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Dequeue<P> {
    /// A packet to transmit now.
    Packet(P),
    /// Nothing is queued.
    Empty,
    /// Packets are queued but the shaper holds them until this time (ns).
    NotBefore(u64),
}

/// Why a packet was dropped. Every drop in cakewalk is counted under one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// COBALT (CoDel or BLUE) decided to drop.
    Aqm,
    /// The memory or packet limit was exceeded (drop from the fattest flow, or FIFO tail drop),
    /// or a reconfigure removed the tin the packet waited in (CAKE's purge): in both the
    /// queue had no room left for the packet, and neither is the AQM's decision.
    Overflow,
    /// The ACK filter replaced this ACK with a newer one.
    AckFilter,
    /// The lock-free intake of a TX queue was full.
    IntakeFull,
    /// A packet the shaper let out could not reach the port (in the forwarder: a bypassed
    /// packet whose handoff to the core that owns the port was full).
    TxFull,
    /// The frame could not be parsed (forwarded anyway as non-IP; counted here only if dropped).
    Malformed,
    /// The port took the frame but could not send it, for good: larger than the egress MTU,
    /// interface down, the interface's own kernel qdisc full, or a capture file that failed
    /// to write. Counted as dropped, not transmitted.
    TxRefused,
}

impl DropReason {
    /// All reasons, in display order.
    pub const ALL: [DropReason; 7] = [
        DropReason::Aqm,
        DropReason::Overflow,
        DropReason::AckFilter,
        DropReason::IntakeFull,
        DropReason::TxFull,
        DropReason::Malformed,
        DropReason::TxRefused,
    ];

    /// This reason's position in [`DropReason::ALL`], for per-reason counter arrays.
    pub const fn index(self) -> usize {
        match self {
            DropReason::Aqm => 0,
            DropReason::Overflow => 1,
            DropReason::AckFilter => 2,
            DropReason::IntakeFull => 3,
            DropReason::TxFull => 4,
            DropReason::Malformed => 5,
            DropReason::TxRefused => 6,
        }
    }

    /// Short snake_case name used in stats output and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::Aqm => "aqm",
            DropReason::Overflow => "overflow",
            DropReason::AckFilter => "ack_filter",
            DropReason::IntakeFull => "intake_full",
            DropReason::TxFull => "tx_full",
            DropReason::Malformed => "malformed",
            DropReason::TxRefused => "tx_refused",
        }
    }
}

/// Marks the branch that calls it as rarely taken, so that LLVM lays out the other side as
/// the straight-line path. On the packet path every taken branch redirects instruction
/// fetch, and those redirects, more than the instruction count, set the pace of the goal
/// benchmark (docs/performance-notes.md, "Rare branches marked cold"). An empty out-of-line `#[cold]` function:
/// the polyfill of `core::hint::cold_path` for the crate's minimum Rust version.
#[cold]
#[inline(never)]
pub(crate) fn cold_path() {}

/// The result of [`Qdisc::enqueue`]. Drops caused by the enqueue (of this packet or of
/// another one, such as the head of the fattest flow) are reported so the caller can keep
/// conservation exact: `in = out + dropped + queued`.
///
/// Sixteen bytes, so that it comes back in two registers: at 24 (a `u32` ACK count) it was
/// returned through memory, and its seven bytes of padding were copied with overlapping
/// moves whose loads could not be forwarded from the stores before them; each enqueue then
/// waited for every store it had made to cold lines to complete (a fifth of a subscriber
/// enqueue's time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Enqueued {
    /// Bytes (wire length) dropped by this call.
    pub dropped_bytes: u64,
    /// Packets dropped by this call (possibly including the one just offered).
    pub dropped_packets: u32,
    /// Of `dropped_packets`, the ACKs that the ACK filter replaced by a newer one (at most
    /// one per enqueue). One enqueue can both filter an ACK and overflow; the caller counts
    /// each under its own reason (see [`Enqueued::drops_by_reason`]).
    pub ack_filtered: u16,
    /// The reason for those drops that are not `ack_filtered`; [`DropReason::AckFilter`]
    /// when the ACK filter made every drop; `None` when nothing was dropped.
    pub reason: Option<DropReason>,
}

// The size its docs promise: two registers.
const _: () = assert!(std::mem::size_of::<Enqueued>() == 16);

impl Enqueued {
    /// The drops of this call split by reason: `(reason, packets)` for the ACK filter's and
    /// for the rest, each only when non-zero.
    pub fn drops_by_reason(&self) -> impl Iterator<Item = (DropReason, u32)> {
        let filtered = u32::from(self.ack_filtered).min(self.dropped_packets);
        let rest = self.dropped_packets - filtered;
        let rest_reason = self.reason.unwrap_or(DropReason::Overflow);
        [(DropReason::AckFilter, filtered), (rest_reason, rest)]
            .into_iter()
            .filter(|&(_, n)| n > 0)
    }
}

/// What [`Qdisc::bypass_burst`] let through: the first `packets` packets of the burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BurstBypass {
    /// Packets bypassed, from the front of the burst.
    pub packets: usize,
    /// Their bytes ([`Packet::len`]).
    pub bytes: u64,
}

/// What every queueing discipline in this crate offers to [`mq::TxQueue`] and the engine.
pub trait Qdisc<P: Packet> {
    /// Whether the bypass ([`Qdisc::bypass_burst`]) reads the [`PacketMeta`]. CAKE does
    /// (the tin and its statistics); the FIFO does not (it bypasses whenever it is empty), so
    /// a caller may leave the metas of a burst that bypasses it unwritten, as Linux never
    /// classifies a packet that bypasses an empty pfifo_fast (`TCQ_F_CAN_BYPASS`).
    const BYPASS_READS_META: bool = true;

    /// Whether [`Qdisc::bypass_burst`] may be offered while packets are queued. False for
    /// a discipline whose bypass needs the whole queue empty (CAKE, the FIFO: [`mq::TxQueue`]
    /// then skips the call); true for one that decides per class, as
    /// [`circuit::CircuitShaper`] does per circuit (a packet passes only when its own
    /// circuit holds nothing, so no earlier packet of its flow can be waiting). Such a
    /// discipline is also offered the rest of a burst again after the packet that stopped
    /// its bypass was queued: order is kept within a class, not across classes.
    const BYPASS_WHILE_BACKLOGGED: bool = false;

    /// Queues `pkt`. Never fails; drops it causes are reported in the result.
    fn enqueue(&mut self, now_ns: u64, pkt: P, meta: &PacketMeta) -> Enqueued;

    /// A hint before a burst of classified packets is bypassed or enqueued: start loading
    /// the state their enqueues will touch, so that the cache misses of the whole burst
    /// overlap instead of coming one packet at a time. Changes nothing; the default does
    /// nothing. [`circuit::CircuitShaper`] uses it (its circuits' state is cold on arrival);
    /// a single CAKE, whose state stays cached, does not.
    #[inline]
    fn prefetch(&self, metas: &[PacketMeta]) {
        let _ = metas;
    }

    /// [`Qdisc::prefetch`] while the burst is being classified, called once for each `i`
    /// in order, after `metas[i]` (and every meta before it) was written: a discipline whose
    /// prefetch goes in dependent stages can start each packet's first stage at once and
    /// the later stages a few packets behind, so that each stage's loads have the
    /// classification of the packets in between to arrive in. By the call for the last
    /// packet every stage of the burst has been started, except what the discipline leaves
    /// to [`Qdisc::prefetch_before_offer`]. The default runs [`Qdisc::prefetch`] on the
    /// whole burst at the last packet.
    #[inline]
    fn prefetch_classified(&self, metas: &[PacketMeta], i: usize) {
        if i + 1 == metas.len() {
            self.prefetch(metas);
        }
    }

    /// After [`Qdisc::prefetch_classified`] saw the whole burst, called once for each `i`
    /// in order just before packet `i` is passed or queued: the last stages of the burst's
    /// last packets can start here, with the packets offered before them as the time for
    /// the stages before to arrive in (started at the burst's last packet, they waited on
    /// lines just asked for). A hint, changes nothing; the default does nothing.
    #[inline]
    fn prefetch_before_offer(&self, metas: &[PacketMeta], i: usize) {
        let _ = (metas, i);
    }

    /// Returns the next packet the discipline allows at `now_ns`.
    fn dequeue(&mut self, now_ns: u64) -> Dequeue<P>;

    /// Packets queued.
    fn len(&self) -> usize;

    /// Returns true when nothing is queued.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes (wire length) queued.
    fn backlog_bytes(&self) -> u64;

    /// The enqueue bypass (Linux `TCQ_F_CAN_BYPASS`) for the front of a burst: while nothing
    /// is queued and the shaper has credit at `now_ns`, charges packets to the shaper and
    /// statistics as if each had been enqueued and dequeued at once, and returns how many
    /// from the front of `pkts` it let through. The packets stay where they are: the caller
    /// transmits `pkts[..packets]` and enqueues the rest, in order. `metas[i]` is the meta of
    /// `pkts[i]`; a discipline whose [`Qdisc::BYPASS_READS_META`] is false does not read
    /// them. A discipline does its per-burst bookkeeping (clock, shaper gate, statistics)
    /// once per burst, not per packet.
    fn bypass_burst(&mut self, now_ns: u64, pkts: &[P], metas: &[PacketMeta]) -> BurstBypass;

    /// Rewrites the packets [`Qdisc::bypass_burst`] just let through as their enqueue would
    /// have (CAKE's `wash`): the caller calls it on `pkts[..packets]` before it transmits
    /// them. `metas[i]` is the meta of `pkts[i]`. The default rewrites nothing.
    #[inline]
    fn rewrite_passed(&self, _pkts: &mut [P], _metas: &[PacketMeta]) {}

    /// [`Qdisc::bypass_burst`] for one packet: true when `pkt` was let through (charged as
    /// enqueued and dequeued at once), false when nothing changed and the caller enqueues it.
    #[inline]
    fn try_bypass(&mut self, now_ns: u64, pkt: &P, meta: &PacketMeta) -> bool {
        let one = self.bypass_burst(
            now_ns,
            std::slice::from_ref(pkt),
            std::slice::from_ref(meta),
        );
        one.packets == 1
    }

    /// Rate-only update: a pure parameter write (no purge, no cursor move, no table walk).
    fn set_rate(&mut self, rate: Rate);

    /// The configured (unshared) rate; `Rate::UNLIMITED` when not shaping.
    fn rate(&self) -> Rate;

    /// When the shaper will next allow a packet, if something is queued and held back.
    fn next_wakeup(&self) -> Option<u64>;
}

#[cfg(test)]
mod tests {
    use super::{DropReason, Enqueued};

    #[test]
    fn every_drop_reason_indexes_its_place_in_all() {
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i, "{r:?}");
        }
    }

    #[test]
    fn an_enqueue_that_filters_an_ack_and_overflows_reports_each_drop_under_its_reason() {
        let both = Enqueued {
            dropped_packets: 3,
            dropped_bytes: 1066,
            reason: Some(DropReason::Overflow),
            ack_filtered: 1,
        };
        let split: Vec<_> = both.drops_by_reason().collect();
        assert_eq!(
            split,
            [(DropReason::AckFilter, 1), (DropReason::Overflow, 2)]
        );
        let only_acks = Enqueued {
            dropped_packets: 1,
            dropped_bytes: 66,
            reason: Some(DropReason::AckFilter),
            ack_filtered: 1,
        };
        assert_eq!(
            only_acks.drops_by_reason().collect::<Vec<_>>(),
            [(DropReason::AckFilter, 1)]
        );
        assert_eq!(Enqueued::default().drops_by_reason().count(), 0);
    }
}
