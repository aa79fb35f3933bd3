//! The runner's side of a [`TxQueue`]: what the runner-lock holder does on each run. It
//! applies a pending reconfigure, makes the reads other threads asked for, drains the intake into the qdisc, syncs this queue's share
//! of the `SharedRate` with its siblings when due (cake_mq's `cake_mq_sync_rates`), and
//! publishes backlog, activity and counters for other threads to read.

use super::super::shared_rate::SPARSE_HORIZON_NS;
use super::super::sync::Ordering;
use super::super::MqQdisc;
use super::{NextRun, Runner, SyncState, TxQueue};
use crate::{Dequeue, DropReason, Enqueued, Packet, PacketMeta, Rate};

/// The horizon of a queue's recent rate, against which its long-run rate is checked (a light
/// sender's bursts stay within a few times its long-run rate over this span; a queue that
/// turned bulk does not).
const FAST_HORIZON_NS: u64 = 5_000_000;

impl<P: Packet + Send, Q: MqQdisc<P>> TxQueue<P, Q> {
    pub(super) fn activity_backlog(&self) -> u64 {
        self.shared
            .queue(self.index)
            .backlog_bytes
            .load(Ordering::Relaxed)
    }

    pub(super) fn apply_pending(&self, r: &mut Runner<P, Q>) {
        if !self.pending_flag.load(Ordering::Acquire) {
            return;
        }
        let taken = {
            let mut slot = self.pending.lock().expect("config slot poisoned");
            self.pending_flag.store(false, Ordering::Relaxed);
            slot.take()
        };
        if let Some(pending) = taken {
            if let Ok(config) = pending.downcast::<Q::Config>() {
                // Validated when requested, so this cannot fail; on a failure the qdisc is
                // unchanged, which is the safe outcome anyway.
                let before = r.qdisc.len();
                let _ = r.qdisc.reconfigure(&config);
                // A qdisc whose reconfigure drops packets (CAKE moves the packets of the tins
                // a new diffserv mode no longer has instead) counts them as Overflow drops,
                // as the qdisc's own stats do, not AQM drops, which is what conservation
                // alone would say.
                let purged = before.saturating_sub(r.qdisc.len());
                r.count_drops(DropReason::Overflow, purged as u64);
                // The reconfigure set the full configured rate; the sync scales it back down.
                r.sync.force = true;
            }
        }
    }

    /// Makes the oldest read waiting for the runner ([`TxQueue::request_read`]). One per
    /// run: each takes tens of microseconds (a chunk of cold circuits), and a queue that made
    /// every read waiting at once would stall for as many as there are readers (64 control
    /// connections at once, say); the rest keep the queue's run urgent and are made at the
    /// runs that follow, with receives and dequeues between them.
    pub(super) fn serve_reads(&self, r: &mut Runner<P, Q>) {
        if !self.reads_flag.load(Ordering::Acquire) {
            return;
        }
        let oldest = {
            let mut reads = self.reads.lock().expect("read slot poisoned");
            let oldest = (!reads.waiting.is_empty()).then(|| reads.waiting.remove(0));
            if reads.waiting.is_empty() {
                self.reads_flag.store(false, Ordering::Relaxed);
            }
            oldest
        };
        if let Some((_, read)) = oldest {
            read(&mut r.qdisc);
        }
    }

    /// Moves up to `limit` packets from the intake into the qdisc; returns how many.
    pub(super) fn drain_intake(&self, r: &mut Runner<P, Q>, now_ns: u64, limit: usize) -> usize {
        let mut moved = 0;
        // `is_empty` first: a pop that finds the ring empty costs a full fence.
        while moved < limit && !self.intake.is_empty() {
            let Some((pkt, meta)) = self.intake.pop() else {
                break;
            };
            r.enqueue_one(now_ns, pkt, &meta);
            moved += 1;
        }
        moved
    }

