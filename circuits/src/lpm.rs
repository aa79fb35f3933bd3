//! Longest-prefix match from an address to a circuit index, for IPv4 and IPv6: a poptrie
//! (Asai and Ohara, SIGCOMM 2015) with wide nodes, built once from a prefix list and then only
//! read.
//!
//! The first 16 bits of the address index a direct table; each entry is either the answer or
//! a node. A node covers the next 8 bits: the top 2 pick one of its four 6-bit parts, and a
//! part has two 64-bit maps: `children` marks the slots that continue in a child node,
//! `leaves` marks where a run of equal answers starts among the other slots. Children and
//! leaves of a node are stored contiguously, so a slot's child or answer is found by counting
//! the set bits below it (`popcnt`): no pointers, 24 bytes per part, and the answers of a node
//! compressed to one per run (a run goes on across the parts of a node). Prefixes are pushed
//! to the leaves at build time, so a lookup never backtracks: an IPv4 address takes the direct
//! entry and at most 2 nodes (16 + 8 + 8 bits), an IPv6 address at most 14. Where every prefix
//! under a direct entry shares more bits (an IPv6 allocation such as a /32), the walk skips
//! them after one comparison (a `Skip` entry): a /56 under a /32 then takes 3 nodes.
//!
//! Why 8-bit nodes (four 6-bit parts) and not the paper's 6: an IPv4 /32 is 16 + 8 + 8 bits,
//! one dependent load fewer than 16 + 6 + 6 + 6, and only the part the address falls in is
//! read (one cache line). Why not DIR-24-8: it needs a 2^24-entry first table (64 MiB with
//! 32-bit answers) per family and has no IPv6 form; this table is a few MiB for 100 000
//! prefixes, so its hot part stays in cache, and it treats both families alike.
//! docs/circuits.md ("Why this lookup") has the measurements against the alternatives.
//!
//! [`Lpm::lookup_v4_batch`] and [`Lpm::lookup_v6_batch`] walk a burst of addresses a level at
//! a time, so the loads of different addresses overlap instead of each walk waiting on its
//! own chain of loads; the forwarder classifies a burst at a time anyway. Indices into the
//! tables are clamped (`min(len - 1)`) rather than checked: the compiler drops the bounds
//! checks, and a wrong index (a bug) gives a wrong answer, which the oracle tests catch, not
//! a panic in the data path.
//!
//! A table is immutable after [`Lpm::build`]; reload builds a new one and publishes it
//! through [`crate::publish::Published`], so lookups never take a lock.

use crate::prefix::{mask, Family, Prefix};

/// Bits indexed by the direct table.
const DIRECT_BITS: u32 = 16;
/// Bits per part of a node (one 64-bit map).
const PART_BITS: u32 = 6;
/// Bits per node that pick the part: a node is `1 << WIDE_BITS` parts.
const WIDE_BITS: u32 = 2;
/// Bits a node covers.
const STRIDE: u32 = WIDE_BITS + PART_BITS;
/// Addresses a batch lookup walks together: the forwarder's burst.
pub const BATCH: usize = 32;
/// A direct-table entry with this bit set holds an answer.
const LEAF_FLAG: u32 = 1 << 31;
/// A direct-table entry with this bit set (and not [`LEAF_FLAG`]) holds a [`Skip`] index;
/// with neither, a node index.
const SKIP_FLAG: u32 = 1 << 30;
/// The answer "no circuit".
const NONE: u32 = u32::MAX >> 1;

/// Why a table could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// A circuit index does not fit the table's answer width.
    #[error("circuit index {0} is too large for the prefix table (at most 2^31 - 2)")]
    IndexTooLarge(u32),
    /// More nodes than a 30-bit index can address.
    #[error("the prefix table needs more than 2^30 nodes")]
    TooManyNodes,
}

/// One 6-bit part of a node.
#[derive(Debug, Clone, Copy, Default)]
struct Part {
    children: u64,
    leaves: u64,
    /// The first part of the first child node.
    first_child: u32,
    /// The leaf of the first run that starts in this part; one less when the part's first
    /// slot continues a run from the part before.
    first_leaf: u32,
}

