//! The ACK filter (sch_cake.c `cake_ack_filter`): when a pure TCP ACK joins a flow's queue,
//! find an older ACK of the same connection that the new one makes redundant, so it can be
//! dropped instead of sent. Works on facts cached at enqueue ([`AckEntry`]); the caller
//! owns the queue and unlinks the victim.

use crate::{FlowKeys, TcpAckInfo};

const ACK: u8 = 0x10;
const SYN: u8 = 0x02;
const ECE_CWR: u8 = 0xc0;

/// What the filter remembers about a queued packet.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct AckEntry {
    /// The packet's flow keys (exact 5-tuple comparison, not just the bucket).
    pub(super) keys: FlowKeys,
    /// TCP facts, or `None` for anything that is not TCP.
    pub(super) info: Option<TcpAckInfo>,
}

/// `a` is after `b` in TCP sequence space.
#[inline]
fn after(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) < 0
}

#[inline]
fn before(a: u32, b: u32) -> bool {
    after(b, a)
}

fn same_connection(a: &FlowKeys, b: &FlowKeys) -> bool {
    a.l3 == b.l3
        && a.src_port == b.src_port
        && a.dst_port == b.dst_port
        && a.src_addr == b.src_addr
        && a.dst_addr == b.dst_addr
}

/// A candidate may go only if it is a bare ACK (ECE/CWR aside) with harmless options and a
/// timestamp no newer than the trigger's.
fn may_drop(c: &TcpAckInfo, tsval: u32, tsecr: u32) -> bool {
    if c.flags & !ECE_CWR != ACK || c.other_options {
        return false;
    }
    match c.timestamp {
        Some((v, e)) => !after(v, tsval) && !after(e, tsecr),
        None => true,
    }
}

fn blocks(i: &TcpAckInfo) -> &[(u32, u32)] {
    &i.sack[..usize::from(i.sack_count.min(4))]
}

/// Compares SACK coverage of candidate `a` and trigger `b`: -1 when `a` covers something
/// `b` does not (or `a` carries a DSACK), 0 when equal, 1 when `b` covers strictly more.
fn sack_compare(a: &TcpAckInfo, b: &TcpAckInfo) -> i32 {
    let (sa, sb) = (blocks(a), blocks(b));
    if sa.is_empty() {
        return i32::from(!sb.is_empty());
    }
    if sb.is_empty() {
        return -1;
    }
    let (mut bytes_a, mut bytes_b) = (0u64, 0u64);
    for (n, &(start_a, end_a)) in sa.iter().enumerate() {
        let first = n == 0;
        // A first block below the cumulative ACK is a DSACK: always keep it.
        if first && before(start_a, a.ack_seq) {
            return -1;
        }
        bytes_a += u64::from(end_a.wrapping_sub(start_a));
        let mut found = false;
        for &(start_b, end_b) in sb {
            if first {
                bytes_b += u64::from(end_b.wrapping_sub(start_b));
            }
            if !after(start_b, start_a) && !before(end_b, end_a) {
                found = true;
                if !first {
                    break;
                }
            }
        }
        if !found {
            return -1;
        }
    }
    i32::from(bytes_b > bytes_a)
}

