//! Zero-copy packet parsing and in-place header rewrites for the data path.
//!
//! Each protocol has a checked view in the smoltcp style (`new_checked` validates lengths
//! once; afterwards no accessor can panic) with its field offsets as consts. [`parse`] walks
//! Ethernet, 802.1Q/QinQ tags, a PPPoE session or an MPLS label stack, IPv4 (options, fragments) or IPv6 (extension headers, bounded)
//! and TCP/UDP/ICMP into a [`qdisc::PacketMeta`] and never fails: a frame it cannot read is
//! forwarded as non-IP with a [`Malformed`] reason. [`set_ce`] and [`wash_dscp`] rewrite the
//! TOS/traffic-class byte in place with incremental IPv4 checksum updates; [`tcp_ack_info`]
//! decodes what CAKE's ACK filter needs. Nothing here allocates. [`build_udp_frame`] and
//! [`build_tcp_frame`] make well-formed frames for the generator and tests.
//!
//! Not here: flow hashing and queue choice ([`crate::classify`]), NAT, checksum offload.

mod build;
pub mod checksum;
mod ecn;
pub mod ethernet;
pub mod ipv4;
pub mod ipv6;
mod offload;
mod parse;
pub mod tcp;

pub use build::{
    build_ports_frame, build_tcp_frame, build_udp_frame, push_mpls, push_pppoe, push_vlan_tag,
    TcpSpec, DST_MAC, SRC_MAC,
};
pub use ecn::{set_ce, set_ce_at, wash_dscp};
pub use offload::complete_partial_checksum;
pub use parse::{parse, parse_into, protocol, tcp_ack_info, Malformed, Parsed, ARP_DSCP};

#[cfg(test)]
mod props;
