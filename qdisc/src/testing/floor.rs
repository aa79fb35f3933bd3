//! [`DrrFloor`]: the floor under CAKE for benchmarks. It is CAKE's DRR++ skeleton and nothing
//! else, so a benchmark that runs it beside CAKE on the same workload shows, in one run, what
//! everything CAKE adds to DRR++ costs, and how fast any CAKE could be at best.
//!
//! It keeps the diffserv3 tin choice and the unlimited-mode tin DRR (quanta 1024, 64 and 256,
//! with full rounds applied in closed form as CAKE does), 1024 flows per tin indexed directly
//! by CAKE's flow hash, the new and old flow lists with DRR++'s moves (a refilled flow goes to
//! the old tail, an emptied new flow goes to the old tail, an emptied old flow leaves) and a
//! preallocated packet slab. It has no COBALT, host fairness, decaying list, set-associative
//! ways, shaper, memory limit or statistics: not a qdisc to forward with.

use std::convert::Infallible;

use crate::cake::{diffserv_table, flow_hash, DiffservMode};
use crate::mq::MqQdisc;
use crate::{BurstBypass, Dequeue, DropReason, Enqueued, Packet, PacketMeta, Qdisc, Rate};

const FLOWS: usize = 1024;
const TINS: usize = 3;
const NIL: u32 = u32::MAX;
const NIL16: u16 = u16::MAX;
const IDLE: u8 = u8::MAX;
const NEW: u8 = 0;
const OLD: u8 = 1;
const FLOW_QUANTUM: i32 = 1514;
/// CAKE's diffserv3 tin quanta in unlimited mode (best effort, bulk, voice).
const TIN_QUANTA: [i32; TINS] = [1024, 64, 256];
const HASH_SEED: u64 = 0x9e37;

/// DRR++ over diffserv3 tins: see the module docs.
#[derive(Debug)]
pub struct DrrFloor<P> {
    tin_of_dscp: &'static [u8; 64],
    tins: [Tin; TINS],
    flows: Vec<Flow>,
    /// Per flow: the next flow in its tin's list.
    list_next: Vec<u16>,
    slab: Vec<Slot<P>>,
    free_head: u32,
    cur_tin: usize,
    qlen: usize,
    backlog: u64,
}

#[derive(Debug, Clone, Copy)]
struct Tin {
    quantum: i32,
    deficit: i32,
    /// Flows in the new or old list.
    listed_flows: u32,
    /// The new and old lists as (head, tail) flow indices within the tin.
    lists: [(u16, u16); 2],
}

#[derive(Debug, Clone, Copy)]
struct Flow {
    head: u32,
    tail: u32,
    deficit: i32,
    /// `NEW`, `OLD` or `IDLE`.
    list: u8,
}

#[derive(Debug)]
struct Slot<P> {
    pkt: Option<P>,
    next: u32,
}

impl<P: Packet> DrrFloor<P> {
    /// A floor with room for `packets` packets.
    pub fn new(packets: usize) -> DrrFloor<P> {
        let packets = packets.clamp(1, NIL as usize - 1);
        DrrFloor {
            tin_of_dscp: diffserv_table(DiffservMode::Diffserv3),
            tins: TIN_QUANTA.map(|quantum| Tin {
                quantum,
                deficit: 0,
                listed_flows: 0,
                lists: [(NIL16, NIL16); 2],
            }),
            flows: vec![
                Flow {
                    head: NIL,
                    tail: NIL,
                    deficit: 0,
                    list: IDLE,
                };
                TINS * FLOWS
            ],
            list_next: vec![NIL16; TINS * FLOWS],
            slab: (0..packets)
                .map(|i| Slot {
                    pkt: None,
                    next: if i + 1 == packets { NIL } else { i as u32 + 1 },
                })
                .collect(),
            free_head: 0,
            cur_tin: 0,
            qlen: 0,
            backlog: 0,
        }
    }

    fn push_tail(&mut self, t: usize, flow: u16, which: u8) {
        let base = t * FLOWS;
        let (head, tail) = &mut self.tins[t].lists[usize::from(which)];
        if *tail == NIL16 {
            *head = flow;
        } else {
            self.list_next[base + usize::from(*tail)] = flow;
        }
        *tail = flow;
        self.list_next[base + usize::from(flow)] = NIL16;
        self.flows[base + usize::from(flow)].list = which;
    }

