//! Fixed-size per-flow tables indexed by global flow id (`tin * FLOWS + flow`), `FLOWS`
//! being the instance's flows per tin.
//!
//! The hot paths index these tables a few dozen times per packet. A table is a boxed
//! `[[T; FLOWS]; MAX_TINS]`, whose size is in its type although `MAX_TINS * FLOWS` cannot
//! be (no generic constant expressions on stable Rust). Indexed as one flat slice of that
//! constant length, reduced modulo its (power of two) size, every access is provably in
//! bounds: the compiler drops the bounds check (a length load, a compare and a branch) and
//! keeps one `and`. (Indexing row then column cost the link instance's goal row 2 % more
//! instructions per packet under callgrind.) A valid flow id is always below the size, so
//! the reduction never changes which entry is used; debug builds still assert it.

use std::ops::{Deref, DerefMut, Index, IndexMut};

use super::MAX_TINS;

/// `MAX_TINS * FLOWS` entries of `T`, boxed, one row per tin.
#[derive(Debug, Clone)]
pub(super) struct FlowTable<T, const FLOWS: usize>(Box<[[T; FLOWS]; MAX_TINS]>);

impl<T: Copy, const FLOWS: usize> FlowTable<T, FLOWS> {
    /// A table with every entry set to `v`.
    pub(super) fn new(v: T) -> FlowTable<T, FLOWS> {
        let boxed: Box<[[T; FLOWS]]> = vec![[v; FLOWS]; MAX_TINS].into_boxed_slice();
        match boxed.try_into() {
            Ok(a) => FlowTable(a),
            Err(_) => unreachable!("the vector has MAX_TINS rows"),
        }
    }
}

impl<T, const FLOWS: usize> FlowTable<T, FLOWS> {
    /// The entries of tin `t` (`t < MAX_TINS`), as an array so that an index reduced modulo
    /// `FLOWS` needs no bounds check.
    #[inline(always)]
    pub(super) fn tin(&self, t: usize) -> &[T; FLOWS] {
        let start = t * FLOWS;
        match self.0.as_flattened()[start..start + FLOWS].try_into() {
            Ok(a) => a,
            Err(_) => unreachable!("the range has FLOWS entries"),
        }
    }

    /// The entries of tin `t`.
    pub(super) fn tin_mut(&mut self, t: usize) -> &mut [T] {
        &mut self.0[t % MAX_TINS]
    }

    /// Bytes of heap memory the table owns.
    pub(super) fn bytes(&self) -> usize {
        std::mem::size_of::<[[T; FLOWS]; MAX_TINS]>()
    }
}

impl<T, const FLOWS: usize> Index<usize> for FlowTable<T, FLOWS> {
    type Output = T;

    #[inline(always)]
    fn index(&self, i: usize) -> &T {
        debug_assert!(i < MAX_TINS * FLOWS, "flow id {i} out of range");
        &self.0.as_flattened()[i % (MAX_TINS * FLOWS)]
    }
}

impl<T, const FLOWS: usize> IndexMut<usize> for FlowTable<T, FLOWS> {
    #[inline(always)]
    fn index_mut(&mut self, i: usize) -> &mut T {
        debug_assert!(i < MAX_TINS * FLOWS, "flow id {i} out of range");
        &mut self.0.as_flattened_mut()[i % (MAX_TINS * FLOWS)]
    }
}

impl<T, const FLOWS: usize> Deref for FlowTable<T, FLOWS> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        self.0.as_flattened()
    }
}

impl<T, const FLOWS: usize> DerefMut for FlowTable<T, FLOWS> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.0.as_flattened_mut()
    }
}
