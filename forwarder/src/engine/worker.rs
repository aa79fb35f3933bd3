//! One worker thread of the engine: its loop (receive a burst from each of its receive
//! queues, classify it, offer it to its TX queues; run the queues it owns and transmit what
//! they release and what other workers handed over), its drain at stop, and its idle wait.
//! It writes only its own counter block.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_queue::ArrayQueue;
use qdisc::mq::{NextRun, Offerer, RunResult};
use qdisc::{DropReason, PacketMeta};

use super::{
    EngineShared, IdleMode, Shaper, Shapers, WorkerHook, DRAINING, RUNNING, STOPPED, WORKER_DONE,
};
use circuits::publish::{Published, Reader};
use circuits::Lpm;

use crate::classify::Side;
use crate::clock;
use crate::counters::{egress, port, Layout};
use crate::port::{PortBuf, PortRx, PortTx};

pub(super) struct RxSlot<P> {
    pub(super) rx: Box<dyn PortRx<Buf = P>>,
    pub(super) port: usize,
    pub(super) out: usize,
    /// The one egress every packet of this slot goes to ([`TxSelect::Worker`], or a port with
    /// one TX queue); `None`: by flow hash.
    pub(super) egress: Option<usize>,
    /// Which address names the subscriber of what this slot receives (`None`: its
    /// direction has no circuits).
    pub(super) side: Option<Side>,
    pub(super) finished: bool,
}

/// A worker's view of the circuit prefix table: its own `Arc`, refreshed once per receive
/// phase with one atomic load, so that a lookup never takes a lock.
pub(super) struct WorkerCircuits {
    pub(super) table: Arc<Published<Lpm>>,
    pub(super) reader: Reader<Lpm>,
    /// Unmatched packets all go to the first TX queue (see `CircuitTables`).
    pub(super) unmatched_one_queue: bool,
}

pub(super) struct TxSlot<P> {
    pub(super) tx: Box<dyn PortTx<Buf = P>>,
    pub(super) egress: usize,
    pub(super) pending: Vec<P>,
    /// The bytes in `pending`, kept as packets come and go so that a transmit need not sum
    /// them (a bypassed burst's bytes come with it from the queue).
    pub(super) pending_bytes: u64,
    /// The shaper said it holds its packets until this time: no point running it before.
    pub(super) due_ns: u64,
    /// The last run spent its whole budget and had more to send at once: this worker is
    /// behind on the queue (a CPU overload, not a shaper holding packets back).
    pub(super) behind: bool,
}

/// A worker's per-burst buffers, allocated once.
pub(super) struct Buffers<P> {
    /// As long as a transmit burst: a burst that bypasses whole swaps buffers with one.
    pub(super) burst: Vec<P>,
    /// Scratch metas for sorting a burst over several TX queues.
    pub(super) metas: Vec<PacketMeta>,
    pub(super) scratch: Vec<P>,
    /// Per egress, the packets of the burst being sorted to it.
    pub(super) bpkts: Vec<Vec<P>>,
    /// Always `bs` long: `bmetas[e][..bpkts[e].len()]` belong to the packets in `bpkts[e]`,
    /// so the parser can write them in place.
    pub(super) bmetas: Vec<Vec<PacketMeta>>,
}

impl<P> Buffers<P> {
    pub(super) fn new(bs: usize, egress_count: usize) -> Buffers<P> {
        Buffers {
            burst: Vec::with_capacity(bs * 4),
            metas: vec![PacketMeta::default(); bs],
            scratch: Vec::with_capacity(bs * 4),
            bpkts: (0..egress_count).map(|_| Vec::with_capacity(bs)).collect(),
            bmetas: (0..egress_count)
                .map(|_| vec![PacketMeta::default(); bs])
                .collect(),
        }
    }
}