    fn pop_list_head(&mut self, t: usize, which: u8) {
        let base = t * FLOWS;
        let (head, tail) = &mut self.tins[t].lists[usize::from(which)];
        let next = self.list_next[base + usize::from(*head)];
        *head = next;
        if next == NIL16 {
            *tail = NIL16;
        }
    }

    /// Applies full rounds of the tin DRR that cannot end it, as CAKE's `skip_drr_rounds`.
    fn skip_rounds(&mut self) {
        let rounds = self
            .tins
            .iter()
            .filter(|t| t.listed_flows > 0)
            .map(|t| t.deficit.min(0).unsigned_abs().div_ceil(t.quantum as u32))
            .min()
            .unwrap_or(0);
        if rounds < 2 {
            return;
        }
        for t in &mut self.tins {
            if t.deficit <= 0 {
                let adds = (rounds - 1).min(t.deficit.unsigned_abs() / t.quantum as u32 + 1);
                t.deficit += (adds * t.quantum as u32) as i32;
            }
        }
    }

    /// Picks the tin to serve, as CAKE's unlimited-mode walk; `None` when no tin has flows.
    fn choose_tin(&mut self) -> Option<usize> {
        if self.tins.iter().all(|t| t.listed_flows == 0) {
            return None;
        }
        let mut wrapped = false;
        loop {
            let tin = &mut self.tins[self.cur_tin];
            if tin.deficit >= 0 && tin.listed_flows > 0 {
                return Some(self.cur_tin);
            }
            if tin.deficit <= 0 {
                tin.deficit += tin.quantum;
            }
            self.cur_tin += 1;
            if self.cur_tin == TINS {
                self.cur_tin = 0;
                if wrapped {
                    self.skip_rounds();
                }
                wrapped = true;
            }
        }
    }
}

impl<P: Packet> Qdisc<P> for DrrFloor<P> {
    fn enqueue(&mut self, _now_ns: u64, pkt: P, meta: &PacketMeta) -> Enqueued {
        let t = usize::from(self.tin_of_dscp[usize::from(meta.dscp & 63)]).min(TINS - 1);
        let flow = (flow_hash(&meta.keys, HASH_SEED) as usize % FLOWS) as u16;
        let len = pkt.len() as u64;
        let s = self.free_head;
        if s == NIL {
            return Enqueued {
                dropped_packets: 1,
                dropped_bytes: len,
                reason: Some(DropReason::Overflow),
                ack_filtered: 0,
            };
        }
        self.free_head = self.slab[s as usize].next;
        self.slab[s as usize] = Slot {
            pkt: Some(pkt),
            next: NIL,
        };
        self.qlen += 1;
        self.backlog += len;
        let f = &mut self.flows[t * FLOWS + usize::from(flow)];
        if f.tail == NIL {
            f.head = s;
        } else {
            self.slab[f.tail as usize].next = s;
        }
        f.tail = s;
        if f.list == IDLE {
            f.deficit = FLOW_QUANTUM;
            self.tins[t].listed_flows += 1;
            self.push_tail(t, flow, NEW);
        }
        Enqueued::default()
    }

    fn dequeue(&mut self, _now_ns: u64) -> Dequeue<P> {
        while let Some(t) = self.choose_tin() {
            let base = t * FLOWS;
            loop {
                let lists = self.tins[t].lists;
                let which = if lists[0].0 != NIL16 {
                    NEW
                } else if lists[1].0 != NIL16 {
                    OLD
                } else {
                    break;
                };
                let flow = lists[usize::from(which)].0;
                let fid = base + usize::from(flow);
                if self.flows[fid].deficit <= 0 {
                    self.flows[fid].deficit += FLOW_QUANTUM;
                    self.pop_list_head(t, which);
                    self.push_tail(t, flow, OLD);
                    continue;
                }
                let s = self.flows[fid].head;
                if s == NIL {
                    self.pop_list_head(t, which);
                    if which == NEW {
                        self.push_tail(t, flow, OLD);
                    } else {
                        self.flows[fid].list = IDLE;
                        self.tins[t].listed_flows -= 1;
                    }
                    continue;
                }
                let slot = &mut self.slab[s as usize];
                let next = slot.next;
                let pkt = slot.pkt.take();
                slot.next = self.free_head;
                self.free_head = s;
                let f = &mut self.flows[fid];
                f.head = next;
                if next == NIL {
                    f.tail = NIL;
                }
                let len = pkt.as_ref().map_or(0, |p| p.len());
                let charge = len.min(i32::MAX as usize) as i32;
                f.deficit = f.deficit.saturating_sub(charge);
                let tin = &mut self.tins[t];
                tin.deficit = tin.deficit.saturating_sub(charge);
                self.qlen -= 1;
                self.backlog -= len as u64;
                return match pkt {
                    Some(p) => Dequeue::Packet(p),
                    None => Dequeue::Empty,
                };
            }
        }
        Dequeue::Empty
    }

