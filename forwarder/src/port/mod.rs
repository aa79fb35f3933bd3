//! The `Port` contract every backend implements, and the backends: `synth` (the built-in
//! generator and verifying sink), `pcap` (files), `afpacket` (Linux interfaces) and, behind the
//! `dpdk` feature, `dpdk`.
//!
//! A port is split once, before the workers start, into per-queue receive and transmit
//! halves that each belong to exactly one worker (`Send`, used through `&mut self`). Bursts
//! are caller-owned `Vec`s created once with capacity and reused, so the data path never
//! allocates. [`pool`] holds the preallocated buffers the software backends share.
//!
//! This file also holds [`PortsConfig`], the `[ports]` table of the TOML config: which
//! backend each of the two ports A and B uses and how packets are forwarded between them.

use std::path::PathBuf;

use qdisc::Packet;
use serde::{Deserialize, Serialize};

pub mod afpacket;
#[cfg(feature = "dpdk")]
pub mod dpdk;
pub mod lcores;
pub mod pcap;
pub mod pool;
pub mod stall;
pub mod synth;

/// An owned packet buffer from a port's preallocated pool. Dropping it returns it to the pool.
pub trait PortBuf: Packet + Send + 'static {
    /// The frame, L2 header first.
    fn data(&self) -> &[u8];
    /// The frame, writable in place (ECN marking, DSCP wash).
    fn data_mut(&mut self) -> &mut [u8];
    /// The NIC's L4 RSS hash, when the hardware said it is valid.
    fn rss_hash(&self) -> Option<u32> {
        None
    }
}

/// The receive half of one port queue.
pub trait PortRx: Send {
    /// The buffer type this port hands out.
    type Buf: PortBuf;
    /// Appends up to `max` received packets to `burst`; returns how many were appended.
    fn rx_burst(&mut self, burst: &mut Vec<Self::Buf>, max: usize) -> usize;
    /// True once this queue will never deliver another packet (a pcap file read once, a
    /// generator that reached its packet or time limit). Live interfaces never finish.
    fn is_finished(&self) -> bool {
        false
    }
}

/// What a transmit queue refused for good since the engine last asked
/// ([`PortTx::take_refused`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct Refused {
    packets: u64,
    bytes: u64,
}

impl Refused {
    /// Counts one refused frame of `len` bytes.
    pub fn count(&mut self, len: usize) {
        self.packets += 1;
        self.bytes += len as u64;
    }

    /// Packets and bytes counted since the last call; starts again from zero.
    pub fn take(&mut self) -> (u64, u64) {
        let r = std::mem::take(self);
        (r.packets, r.bytes)
    }
}

/// The transmit half of one port queue.
pub trait PortTx: Send {
    /// The buffer type this port accepts.
    type Buf: PortBuf;
    /// Transmits packets from the front of `burst` and removes the ones sent; the ones the
    /// ring had no room for stay in `burst`, in order. Returns how many were sent.
    fn tx_burst(&mut self, burst: &mut Vec<Self::Buf>) -> usize;
    /// Packets and bytes that [`PortTx::tx_burst`] took and counted in its return value but
    /// could not send, for good (the kernel refused them, a file write failed), since the
    /// last call. The engine counts them as dropped ([`qdisc::DropReason::TxRefused`]), not
    /// transmitted. Ports that never refuse a frame keep the default.
    fn take_refused(&mut self) -> (u64, u64) {
        (0, 0)
    }
    /// Pushes out anything buffered below the ring (a file writer's buffer). Called when the
    /// engine stops.
    fn flush(&mut self) {}
}

/// Which backend a port uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PortKind {
    /// The built-in generator (receive side) and verifying sink (transmit side).
    #[default]
    Synth,
    /// A pcap/pcapng file as input, a pcap file as output.
    Pcap,
    /// A Linux interface through AF_PACKET.
    Afpacket,
    /// A DPDK ethdev (build with `--features dpdk`).
    Dpdk,
}

impl PortKind {
    /// The lowercase name used in the config and in messages.
    pub fn name(self) -> &'static str {
        match self {
            PortKind::Synth => "synth",
            PortKind::Pcap => "pcap",
            PortKind::Afpacket => "afpacket",
            PortKind::Dpdk => "dpdk",
        }
    }
}