pub(super) struct Worker<P> {
    pub(super) id: usize,
    pub(super) rx: Vec<RxSlot<P>>,
    pub(super) tx: Vec<TxSlot<P>>,
    /// Global egress index -> index in `tx` when this worker owns it.
    pub(super) owned: Vec<Option<usize>>,
    pub(super) shapers: Shapers<P>,
    /// Packets another worker got back as a bypass of a queue this worker owns.
    pub(super) handoff: Arc<Vec<ArrayQueue<P>>>,
    pub(super) shared: Arc<EngineShared>,
    pub(super) layout: Layout,
    pub(super) burst: usize,
    pub(super) idle: IdleMode,
    pub(super) core: Option<core_affinity::CoreId>,
    pub(super) hook: Option<WorkerHook>,
    pub(super) circuits: Option<WorkerCircuits>,
}

impl<P: PortBuf> Worker<P> {
    pub(super) fn run(mut self) {
        if let Some(core) = self.core {
            if !core_affinity::set_for_current(core) {
                crate::log_line!(
                    "warning: worker {} could not be pinned to core {}; it runs unpinned",
                    self.id,
                    core.id
                );
            }
        }
        let _hook_guard = self.hook.as_ref().map(|h| h(self.id));
        let bs = self.burst;
        let lp = self.layout;
        let mut local = vec![0u64; lp.len()];
        let mut b = Buffers::new(bs, lp.egress_count());
        let mut unfinished = self.rx.len();
        let mut idle_iters: u32 = 0;
        let mut busy_iters: u32 = 0;
        let shared = self.shared.clone();
        let counters = shared.counters.block(self.id);
        let mut offers_stopped = false;
        let heartbeat = &shared.heartbeats[self.id];
        let mut beat = 0u64;
        loop {
            // A store to this worker's own cache line, read by the supervisor a few times a
            // second.
            beat = (beat + 1) % WORKER_DONE;
            heartbeat.store(beat, Relaxed);
            let now = clock::now_ns();
            let state = shared.state.load(Relaxed);
            if state == STOPPED {
                break;
            }
            if state == DRAINING && !offers_stopped {
                // Release: whatever this worker offered to other workers' queues and handoffs
                // while it was still running is visible to a worker that sees this flag.
                shared.offers_stopped[self.id].store(true, Release);
                offers_stopped = true;
            }
            let mut work = 0usize;
            // The soonest time a shaper releases a held packet (u64::MAX: none holds any).
            let mut wake_at = u64::MAX;
            // Backpressure: while a port cannot take what this worker already holds for it,
            // stop receiving and let the receive rings absorb (or drop) the excess there.
            // Likewise while a queue this worker runs had more ready to send than a run's
            // budget: sending what is queued comes before taking in more (receive
            // livelock). Without it, a worker behind on its queues kept receiving at full
            // speed, its backlog grew to the packet limit, and each packet then cost an
            // enqueue and the qdisc's drop of another (flat out on two workers with 10 000
            // circuits, the worker that shared its core with the supervisor fell behind so
            // and forwarded a quarter of what the other did). A queue whose shaper holds its
            // packets is not behind: CAKE, not the receive ring, must choose what to drop.
            let backlogged = self
                .tx
                .iter()
                .any(|t| t.behind || t.pending.len() >= 2 * bs);
            if state == RUNNING && !backlogged {
                work += self.receive(now, &mut b, &mut local, &mut unfinished, &shared);
            }
            work += self.run_and_transmit(now, &mut b, &mut local, &mut wake_at);
            if work > 0 {
                // Published every few busy iterations and on the first idle one: readers
                // (stats, the final report after the last, idle, iterations) see them at
                // most microseconds late, and the stores stay off the per-burst path.
                busy_iters = busy_iters.wrapping_add(1);
                if busy_iters & 7 == 0 {
                    counters.publish(&local);
                }
                idle_iters = 0;
                continue;
            }
            if state == DRAINING {
                // Only once no worker can offer any more: a worker still in the burst it
                // received before it saw the drain could otherwise bypass into this worker's
                // handoff (or queue into its intake) just after this worker found them
                // empty and left, stranding those packets until the end.
                let quiet = shared.offers_stopped.iter().all(|f| f.load(Acquire));
                let drained = quiet
                    && self.tx.iter().all(|s| {
                        s.pending.is_empty()
                            && self.handoff[s.egress].is_empty()
                            && self.shapers[s.egress].backlog() == 0
                    });
                if drained || now >= shared.drain_deadline_ns.load(Relaxed) {
                    break;
                }
            }
            idle_iters = idle_iters.saturating_add(1);
            if idle_iters == 1 || idle_iters & 1023 == 0 {
                counters.publish(&local);
            }
            match self.idle {
                IdleMode::Spin => std::hint::spin_loop(),
                IdleMode::Sleep => {
                    // A shaper holding packets is due soon: never oversleep its release time
                    // (a late dequeue is bandwidth lost); keep polling when it is closer than
                    // a sleep's usual overshoot.
                    let until_due = wake_at.saturating_sub(now);
                    if until_due < 200_000 {
                        std::hint::spin_loop();
                    } else if idle_iters > 64 {
                        let us = (10u64 << ((idle_iters - 64) / 64).min(4)).min(until_due / 2_000);
                        std::thread::sleep(Duration::from_micros(us));
                    } else {
                        std::hint::spin_loop();
                    }
                }
            }
        }
        for slot in self.tx.iter_mut() {
            slot.tx.flush();
            local[lp.egress(slot.egress, egress::PENDING)] = slot.pending.len() as u64;
        }
        counters.publish(&local);
        heartbeat.store(WORKER_DONE, Relaxed);
        // Anything still in a transmit burst was reported as pending and is freed here.
    }

