//! Fixed-size per-flow tables indexed by global flow id (`tin * FLOWS_PER_TIN + flow`).
//!
//! The hot paths index these tables a few dozen times per packet. Reducing the index modulo
//! the (power of two) table size makes every access provably in bounds, so the compiler
//! drops the bounds check (a length load, a compare and a branch) and keeps one `and`. A
//! valid flow id is always below the size, so the reduction never changes which entry is
//! used; debug builds still assert it.

use std::ops::{Deref, DerefMut, Index, IndexMut};

use super::{ALL_FLOWS, FLOWS_PER_TIN};

const _: () = assert!(ALL_FLOWS.is_power_of_two());

/// `ALL_FLOWS` entries of `T`, boxed.
#[derive(Debug, Clone)]
pub(super) struct FlowTable<T>(Box<[T; ALL_FLOWS]>);

impl<T: Clone> FlowTable<T> {
    /// A table with every entry set to `v`.
    pub(super) fn new(v: T) -> FlowTable<T> {
        let boxed: Box<[T]> = vec![v; ALL_FLOWS].into_boxed_slice();
        match boxed.try_into() {
            Ok(a) => FlowTable(a),
            Err(_) => unreachable!("the vector has ALL_FLOWS entries"),
        }
    }
}

impl<T> FlowTable<T> {
    /// The entries of tin `t` (`t < MAX_TINS`), as an array so that an index reduced modulo
    /// `FLOWS_PER_TIN` needs no bounds check.
    #[inline(always)]
    pub(super) fn tin(&self, t: usize) -> &[T; FLOWS_PER_TIN] {
        let start = t * FLOWS_PER_TIN;
        match self.0[start..start + FLOWS_PER_TIN].try_into() {
            Ok(a) => a,
            Err(_) => unreachable!("the range has FLOWS_PER_TIN entries"),
        }
    }

    /// The entries of tin `t`.
    pub(super) fn tin_mut(&mut self, t: usize) -> &mut [T] {
        &mut self.0[t * FLOWS_PER_TIN..(t + 1) * FLOWS_PER_TIN]
    }
}

impl<T> Index<usize> for FlowTable<T> {
    type Output = T;

    #[inline(always)]
    fn index(&self, i: usize) -> &T {
        debug_assert!(i < ALL_FLOWS, "flow id {i} out of range");
        &self.0[i % ALL_FLOWS]
    }
}

impl<T> IndexMut<usize> for FlowTable<T> {
    #[inline(always)]
    fn index_mut(&mut self, i: usize) -> &mut T {
        debug_assert!(i < ALL_FLOWS, "flow id {i} out of range");
        &mut self.0[i % ALL_FLOWS]
    }
}

impl<T> Deref for FlowTable<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        &self.0[..]
    }
}

impl<T> DerefMut for FlowTable<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.0[..]
    }
}
