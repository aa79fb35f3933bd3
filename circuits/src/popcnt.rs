//! The one module of this crate with `unsafe`: running a closure compiled for the `popcnt`
//! instruction when the CPU has it. The default x86-64 target predates `popcnt`, so
//! `count_ones` there is a dozen shifts, masks and a multiply, and the prefix table counts
//! bits at every node of every lookup ([`crate::lpm`]). Choosing at run time keeps the build
//! for any x86-64 (docs/circuits.md, "Why this lookup").

/// Calls `f`, with the code inlined into it compiled for `popcnt` where this CPU has it.
#[inline(always)]
pub(crate) fn with_popcnt<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("popcnt") {
        // SAFETY: `compiled_for_popcnt` needs no CPU feature but `popcnt`, detected just
        // above (the detection is cached: one load and a test).
        return unsafe { compiled_for_popcnt(f) };
    }
    f()
}

/// `f()`, compiled for `popcnt`. An `unsafe fn` because the crate's minimum Rust predates
/// safe `#[target_feature]` functions.
///
/// # Safety
/// The CPU must have `popcnt`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
unsafe fn compiled_for_popcnt<R>(f: impl FnOnce() -> R) -> R {
    f()
}
