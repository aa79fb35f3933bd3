//! Which TX queue a packet goes to. Every packet of a flow must land on the same queue (so
//! CAKE sees the whole flow and nothing is reordered), and flows should spread evenly.
//!
//! The queue comes from the flow hash: the NIC's L4 RSS hash when it is valid and no rewrite
//! changed the keys, otherwise a cheap keyed, direction-symmetric hash of the 5-tuple
//! (keyed by [`crate::flow_key`]: secret unless `shaper.seed` is set). The *high* bits pick
//! the queue (`(hash × n) >> 32`) because CAKE indexes its flow table with the low ones;
//! non-IP packets (flow 0) go to queue 0.
//!
//! With circuits (docs/circuits.md) a packet first gets its circuit: the subscriber-side
//! address (the destination of a download packet, the source of an upload one) looked up in
//! the prefix table ([`circuit_of`]). A circuit's packets must all meet one circuit shaper
//! per direction, whatever their flows, so with several TX queues they are steered by the
//! circuit's slot ([`circuit_queue`]), not by the flow hash; unmatched packets keep the flow
//! hash.

use qdisc::{FlowKeys, L3Kind, PacketMeta};

/// Returns the flow hash used for queue selection: the precomputed L4 hash when it may be
/// reused, else [`flow_hash`] of the keys.
#[inline]
pub fn queue_hash(meta: &PacketMeta) -> u32 {
    match meta.l4_hash {
        Some(h) if !meta.keys_rewritten => h,
        _ => flow_hash(meta),
    }
}

/// Returns the TX queue (0..n_queues) for a packet; 0 when `n_queues` ≤ 1.
///
/// # Examples
/// ```
/// let meta = qdisc::PacketMeta { l4_hash: Some(0xffff_ffff), ..Default::default() };
/// assert_eq!(forwarder::classify::tx_queue_for(&meta, 4), 3);
/// ```
#[inline]
pub fn tx_queue_for(meta: &PacketMeta, n_queues: usize) -> usize {
    if n_queues <= 1 {
        return 0;
    }
    queue_index(queue_hash(meta), n_queues)
}

/// Picks the TX queue as [`tx_queue_for`] does and, when the packet brought no precomputed
/// hash, keeps the software hash computed for the choice in `meta.l4_hash`. CAKE then reuses
/// it as its flow hash instead of hashing the keys a second time, as Linux's CAKE reuses the
/// `skb->hash` that the stack computed for RPS. With one queue nothing is hashed.
#[inline]
pub fn assign_tx_queue(meta: &mut PacketMeta, n_queues: usize) -> usize {
    if n_queues <= 1 {
        return 0;
    }
    let hash = match meta.l4_hash {
        Some(h) if !meta.keys_rewritten => h,
        Some(_) => flow_hash(meta),
        None => {
            let h = flow_hash(meta);
            meta.l4_hash = Some(h);
            h
        }
    };
    queue_index(hash, n_queues)
}

/// Maps a 32-bit hash onto `0..n` by its high bits (Lemire's multiply-shift reduction).
#[inline]
pub fn queue_index(hash: u32, n: usize) -> usize {
    ((u64::from(hash) * n as u64) >> 32) as usize
}

/// Which address of a packet names its subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The destination: traffic towards the subscribers (the download).
    Destination,
    /// The source: traffic from the subscribers (the upload).
    Source,
}

impl Side {
    /// The subscriber-side address of traffic leaving in direction `dir`: the destination
    /// of the download, the source of the upload.
    pub fn of(dir: crate::direction::Direction) -> Side {
        match dir {
            crate::direction::Direction::Download => Side::Destination,
            crate::direction::Direction::Upload => Side::Source,
        }
    }
}

/// The circuit slot of a packet with `keys`, found by its `side` address in `lpm`; `None`
/// for non-IP packets and addresses no circuit holds.
#[inline]
pub fn circuit_of(lpm: &circuits::Lpm, side: Side, keys: &FlowKeys) -> Option<u32> {
    let addr = match side {
        Side::Destination => keys.dst_addr,
        Side::Source => keys.src_addr,
    };
    match keys.l3 {
        L3Kind::Ipv4 => lpm.lookup_mapped(true, addr),
        L3Kind::Ipv6 => lpm.lookup_mapped(false, addr),
        L3Kind::NonIp => None,
    }
}

/// The TX queue (0..n) of circuit `slot`: a multiplicative hash of the slot, so that
/// consecutive slots (a file's circuits in order) spread over the queues.
#[inline]
pub fn circuit_queue(slot: u32, n: usize) -> usize {
    if n <= 1 {
        return 0;
    }
    queue_index(slot.wrapping_add(1).wrapping_mul(0x9e37_79b1), n)
}

