//! Counting and reporting: the engine's per-worker counter blocks ([`counters`]), and the
//! reports built from them.

pub mod counters;