    pub(super) fn sync_if_due(&self, r: &mut Runner<P, Q>, now_ns: u64) {
        let generation = self.shared.generation();
        let interval = self.shared.sync_interval_ns();
        let elapsed = now_ns.saturating_sub(r.sync.last_check_ns);
        if !r.sync.force && generation == r.sync.generation && elapsed < interval {
            return;
        }
        let saturation = u64::from(self.shared.sync_config().saturation_percent);
        let mine = self.shared.queue(self.index);
        let share_before = r.counters.share_bps;
        // Delivered rate over the window; a first sync (no window yet) reports nothing.
        let measured = if elapsed > 0 && r.sync.synced_once {
            (u128::from(r.sync.window_bytes) * 1_000_000_000 / u128::from(elapsed)) as u64
        } else {
            0
        };
        // Saturated: it used (nearly) all of its share, or the shaper still held packets at
        // the end of the last run, whatever it used: packets waiting mean the queue was short
        // of rate or of CPU, never of demand. (Counting a queue whose worker lost the CPU as
        // thin handed its sibling the difference while it kept its own share, and sent that
        // when it came back: 2 queues on 2 busy workers delivered 101 % of the rate.) A
        // light queue draining a burst stays thin (below).
        let used_percent = if share_before == 0 {
            0
        } else {
            u128::from(measured) * 100 / u128::from(share_before)
        };
        // The long-run average (an exponential average over SPARSE_HORIZON_NS, normalised by
        // the time it covers so that it is right from the first windows) and, when the queue
        // is thin and uses well under its share, what siblings keep reserved for it while it
        // is quiet (see `shared_rate::SPARSE_HORIZON_NS`). A queue that was busy keeps
        // nothing reserved, so its share is released at once when it stops.
        if r.sync.synced_once {
            let horizon = u128::from(SPARSE_HORIZON_NS);
            let keep = horizon - u128::from(elapsed).min(horizon);
            let bytes =
                u128::from(r.sync.average_bytes) * keep / horizon + u128::from(r.sync.window_bytes);
            let ns = u128::from(r.sync.average_ns) * keep / horizon + u128::from(elapsed);
            r.sync.average_bytes = bytes.min(u128::from(u64::MAX)) as u64;
            r.sync.average_ns = ns.min(u128::from(u64::MAX)) as u64;
            let fast = u128::from(FAST_HORIZON_NS);
            let keep = fast - u128::from(elapsed).min(fast);
            r.sync.recent_bytes = (u128::from(r.sync.recent_bytes) * keep / fast
                + u128::from(r.sync.window_bytes))
            .min(u128::from(u64::MAX)) as u64;
            r.sync.recent_ns = (u128::from(r.sync.recent_ns) * keep / fast + u128::from(elapsed))
                .min(u128::from(u64::MAX)) as u64;
        }
        let recent = if r.sync.recent_ns == 0 {
            0
        } else {
            (u128::from(r.sync.recent_bytes) * 1_000_000_000 / u128::from(r.sync.recent_ns)) as u64
        };
        let average = if r.sync.average_ns == 0 {
            0
        } else {
            (u128::from(r.sync.average_bytes) * 1_000_000_000 / u128::from(r.sync.average_ns))
                as u64
        };
        // A light queue (long-run rate under half its share, and no recent surge above it) that holds packets is draining
        // a burst, not short of rate: it stays thin, so that siblings keep counting it with
        // its long-run rate instead of handing it a full fair share.
        // The few-ms average must stay within twice the long-run one: a light queue that
        // turns bulk stops being light within a few ms, not after its long-run average caught
        // up, and a queue that uses its share (recent ~ share) is never light, since both
        // tests together need recent <= 2 x average < share.
        let light = r.sync.synced_once
            && average.saturating_mul(2) < share_before
            && recent <= average.saturating_mul(2);
        let held_back = r.sync.published_backlog > 0;
        let saturated = (used_percent >= u128::from(saturation) || held_back) && !light;
        let demand = if saturated || measured == 0 && held_back {
            None
        } else {
            Some(measured)
        };
        // A first sync has measured nothing yet: no bound on its room to grow.
        let bound_from = if r.sync.synced_once {
            share_before
        } else {
            u64::MAX
        };
        let (share, active) =
            self.shared
                .compute_share(self.index, now_ns, r.sync.last_check_ns, demand, bound_from);
        let sparse = match demand {
            Some(_) if light && average.saturating_mul(2) < share => average,
            _ => 0,
        };
        mine.sparse_bps.store(sparse, Ordering::Relaxed);
        mine.measured_bps.store(measured, Ordering::Relaxed);
        mine.saturated.store(demand.is_none(), Ordering::Relaxed);
        mine.share_bps.store(share, Ordering::Relaxed);
        if share != share_before || r.sync.force {
            r.qdisc.set_rate(Rate::from_bytes_per_sec(share));
        }
        r.counters.share_bps = share;
        r.counters.active_queues = active;
        r.counters.syncs += 1;
        r.sync.last_check_ns = now_ns;
        r.sync.synced_once = true;
        r.sync.window_bytes = 0;
        r.sync.generation = generation;
        r.sync.force = false;
        self.published.last_sync_ns.store(now_ns, Ordering::Relaxed);
        self.published
            .generation
            .store(generation, Ordering::Relaxed);
    }