/// The bits every prefix under one direct entry shares beyond the first 16: the walk starts
/// at `depth` instead of 16 after one comparison (path compression at the top, where an
/// operator's table is one or a few long allocations: 2001:db8::/32 saves 2 nodes).
#[derive(Debug, Clone, Copy, Default)]
struct Skip {
    /// The shared bits (the top `depth` bits; the rest zero).
    common: u128,
    /// Where the walk resumes.
    depth: u32,
    /// The answer for an address under the direct entry that does not share them.
    outside: u32,
    /// The node at `depth`.
    root: u32,
}

/// A left-aligned address: IPv4 as the top of a `u64` (the walk never passes bit 64, and
/// 64-bit shifts are one instruction where 128-bit ones are several), IPv6 as a `u128`.
trait Key: Copy {
    /// The top 16 bits.
    fn direct(self) -> usize;
    /// The `STRIDE` bits at `depth`.
    fn slot(self, depth: u32) -> u32;
    /// True when the top `depth` bits differ from those of `common`.
    fn outside(self, common: u128, depth: u32) -> bool;
}

impl Key for u64 {
    #[inline(always)]
    fn direct(self) -> usize {
        (self >> (64 - DIRECT_BITS)) as usize
    }

    #[inline(always)]
    fn slot(self, depth: u32) -> u32 {
        // An IPv4 walk never goes deeper than bit 32.
        ((self << (depth & 63)) >> (64 - STRIDE)) as u32
    }

    #[inline(always)]
    fn outside(self, common: u128, depth: u32) -> bool {
        (self ^ (common >> 64) as u64) & !(u64::MAX >> (depth & 63)) != 0
    }
}

impl Key for u128 {
    #[inline(always)]
    fn direct(self) -> usize {
        (self >> (128 - DIRECT_BITS)) as usize
    }

    #[inline(always)]
    fn slot(self, depth: u32) -> u32 {
        ((self << (depth & 127)) >> (128 - STRIDE)) as u32
    }

    #[inline(always)]
    fn outside(self, common: u128, depth: u32) -> bool {
        (self ^ common) & !(u128::MAX >> (depth & 127)) != 0
    }
}

/// One family's trie.
#[derive(Debug, Clone)]
struct Trie {
    direct: Box<[u32; 1 << DIRECT_BITS]>,
    /// Never empty (a lookup clamps its index to the last element).
    skips: Box<[Skip]>,
    /// Never empty.
    parts: Box<[Part]>,
    /// Never empty.
    leaves: Box<[u32]>,
}

/// A prefix table for both families, answering with the circuit index given at build time.
#[derive(Debug, Clone)]
pub struct Lpm {
    v4: Trie,
    v6: Trie,
    prefixes: usize,
}

/// A prefix being built: its left-aligned bits, its length and its answer.
#[derive(Debug, Clone, Copy)]
struct Entry {
    bits: u128,
    len: u8,
    value: u32,
}

/// Element `i` of a slice known not to be empty, clamped to the last one: no bounds check
/// (the compiler sees the index is in range), and never a panic.
#[inline(always)]
fn at<T: Copy>(v: &[T], i: u32) -> T {
    v[(i as usize).min(v.len().wrapping_sub(1))]
}

/// The tables while they are built.
#[derive(Default)]
struct Builder {
    skips: Vec<Skip>,
    parts: Vec<Part>,
    leaves: Vec<u32>,
}

impl Builder {
    fn reserve(&mut self, nodes: usize) -> Result<u32, BuildError> {
        let at = self.parts.len();
        let n = nodes << WIDE_BITS;
        if at + n >= SKIP_FLAG as usize {
            return Err(BuildError::TooManyNodes);
        }
        self.parts.resize(at + n, Part::default());
        Ok(at as u32)
    }

