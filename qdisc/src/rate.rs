//! The [`Rate`] unit type: bytes per second, the unit the kernel's CAKE keeps internally.

use std::fmt;

/// A transmission rate in bytes per second. Zero means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Rate(u64);

impl Rate {
    /// No shaping.
    pub const UNLIMITED: Rate = Rate(0);

    /// A rate of `bytes` per second.
    pub const fn from_bytes_per_sec(bytes: u64) -> Rate {
        Rate(bytes)
    }

    /// A rate of `bits` per second, rounded down to whole bytes.
    pub const fn from_bits_per_sec(bits: u64) -> Rate {
        Rate(bits / 8)
    }

    /// Bytes per second (0 = unlimited).
    pub const fn bytes_per_sec(self) -> u64 {
        self.0
    }

    /// Bits per second (0 = unlimited).
    pub const fn bits_per_sec(self) -> u64 {
        self.0.saturating_mul(8)
    }

    /// Returns true for the unlimited rate.
    pub const fn is_unlimited(self) -> bool {
        self.0 == 0
    }
}

impl fmt::Display for Rate {
    /// Formats like tc: `unlimited`, `500Mbit`, `1Gbit`, `1Kbit`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_unlimited() {
            return f.write_str("unlimited");
        }
        let bits = self.bits_per_sec();
        for (unit, scale) in [
            ("Tbit", 1_000_000_000_000u64),
            ("Gbit", 1_000_000_000),
            ("Mbit", 1_000_000),
            ("Kbit", 1_000),
        ] {
            if bits >= scale {
                return if bits % scale == 0 {
                    write!(f, "{}{unit}", bits / scale)
                } else {
                    write!(f, "{:.3}{unit}", bits as f64 / scale as f64)
                };
            }
        }
        write!(f, "{bits}bit")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_like_tc() {
        assert_eq!(Rate::from_bits_per_sec(1000).to_string(), "1Kbit");
        assert_eq!(Rate::from_bits_per_sec(500_000_000).to_string(), "500Mbit");
        assert_eq!(Rate::UNLIMITED.to_string(), "unlimited");
    }
}
