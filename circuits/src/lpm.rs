//! Longest-prefix match from an address to a circuit index, for IPv4 and IPv6: a poptrie
//! (Asai and Ohara, SIGCOMM 2015), built once from a prefix list and then only read.
//!
//! The first 16 bits of the address index a direct table; each entry is either the answer or
//! a node. A node covers the next 6 bits with two 64-bit maps: `children` marks the slots that
//! continue in a child node, `leaves` marks where a run of equal answers starts among the
//! other slots. Children and leaves of a node are stored contiguously, so a slot's child or
//! answer is found by counting the set bits below it (`popcnt`): no pointers, 24 bytes per
//! node, and the answers of a node compressed to one per run. Prefixes are pushed to the
//! leaves at build time, so a lookup never backtracks: an IPv4 address takes the direct entry
//! and at most 3 nodes, an IPv6 address at most 19 (a /64 table: 8). Where every prefix under
//! a direct entry shares more bits (an IPv6 allocation such as a /32), the walk skips them
//! after one comparison (a `Skip` entry): a /56 under a /32 then takes 4 nodes instead of 7.
//!
//! Why this and not DIR-24-8: DIR-24-8 needs a 2^24-entry first table (64 MiB with 32-bit
//! answers) per family and has no IPv6 form; the poptrie is a few MiB for 100 000 prefixes,
//! so the hot part of the table stays in cache, and it treats both families alike. A
//! compressed binary (Patricia) trie walks one bit at a time, a dependent load per level.
//! BENCHMARKS.md has the measurements.
//!
//! A table is immutable after [`Lpm::build`]; reload builds a new one and publishes it
//! through [`crate::publish::Published`], so lookups never take a lock.

use crate::prefix::{mask, Family, Prefix};

/// Bits indexed by the direct table.
const DIRECT_BITS: u32 = 16;
/// Bits per node.
const STRIDE: u32 = 6;
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
    /// More nodes than a 31-bit index can address.
    #[error("the prefix table needs more than 2^31 nodes")]
    TooManyNodes,
}

#[derive(Debug, Clone, Copy, Default)]
struct Node {
    children: u64,
    leaves: u64,
    first_child: u32,
    first_leaf: u32,
}

/// The bits every prefix under one direct entry shares beyond the first 16: the walk starts
/// at `depth` instead of 16 after one comparison (path compression at the top, where an
/// operator's table is one or a few long allocations: 2001:db8::/32 saves 2 nodes).
#[derive(Debug, Clone, Copy)]
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

/// One family's trie.
#[derive(Debug, Clone)]
struct Trie {
    direct: Box<[u32]>,
    skips: Vec<Skip>,
    nodes: Vec<Node>,
    leaves: Vec<u32>,
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

/// The 6-bit slot of `bits` at `depth`.
#[inline(always)]
fn slot(bits: u128, depth: u32) -> u32 {
    ((bits << depth) >> (128 - STRIDE)) as u32
}

impl Trie {
    fn build(mut entries: Vec<Entry>) -> Result<Trie, BuildError> {
        // By length, then by address, and among equal prefixes the last given wins.
        entries.sort_by_key(|e| (e.len, e.bits));
        let mut direct = vec![LEAF_FLAG | NONE; 1 << DIRECT_BITS].into_boxed_slice();
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
        let mut trie = Trie {
            direct,
            skips: Vec::new(),
            nodes: Vec::new(),
            leaves: Vec::new(),
        };
        let mut start = 0;
        while start < deeper.len() {
            let top = deeper[start].bits >> (128 - DIRECT_BITS);
            let end = start
                + deeper[start..]
                    .iter()
                    .take_while(|e| e.bits >> (128 - DIRECT_BITS) == top)
                    .count();
            let group = &deeper[start..end];
            let inherited = trie.direct[top as usize] & !LEAF_FLAG;
            // The bits all prefixes of the group share, up to the shortest one's length.
            let differ = group.iter().fold(0, |d, e| d | (e.bits ^ group[0].bits));
            let shortest = group.iter().map(|e| u32::from(e.len)).min().unwrap_or(0);
            // At most 127: the comparison's mask shifts by it (a lone /128 skips to bit 127).
            let depth = differ.leading_zeros().min(shortest).min(127);
            let at = trie.reserve(1)?;
            if depth >= DIRECT_BITS + STRIDE {
                trie.fill(at, group, depth, inherited)?;
                trie.direct[top as usize] = SKIP_FLAG | trie.skips.len() as u32;
                trie.skips.push(Skip {
                    common: group[0].bits & mask(depth as u8),
                    depth,
                    outside: inherited,
                    root: at,
                });
            } else {
                trie.fill(at, group, DIRECT_BITS, inherited)?;
                trie.direct[top as usize] = at;
            }
            start = end;
        }
        trie.nodes.shrink_to_fit();
        trie.leaves.shrink_to_fit();
        Ok(trie)
    }

