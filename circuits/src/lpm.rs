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
//! under a direct entry shares more bits, the walk skips them after one comparison (a `Skip`
//! entry).
//!
//! IPv6 tables are an operator's delegations (/48, /56, /64, a few /128) out of a few /32
//! allocations, so the top 32 bits of an address nearly always name one of a handful of
//! /32s. A /32 with [`BLOCK_MIN`] longer prefixes under it is a *block*: a hash of the top 32
//! bits finds it in a small table that stays in cache, and its root is one 16-bit node at bit
//! 32. A /48 is then answered by the block, its root and the answer (3 dependent loads), a
//! /56 by one node more, a /64 by two, where the direct table and the nodes at bits 16, 24,
//! 32 and 40 took 7 loads for a /56 (`Lpm::dependent_loads` counts them; the benchmark prints
//! the mean). Several /32s under one top 16 bits each get their block, which a skip cannot.
//!
//! Why 8-bit nodes (four 6-bit parts) and not the paper's 6: an IPv4 /32 is 16 + 8 + 8 bits,
//! one dependent load fewer than 16 + 6 + 6 + 6, and only the part the address falls in is
//! read (one cache line). Why not DIR-24-8: it needs a 2^24-entry first table (64 MiB with
//! 32-bit answers) per family and has no IPv6 form; this table is a few MiB for 100 000
//! prefixes, so its hot part stays in cache, and it treats both families alike.
//! docs/circuits.md ("Why this lookup") has the measurements against the alternatives.
//!
//! [`Lpm::lookup_v4_batch`] walks a burst of addresses a level at a time, so the loads of
//! different addresses overlap instead of each walk waiting on its own chain of loads; the
//! forwarder classifies a burst at a time anyway. An IPv6 burst ([`Lpm::lookup_v6_batch`])
//! is looked up one address after the other (its documentation says why). Bit counts use the
//! CPU's `popcnt` where it has one (`crate::popcnt`, chosen at run time). Indices into the
//! tables are clamped (`min(len - 1)`) rather than checked: the compiler drops the bounds
//! checks, and a wrong index (a bug) gives a wrong answer, which the oracle tests catch, not
//! a panic in the data path.
//!
//! A table is immutable after [`Lpm::build`]; reload builds a new one and publishes it
//! through [`crate::publish::Published`], so lookups never take a lock.

use crate::popcnt::with_popcnt;
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
/// The length of the IPv6 blocks: an address whose top 32 bits are a block's goes straight to
/// that block's root node (see [`Block`]).
const BLOCK_BITS: u32 = 32;
/// Bits a block's root node covers: a /48 is answered there, a /56 one node below.
const BLOCK_STRIDE: u32 = 16;
/// The fewest prefixes longer than /32 under one IPv6 /32 for it to become a block: a
/// block's root is 1024 parts (24 KiB) however few prefixes it holds.
pub const BLOCK_MIN: usize = 1024;
/// At most `1 << MAX_BLOCK_BITS` slots in the block hash; /32s that do not find a slot of
/// their own are walked from the direct table instead.
const MAX_BLOCK_BITS: u32 = 12;
/// Fibonacci hashing of the top 32 bits (2^32 / golden ratio): consecutive /32s, the blocks
/// of one /29, land far apart.
const BLOCK_HASH: u32 = 0x9e37_79b9;

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

/// An IPv6 /32 that holds many longer prefixes, an operator's allocation: lookups under it
/// skip the direct table and the nodes at bits 16 to 32 (or a [`Skip`]), which every address
/// under it shares, and start at its root, one [`BLOCK_STRIDE`]-bit node (1024 parts) at bit
/// 32. The blocks are found by a hash of the top 32 bits into a small table with at most one
/// block per slot, so a lookup makes one probe (the table's few lines stay in cache) and
/// compares the key; several /32s under one top 16 bits (the /32s of a /29, two allocations
/// in 2a02::/16) each get a block, where a skip could serve only one.
#[derive(Debug, Clone, Copy)]
struct Block {
    /// The top 32 bits, or `u64::MAX` for an empty slot (no address matches it).
    key: u64,
    /// The first part of the root node.
    root: u32,
}