    /// Fills the node whose first part is `at`, which covers the bits from `depth`, from
    /// `entries` (none shorter than `depth`, all under this node, sorted by length then
    /// address); `inherited` is the answer of the longest prefix above the node.
    fn fill(
        &mut self,
        at: u32,
        entries: &[Entry],
        depth: u32,
        inherited: u32,
    ) -> Result<(), BuildError> {
        const SLOTS: usize = 1 << STRIDE;
        let mut answer = [inherited; SLOTS];
        let mut below: Vec<Vec<Entry>> = vec![Vec::new(); SLOTS];
        for e in entries {
            let len = u32::from(e.len);
            let first = e.bits.slot(depth) as usize;
            if len <= depth + STRIDE {
                // Shorter ones come first, so a longer prefix overwrites what it refines.
                let count = 1usize << (depth + STRIDE - len);
                answer[first..first + count].fill(e.value);
            } else {
                below[first].push(*e);
            }
        }
        let children = below.iter().filter(|b| !b.is_empty()).count();
        let first_child = self.reserve(children)?;
        let mut child = first_child;
        // The runs go on across the parts: a part whose first slot continues the last run
        // has no leaf bit there, and its `first_leaf` is one past that run's leaf.
        let mut last = None;
        for p in 0..1usize << WIDE_BITS {
            let mut part = Part {
                first_child: child,
                first_leaf: self.leaves.len() as u32,
                ..Part::default()
            };
            for b in 0..64 {
                let s = (p << PART_BITS) | b;
                if !below[s].is_empty() {
                    part.children |= 1 << b;
                    child += 1 << WIDE_BITS;
                } else if last != Some(answer[s]) {
                    part.leaves |= 1 << b;
                    self.leaves.push(answer[s]);
                    last = Some(answer[s]);
                }
            }
            self.parts[at as usize + p] = part;
        }
        let mut child = first_child;
        for (s, group) in below.iter().enumerate() {
            if !group.is_empty() {
                self.fill(child, group, depth + STRIDE, answer[s])?;
                child += 1 << WIDE_BITS;
            }
        }
        Ok(())
    }
}

impl Trie {
    fn build(mut entries: Vec<Entry>) -> Result<Trie, BuildError> {
        // By length, then by address, and among equal prefixes the last given wins.
        entries.sort_by_key(|e| (e.len, e.bits));
        let mut direct: Box<[u32; 1 << DIRECT_BITS]> = vec![LEAF_FLAG | NONE; 1 << DIRECT_BITS]
            .into_boxed_slice()
            .try_into()
            .expect("the length is the array's");
        let mut deeper: Vec<Entry> = Vec::new();
        for e in &entries {
            if u32::from(e.len) <= DIRECT_BITS {
                let first = (e.bits >> (128 - DIRECT_BITS)) as usize;
                let count = 1usize << (DIRECT_BITS - u32::from(e.len));
                direct[first..first + count].fill(LEAF_FLAG | e.value);
            } else {
                deeper.push(*e);
            }
        }
        // Group the longer prefixes by their top 16 bits; each group is one subtree.
        deeper.sort_by_key(|e| (e.bits >> (128 - DIRECT_BITS), e.len, e.bits));
        let mut b = Builder::default();
        let mut start = 0;
        while start < deeper.len() {
            let top = deeper[start].bits >> (128 - DIRECT_BITS);
            let end = start
                + deeper[start..]
                    .iter()
                    .take_while(|e| e.bits >> (128 - DIRECT_BITS) == top)
                    .count();
            let group = &deeper[start..end];
            let inherited = direct[top as usize] & !LEAF_FLAG;
            // The bits all prefixes of the group share, up to the shortest one's length.
            let differ = group.iter().fold(0, |d, e| d | (e.bits ^ group[0].bits));
            let shortest = group.iter().map(|e| u32::from(e.len)).min().unwrap_or(0);
            // At most 127: the comparison's mask shifts by it (a lone /128 skips to bit 127).
            let depth = differ.leading_zeros().min(shortest).min(127);
            let at = b.reserve(1)?;
            if depth >= DIRECT_BITS + STRIDE {
                b.fill(at, group, depth, inherited)?;
                direct[top as usize] = SKIP_FLAG | b.skips.len() as u32;
                b.skips.push(Skip {
                    common: group[0].bits & mask(depth as u8),
                    depth,
                    outside: inherited,
                    root: at,
                });
            } else {
                b.fill(at, group, DIRECT_BITS, inherited)?;
                direct[top as usize] = at;
            }
            start = end;
        }
        // Lookups clamp their indices to the last element, so none may be empty.
        fn nonempty<T>(mut v: Vec<T>, filler: T) -> Box<[T]> {
            if v.is_empty() {
                v.push(filler);
            }
            v.into_boxed_slice()
        }
        Ok(Trie {
            direct,
            skips: nonempty(b.skips, Skip::default()),
            parts: nonempty(b.parts, Part::default()),
            leaves: nonempty(b.leaves, NONE),
        })
    }

