//! Flow and host hashing (sch_cake.c `cake_hash`): a cheap keyed, direction-symmetric hash of
//! the 5-tuple, built from folded 64×64→128-bit multiplies (wyhash's mixing step). It is
//! not SipHash: it costs about as much as jhash and is meant for spreading flows over
//! buckets, not for resisting an attacker who can observe bucket placement.

use crate::{cold_path, FlowKeys, L3Kind};

const K0: u64 = 0xa076_1d64_78bd_642f;
const K1: u64 = 0xe703_7ed1_a0b4_28db;
const K2: u64 = 0x8ebc_6af0_9c88_c6e3;
const K3: u64 = 0x5899_65cc_7537_4cc3;
const K4: u64 = 0x1d8e_4e27_c47d_124f;

#[inline(always)]
fn fold(a: u64, b: u64) -> u64 {
    let t = u128::from(a) * u128::from(b);
    (t as u64) ^ ((t >> 64) as u64)
}

#[inline(always)]
fn words(addr: &[u8; 16]) -> (u64, u64) {
    let mut hi = [0u8; 8];
    let mut lo = [0u8; 8];
    hi.copy_from_slice(&addr[..8]);
    lo.copy_from_slice(&addr[8..]);
    (u64::from_le_bytes(hi), u64::from_le_bytes(lo))
}

/// Returns the flow hash of `keys` under `seed`: the same for both directions of a
/// connection (addresses and ports are put in a canonical order first, as the kernel's
/// dissector does), 0 for non-IP packets. An IPv6 packet with a non-zero flow label is
/// keyed by (addresses, protocol, label) without ports.
///
/// The engine uses the same function to pick a TX queue; it should take the high bits
/// (`(hash as u64 * n) >> 32`) because CAKE indexes its table with the low ten.
#[inline]
pub fn flow_hash(keys: &FlowKeys, seed: u64) -> u32 {
    if keys.l3 == L3Kind::NonIp {
        cold_path();
        return 0;
    }
    let label = if keys.l3 == L3Kind::Ipv6 {
        keys.flow_label & 0x000f_ffff
    } else {
        0
    };
    let (sp, dp) = if label != 0 {
        (0, 0)
    } else {
        (keys.src_port, keys.dst_port)
    };
    // One digest per endpoint under the same key, so swapping the endpoints swaps the
    // digests; ordering two u64s is cheaper than ordering the raw (address, port) pairs.
    // A port XORed into a 64-bit digest collides only when two digests differ in their low
    // 16 bits alone (2^-48 per pair).
    let (s_hi, s_lo) = words(&keys.src_addr);
    let (d_hi, d_lo) = words(&keys.dst_addr);
    let es = fold(s_hi ^ seed ^ K0, s_lo ^ K1) ^ u64::from(sp);
    let ed = fold(d_hi ^ seed ^ K0, d_lo ^ K1) ^ u64::from(dp);
    let (lo, hi) = if es <= ed { (es, ed) } else { (ed, es) };
    let rest = (u64::from(keys.protocol) << 24) | u64::from(label);
    let h = fold(lo ^ rest ^ K4, hi ^ seed.rotate_left(32) ^ K3);
    (h ^ (h >> 32)) as u32
}

/// Returns the hash of one host address under `seed`; `dst` selects a separate key so a
/// host's source and destination hashes differ. 0 for non-IP packets.
#[inline]
pub fn host_hash(keys: &FlowKeys, seed: u64, dst: bool) -> u32 {
    if keys.l3 == L3Kind::NonIp {
        return 0;
    }
    let (addr, k) = if dst {
        (&keys.dst_addr, K2)
    } else {
        (&keys.src_addr, K0)
    };
    let (hi, lo) = words(addr);
    let h = fold(hi ^ seed ^ k, lo ^ K4);
    (h ^ (h >> 32)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::udp_meta;

    fn reversed(k: &FlowKeys) -> FlowKeys {
        FlowKeys {
            src_addr: k.dst_addr,
            dst_addr: k.src_addr,
            src_port: k.dst_port,
            dst_port: k.src_port,
            ..*k
        }
    }

    #[test]
    fn flow_hash_is_the_same_in_both_directions() {
        for f in 0..200 {
            let k = udp_meta(f % 7, f % 5, f, 0).keys;
            assert_eq!(flow_hash(&k, 1), flow_hash(&reversed(&k), 1));
        }
        // Same addresses, ports only swapped.
        let mut k = udp_meta(1, 1, 3, 0).keys;
        k.dst_addr = k.src_addr;
        assert_eq!(flow_hash(&k, 9), flow_hash(&reversed(&k), 9));
    }

    #[test]
    fn flow_hash_depends_on_seed_ports_and_protocol() {
        let k = udp_meta(1, 2, 3, 0).keys;
        assert_ne!(flow_hash(&k, 1), flow_hash(&k, 2));
        let mut k2 = k;
        k2.src_port += 1;
        assert_ne!(flow_hash(&k, 1), flow_hash(&k2, 1));
        let mut k3 = k;
        k3.protocol = 6;
        assert_ne!(flow_hash(&k, 1), flow_hash(&k3, 1));
    }

    #[test]
    fn ipv6_flow_label_replaces_the_ports() {
        let mut k = udp_meta(1, 2, 3, 0).keys;
        k.l3 = L3Kind::Ipv6;
        k.flow_label = 0x12345;
        let mut k2 = k;
        k2.src_port = 999;
        assert_eq!(flow_hash(&k, 1), flow_hash(&k2, 1));
        k2.flow_label = 0x54321;
        assert_ne!(flow_hash(&k, 1), flow_hash(&k2, 1));
    }

    #[test]
    fn non_ip_packets_hash_to_zero() {
        assert_eq!(flow_hash(&FlowKeys::default(), 77), 0);
        assert_eq!(host_hash(&FlowKeys::default(), 77, true), 0);
    }

    #[test]
    fn ten_thousand_flows_spread_evenly_over_1024_buckets() {
        let mut buckets = [0u32; 1024];
        for f in 0..10_240 {
            let k = udp_meta(f % 13, f % 11, f, 0).keys;
            buckets[(flow_hash(&k, 0x5eed) % 1024) as usize] += 1;
        }
        let max = *buckets.iter().max().unwrap();
        let empty = buckets.iter().filter(|&&b| b == 0).count();
        // A uniform hash puts ~10 per bucket; max ≈ 22 and ~0 empty buckets.
        assert!(max < 30, "max bucket {max}");
        assert!(empty < 5, "{empty} empty buckets");
    }

    #[test]
    fn host_hashes_separate_source_and_destination_roles() {
        let k = udp_meta(1, 1, 3, 0).keys;
        assert_ne!(host_hash(&k, 5, false), host_hash(&reversed(&k), 5, false));
        assert_eq!(
            host_hash(&k, 5, false),
            host_hash(&udp_meta(1, 9, 4, 0).keys, 5, false)
        );
    }
}
