//! Stable slots for circuits. The data path knows a circuit by a small number, its slot: the
//! prefix table answers with it and the circuit shaper keeps one queue per slot. A slot must
//! mean the same circuit across reloads (a reload that renumbered circuits would move one
//! subscriber's queued packets under another's plan), so slots are assigned by circuit ID and
//! kept: a circuit that stays keeps its slot, a removed circuit's slot is held for a drain
//! time before a new circuit may take it (its queue empties under no plan meanwhile), and a
//! new circuit takes the lowest free slot, so the slot range stays as small as the set.
//!
//! Time is an argument, as in `qdisc`: nothing here reads a clock.

use std::collections::{BTreeSet, HashMap};

/// The ID reserved for the circuit that unmatched traffic shares (`[circuits] unmatched` with
/// rates). No file can use it: every importer refuses a circuit without an ID.
pub const UNMATCHED_ID: &str = "";

/// Circuit ID to slot, kept across reloads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlotMap {
    by_id: HashMap<String, u32>,
    /// Slots of removed circuits, with the time each may be taken again.
    draining: Vec<(u32, u64)>,
    /// Slots no circuit holds and that have drained, lowest first.
    free: BTreeSet<u32>,
    /// Slots ever handed out: every slot is below it.
    len: u32,
}

impl SlotMap {
    /// Assigns a slot to each of `ids` (in order; an ID given twice gets one slot), at
    /// `now_ns`: kept IDs keep their slots, IDs no longer given start draining for
    /// `drain_ns`, new IDs take free slots. Returns the slot of each ID.
    pub fn assign<'a>(
        &mut self,
        ids: impl IntoIterator<Item = &'a str>,
        now_ns: u64,
        drain_ns: u64,
    ) -> Vec<u32> {
        let ids: Vec<&str> = ids.into_iter().collect();
        self.release_drained(now_ns);
        let wanted: std::collections::HashSet<&str> = ids.iter().copied().collect();
        let gone: Vec<String> = self
            .by_id
            .keys()
            .filter(|id| !wanted.contains(id.as_str()))
            .cloned()
            .collect();
        for id in gone {
            if let Some(slot) = self.by_id.remove(&id) {
                self.draining.push((slot, now_ns.saturating_add(drain_ns)));
            }
        }
        ids.iter()
            .map(|id| match self.by_id.get(*id) {
                Some(&slot) => slot,
                None => {
                    let slot = self.take_free();
                    self.by_id.insert((*id).to_string(), slot);
                    slot
                }
            })
            .collect()
    }

    /// Moves the slots whose drain ended by `now_ns` to the free set.
    pub fn release_drained(&mut self, now_ns: u64) {
        let free = &mut self.free;
        self.draining.retain(|&(slot, at)| {
            if at <= now_ns {
                free.insert(slot);
                false
            } else {
                true
            }
        });
    }

    fn take_free(&mut self) -> u32 {
        match self.free.pop_first() {
            Some(s) => s,
            None => {
                self.len += 1;
                self.len - 1
            }
        }
    }

    /// The slot of `id`, when it has one.
    pub fn slot_of(&self, id: &str) -> Option<u32> {
        self.by_id.get(id).copied()
    }

    /// Slots ever handed out (the length a per-slot array needs).
    pub fn len(&self) -> u32 {
        self.len
    }

    /// True before the first circuit.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Slots held by removed circuits that are still draining.
    pub fn draining(&self) -> usize {
        self.draining.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn kept_circuits_keep_their_slots_and_new_ones_take_drained_slots() {
        let mut m = SlotMap::default();
        assert_eq!(m.assign(["a", "b", "c"], 0, 10), vec![0, 1, 2]);
        // b removed: its slot drains; d is new and may not take it yet.
        assert_eq!(m.assign(["a", "c", "d"], 5, 10), vec![0, 2, 3]);
        assert_eq!(m.draining(), 1);
        assert_eq!(m.slot_of("b"), None);
        // After the drain, e takes b's old slot; order in the file does not matter.
        assert_eq!(m.assign(["e", "d", "c", "a"], 15, 10), vec![1, 3, 2, 0]);
        assert_eq!(m.len(), 4);
        // The same ID twice is one circuit.
        assert_eq!(m.assign(["a", "a"], 20, 10), vec![0, 0]);
    }

    #[test]
    fn a_circuit_removed_and_added_back_before_its_drain_gets_a_fresh_slot() {
        let mut m = SlotMap::default();
        m.assign(["a", "b"], 0, 10);
        m.assign(["a"], 1, 10);
        assert_eq!(m.assign(["a", "b"], 2, 10), vec![0, 2]);
        // Its old slot is free after its drain.
        assert_eq!(m.assign(["a", "b", "c"], 11, 10), vec![0, 2, 1]);
    }

    proptest! {
        /// Across any sequence of reloads: no two circuits share a slot, a circuit present
        /// in consecutive sets keeps its slot, and a removed circuit's slot is never handed
        /// out before its drain ended.
        #[test]
        fn slots_are_unique_stable_and_drained(
            sets in prop::collection::vec(prop::collection::btree_set(0u8..24, 0..16), 1..12),
        ) {
            let mut m = SlotMap::default();
            let mut prev: HashMap<String, u32> = HashMap::new();
            let mut freed_at: HashMap<u32, u64> = HashMap::new();
            for (step, set) in sets.iter().enumerate() {
                let now = step as u64 * 3;
                let ids: Vec<String> = set.iter().map(|i| format!("c{i}")).collect();
                let slots = m.assign(ids.iter().map(String::as_str), now, 5);
                let unique: BTreeSet<u32> = slots.iter().copied().collect();
                prop_assert_eq!(unique.len(), slots.len());
                let mut now_map = HashMap::new();
                for (id, s) in ids.iter().zip(&slots) {
                    if let Some(old) = prev.get(id) {
                        prop_assert_eq!(old, s);
                    } else if let Some(&at) = freed_at.get(s) {
                        prop_assert!(now >= at + 5, "slot {} reused at {} freed at {}", s, now, at);
                    }
                    now_map.insert(id.clone(), *s);
                }
                for (id, s) in &prev {
                    if !now_map.contains_key(id) {
                        freed_at.insert(*s, now);
                    }
                }
                prev = now_map;
            }
        }
    }
}