    /// The answer for `key`.
    #[inline(always)]
    fn lookup<K: Key>(&self, key: K) -> u32 {
        let (mut entry, mut depth) = self.start(key);
        while entry & LEAF_FLAG == 0 {
            (entry, depth) = self.step(key, entry, depth);
        }
        entry & !LEAF_FLAG
    }

    /// How many dependent loads [`Trie::lookup`] makes for `key`: the direct entry, the
    /// skip, each node's part and the answer.
    fn loads<K: Key>(&self, key: K) -> u32 {
        let entry = self.direct[key.direct()];
        let mut loads = 1 + u32::from(entry & (LEAF_FLAG | SKIP_FLAG) == SKIP_FLAG);
        let (mut entry, mut depth) = self.start(key);
        while entry & LEAF_FLAG == 0 {
            loads += 1;
            match self.descend(key, entry, depth) {
                Ok(next) => (entry, depth) = next,
                Err(_) => {
                    loads += 1;
                    entry = LEAF_FLAG;
                }
            }
        }
        loads
    }

    /// The direct entry of `key`, past its skip if it has one: an answer (with
    /// [`LEAF_FLAG`]) or the node to walk from, and the depth there.
    #[inline(always)]
    fn start<K: Key>(&self, key: K) -> (u32, u32) {
        let entry = self.direct[key.direct()];
        if entry & (LEAF_FLAG | SKIP_FLAG) != SKIP_FLAG {
            return (entry, DIRECT_BITS);
        }
        let skip = at(&self.skips, entry & !SKIP_FLAG);
        if key.outside(skip.common, skip.depth) {
            (LEAF_FLAG | skip.outside, skip.depth)
        } else {
            (skip.root, skip.depth)
        }
    }

    /// One node of the walk: the child node to go on with, or the answer (with
    /// [`LEAF_FLAG`]).
    #[inline(always)]
    fn step<K: Key>(&self, key: K, node: u32, depth: u32) -> (u32, u32) {
        match self.descend(key, node, depth) {
            Ok(next) => next,
            Err(leaf) => (LEAF_FLAG | at(&self.leaves, leaf), depth),
        }
    }

    /// Where [`Trie::step`] goes from `node` for `key`: `Ok` the child node and its depth,
    /// `Err` the index of the answer in `leaves` (not yet read).
    #[inline(always)]
    fn descend<K: Key>(&self, key: K, node: u32, depth: u32) -> Result<(u32, u32), u32> {
        let s = key.slot(depth);
        let part = at(&self.parts, node + (s >> PART_BITS));
        let bit = 1u64 << (s & 63);
        if part.children & bit != 0 {
            let rank = (part.children & (bit - 1)).count_ones();
            Ok((part.first_child + (rank << WIDE_BITS), depth + STRIDE))
        } else {
            let run = (part.leaves & (bit | (bit - 1))).count_ones();
            // `run` is 0 when the slot continues the part before's last run.
            Err((part.first_leaf + run).wrapping_sub(1))
        }
    }