/// One port: its backend and the backend's settings.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PortSpec {
    /// Label in stats output (defaults to "a" / "b").
    pub name: String,
    /// Backend.
    pub kind: PortKind,
    /// afpacket: the interface name; dpdk: the port id or device name.
    pub iface: String,
    /// pcap: the file read as input (pcap or pcapng). Without it the port receives nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<PathBuf>,
    /// pcap: the file written with what is transmitted. Without it transmitted frames are
    /// counted and dropped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<PathBuf>,
    /// Receive queues (each goes to one worker).
    pub rx_queues: usize,
    /// `[ports.X.shaper]`: CAKE keys for what leaves through this port, as written. The
    /// config loader moves them into the direction this port carries
    /// ([`crate::config::direction`]), so a loaded config holds `None` here.
    #[serde(skip_serializing)]
    pub shaper: Option<toml::Table>,
}

impl Default for PortSpec {
    fn default() -> Self {
        PortSpec {
            name: String::new(),
            kind: PortKind::Synth,
            iface: String::new(),
            input: None,
            output: None,
            rx_queues: 1,
            shaper: None,
        }
    }
}

/// The `[ports]` table: ports A and B and the forwarding map between them.
///
/// Packets received on A are transmitted on B; with `bidirectional` (the default) packets
/// received on B are transmitted on A as well.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PortsConfig {
    /// Port A (`[ports.a]`).
    pub a: PortSpec,
    /// Port B (`[ports.b]`).
    pub b: PortSpec,
    /// The port that faces the uplink: what leaves through it is the upload, what leaves
    /// through the other port the download (`"b"` by default).
    pub uplink: crate::direction::PortSide,
    /// Forward B -> A as well as A -> B.
    pub bidirectional: bool,
    /// pcap input: replay the file forever instead of once.
    #[serde(rename = "loop")]
    pub loop_input: bool,
    /// Buffers in each port's pool.
    pub pool_buffers: usize,
    /// Bytes per pool buffer (the largest frame a software port carries).
    pub buffer_size: usize,
    /// The generator used by synth ports (`[ports.synth]`).
    pub synth: synth::SynthConfig,
    /// DPDK EAL arguments for dpdk ports (`["-l", "0-1", "--vdev=net_null0"]`).
    pub eal_args: Vec<String>,
}

impl Default for PortsConfig {
    fn default() -> Self {
        PortsConfig {
            a: PortSpec {
                name: "a".into(),
                ..PortSpec::default()
            },
            b: PortSpec {
                name: "b".into(),
                ..PortSpec::default()
            },
            uplink: crate::direction::PortSide::B,
            bidirectional: true,
            loop_input: false,
            pool_buffers: 16384,
            buffer_size: pool::DEFAULT_BUF_SIZE,
            synth: synth::SynthConfig::default(),
            eal_args: Vec::new(),
        }
    }
}

impl PortsConfig {
    /// The display name of port `index` (0 = A, 1 = B), "a"/"b" when left empty.
    pub fn port_name(&self, index: usize) -> String {
        let (spec, fallback) = if index == 0 {
            (&self.a, "a")
        } else {
            (&self.b, "b")
        };
        if spec.name.is_empty() {
            fallback.to_string()
        } else {
            spec.name.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_ports_are_two_synth_ports_forwarding_both_ways() {
        let c = PortsConfig::default();
        assert_eq!(c.a.kind, PortKind::Synth);
        assert_eq!(c.b.kind, PortKind::Synth);
        assert!(c.bidirectional);
        assert_eq!(c.port_name(0), "a");
        assert_eq!(c.port_name(1), "b");
    }

    #[test]
    fn ports_table_parses_from_toml_and_rejects_unknown_keys() {
        let c: PortsConfig = toml::from_str(
            "bidirectional = false\n[a]\nkind = \"pcap\"\ninput = \"in.pcap\"\n[b]\nkind = \"pcap\"\noutput = \"out.pcap\"\n",
        )
        .unwrap();
        assert_eq!(c.a.kind, PortKind::Pcap);
        assert_eq!(
            c.b.output.as_deref(),
            Some(std::path::Path::new("out.pcap"))
        );
        assert!(toml::from_str::<PortsConfig>("bogus = 1").is_err());
    }
}