impl Default for Block {
    fn default() -> Block {
        Block {
            key: u64::MAX,
            root: 0,
        }
    }
}

/// A left-aligned address: IPv4 as the top of a `u64` (the walk never passes bit 64, and
/// 64-bit shifts are one instruction where 128-bit ones are several), IPv6 as a `u128`.
trait Key: Copy {
    /// Whether the family has [`Block`]s (IPv6; an IPv4 walk has nothing to skip below its
    /// top 16 bits).
    const BLOCKS: bool;
    /// The top 16 bits.
    fn direct(self) -> usize;
    /// The top 32 bits (the block key).
    fn top32(self) -> u32;
    /// The [`BLOCK_STRIDE`] bits below the top 32 (the slot in a block's root).
    fn block_slot(self) -> u32;
    /// The `STRIDE` bits at `depth`.
    fn slot(self, depth: u32) -> u32;
    /// True when the top `depth` bits differ from those of `common`.
    fn outside(self, common: u128, depth: u32) -> bool;
}

impl Key for u64 {
    const BLOCKS: bool = false;

    #[inline(always)]
    fn direct(self) -> usize {
        (self >> (64 - DIRECT_BITS)) as usize
    }

    #[inline(always)]
    fn top32(self) -> u32 {
        (self >> 32) as u32
    }

