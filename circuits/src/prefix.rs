//! IP prefixes as the circuit files write them (`100.64.0.1`, `100.64.0.0/29`,
//! `2001:db8:1::/56`): parsing, the address bits left-aligned in a `u128` so IPv4 and IPv6
//! share one representation, and containment tests. A bare address is a host prefix (/32 or
//! /128). Host bits below the prefix length are cleared, as `ipaddress.ip_network(strict=False)`
//! does, since operators' files carry such entries (`100.64.0.1/29`).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// The address family of a prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// IPv4 (32 bits).
    V4,
    /// IPv6 (128 bits).
    V6,
}

impl Family {
    /// Address width in bits.
    pub fn bits(self) -> u8 {
        match self {
            Family::V4 => 32,
            Family::V6 => 128,
        }
    }
}

/// An IPv4 or IPv6 prefix. `bits` holds the address left-aligned (an IPv4 address in the top
/// 32 bits), with every bit below `len` cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Prefix {
    /// The family.
    pub family: Family,
    /// The address, left-aligned, host bits cleared.
    pub bits: u128,
    /// The prefix length (0..=32 or 0..=128).
    pub len: u8,
}

/// Why a prefix did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    /// Not an IPv4 or IPv6 address.
    #[error("`{0}` is not an IPv4 or IPv6 address")]
    BadAddress(String),
    /// The part after `/` is not a number within the family's width.
    #[error("`{text}`: prefix length must be 0..={max}")]
    BadLength {
        /// The text as written.
        text: String,
        /// The family's width.
        max: u8,
    },
}

/// The mask of the top `len` bits of a `u128`.
pub fn mask(len: u8) -> u128 {
    match len {
        0 => 0,
        l if l >= 128 => u128::MAX,
        l => !(u128::MAX >> l),
    }
}

/// An address as a left-aligned key (the form [`Prefix::bits`] and the lookup use).
pub fn key_of(addr: IpAddr) -> (Family, u128) {
    match addr {
        IpAddr::V4(a) => (Family::V4, u128::from(u32::from(a)) << 96),
        IpAddr::V6(a) => (Family::V6, u128::from(a)),
    }
}

impl Prefix {
    /// A prefix from an address and a length (clamped to the family's width), host bits
    /// cleared.
    pub fn new(addr: IpAddr, len: u8) -> Prefix {
        let (family, key) = key_of(addr);
        let len = len.min(family.bits());
        Prefix {
            family,
            bits: key & mask(len),
            len,
        }
    }

    /// True when `other` lies inside this prefix (or equals it).
    pub fn contains(&self, other: &Prefix) -> bool {
        self.family == other.family
            && self.len <= other.len
            && other.bits & mask(self.len) == self.bits
    }

    /// True when the address (as a left-aligned key of `family`) matches.
    pub fn matches(&self, family: Family, key: u128) -> bool {
        self.family == family && key & mask(self.len) == self.bits
    }

    /// The first address of the prefix.
    pub fn addr(&self) -> IpAddr {
        match self.family {
            Family::V4 => IpAddr::V4(Ipv4Addr::from((self.bits >> 96) as u32)),
            Family::V6 => IpAddr::V6(Ipv6Addr::from(self.bits)),
        }
    }
}

impl FromStr for Prefix {
    type Err = PrefixError;

    fn from_str(text: &str) -> Result<Prefix, PrefixError> {
        let text = text.trim();
        let (addr, len) = match text.split_once('/') {
            Some((a, l)) => (a.trim(), Some(l.trim())),
            None => (text, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| PrefixError::BadAddress(text.to_string()))?;
        let max = key_of(addr).0.bits();
        let len = match len {
            None => max,
            Some(l) => match l.parse::<u8>() {
                Ok(n) if n <= max => n,
                _ => {
                    return Err(PrefixError::BadLength {
                        text: text.to_string(),
                        max,
                    })
                }
            },
        };
        Ok(Prefix::new(addr, len))
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr(), self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_addresses_are_host_prefixes_and_host_bits_are_cleared() {
        let p: Prefix = "100.64.0.1".parse().unwrap();
        assert_eq!(p.to_string(), "100.64.0.1/32");
        let p: Prefix = " 100.64.0.9/29 ".parse().unwrap();
        assert_eq!(p.to_string(), "100.64.0.8/29");
        let p: Prefix = "2001:db8:1:2::5/56".parse().unwrap();
        assert_eq!(p.to_string(), "2001:db8:1::/56");
        assert_eq!("::/0".parse::<Prefix>().unwrap().len, 0);
    }

    #[test]
    fn bad_text_is_refused_with_the_text() {
        assert!(matches!(
            "100.64.0.1/33".parse::<Prefix>(),
            Err(PrefixError::BadLength { max: 32, .. })
        ));
        assert!(matches!(
            "2001:db8::/129".parse::<Prefix>(),
            Err(PrefixError::BadLength { max: 128, .. })
        ));
        let e = "100.64.0".parse::<Prefix>().unwrap_err();
        assert_eq!(e.to_string(), "`100.64.0` is not an IPv4 or IPv6 address");
        assert!("10.0.0.0/x".parse::<Prefix>().is_err());
    }

    #[test]
    fn containment_respects_family_and_length() {
        let p = |s: &str| s.parse::<Prefix>().unwrap();
        assert!(p("10.0.0.0/8").contains(&p("10.1.2.3")));
        assert!(!p("10.1.2.3").contains(&p("10.0.0.0/8")));
        assert!(!p("0.0.0.0/0").contains(&p("::/0")), "families never mix");
        assert!(p("::/0").contains(&p("2001:db8::1")));
    }
}
