//! The two directions a box between a LAN and an uplink shapes, and which port each leaves
//! through: a leaf the ports, the stats and the control socket name without reaching into
//! the configuration ([`crate::config::direction`] resolves each direction's settings).

use serde::{Deserialize, Serialize};

/// Which way traffic travels through the box.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// From the uplink towards the LAN: leaves through the port that is not the uplink.
    Download,
    /// From the LAN towards the uplink: leaves through the uplink port.
    Upload,
}

impl Direction {
    /// Both directions, download first.
    pub const BOTH: [Direction; 2] = [Direction::Download, Direction::Upload];

    /// `download` / `upload`, as the config, stats and control socket spell it.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Download => "download",
            Direction::Upload => "upload",
        }
    }

    /// Reads `download` / `upload` (also `down` / `up`).
    pub fn parse(word: &str) -> Option<Direction> {
        match word {
            "download" | "down" => Some(Direction::Download),
            "upload" | "up" => Some(Direction::Upload),
            _ => None,
        }
    }

    /// The direction's slot in per-direction arrays (download 0, upload 1).
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// One of the two ports, as `[ports] uplink` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PortSide {
    /// Port A.
    A,
    /// Port B (the default uplink).
    #[default]
    B,
}

impl PortSide {
    /// The port index (A = 0, B = 1).
    pub fn index(self) -> usize {
        match self {
            PortSide::A => 0,
            PortSide::B => 1,
        }
    }

    /// `a` / `b`.
    pub fn name(self) -> &'static str {
        match self {
            PortSide::A => "a",
            PortSide::B => "b",
        }
    }
}

/// The direction that leaves through egress port `port` (0 = A, 1 = B) when `uplink` is the
/// uplink port.
pub fn of_egress(uplink: PortSide, port: usize) -> Direction {
    if port == uplink.index() {
        Direction::Upload
    } else {
        Direction::Download
    }
}

/// The egress port index of `dir` when `uplink` is the uplink port.
pub fn egress_port(uplink: PortSide, dir: Direction) -> usize {
    match dir {
        Direction::Upload => uplink.index(),
        Direction::Download => 1 - uplink.index(),
    }
}