    /// The receive phase of one loop iteration: a burst from each receive queue this worker
    /// polls, classified and offered to its TX queues (sorted by flow hash when its port has
    /// several). Returns the packets received.
    #[inline(always)]
    fn receive(
        &mut self,
        now: u64,
        b: &mut Buffers<P>,
        local: &mut [u64],
        unfinished: &mut usize,
        shared: &EngineShared,
    ) -> usize {
        let bs = self.burst;
        let nq = self.layout.queues;
        let lp = self.layout;
        let mut work = 0usize;
        // A table a reload published is picked up here, once per receive phase.
        if let Some(c) = self.circuits.as_mut() {
            c.reader.refresh(&c.table);
        }
        let lpm = self.circuits.as_ref().map(|c| c.reader.get());
        let unmatched_one_queue = self
            .circuits
            .as_ref()
            .is_some_and(|c| c.unmatched_one_queue);
        for slot in self.rx.iter_mut() {
            let base = slot.out * nq;
            // The prefix table when this slot's direction has circuits.
            let circuits = lpm.zip(slot.side);
            if slot
                .egress
                .is_some_and(|e| self.shapers[e].offer_would_overflow(bs))
            {
                // This egress's intake has no room for a whole burst: part of it would be
                // dropped on arrival. Leave it in the receive ring, where the NIC holds it
                // (or drops an overload for free), and spend the time on other queues. The
                // intake fills when another worker runs this egress and lags (receive
                // livelock otherwise: measured on DPDK null devices, two workers each
                // receiving for the other's queue shaped 1 Gbit/s to a quarter of it), or
                // when a statistics read holds the runner lock of this worker's own queue:
                // flat out at 100 000 circuits, nine `ctl circuits`, `ctl circuit` and `ctl
                // circuit set` commands dropped 49 000 to 81 000 packets at the intake.
                continue;
            }
            if circuits.is_some()
                && slot.egress.is_none()
                && (base..base + nq).any(|e| self.shapers[e].offer_would_overflow(bs))
            {
                // The same with circuits steered to their queues: about half of every
                // burst goes to the other worker's queues, and with one of their intakes
                // full that half would be parsed, looked up and dropped on arrival. Flat
                // out on two workers with 10 000 circuits, those drops were a third of
                // what was received (scripts/bench-circuits-tree).
                continue;
            }
            let n = slot.rx.rx_burst(&mut b.burst, bs);
            if n == 0 {
                if !slot.finished && slot.rx.is_finished() {
                    slot.finished = true;
                    *unfinished -= 1;
                    if *unfinished == 0 {
                        shared.rx_done[self.id].store(true, Relaxed);
                    }
                }
                continue;
            }
            work += n;
            // Received bytes: the queues sum them as they take the packets.
            let mut bytes = 0u64;
            let mut malformed = 0u64;
            debug_assert!(b.burst.len() <= bs, "rx_burst returns at most bs");
            if let Some(e) = slot.egress {
                // One TX queue for the whole burst (the port has one, or this worker
                // sends on its own): nothing to sort, so the burst is offered as it
                // came and each packet is parsed only if the queue needs its meta (a
                // burst that bypasses an empty FIFO never is: Linux's
                // TCQ_F_CAN_BYPASS). MALFORMED counts the frames that were parsed.
                let mut classify = |pkt: &P, meta: &mut PacketMeta| {
                    malformed += u64::from(classify_into(pkt, meta));
                    if let Some((lpm, side)) = circuits {
                        meta.circuit = crate::classify::circuit_of(lpm, side, &meta.keys);
                    }
                };
                let offered = offer_to(
                    self.shapers[e].as_ref(),
                    now,
                    &mut b.burst,
                    &mut b.bmetas[e],
                    &mut classify,
                    self.owned[e].map(|i| &mut self.tx[i]),
                    &self.handoff[e],
                    &mut b.scratch,
                );
                bytes += offered.bytes;
                count_offer(local, lp, e, offered);
            } else {
                // The TX queue comes from the flow hash, so every packet is parsed:
                // the whole burst first, each meta written in place, then sorted by
                // queue (a meta copied right after parsing waits on its stores; see
                // `wire::parse_into`).
                for (pkt, meta) in b.burst.iter().zip(b.metas.iter_mut()) {
                    malformed += u64::from(classify_into(pkt, meta));
                }
                if let Some((lpm, side)) = circuits {
                    for meta in b.metas[..b.burst.len()].iter_mut() {
                        meta.circuit = crate::classify::circuit_of(lpm, side, &meta.keys);
                    }
                }
                // The queue's software hash stays in the meta for CAKE to reuse; a
                // circuit's packets all go to its one queue.
                for (pkt, meta) in b.burst.drain(..).zip(b.metas.iter_mut()) {
                    let q = crate::classify::assign_tx_queue(meta, nq);
                    let q = match (meta.circuit, circuits.is_some()) {
                        (Some(c), true) => crate::classify::circuit_queue(c, nq),
                        (None, true) if unmatched_one_queue => 0,
                        _ => q,
                    };
                    let e = base + q;
                    b.bmetas[e][b.bpkts[e].len()] = *meta;
                    b.bpkts[e].push(pkt);
                }
                // One offer per TX queue per burst (per-flow order is kept: a flow
                // maps to one queue).
                for e in base..base + nq {
                    if b.bpkts[e].is_empty() {
                        continue;
                    }
                    let offered = offer_to(
                        self.shapers[e].as_ref(),
                        now,
                        &mut b.bpkts[e],
                        &mut b.bmetas[e],
                        &mut |_, _| {},
                        self.owned[e].map(|i| &mut self.tx[i]),
                        &self.handoff[e],
                        &mut b.scratch,
                    );
                    bytes += offered.bytes;
                    count_offer(local, lp, e, offered);
                }
            }
            local[lp.port(slot.port, port::RX_PACKETS)] += n as u64;
            local[lp.port(slot.port, port::RX_BYTES)] += bytes;
            local[lp.port(slot.port, port::MALFORMED)] += malformed;
        }
        work
    }