    #[inline(always)]
    fn block_slot(self) -> u32 {
        (self >> (64 - BLOCK_BITS - BLOCK_STRIDE)) as u32 & ((1 << BLOCK_STRIDE) - 1)
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
    const BLOCKS: bool = true;

    #[inline(always)]
    fn direct(self) -> usize {
        (self >> (128 - DIRECT_BITS)) as usize
    }

    #[inline(always)]
    fn top32(self) -> u32 {
        (self >> 96) as u32
    }

    #[inline(always)]
    fn block_slot(self) -> u32 {
        (self >> (128 - BLOCK_BITS - BLOCK_STRIDE)) as u32 & ((1 << BLOCK_STRIDE) - 1)
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
    /// Never empty: at least two slots, so the hash shift is below 32.
    blocks: Box<[Block]>,
    /// `32 - log2(blocks.len())`: the hash's top bits pick the slot.
    block_shift: u32,
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
    /// Room for `parts` more parts: the index of the first.
    fn reserve(&mut self, parts: usize) -> Result<u32, BuildError> {
        let at = self.parts.len();
        if at + parts >= SKIP_FLAG as usize {
            return Err(BuildError::TooManyNodes);
        }
        self.parts.resize(at + parts, Part::default());
        Ok(at as u32)
    }

    /// Fills the node whose first part is `at`, which covers the `stride` bits from `depth`
    /// ([`STRIDE`], or [`BLOCK_STRIDE`] for a block's root; its children are always
    /// `STRIDE` wide), from `entries` (none shorter than `depth`, all under this node, sorted
    /// by length then address); `inherited` is the answer of the longest prefix above the
    /// node.
    fn fill(
        &mut self,
        at: u32,
        entries: &[Entry],
        depth: u32,
        stride: u32,
        inherited: u32,
    ) -> Result<(), BuildError> {
        let slots = 1usize << stride;
        let slot = |e: &Entry| ((e.bits << depth) >> (128 - stride)) as usize;
        let mut answer = vec![inherited; slots];
        // The prefixes that go on below, by slot (a stable sort: still by length in each).
        let mut below: Vec<Entry> = Vec::new();
        // One bit per slot that has a child.
        let mut has_child = vec![0u64; slots >> PART_BITS];
        for e in entries {
            let len = u32::from(e.len);
            let first = slot(e);
            if len <= depth + stride {
                // Shorter ones come first, so a longer prefix overwrites what it refines.
                let count = 1usize << (depth + stride - len);
                answer[first..first + count].fill(e.value);
            } else {
                below.push(*e);
                has_child[first >> PART_BITS] |= 1 << (first & 63);
            }
        }
        below.sort_by_key(slot);
        let children: u32 = has_child.iter().map(|m| m.count_ones()).sum();
        let first_child = self.reserve((children as usize) << WIDE_BITS)?;
        let mut child = first_child;
        // The runs go on across the parts: a part whose first slot continues the last run
        // has no leaf bit there, and its `first_leaf` is one past that run's leaf.
        let mut last = None;
        for (p, &children) in has_child.iter().enumerate() {
            let mut part = Part {
                children,
                first_child: child,
                first_leaf: self.leaves.len() as u32,
                ..Part::default()
            };
            child += children.count_ones() << WIDE_BITS;
            for b in 0..64 {
                let s = (p << PART_BITS) | b;
                if part.children & (1 << b) == 0 && last != Some(answer[s]) {
                    part.leaves |= 1 << b;
                    self.leaves.push(answer[s]);
                    last = Some(answer[s]);
                }
            }
            self.parts[at as usize + p] = part;
        }
        let mut child = first_child;
        for group in below.chunk_by(|a, b| slot(a) == slot(b)) {
            self.fill(
                child,
                group,
                depth + stride,
                STRIDE,
                answer[slot(&group[0])],
            )?;
            child += 1 << WIDE_BITS;
        }
        Ok(())
    }
}

/// The slot of the block with top 32 bits `top` in a table of `1 << (32 - shift)` slots.
#[inline(always)]
fn block_slot(top: u32, shift: u32) -> u32 {
    top.wrapping_mul(BLOCK_HASH) >> shift
}

/// The hash table of the /32s in `keys`: the slots, each with the key that owns it (at most
/// one), and the shift. The smallest power of two from twice the keys up in which no two
/// collide; past `1 << MAX_BLOCK_BITS` slots, a key whose slot is taken is left out.
fn place_blocks(keys: &[u32]) -> (Vec<Option<u32>>, u32) {
    let mut bits = (2 * keys.len())
        .next_power_of_two()
        .trailing_zeros()
        .clamp(1, MAX_BLOCK_BITS);
    loop {
        let shift = 32 - bits;
        let mut slots = vec![None; 1 << bits];
        let mut collided = false;
        for &k in keys {
            let slot = &mut slots[block_slot(k, shift) as usize];
            if slot.is_none() {
                *slot = Some(k);
            } else {
                collided = true;
            }
        }
        if !collided || bits >= MAX_BLOCK_BITS {
            return (slots, shift);
        }
        bits += 1;
    }
}

impl Trie {
    /// The trie of `entries`; a /32 with at least `block_min` longer prefixes under it
    /// becomes a [`Block`] (for IPv4 pass `usize::MAX`).
    fn build(mut entries: Vec<Entry>, block_min: usize) -> Result<Trie, BuildError> {
        // By length, then by address, and among equal prefixes the last given wins.
        entries.sort_by_key(|e| (e.len, e.bits));
        let top32 = |e: &Entry| (e.bits >> (128 - BLOCK_BITS)) as u32;
        let below_block = |e: &Entry| u32::from(e.len) > BLOCK_BITS;
        let mut counts = std::collections::HashMap::new();
        for e in entries.iter().filter(|e| below_block(e)) {
            *counts.entry(top32(e)).or_insert(0usize) += 1;
        }
        let mut keys: Vec<u32> = counts
            .into_iter()
            .filter(|&(_, n)| n >= block_min)
            .map(|(k, _)| k)
            .collect();
        keys.sort_unstable();
        let (slots, block_shift) = place_blocks(&keys);
        let placed: std::collections::HashSet<u32> = slots.iter().flatten().copied().collect();
        let (mut under, entries): (Vec<Entry>, Vec<Entry>) = entries
            .into_iter()
            .partition(|e| below_block(e) && placed.contains(&top32(e)));
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
            let at = b.reserve(1 << WIDE_BITS)?;
            if depth >= DIRECT_BITS + STRIDE {
                b.fill(at, group, depth, STRIDE, inherited)?;
                direct[top as usize] = SKIP_FLAG | b.skips.len() as u32;
                b.skips.push(Skip {
                    common: group[0].bits & mask(depth as u8),
                    depth,
                    outside: inherited,
                    root: at,
                });
            } else {
                b.fill(at, group, DIRECT_BITS, STRIDE, inherited)?;
                direct[top as usize] = at;
            }
            start = end;
        }
        // Each block's root, from the prefixes under it; above them the longest prefix of
        // 32 bits or fewer that covers the /32 (the last such in `entries`' order).
        under.sort_by_key(|e| (top32(e), e.len, e.bits));
        let mut roots = std::collections::HashMap::new();
        for group in under.chunk_by(|a, b| top32(a) == top32(b)) {
            let inherited = entries
                .iter()
                .rev()
                .find(|e| u32::from(e.len) <= BLOCK_BITS && group[0].bits & mask(e.len) == e.bits)
                .map_or(NONE, |e| e.value);
            let root = b.reserve(1 << (BLOCK_STRIDE - PART_BITS))?;
            b.fill(root, group, BLOCK_BITS, BLOCK_STRIDE, inherited)?;
            roots.insert(top32(&group[0]), root);
        }
        let blocks = slots
            .iter()
            .map(|slot| match slot {
                Some(k) => Block {
                    key: u64::from(*k),
                    root: roots[k],
                },
                None => Block::default(),
            })
            .collect();
        // Lookups clamp their indices to the last element, so none may be empty.
        fn nonempty<T>(mut v: Vec<T>, filler: T) -> Box<[T]> {
            if v.is_empty() {
                v.push(filler);
            }
            v.into_boxed_slice()
        }
        Ok(Trie {
            blocks,
            block_shift,
            direct,
            skips: nonempty(b.skips, Skip::default()),
            parts: nonempty(b.parts, Part::default()),
            leaves: nonempty(b.leaves, NONE),
        })
    }

    /// The answer for `key`.
    #[inline(always)]
    fn lookup<K: Key>(&self, key: K) -> u32 {
        let (child, at, depth) = match self.block_start(key) {
            Some(step) => step,
            None => match self.start(key) {
                (entry, _) if entry & LEAF_FLAG != 0 => return entry & !LEAF_FLAG,
                (node, depth) => (true, node, depth),
            },
        };
        if !child {
            return self::at(&self.leaves, at);
        }
        self.walk(key, at, depth)
    }

    /// How many dependent loads [`Trie::lookup`] makes for `key`: the block (if `key` is
    /// under one) or the direct entry and the skip, each node's part and the answer.
    fn loads<K: Key>(&self, key: K) -> u32 {
        let (mut loads, (mut child, mut at, mut depth)) = match self.block_start(key) {
            Some(step) => (2, step),
            None => {
                let entry = self.direct[key.direct()];
                let skip = entry & (LEAF_FLAG | SKIP_FLAG) == SKIP_FLAG;
                match self.start(key) {
                    (entry, _) if entry & LEAF_FLAG != 0 => return 1 + u32::from(skip),
                    (node, depth) => (1 + u32::from(skip), (true, node, depth)),
                }
            }
        };
        while child {
            (child, at, depth) = self.descend(key, at, depth);
            loads += 1;
        }
        loads + 1
    }

    /// For a `key` under a [`Block`], the step through the block's root, as
    /// [`Trie::descend`] answers; `None` for any other key (and always for IPv4).
    #[inline(always)]
    fn block_start<K: Key>(&self, key: K) -> Option<(bool, u32, u32)> {
        if !K::BLOCKS {
            return None;
        }
        let top = key.top32();
        let block = at(&self.blocks, block_slot(top, self.block_shift));
        if block.key != u64::from(top) {
            return None;
        }
        let s = key.block_slot();
        Some(self.descend_part(block.root + (s >> PART_BITS), s, BLOCK_BITS + BLOCK_STRIDE))
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

    /// One node of the walk, from `node` at `depth` for `key`: `(true, child, its depth)`,
    /// or `(false, the index of the answer in leaves, _)`.
    #[inline(always)]
    fn descend<K: Key>(&self, key: K, node: u32, depth: u32) -> (bool, u32, u32) {
        let s = key.slot(depth);
        self.descend_part(node + (s >> PART_BITS), s, depth + STRIDE)
    }

    /// [`Trie::descend`] from part `part`, at slot `s` (its low 6 bits are the slot in the
    /// part); a child is at depth `below`. Without a branch on which it is (a burst's
    /// addresses end at different depths, so the branch would be mispredicted): the child
    /// is counted among the children below it, the answer among the runs up to it, one
    /// population count of one map or the other.
    #[inline(always)]
    fn descend_part(&self, part: u32, s: u32, below: u32) -> (bool, u32, u32) {
        let part = at(&self.parts, part);
        let bit = 1u64 << (s & 63);
        let child = part.children & bit != 0;
        let (map, upto, first) = if child {
            (part.children, bit - 1, part.first_child)
        } else {
            // Counting the slot itself: `rank` is 0 when the slot continues the part
            // before's last run, whose answer is the one before `first_leaf`.
            (
                part.leaves,
                bit | (bit - 1),
                part.first_leaf.wrapping_sub(1),
            )
        };
        let rank = (map & upto).count_ones();
        // A child node is `1 << WIDE_BITS` parts.
        let to = first.wrapping_add(rank << (WIDE_BITS * u32::from(child)));
        (child, to, below)
    }

    /// The answers for up to [`BATCH`] IPv4 keys, walked a level at a time so the loads of
    /// different keys are in flight together. Each level is two passes: the nodes of every
    /// key still walking, then the answers of those that reached one; a key's answer is read
    /// after its node, so in one pass the walk of one key would wait on both. (IPv6 bursts
    /// are looked up one address after the other: see [`Lpm::lookup_v6_batch`].)
    #[inline(always)]
    fn lookup_batch(&self, keys: &[u64], out: &mut [u32]) {
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
                        (true, node, below) => (*e, *d) = (node, below),
                        (false, answer, _) => (*e, *l) = (LEAF_FLAG, answer),
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

    /// The answer for `key` from `node` at `depth` down, one node after the other.
    #[inline(always)]
    fn walk<K: Key>(&self, key: K, node: u32, depth: u32) -> u32 {
        let (mut child, mut to, mut depth) = (true, node, depth);
        while child {
            (child, to, depth) = self.descend(key, to, depth);
        }
        at(&self.leaves, to)
    }

    fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.blocks)
            + std::mem::size_of_val(&*self.direct)
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
        Lpm::build_with_block_min(prefixes, BLOCK_MIN)
    }

    /// [`Lpm::build`], with an IPv6 /32 a block once it holds `block_min` longer prefixes
    /// instead of [`BLOCK_MIN`]: the tests and the fuzz target make blocks of a few prefixes.
    ///
    /// # Errors
    /// As [`Lpm::build`].
    #[doc(hidden)]
    pub fn build_with_block_min(
        prefixes: impl IntoIterator<Item = (Prefix, u32)>,
        block_min: usize,
    ) -> Result<Lpm, BuildError> {
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
            v4: Trie::build(v4, usize::MAX)?,
            v6: Trie::build(v6, block_min)?,
            prefixes,
        })
    }

    /// The circuit of an IPv4 address (as a host-order `u32`).
    #[inline]
    pub fn lookup_v4(&self, addr: u32) -> Option<u32> {
        found(with_popcnt(
            #[inline(always)]
            || self.v4.lookup(u64::from(addr) << 32),
        ))
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
            with_popcnt(
                #[inline(always)]
                || self.v4.lookup_batch(&keys[..addrs.len()], &mut answers),
            );
            for (o, &a) in out.iter_mut().zip(&answers) {
                *o = found(a);
            }
        }
    }

    /// [`Lpm::lookup_v4_batch`] for IPv6 addresses. Looked up one after the other, not a
    /// level at a time: under a block most walks are 3 or 4 loads, the CPU already overlaps
    /// the walks of consecutive addresses, and the passes over the burst cost more than
    /// they hide (paired, 100 000 prefixes: 13-14 ns per lookup against 18-25, 118
    /// instructions against 183).
    pub fn lookup_v6_batch(&self, addrs: &[u128], out: &mut [Option<u32>]) {
        for (addrs, out) in addrs.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            let mut answers = [0u32; BATCH];
            with_popcnt(
                #[inline(always)]
                || {
                    for (a, k) in answers.iter_mut().zip(addrs) {
                        *a = self.v6.lookup(*k);
                    }
                },
            );
            for (o, &a) in out.iter_mut().zip(&answers) {
                *o = found(a);
            }
        }
    }

    /// The circuit of an IPv6 address (as a host-order `u128`).
    #[inline]
    pub fn lookup_v6(&self, addr: u128) -> Option<u32> {
        found(with_popcnt(
            #[inline(always)]
            || self.v6.lookup(addr),
        ))
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
    fn blocks_start_below_their_slash_32() {
        // Two /32s under one top 16 bits (a skip serves neither) and one elsewhere; a /16
        // and a /32 above them, and a /40 inside one.
        let mut table = vec![
            (p("3fff::/16"), 1),
            (p("3fff:1::/32"), 2),
            (p("3fff:1:ab00::/40"), 3),
            (p("2001:db8:5::1"), 4),
        ];
        for (i, block) in ["3fff:0", "3fff:1", "2001:db8"].iter().enumerate() {
            for j in 0..8u32 {
                let value = 10 * (i as u32 + 1) + j;
                table.push((p(&format!("{block}:{j:x}::/48")), value + 100));
                table.push((p(&format!("{block}:10{j:x}:{j:x}00::/56")), value));
                table.push((
                    p(&format!("{block}:10{j:x}:{:x}01::/64", j + 8)),
                    value + 200,
                ));
            }
        }
        let lpm = Lpm::build_with_block_min(table.iter().copied(), 8).unwrap();
        assert_eq!(
            lpm.v6.blocks.iter().filter(|b| b.key != u64::MAX).count(),
            3
        );
        let loads = |s: &str| lpm.dependent_loads(s.parse().unwrap());
        for (a, want, dependent) in [
            // Under a block: the block, its root's part, the answer; a node more per 8 bits.
            ("3fff:0:5::1", Some(115), 3),
            ("3fff:0:103:300::1", Some(13), 4),
            ("3fff:0:103:302::9", Some(13), 4),
            ("3fff:0:103:b01::9", Some(213), 5),
            ("3fff:0:103:b02::9", Some(1), 5),
            // Above the prefixes of a block: the /16, the /32 and a /40 in its root.
            ("3fff:0:9::1", Some(1), 3),
            ("3fff:1:9::1", Some(2), 3),
            ("3fff:1:ab01::1", Some(3), 3),
            // A host: ten nodes below the root.
            ("2001:db8:5::1", Some(4), 13),
            ("2001:db8:5::2", Some(135), 13),
            // Not under a block: the direct table (and a skip to 3fff:1::/32).
            ("3fff:2::1", Some(1), 2),
            ("2001:db9::1", None, 1),
        ] {
            assert_eq!(lpm.lookup(a.parse().unwrap()), want, "{a}");
            assert_eq!(
                lpm.lookup(a.parse().unwrap()),
                linear_scan(&table, a.parse().unwrap())
            );
            assert_eq!(loads(a), dependent, "{a}");
        }
        // The default leaves 24 prefixes per /32 to the direct table, with the same answers.
        let walked = Lpm::build(table.iter().copied()).unwrap();
        assert!(walked.v6.blocks.iter().all(|b| b.key == u64::MAX));
        for (prefix, _) in &table {
            let a = prefix.addr();
            assert_eq!(walked.lookup(a), lpm.lookup(a), "{a}");
        }
    }

    #[test]
    fn each_block_owns_its_hash_slot() {
        // The /32s of a /29 and a few more: no collision once the table is large enough.
        let keys: Vec<u32> = (0..8)
            .map(|i| 0x2001_0db8 + i)
            .chain([0x3fff_0000, 7])
            .collect();
        let (slots, shift) = place_blocks(&keys);
        assert!(slots.len() >= 2 * keys.len());
        for k in &keys {
            assert_eq!(slots[block_slot(*k, shift) as usize], Some(*k));
        }
        // More /32s than the largest table has slots: some are left out, none shares a slot.
        let many: Vec<u32> = (0..5000u32).map(|i| i.wrapping_mul(0x0101_0101)).collect();
        let (slots, shift) = place_blocks(&many);
        assert_eq!(slots.len(), 1 << MAX_BLOCK_BITS);
        for (i, slot) in slots.iter().enumerate() {
            if let Some(k) = slot {
                assert_eq!(block_slot(*k, shift) as usize, i);
            }
        }
        assert!(slots.iter().flatten().count() < many.len());
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

    /// IPv6 prefixes under a few /32s that share their top 16 to 31 bits (an operator's
    /// allocations), most longer than the /32 and packed below a few /40s and /48s so that
    /// a block's root has children, its children children; some 32 bits or shorter above
    /// them.
    fn block_set() -> impl Strategy<Value = Vec<(Prefix, u32)>> {
        (
            any::<u32>(),
            prop::collection::vec(0u32..16, 1..4),
            prop::collection::vec((0usize..4, 0u8..4, any::<u128>(), 0u8..=128), 0..120),
        )
            .prop_map(|(base, offsets, picks)| {
                picks
                    .into_iter()
                    .enumerate()
                    .map(|(i, (r, depth, noise, len))| {
                        let top = base.wrapping_add(offsets[r % offsets.len()] << (base % 16));
                        // Share 32, 40, 48 or 56 bits with the /32's first /56.
                        let shared = 32 + 8 * depth;
                        let bits = (u128::from(top) << 96) | (noise & !mask(shared));
                        // Most below the /32; one in four any length.
                        let len = if i % 4 == 0 { len } else { 33 + len % 96 };
                        let prefix = Prefix {
                            family: Family::V6,
                            bits: bits & mask(len),
                            len,
                        };
                        (prefix, i as u32)
                    })
                    .collect()
            })
    }

    fn agrees(
        set: &[(Prefix, u32)],
        probes: &[(usize, u128)],
        family: Family,
        block_min: usize,
    ) -> Result<(), TestCaseError> {
        let lpm = Lpm::build_with_block_min(set.iter().copied(), block_min).unwrap();
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
            agrees(&set, &probes, Family::V4, BLOCK_MIN)?;
        }

        #[test]
        fn ipv6_blocks_match_the_linear_scan(set in block_set(), probes in prop::collection::vec((any::<usize>(), any::<u128>()), 32)) {
            agrees(&set, &probes, Family::V6, BLOCK_MIN)?;
            // Every /32 with a longer prefix under it a block.
            agrees(&set, &probes, Family::V6, 1)?;
        }

        #[test]
        fn ipv6_matches_the_linear_scan(set in prefix_set(Family::V6), probes in prop::collection::vec((any::<usize>(), any::<u128>()), 32)) {
            agrees(&set, &probes, Family::V6, BLOCK_MIN)?;
        }
    }
}