    /// The answers for up to [`BATCH`] keys, walked a level at a time so the loads of
    /// different keys are in flight together. Each level is two passes: the nodes of every
    /// key still walking, then the answers of those that reached one; a key's answer is read
    /// after its node, so in one pass the walk of one key would wait on both.
    #[inline(always)]
    fn lookup_batch<K: Key>(&self, keys: &[K], out: &mut [u32]) {
        const NO_LEAF: u32 = u32::MAX;
        let n = keys.len().min(out.len()).min(BATCH);
        let (keys, out) = (&keys[..n], &mut out[..n]);
        let mut entry = [0u32; BATCH];
        let mut depth = [0u32; BATCH];
        let mut leaf = [NO_LEAF; BATCH];
        let (entry, depth, leaf) = (&mut entry[..n], &mut depth[..n], &mut leaf[..n]);
        for (k, e) in keys.iter().zip(entry.iter_mut()) {
            *e = self.direct[k.direct()];
        }
        let mut walking = 0;
        for ((k, e), d) in keys.iter().zip(entry.iter_mut()).zip(depth.iter_mut()) {
            *d = DIRECT_BITS;
            if *e & (LEAF_FLAG | SKIP_FLAG) == SKIP_FLAG {
                (*e, *d) = self.start(*k);
            }
            walking |= !*e & LEAF_FLAG;
        }
        while walking != 0 {
            let lanes = keys.iter().zip(entry.iter_mut()).zip(depth.iter_mut());
            for (((k, e), d), l) in lanes.zip(leaf.iter_mut()) {
                if *e & LEAF_FLAG == 0 {
                    match self.descend(*k, *e, *d) {
                        Ok(next) => (*e, *d) = next,
                        Err(at) => {
                            *l = at;
                            *e = LEAF_FLAG;
                        }
                    }
                }
            }
            walking = 0;
            for (e, l) in entry.iter_mut().zip(leaf.iter_mut()) {
                if *l != NO_LEAF {
                    *e = LEAF_FLAG | at(&self.leaves, *l);
                    *l = NO_LEAF;
                }
                walking |= !*e & LEAF_FLAG;
            }
        }
        for (o, e) in out.iter_mut().zip(entry.iter()) {
            *o = *e & !LEAF_FLAG;
        }
    }

    fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.direct)
            + std::mem::size_of_val(&*self.skips)
            + std::mem::size_of_val(&*self.parts)
            + std::mem::size_of_val(&*self.leaves)
    }
}

/// `Some(answer)` unless it is [`NONE`].
#[inline(always)]
fn found(v: u32) -> Option<u32> {
    (v != NONE).then_some(v)
}

impl Lpm {
    /// Builds the table. Where the same prefix is given twice, the later answer wins.
    ///
    /// # Errors
    /// [`BuildError`] when an answer is 2^31 - 1 or more.
    pub fn build(prefixes: impl IntoIterator<Item = (Prefix, u32)>) -> Result<Lpm, BuildError> {
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        for (p, value) in prefixes {
            if value >= NONE {
                return Err(BuildError::IndexTooLarge(value));
            }
            let e = Entry {
                bits: p.bits & mask(p.len),
                len: p.len,
                value,
            };
            match p.family {
                Family::V4 => v4.push(e),
                Family::V6 => v6.push(e),
            }
        }
        let prefixes = v4.len() + v6.len();
        // A stable sort keeps the given order among equal prefixes; make "the later wins"
        // explicit by keeping only the last of each.
        let dedup = |v: &mut Vec<Entry>| {
            v.reverse();
            let mut seen = std::collections::HashSet::new();
            v.retain(|e| seen.insert((e.bits, e.len)));
        };
        dedup(&mut v4);
        dedup(&mut v6);
        Ok(Lpm {
            v4: Trie::build(v4)?,
            v6: Trie::build(v6)?,
            prefixes,
        })
    }

    /// The circuit of an IPv4 address (as a host-order `u32`).
    #[inline]
    pub fn lookup_v4(&self, addr: u32) -> Option<u32> {
        found(self.v4.lookup(u64::from(addr) << 32))
    }