    fn reserve(&mut self, n: usize) -> Result<u32, BuildError> {
        let at = self.nodes.len();
        if at + n >= SKIP_FLAG as usize {
            return Err(BuildError::TooManyNodes);
        }
        self.nodes.resize(at + n, Node::default());
        Ok(at as u32)
    }

    /// Fills node `at`, which covers the bits from `depth`, from `entries` (none shorter than
    /// `depth`, all under this node, sorted by length then address); `inherited` is the
    /// answer of the longest prefix above the node.
    fn fill(
        &mut self,
        at: u32,
        entries: &[Entry],
        depth: u32,
        inherited: u32,
    ) -> Result<(), BuildError> {
        let mut answer = [inherited; 64];
        let mut below: [Vec<Entry>; 64] = std::array::from_fn(|_| Vec::new());
        for e in entries {
            let len = u32::from(e.len);
            let first = slot(e.bits, depth) as usize;
            if len <= depth + STRIDE {
                // Shorter ones come first, so a longer prefix overwrites what it refines.
                let count = 1usize << (depth + STRIDE - len);
                answer[first..first + count].fill(e.value);
            } else {
                below[first].push(*e);
            }
        }
        let mut node = Node::default();
        let mut last = None;
        for s in 0..64 {
            if below[s].is_empty() && last != Some(answer[s]) {
                node.leaves |= 1 << s;
                self.leaves.push(answer[s]);
                last = Some(answer[s]);
            } else if !below[s].is_empty() {
                node.children |= 1 << s;
            }
        }
        node.first_leaf = (self.leaves.len() - node.leaves.count_ones() as usize) as u32;
        let first_child = self.reserve(node.children.count_ones() as usize)?;
        node.first_child = first_child;
        self.nodes[at as usize] = node;
        let mut child = first_child;
        for (s, group) in below.iter().enumerate() {
            if !group.is_empty() {
                self.fill(child, group, depth + STRIDE, answer[s])?;
                child += 1;
            }
        }
        Ok(())
    }

    #[inline(always)]
    fn lookup(&self, key: u128) -> u32 {
        let mut entry = self.direct[(key >> (128 - DIRECT_BITS)) as usize];
        if entry & LEAF_FLAG != 0 {
            return entry & !LEAF_FLAG;
        }
        let mut depth = DIRECT_BITS;
        if entry & SKIP_FLAG != 0 {
            let skip = &self.skips[(entry & !SKIP_FLAG) as usize];
            // depth is at least 22 here, so the shift is in range.
            if (key ^ skip.common) & !(u128::MAX >> skip.depth) != 0 {
                return skip.outside;
            }
            entry = skip.root;
            depth = skip.depth;
        }
        loop {
            let node = &self.nodes[entry as usize];
            let bit = 1u64 << slot(key, depth);
            if node.children & bit != 0 {
                entry = node.first_child + (node.children & (bit - 1)).count_ones();
                depth += STRIDE;
            } else {
                let run = (node.leaves & (bit | (bit - 1))).count_ones();
                return self.leaves[(node.first_leaf + run - 1) as usize];
            }
        }
    }

    fn bytes(&self) -> usize {
        self.direct.len() * 4
            + self.nodes.len() * std::mem::size_of::<Node>()
            + self.leaves.len() * 4
    }
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
        Some(self.v4.lookup(u128::from(addr) << 96)).filter(|&v| v != NONE)
    }

    /// The circuit of an IPv6 address (as a host-order `u128`).
    #[inline]
    pub fn lookup_v6(&self, addr: u128) -> Option<u32> {
        Some(self.v6.lookup(addr)).filter(|&v| v != NONE)
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
        assert!(!lpm.v6.skips.is_empty() && !lpm.v4.skips.is_empty());
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
        for k in keys {
            let k = match family {
                Family::V4 => k & mask(32),
                Family::V6 => k,
            };
            let a = addr(family, k);
            prop_assert_eq!(lpm.lookup(a), linear_scan(set, a), "address {}", a);
        }
        Ok(())
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