/// Looks for a redundant ACK. `order` yields the queued packets from the head, ending with
/// the trigger (the packet just appended); `entry` gives each one's facts. Returns the
/// position (in `order`) of the packet to drop, if any.
pub(super) fn find_redundant(
    order: impl Iterator<Item = u32>,
    entry: impl Fn(u32) -> AckEntry,
    trigger: u32,
    aggressive: bool,
) -> Option<u32> {
    let t = entry(trigger);
    let ti = t.info?;
    if ti.flags & (ACK | SYN) != ACK {
        return None;
    }
    let (tsval, tsecr) = ti.timestamp.unwrap_or((0, 0));
    let mut elig: Option<u32> = None;
    let mut elig_flags = 0u8;
    let mut elig_is_last = false;
    let mut found = 0i32;
    for slot in order {
        if slot == trigger {
            break;
        }
        elig_is_last = false;
        let c = entry(slot);
        let Some(ci) = c.info else { continue };
        if !same_connection(&c.keys, &t.keys) {
            continue;
        }
        // A change of ECE/CWR after the first eligible ACK means dropping it would lose
        // congestion signals: forget it.
        if elig.is_some() && ci.flags & ECE_CWR != elig_flags {
            elig = None;
            found -= 1;
        }
        if !may_drop(&ci, tsval, tsecr) || ci.payload_len != 0 || after(ci.ack_seq, ti.ack_seq) {
            continue;
        }
        let sack = sack_compare(&ci, &ti);
        if sack < 0 || (ci.ack_seq == ti.ack_seq && sack == 0) {
            continue;
        }
        if elig.is_none() {
            elig = Some(slot);
            elig_flags = ci.flags & ECE_CWR;
            elig_is_last = true;
        }
        if found > 0 {
            return elig;
        }
        found += 1;
    }
    // A lone eligible ACK right before the trigger, with the same ECE/CWR, may go too.
    if aggressive && elig_is_last && elig.is_some() && elig_flags == ti.flags & ECE_CWR {
        return elig;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::udp_meta;

    fn ack(seq: u32) -> AckEntry {
        let mut keys = udp_meta(1, 2, 3, 0).keys;
        keys.protocol = 6;
        AckEntry {
            keys,
            info: Some(TcpAckInfo {
                flags: ACK,
                ack_seq: seq,
                ..TcpAckInfo::default()
            }),
        }
    }

    fn run(q: &[AckEntry], aggressive: bool) -> Option<u32> {
        let n = q.len() as u32;
        find_redundant(0..n, |i| q[i as usize], n - 1, aggressive)
    }

    #[test]
    fn two_older_acks_lose_the_oldest_in_both_modes() {
        let q = [ack(100), ack(200), ack(300)];
        assert_eq!(run(&q, false), Some(0));
        assert_eq!(run(&q, true), Some(0));
    }

    #[test]
    fn a_lone_older_ack_goes_only_in_aggressive_mode() {
        let q = [ack(100), ack(200)];
        assert_eq!(run(&q, false), None);
        assert_eq!(run(&q, true), Some(0));
    }

    #[test]
    fn aggressive_mode_needs_the_lone_ack_adjacent_to_the_trigger() {
        let mut data = ack(0);
        data.info.as_mut().unwrap().payload_len = 100;
        let q = [ack(100), data, ack(200)];
        assert_eq!(run(&q, true), None);
    }

    #[test]
    fn data_syn_newer_acks_and_other_connections_are_kept() {
        let mut data = ack(100);
        data.info.as_mut().unwrap().payload_len = 1;
        let mut syn = ack(100);
        syn.info.as_mut().unwrap().flags = ACK | SYN;
        let mut other = ack(100);
        other.keys.src_port += 1;
        let mut opts = ack(100);
        opts.info.as_mut().unwrap().other_options = true;
        for keep in [data, syn, other, opts, ack(400)] {
            assert_eq!(run(&[keep, keep, ack(300)], false), None);
        }
        // A trigger that is not a bare-ACK candidate itself still works if it has ACK set…
        let mut trig = ack(300);
        trig.info.as_mut().unwrap().flags = ACK | 0x08;
        assert_eq!(run(&[ack(1), ack(2), trig], false), Some(0));
        // …but a SYN-ACK trigger never filters.
        assert_eq!(run(&[ack(1), ack(2), syn], false), None);
        // Same ack number and no SACK: nothing new, nothing dropped.
        assert_eq!(run(&[ack(300), ack(300), ack(300)], false), None);
    }

    #[test]
    fn ecn_flag_changes_protect_earlier_acks() {
        let mut ece = ack(150);
        ece.info.as_mut().unwrap().flags = ACK | 0x40;
        assert_eq!(run(&[ack(100), ece, ack(300)], false), None);
        assert_eq!(run(&[ack(100), ece, ece, ack(300)], false), Some(1));
    }

    #[test]
    fn newer_timestamps_and_dsacks_are_never_dropped() {
        let mut ts_new = ack(100);
        ts_new.info.as_mut().unwrap().timestamp = Some((50, 5));
        let mut trig = ack(300);
        trig.info.as_mut().unwrap().timestamp = Some((40, 5));
        assert_eq!(run(&[ts_new, ts_new, trig], false), None);
        trig.info.as_mut().unwrap().timestamp = Some((60, 5));
        assert_eq!(run(&[ts_new, ts_new, trig], false), Some(0));

        let mut dsack = ack(1000);
        {
            let i = dsack.info.as_mut().unwrap();
            i.sack[0] = (500, 600);
            i.sack_count = 1;
        }
        assert_eq!(run(&[dsack, dsack, ack(2000)], false), None);
    }

    #[test]
    fn sack_coverage_decides_equal_cumulative_acks() {
        let with_sack = |blocks: &[(u32, u32)]| {
            let mut a = ack(100);
            let i = a.info.as_mut().unwrap();
            for (n, b) in blocks.iter().enumerate() {
                i.sack[n] = *b;
            }
            i.sack_count = blocks.len() as u8;
            a
        };
        let small = with_sack(&[(200, 300)]);
        let big = with_sack(&[(200, 400)]);
        assert_eq!(run(&[small, small, big], false), Some(0));
        assert_eq!(
            run(&[big, big, small], false),
            None,
            "trigger must cover the candidate"
        );
        assert_eq!(run(&[ack(100), ack(100), small], false), Some(0));
        assert_eq!(run(&[small, small, ack(100)], false), None);
    }
}