    /// The transmit phase of one loop iteration: each TX queue this worker runs is run when
    /// it has work (its dequeued packets transmitted under its lock, behind what other
    /// workers handed over), then whatever waits for the port is sent. Lowers `wake_at` to
    /// the soonest time a shaper releases a held packet. Returns the packets sent or refused.
    #[inline(always)]
    fn run_and_transmit(
        &mut self,
        now: u64,
        b: &mut Buffers<P>,
        local: &mut [u64],
        wake_at: &mut u64,
    ) -> usize {
        let bs = self.burst;
        let lp = self.layout;
        let mut work = 0usize;
        for slot in self.tx.iter_mut() {
            let e = slot.egress;
            let handoff = &self.handoff[e];
            // Two bursts per run, while the receive phase adds at most one per port: a
            // queue that fell behind (its shapers held packets back for a moment) catches
            // up. With one, every packet a run left queued stayed queued under a CPU
            // overload, since each loop takes in a burst and could send no more: the
            // backlog ratcheted up to the packet limit, each packet paid an enqueue and a
            // dequeue instead of the bypass, and delay grew to tens of milliseconds
            // (scripts/bench-circuits: 10 000 circuits 0.93 -> 2.17 Mpps; one link CAKE,
            // unlimited, 5.95 -> 17.7 Mpps, its queue empty and every packet bypassed).
            // What a run leaves in `pending` stops the receive phase at two bursts.
            let room = (2 * bs).saturating_sub(slot.pending.len());
            let mut tx_pkts = 0u64;
            let mut tx_bytes = 0u64;
            let mut tx_refused = 0u64;
            // A queue with nothing to drain, dequeue, apply or sync is not run at all (its
            // lock round trip and publish would cost more than a bypassed burst). One
            // waiting for its next send time is left alone until then, unless something
            // cannot wait: packets in its intake (at a low rate the wait is seconds, and
            // they would fill the intake and be dropped there, not by CAKE), a change, or
            // a rate change or sync that the qdisc meets by rescaling the wait.
            let due = now >= slot.due_ns || self.shapers[e].run_urgent(now);
            slot.behind = false;
            if room > 0 && due && self.shapers[e].run_wanted(now) {
                // `out[kept..]` is what the run added since the last transmit (a run may
                // transmit more than once, and each transmit may leave some behind).
                let mut kept = slot.pending.len();
                let port_tx = &mut slot.tx;
                let pending_bytes = &mut slot.pending_bytes;
                let r = self.shapers[e].run(now, room, &mut slot.pending, &mut |out| {
                    let fresh = kept.min(out.len());
                    // Packets other workers bypassed went out of the queue before
                    // anything dequeued now: put them in front of it.
                    if !handoff.is_empty() {
                        b.scratch.extend(out.drain(fresh..));
                        while let Some(p) = handoff.pop() {
                            out.push(p);
                        }
                        out.append(&mut b.scratch);
                    }
                    *pending_bytes += out[fresh..].iter().map(|p| p.len() as u64).sum::<u64>();
                    let (n, b, r) = transmit(port_tx.as_mut(), out, pending_bytes);
                    tx_pkts += n;
                    tx_bytes += b;
                    tx_refused += r;
                    kept = out.len();
                });
                if let RunResult::Ran { sent, next } = r {
                    local[lp.egress(e, egress::DEQUEUED)] += sent as u64;
                    slot.behind = next == NextRun::Now && sent >= room;
                    slot.due_ns = 0;
                    match next {
                        NextRun::Idle => {}
                        NextRun::Now => *wake_at = now,
                        NextRun::At(t) => {
                            *wake_at = (*wake_at).min(t);
                            slot.due_ns = t;
                        }
                    }
                }
            }
            // `is_empty` first: a pop that finds the ring empty costs a full fence.
            while slot.pending.len() < bs * 2 && !handoff.is_empty() {
                let Some(p) = handoff.pop() else { break };
                slot.pending_bytes += p.len() as u64;
                slot.pending.push(p);
            }
            if !slot.pending.is_empty() {
                let (n, b, r) =
                    transmit(slot.tx.as_mut(), &mut slot.pending, &mut slot.pending_bytes);
                tx_pkts += n;
                tx_bytes += b;
                tx_refused += r;
            }
            if tx_pkts + tx_refused > 0 {
                local[lp.egress(e, egress::TX_PACKETS)] += tx_pkts;
                local[lp.egress(e, egress::TX_BYTES)] += tx_bytes;
                local[lp.egress(e, egress::DROPS + DropReason::TxRefused.index())] += tx_refused;
                work += (tx_pkts + tx_refused) as usize;
            }
            local[lp.egress(e, egress::PENDING)] = slot.pending.len() as u64;
        }
        work
    }
}