/// The keyed, direction-symmetric flow hash of `meta`'s keys (0 for non-IP).
#[inline]
pub fn flow_hash(meta: &PacketMeta) -> u32 {
    qdisc::cake::flow_hash(&meta.keys, crate::flow_key::current_queue_key())
}

#[cfg(test)]
mod tests {
    use super::*;
    use qdisc::testing::udp_meta;

    #[test]
    fn one_queue_takes_everything() {
        assert_eq!(tx_queue_for(&udp_meta(1, 2, 3, 0), 1), 0);
        assert_eq!(tx_queue_for(&udp_meta(1, 2, 3, 0), 0), 0);
    }

    #[test]
    fn both_directions_of_a_flow_share_a_queue() {
        for flow in 0..200 {
            let m = udp_meta(flow % 7, flow % 5, flow, 0);
            let mut back = m;
            std::mem::swap(&mut back.keys.src_addr, &mut back.keys.dst_addr);
            std::mem::swap(&mut back.keys.src_port, &mut back.keys.dst_port);
            assert_eq!(tx_queue_for(&m, 8), tx_queue_for(&back, 8));
        }
    }

    #[test]
    fn flows_spread_evenly_over_queues() {
        let n = 4;
        let mut counts = [0usize; 4];
        for flow in 0..4000 {
            counts[tx_queue_for(&udp_meta(flow % 50, 7, flow, 0), n)] += 1;
        }
        let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(*max * 10 < *min * 13, "uneven spread {counts:?}");
    }

    #[test]
    fn a_valid_nic_hash_is_reused_unless_keys_were_rewritten() {
        let mut m = udp_meta(1, 2, 3, 0);
        m.l4_hash = Some(0x8000_0000);
        assert_eq!(queue_hash(&m), 0x8000_0000);
        assert_eq!(tx_queue_for(&m, 2), 1);
        m.keys_rewritten = true;
        assert_eq!(queue_hash(&m), flow_hash(&m));
    }

    #[test]
    fn the_software_queue_hash_is_kept_for_cake() {
        let m = udp_meta(1, 2, 3, 0);
        let mut kept = m;
        assert_eq!(assign_tx_queue(&mut kept, 4), tx_queue_for(&m, 4));
        assert_eq!(kept.l4_hash, Some(flow_hash(&m)));
        // A NIC hash stays as it came, also when the keys were rewritten.
        let mut nic = m;
        nic.l4_hash = Some(0x8000_0000);
        nic.keys_rewritten = true;
        assert_eq!(assign_tx_queue(&mut nic, 4), tx_queue_for(&nic, 4));
        assert_eq!(nic.l4_hash, Some(0x8000_0000));
        // One queue: nothing hashed, nothing kept.
        let mut one = m;
        assert_eq!(assign_tx_queue(&mut one, 1), 0);
        assert_eq!(one.l4_hash, None);
    }

    #[test]
    fn the_subscriber_address_finds_the_circuit_per_side() {
        let lpm = circuits::Lpm::build([
            ("10.0.0.0/24".parse::<circuits::Prefix>().unwrap(), 3),
            ("2001:db8::/48".parse().unwrap(), 5),
        ])
        .unwrap();
        let mut m = udp_meta(1, 2, 3, 0);
        m.keys.l3 = L3Kind::Ipv4;
        m.keys.src_addr = std::net::Ipv4Addr::new(10, 0, 0, 9)
            .to_ipv6_mapped()
            .octets();
        m.keys.dst_addr = std::net::Ipv4Addr::new(192, 0, 2, 1)
            .to_ipv6_mapped()
            .octets();
        assert_eq!(circuit_of(&lpm, Side::Source, &m.keys), Some(3));
        assert_eq!(circuit_of(&lpm, Side::Destination, &m.keys), None);
        m.keys.l3 = L3Kind::Ipv6;
        m.keys.dst_addr = "2001:db8:0:1::1"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets();
        assert_eq!(circuit_of(&lpm, Side::Destination, &m.keys), Some(5));
        m.keys.l3 = L3Kind::NonIp;
        assert_eq!(circuit_of(&lpm, Side::Destination, &m.keys), None);
    }

    #[test]
    fn circuits_spread_over_queues_and_stay_on_one() {
        let mut counts = [0usize; 4];
        for slot in 0..4000 {
            let q = circuit_queue(slot, 4);
            assert_eq!(q, circuit_queue(slot, 4));
            counts[q] += 1;
        }
        let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(*max * 10 < *min * 11, "uneven spread {counts:?}");
        assert_eq!(circuit_queue(7, 1), 0);
    }

    #[test]
    fn non_ip_packets_go_to_queue_zero() {
        let m = PacketMeta::default();
        assert_eq!(tx_queue_for(&m, 8), 0);
    }
}