    /// Publishes backlog, activity and counters: one batch of stores per run, all on lines
    /// this queue owns.
    pub(super) fn publish(&self, r: &mut Runner<P, Q>, now_ns: u64) {
        self.note_delivery(r, now_ns);
        self.publish_backlog(r);
        self.publish_counters(r);
        r.sync.counters_published_ns = now_ns;
    }

    /// The counters part of [`TxQueue::publish`].
    pub(super) fn publish_counters(&self, r: &Runner<P, Q>) {
        let c = &r.counters;
        let p = &self.published;
        p.enqueued.store(c.enqueued, Ordering::Relaxed);
        p.bypassed.store(c.bypassed, Ordering::Relaxed);
        for (a, d) in p.qdisc_drops.iter().zip(c.qdisc_drops) {
            a.store(d, Ordering::Relaxed);
        }
        let qlen = r.qdisc.len() as u64;
        let inside = c
            .enqueued
            .saturating_sub(c.reasoned_drops + c.dequeued + qlen);
        p.dequeue_drops.store(inside, Ordering::Relaxed);
        p.dequeued.store(c.dequeued, Ordering::Relaxed);
        p.sent_bytes.store(c.sent_bytes, Ordering::Relaxed);
        p.syncs.store(c.syncs, Ordering::Relaxed);
        p.active_queues.store(c.active_queues, Ordering::Relaxed);
        p.share_bps.store(c.share_bps, Ordering::Relaxed);
    }

    /// Adds the bytes delivered since the last call to the sync window and publishes the
    /// delivery time when there were any.
    pub(super) fn note_delivery(&self, r: &mut Runner<P, Q>, now_ns: u64) {
        if r.counters.sent_bytes != r.sync.published_bytes {
            r.sync.window_bytes += r.counters.sent_bytes - r.sync.published_bytes;
            r.sync.published_bytes = r.counters.sent_bytes;
            self.shared
                .queue(self.index)
                .last_active_ns
                .store(now_ns, Ordering::Relaxed);
        }
    }

    pub(super) fn publish_backlog(&self, r: &mut Runner<P, Q>) {
        self.published
            .qlen
            .store(r.qdisc.len() as u64, Ordering::Relaxed);
        let backlog = r.qdisc.backlog_bytes();
        if backlog != r.sync.published_backlog {
            r.sync.published_backlog = backlog;
            self.shared
                .queue(self.index)
                .backlog_bytes
                .store(backlog, Ordering::Relaxed);
        }
    }
}

impl SyncState {
    pub(super) fn clamp(&mut self, now_ns: u64) -> u64 {
        self.now_ns = self.now_ns.max(now_ns);
        self.now_ns
    }
}

impl<P: Packet, Q: MqQdisc<P>> Runner<P, Q> {
    pub(super) fn enqueue_one(&mut self, now_ns: u64, pkt: P, meta: &PacketMeta) {
        let result: Enqueued = self.qdisc.enqueue(now_ns, pkt, meta);
        self.counters.enqueued += 1;
        // One enqueue can both filter an ACK and overflow: each drop under its own reason.
        for (reason, packets) in result.drops_by_reason() {
            self.count_drops(reason, u64::from(packets));
        }
    }

    /// Counts `packets` dropped for `reason` outside the dequeue (whose AQM drops are
    /// derived by conservation in [`TxQueue::publish`]).
    pub(super) fn count_drops(&mut self, reason: DropReason, packets: u64) {
        self.counters.qdisc_drops[reason.index()] += packets;
        self.counters.reasoned_drops += packets;
    }

    pub(super) fn dequeue_into(&mut self, now_ns: u64, budget: usize, out: &mut Vec<P>) -> NextRun {
        for _ in 0..budget {
            let (len, backlog) = (self.qdisc.len(), self.qdisc.backlog_bytes());
            match self.qdisc.dequeue(now_ns) {
                Dequeue::Packet(pkt) => {
                    self.counters.dequeued += 1;
                    // With nothing dropped on the way the backlog fell by the packet's
                    // length: read from the qdisc's state, not from the packet, whose buffer
                    // may be cold (per-circuit shaping) and is read again at transmit anyway.
                    self.counters.sent_bytes += if self.qdisc.len() + 1 == len {
                        backlog - self.qdisc.backlog_bytes()
                    } else {
                        pkt.len() as u64
                    };
                    out.push(pkt);
                }
                Dequeue::Empty => return NextRun::Idle,
                Dequeue::NotBefore(t) => return NextRun::At(t),
            }
        }
        if self.qdisc.is_empty() {
            NextRun::Idle
        } else {
            NextRun::Now
        }
    }
}