/// Parses `pkt` into `meta` (with the NIC's flow hash); returns true when the frame was
/// malformed.
#[inline]
pub(super) fn classify_into<P: PortBuf>(pkt: &P, meta: &mut PacketMeta) -> bool {
    let malformed = crate::wire::parse_into(pkt.data(), meta).is_some();
    meta.l4_hash = pkt.rss_hash();
    malformed
}

/// What [`offer_to`] did with a burst.
pub(super) struct Offered {
    /// Packets that took the bypass.
    pub(super) bypassed: u64,
    /// Bypassed packets dropped because the owner's handoff queue was full. The shaper let
    /// them through (its bypass count and rate sync include them, as they include a
    /// dequeued packet that the port then cannot take), so they are lost on the way to the
    /// port: counted as [`DropReason::TxFull`], not as a queue's intake drop.
    pub(super) handoff_full: u64,
    /// Bytes of the whole burst.
    pub(super) bytes: u64,
    /// Packets offered as a peer (to a queue another worker runs).
    pub(super) handed_in: u64,
}

/// Offers `pkts` to an egress's shaper. Bypassed packets go to the slot's pending burst
/// when this worker owns the egress (swapped in whole when it is empty), otherwise to the
/// owner's handoff queue through `scratch`; a worker that does not own the egress offers
/// as a peer, so it never holds the queue against the owner's runs while the queue is busy.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(super) fn offer_to<P: PortBuf>(
    shaper: &dyn Shaper<P>,
    now: u64,
    pkts: &mut Vec<P>,
    metas: &mut [PacketMeta],
    classify: &mut dyn FnMut(&P, &mut PacketMeta),
    owned: Option<&mut TxSlot<P>>,
    handoff: &ArrayQueue<P>,
    scratch: &mut Vec<P>,
) -> Offered {
    match owned {
        Some(slot) => {
            let outcome = shaper.offer_burst(
                now,
                pkts,
                metas,
                classify,
                &mut slot.pending,
                Offerer::Runner,
            );
            slot.pending_bytes += outcome.bypassed_bytes;
            Offered {
                bypassed: outcome.bypassed as u64,
                handoff_full: 0,
                bytes: outcome.offered_bytes,
                handed_in: 0,
            }
        }
        None => {
            let handed_in = pkts.len() as u64;
            let outcome = shaper.offer_burst(now, pkts, metas, classify, scratch, Offerer::Peer);
            let mut full = 0u64;
            for p in scratch.drain(..) {
                if let Err(p) = handoff.push(p) {
                    drop(p);
                    full += 1;
                }
            }
            Offered {
                bypassed: outcome.bypassed as u64,
                handoff_full: full,
                bytes: outcome.offered_bytes,
                handed_in,
            }
        }
    }
}

