//! Raw bindings to the system libdpdk (at least 22.11), generated at build time by bindgen from
//! the headers and cflags that `pkg-config libdpdk` reports, plus `cw_*` out-of-line copies of
//! DPDK's static inline functions (`shim/shim.c`).
//!
//! This crate only declares; it has no safe API. cakewalk's safe wrapper is
//! `forwarder::port::dpdk`, the one module of the forwarder that names this crate.
// Generated code: its names, its unsafe blocks and its unused items are bindgen's.
#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    unreachable_pub,
    clippy::all,
    clippy::undocumented_unsafe_blocks,
    clippy::multiple_unsafe_ops_per_block,
    unsafe_op_in_unsafe_fn
)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