    fn len(&self) -> usize {
        self.qlen
    }

    fn backlog_bytes(&self) -> u64 {
        self.backlog
    }

    fn bypass_burst(&mut self, _now_ns: u64, _pkts: &[P], _metas: &[PacketMeta]) -> BurstBypass {
        BurstBypass::default()
    }

    fn set_rate(&mut self, _rate: Rate) {}

    fn rate(&self) -> Rate {
        Rate::UNLIMITED
    }

    fn next_wakeup(&self) -> Option<u64> {
        None
    }
}

/// So the DPDK benchmark can run the floor through the same `TxQueue` as CAKE. The config
/// is the slab size in packets.
impl<P: Packet + Send> MqQdisc<P> for DrrFloor<P> {
    type Config = usize;
    type Error = Infallible;

    fn build(packets: &usize) -> Result<Self, Infallible> {
        Ok(DrrFloor::new(*packets))
    }

    fn validate(_packets: &usize) -> Result<(), Infallible> {
        Ok(())
    }

    fn reconfigure(&mut self, _packets: &usize) -> Result<(), Infallible> {
        Ok(())
    }

    fn config_rate(_packets: &usize) -> Rate {
        Rate::UNLIMITED
    }

    fn is_rate_only_change(_old: &usize, _new: &usize) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{udp_meta, TestPacket};

    fn packet(flow: usize, seq: u64, len: usize) -> TestPacket {
        TestPacket::new(len, flow as u32, seq)
    }

    #[test]
    fn conserves_packets_and_keeps_per_flow_order() {
        let mut q = DrrFloor::<TestPacket>::new(64);
        let metas: Vec<_> = (0..40)
            .map(|f| udp_meta(f % 5, f % 3, f, [0, 8, 46][f as usize % 3]))
            .collect();
        let mut next_seq = vec![0u64; metas.len()];
        let mut last_out = vec![None::<u64>; metas.len()];
        let (mut accepted, mut out) = (0u64, 0u64);
        for i in 0..2000u64 {
            let f = (i * 7 % 40) as usize;
            let r = q.enqueue(
                0,
                packet(f, next_seq[f], 60 + (i as usize % 1400)),
                &metas[f],
            );
            if r.dropped_packets == 0 {
                accepted += 1;
            }
            next_seq[f] += 1;
            if i % 3 != 0 {
                if let Dequeue::Packet(p) = q.dequeue(0) {
                    assert!(
                        last_out[p.flow as usize].map_or(true, |s| s < p.seq),
                        "flow order broken"
                    );
                    last_out[p.flow as usize] = Some(p.seq);
                    out += 1;
                }
            }
        }
        while let Dequeue::Packet(_) = q.dequeue(0) {
            out += 1;
        }
        assert_eq!(accepted, out);
        assert_eq!(q.len(), 0);
        assert_eq!(q.backlog_bytes(), 0);
    }

    #[test]
    fn shares_a_tin_equally_between_bulk_flows() {
        let mut q = DrrFloor::<TestPacket>::new(1024);
        let metas: Vec<_> = (0..4).map(|f| udp_meta(f, f, f, 0)).collect();
        for round in 0..100 {
            for (f, m) in metas.iter().enumerate() {
                // Flow f sends packets f+1 times as large, so bytes, not packets, are shared.
                q.enqueue(0, packet(f, round, 300 * (f + 1)), m);
            }
        }
        let mut bytes = [0usize; 4];
        for _ in 0..150 {
            if let Dequeue::Packet(p) = q.dequeue(0) {
                bytes[p.flow as usize] += p.len;
            }
        }
        let (min, max) = (bytes.iter().min().unwrap(), bytes.iter().max().unwrap());
        assert!(*max - *min <= 2 * 1514, "bytes per flow {bytes:?}");
    }
}