/// Adds one offer's bypass, handoff-full and handed-in counts to egress `e`'s counters.
#[inline]
pub(super) fn count_offer(local: &mut [u64], lp: Layout, e: usize, offered: Offered) {
    local[lp.egress(e, egress::BYPASS)] += offered.bypassed;
    local[lp.egress(e, egress::HANDED_IN)] += offered.handed_in;
    local[lp.egress(e, egress::DROPS + DropReason::TxFull.index())] += offered.handoff_full;
}

/// Transmits from the front of `burst`, whose bytes are `bytes` (updated to what is left);
/// returns packets and bytes sent, and packets the port took but refused for good.
#[inline]
pub(super) fn transmit<P: PortBuf>(
    tx: &mut dyn PortTx<Buf = P>,
    burst: &mut Vec<P>,
    bytes: &mut u64,
) -> (u64, u64, u64) {
    debug_assert_eq!(
        *bytes,
        burst.iter().map(|p| p.len() as u64).sum::<u64>(),
        "pending bytes out of step with the pending burst"
    );
    let taken = tx.tx_burst(burst);
    if taken == 0 {
        return (0, 0, 0);
    }
    // Usually the port took everything; otherwise only what is left is summed.
    let left: u64 = burst.iter().map(|p| p.len() as u64).sum();
    let taken_bytes = bytes.saturating_sub(left);
    *bytes = left;
    let (refused, refused_bytes) = tx.take_refused();
    let refused = refused.min(taken as u64);
    (
        taken as u64 - refused,
        taken_bytes.saturating_sub(refused_bytes),
        refused,
    )
}
