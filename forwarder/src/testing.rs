//! Support for the tests that need what an ordinary machine may lack: root, network
//! namespaces, hugepages, or a tool `scripts/test setup` installs. Such a test says why it
//! cannot run and passes, unless [`REQUIRE_PRIVILEGED`] is set, as CI sets it: there a SKIP
//! would hide a test that never ran, so it fails instead.

use std::fmt::Display;

pub mod benchmarks;

/// The environment variable that, set to `1`, turns every [`skip`] into a failure (`.ci/run`
/// sets it, and so does `scripts/test` when `CI=true`).
pub const REQUIRE_PRIVILEGED: &str = "CAKEWALK_REQUIRE_PRIVILEGED";

/// Whether this run must not skip a privileged test ([`REQUIRE_PRIVILEGED`] is `1`).
pub fn privileged_required() -> bool {
    std::env::var(REQUIRE_PRIVILEGED).is_ok_and(|v| v.trim() == "1")
}

/// Reports that the calling test cannot run on this machine and why (the caller returns
/// right after).
///
/// # Panics
/// When [`privileged_required`]: the test must run here, so not running it is a failure.
pub fn skip(why: impl Display) {
    assert!(
        !privileged_required(),
        "{why}; {REQUIRE_PRIVILEGED}=1 says this run must not skip it (run as root with \
         scripts/test setup done, or unset {REQUIRE_PRIVILEGED})"
    );
    crate::log_line!("SKIP: {why}");
}