    /// The circuits of a burst of IPv4 addresses, `out[i]` for `addrs[i]` (as many as the
    /// shorter of the two holds): the same answers as [`Lpm::lookup_v4`], cheaper per
    /// address, as the walks of [`BATCH`] addresses go down the trie side by side.
    pub fn lookup_v4_batch(&self, addrs: &[u32], out: &mut [Option<u32>]) {
        for (addrs, out) in addrs.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            let mut keys = [0u64; BATCH];
            for (k, &a) in keys.iter_mut().zip(addrs) {
                *k = u64::from(a) << 32;
            }
            let mut answers = [0u32; BATCH];
            self.v4.lookup_batch(&keys[..addrs.len()], &mut answers);
            for (o, &a) in out.iter_mut().zip(&answers) {
                *o = found(a);
            }
        }
    }

    /// [`Lpm::lookup_v4_batch`] for IPv6 addresses.
    pub fn lookup_v6_batch(&self, addrs: &[u128], out: &mut [Option<u32>]) {
        for (addrs, out) in addrs.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            let mut answers = [0u32; BATCH];
            self.v6.lookup_batch(addrs, &mut answers);
            for (o, &a) in out.iter_mut().zip(&answers) {
                *o = found(a);
            }
        }
    }

    /// The circuit of an IPv6 address (as a host-order `u128`).
    #[inline]
    pub fn lookup_v6(&self, addr: u128) -> Option<u32> {
        found(self.v6.lookup(addr))
    }

    /// The circuit of an address given as the parser's 16 bytes (`::ffff:a.b.c.d` for IPv4).
    #[inline]
    pub fn lookup_mapped(&self, is_v4: bool, addr: [u8; 16]) -> Option<u32> {
        let bits = u128::from_be_bytes(addr);
        if is_v4 {
            self.lookup_v4(bits as u32)
        } else {
            self.lookup_v6(bits)
        }
    }

    /// The circuit of an address.
    pub fn lookup(&self, addr: std::net::IpAddr) -> Option<u32> {
        match addr {
            std::net::IpAddr::V4(a) => self.lookup_v4(u32::from(a)),
            std::net::IpAddr::V6(a) => self.lookup_v6(u128::from(a)),
        }
    }

    /// How many loads a lookup of `addr` makes, each waiting on the one before (the
    /// benchmark reports their mean; a burst overlaps different addresses' chains, not one's).
    #[doc(hidden)]
    pub fn dependent_loads(&self, addr: std::net::IpAddr) -> u32 {
        match addr {
            std::net::IpAddr::V4(a) => self.v4.loads(u64::from(u32::from(a)) << 32),
            std::net::IpAddr::V6(a) => self.v6.loads(u128::from(a)),
        }
    }

    /// How many prefixes it was built from.
    pub fn len(&self) -> usize {
        self.prefixes
    }

    /// True when built from no prefix.
    pub fn is_empty(&self) -> bool {
        self.prefixes == 0
    }

    /// Memory held by the tables, in bytes.
    pub fn memory_bytes(&self) -> usize {
        self.v4.bytes() + self.v6.bytes()
    }
}

