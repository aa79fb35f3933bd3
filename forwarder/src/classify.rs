//! Which TX queue a packet goes to. Every packet of a flow must land on the same queue (so
//! CAKE sees the whole flow and nothing is reordered), and flows should spread evenly.
//!
//! The queue comes from the flow hash: the NIC's L4 RSS hash when it is valid and no rewrite
//! changed the keys, otherwise a cheap keyed, direction-symmetric hash of the 5-tuple
//! (keyed by [`crate::flow_key`]: secret unless `shaper.seed` is set). The *high* bits pick
//! the queue (`(hash × n) >> 32`) because CAKE indexes its flow table with the low ones;
//! non-IP packets (flow 0) go to queue 0.

use qdisc::PacketMeta;

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
    fn non_ip_packets_go_to_queue_zero() {
        let m = PacketMeta::default();
        assert_eq!(tx_queue_for(&m, 8), 0);
    }
}
