//! cakewalk's forwarder: poll-mode workers that receive bursts from ports, parse and classify
//! each packet ([`wire`]), queue it into per-TX-queue CAKE shapers ([`qdisc::mq`]) and transmit
//! what the shapers release.
//!
//! Map: [`wire`] parses headers without copying; [`port`] holds the `Port` trait and its
//! backends (built-in generator, pcap, AF_PACKET, DPDK); [`engine`] runs the worker loops;
//! [`config`] reads TOML and tc-style units; [`stats`] reports; [`control`] changes a running
//! forwarder without losing packets.
//!
//! Layers depend one way, downward:
//! * leaves, which name nothing else in the crate: [`clock`] (the one time source),
//!   [`counters`] (what the data path counts and the reports read), [`direction`], [`wire`],
//!   [`flow_key`], [`config::units`] and [`config::limits`]; [`classify`] uses only
//!   [`flow_key`];
//! * [`port`] uses the leaves;
//! * [`engine`] uses ports and the leaves; [`stats`] reads only the leaves;
//! * [`config`] assembles the configuration of each layer below it; [`app`], [`cli`],
//!   [`control`], [`reload`], [`preflight`] and [`explain`] sit on top.
#![deny(unsafe_code)]

/// `eprintln!` that ignores a closed standard error: the forwarder keeps forwarding when
/// whatever read its log (`| head`, a restarted log shipper) went away, where `eprintln!`
/// would panic and stop it.
#[macro_export]
macro_rules! log_line {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::writeln!(::std::io::stderr(), $($arg)*);
    }};
}

pub mod app;
pub mod circuit;
pub mod classify;
pub mod cli;
pub mod clock;
pub mod config;
pub mod control;
pub mod counters;
pub mod direction;
pub mod engine;
pub mod explain;
pub mod flow_key;
pub mod notify;
pub mod port;
pub mod preflight;
pub mod reload;
pub mod stats;
pub mod testing;
pub mod wire;