/// The naive answer: the longest prefix that matches, the later one among equals. The
/// oracle of the property tests and the fuzz target.
pub fn linear_scan(prefixes: &[(Prefix, u32)], addr: std::net::IpAddr) -> Option<u32> {
    let (family, key) = crate::prefix::key_of(addr);
    let mut best: Option<(u8, u32)> = None;
    for (p, v) in prefixes {
        let longer = match best {
            Some((len, _)) => p.len >= len,
            None => true,
        };
        if p.matches(family, key) && longer {
            best = Some((p.len, *v));
        }
    }
    best.map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    fn p(s: &str) -> Prefix {
        s.parse().unwrap()
    }

    #[test]
    fn nested_prefixes_answer_the_longest() {
        let table = [
            (p("0.0.0.0/0"), 0),
            (p("10.0.0.0/8"), 1),
            (p("10.1.0.0/16"), 2),
            (p("10.1.2.0/24"), 3),
            (p("10.1.2.3"), 4),
            (p("10.1.2.128/25"), 5),
            (p("2001:db8::/32"), 6),
            (p("2001:db8:1::/48"), 7),
            (p("2001:db8:1:2::/64"), 8),
            (p("2001:db8:1:2::1"), 9),
        ];
        let lpm = Lpm::build(table).unwrap();
        let q = |s: &str| lpm.lookup(s.parse().unwrap());
        assert_eq!(q("192.0.2.1"), Some(0));
        assert_eq!(q("10.9.9.9"), Some(1));
        assert_eq!(q("10.1.9.9"), Some(2));
        assert_eq!(q("10.1.2.4"), Some(3));
        assert_eq!(q("10.1.2.3"), Some(4));
        assert_eq!(q("10.1.2.200"), Some(5));
        assert_eq!(q("2001:db9::1"), None);
        assert_eq!(q("2001:db8:2::1"), Some(6));
        assert_eq!(q("2001:db8:1:3::1"), Some(7));
        assert_eq!(q("2001:db8:1:2::2"), Some(8));
        assert_eq!(q("2001:db8:1:2::1"), Some(9));
        let mapped = u128::from(u32::from(Ipv4Addr::new(10, 1, 2, 3))) | 0xffff << 32;
        assert_eq!(lpm.lookup_mapped(true, mapped.to_be_bytes()), Some(4));
        assert_eq!(lpm.len(), 10);
    }

    #[test]
    fn skipped_bits_are_compared_before_the_walk() {
        let table = [
            (p("2001:db8::/16"), 1),
            (p("2001:db8:0:100::/56"), 2),
            (p("2001:db8:0:200::/56"), 3),
            (p("2001:db8:0:200::/64"), 4),
            (p("2002::1/128"), 5),
            (p("10.20.30.40"), 6),
        ];
        let lpm = Lpm::build(table).unwrap();
        let q = |s: &str| lpm.lookup(s.parse().unwrap());
        assert_eq!(q("2001:db8:0:100::9"), Some(2));
        assert_eq!(q("2001:db8:0:200::9"), Some(4));
        assert_eq!(q("2001:db8:0:201::9"), Some(3));
        assert_eq!(
            q("2001:db9::1"),
            Some(1),
            "outside the shared bits: the /16"
        );
        assert_eq!(q("2001:db8:0:300::1"), Some(1));
        assert_eq!(q("2002::1"), Some(5));
        assert_eq!(q("2002::"), None);
        assert_eq!(q("2002::3"), None);
        assert_eq!(q("10.20.30.40"), Some(6));
        assert_eq!(q("10.20.30.41"), None);
        assert_eq!(q("10.20.31.40"), None);
        let skipped = |t: &Trie| {
            t.direct
                .iter()
                .any(|&e| e & (LEAF_FLAG | SKIP_FLAG) == SKIP_FLAG)
        };
        assert!(skipped(&lpm.v6) && skipped(&lpm.v4));
    }

    #[test]
    fn an_empty_table_and_a_later_duplicate() {
        let lpm = Lpm::build([]).unwrap();
        assert!(lpm.is_empty());
        assert_eq!(lpm.lookup_v4(1), None);
        let lpm = Lpm::build([(p("10.0.0.0/8"), 1), (p("10.0.0.0/8"), 2)]).unwrap();
        assert_eq!(lpm.lookup("10.0.0.1".parse().unwrap()), Some(2));
        assert_eq!(
            Lpm::build([(p("10.0.0.0/8"), NONE)]).unwrap_err(),
            BuildError::IndexTooLarge(NONE)
        );
    }

    /// Prefixes clustered under a few roots so that lengths overlap and nest, as in an
    /// operator's table.
    fn prefix_set(family: Family) -> impl Strategy<Value = Vec<(Prefix, u32)>> {
        let bits = family.bits();
        (
            prop::collection::vec(any::<u128>(), 1..4),
            prop::collection::vec((0usize..4, any::<u128>(), 0..=bits), 0..120),
        )
            .prop_map(move |(roots, picks)| {
                picks
                    .into_iter()
                    .enumerate()
                    .map(|(i, (r, noise, len))| {
                        let root = roots[r % roots.len()];
                        // Share the root's top 20 bits, vary the rest.
                        let bits = (root & mask(20)) | (noise & !mask(20));
                        let bits = match family {
                            Family::V4 => bits & mask(32),
                            Family::V6 => bits,
                        };
                        (
                            Prefix {
                                family,
                                bits: bits & mask(len),
                                len,
                            },
                            i as u32,
                        )
                    })
                    .collect()
            })
    }

    fn addr(family: Family, bits: u128) -> IpAddr {
        match family {
            Family::V4 => IpAddr::V4(Ipv4Addr::from((bits >> 96) as u32)),
            Family::V6 => IpAddr::V6(Ipv6Addr::from(bits)),
        }
    }

    fn agrees(
        set: &[(Prefix, u32)],
        probes: &[(usize, u128)],
        family: Family,
    ) -> Result<(), TestCaseError> {
        let lpm = Lpm::build(set.iter().copied()).unwrap();
        // Probe each prefix's first and last address, its neighbours, and random addresses.
        let mut keys: Vec<u128> = Vec::new();
        for (p, _) in set {
            let last = p.bits | !mask(p.len);
            keys.extend([
                p.bits,
                last,
                p.bits.wrapping_sub(1 << 96),
                last.wrapping_add(1),
            ]);
        }
        for &(i, noise) in probes {
            match set.get(i % set.len().max(1)) {
                Some((p, _)) => keys.push(p.bits | (noise & !mask(p.len))),
                None => keys.push(noise),
            }
        }
        let keys: Vec<u128> = keys
            .into_iter()
            .map(|k| match family {
                Family::V4 => k & mask(32),
                Family::V6 => k,
            })
            .collect();
        let expected: Vec<Option<u32>> = keys
            .iter()
            .map(|&k| linear_scan(set, addr(family, k)))
            .collect();
        for (&k, &want) in keys.iter().zip(&expected) {
            let a = addr(family, k);
            prop_assert_eq!(lpm.lookup(a), want, "address {}", a);
        }
        // The batch walk: bursts of BATCH and a shorter last one, the same answers.
        let mut batch = vec![Some(u32::MAX); keys.len()];
        match family {
            Family::V4 => {
                let addrs: Vec<u32> = keys.iter().map(|&k| (k >> 96) as u32).collect();
                lpm.lookup_v4_batch(&addrs, &mut batch);
            }
            Family::V6 => lpm.lookup_v6_batch(&keys, &mut batch),
        }
        for ((&k, &want), &got) in keys.iter().zip(&expected).zip(&batch) {
            prop_assert_eq!(got, want, "batch, address {}", addr(family, k));
        }
        Ok(())
    }

    #[test]
    fn runs_go_on_across_the_parts_of_a_node() {
        // Under 10.1.0.0/16 the node at bit 16 has four parts of 64 /24s each: a /18 fills
        // part 1, a host below it puts a child in part 0, and the /8 answers around them.
        let table = [
            (p("10.0.0.0/8"), 1),
            (p("10.1.0.5"), 2),
            (p("10.1.64.0/18"), 3),
            (p("10.1.130.0/23"), 3),
            (p("10.1.255.255"), 4),
        ];
        let lpm = Lpm::build(table).unwrap();
        for (a, want) in [
            ("10.1.0.4", Some(1)),
            ("10.1.0.5", Some(2)),
            ("10.1.63.255", Some(1)),
            ("10.1.64.0", Some(3)),
            ("10.1.127.255", Some(3)),
            ("10.1.128.0", Some(1)),
            ("10.1.131.1", Some(3)),
            ("10.1.132.0", Some(1)),
            ("10.1.255.254", Some(1)),
            ("10.1.255.255", Some(4)),
            ("11.0.0.0", None),
        ] {
            let addr: Ipv4Addr = a.parse().unwrap();
            assert_eq!(lpm.lookup_v4(addr.into()), want, "{a}");
            assert_eq!(
                lpm.lookup(IpAddr::V4(addr)),
                linear_scan(&table, IpAddr::V4(addr))
            );
        }
        // An empty burst and a burst longer than the output: only what fits is written.
        lpm.lookup_v4_batch(&[], &mut []);
        let mut out = [None; 2];
        lpm.lookup_v4_batch(&[0x0a01_0005, 0x0a01_4000, 0x0a01_0004], &mut out);
        assert_eq!(out, [Some(2), Some(3)]);
    }

    #[test]
    fn memory_per_prefix_is_small() {
        // 4 096 hosts in one /16: 2 levels of nodes, about 2 leaves per host.
        let hosts = (0..4096u32).map(|i| {
            let a = Ipv4Addr::from(0x6440_0000 | (i * 13 % 65536));
            (Prefix::new(IpAddr::V4(a), 32), i)
        });
        let lpm = Lpm::build(hosts).unwrap();
        // The two direct tables (2 x 256 KiB) and under 64 bytes per prefix.
        let per_prefix = (lpm.memory_bytes() - 2 * 4 * (1 << DIRECT_BITS)) / lpm.len();
        assert!(per_prefix < 64, "{per_prefix} bytes per prefix");
    }

    proptest! {
        #[test]
        fn ipv4_matches_the_linear_scan(set in prefix_set(Family::V4), probes in prop::collection::vec((any::<usize>(), any::<u128>()), 32)) {
            agrees(&set, &probes, Family::V4)?;
        }

        #[test]
        fn ipv6_matches_the_linear_scan(set in prefix_set(Family::V6), probes in prop::collection::vec((any::<usize>(), any::<u128>()), 32)) {
            agrees(&set, &probes, Family::V6)?;
        }
    }
}
