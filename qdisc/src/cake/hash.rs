//! Flow and host hashing (cake-spec.md §2 Keys): a cheap keyed, direction-symmetric hash of
//! the 5-tuple, built from folded 64×64→128-bit multiplies (wyhash's mixing step). It is
//! not SipHash: it costs about as much as jhash and is meant for spreading flows over
//! buckets, not for resisting an attacker who can observe bucket placement.

use crate::{FlowKeys, L3Kind};

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
    let src = u128::from_be_bytes(keys.src_addr);
    let dst = u128::from_be_bytes(keys.dst_addr);
    let (a, pa, b, pb) = if (src, sp) <= (dst, dp) {
        (&keys.src_addr, sp, &keys.dst_addr, dp)
    } else {
        (&keys.dst_addr, dp, &keys.src_addr, sp)
    };
    let (a_hi, a_lo) = words(a);
    let (b_hi, b_lo) = words(b);
    let ha = fold(a_hi ^ seed ^ K0, a_lo ^ K1);
    let hb = fold(b_hi ^ seed ^ K2, b_lo ^ K3);
    let rest = (u64::from(pa) << 48)
        | (u64::from(pb) << 32)
        | (u64::from(keys.protocol) << 24)
        | u64::from(label);
    let h = fold(ha ^ rest ^ K4, hb ^ seed.rotate_left(32) ^ K1);
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
