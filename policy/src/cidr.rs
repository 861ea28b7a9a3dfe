//! IPv4/IPv6 prefixes for egress endpoints and the compiled allow-list.
//!
//! Kept in-crate (a few lines over `std::net`) so the exact matching semantics that the
//! decision function and the compiled network filter share live in one place.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An address prefix such as `203.0.113.0/24` or `2001:db8::/32`. Host bits are always zero
/// (a prefix written with host bits set is rejected rather than silently widened).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cidr {
    v6: bool,
    bits: u128,
    prefix: u8,
}

/// Why a string is not a CIDR prefix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    /// Not `ADDRESS/LEN` with a valid address and length.
    #[error("'{0}' is not a CIDR prefix (expected e.g. 203.0.113.0/24 or 2001:db8::/32)")]
    Malformed(String),
    /// The address has bits set beyond the prefix length.
    #[error("'{0}' has host bits set beyond the prefix length (did you mean {1}?)")]
    HostBits(String, String),
}

impl Cidr {
    /// Parses `ADDRESS/LEN`; a bare address means a single host (/32 or /128).
    pub fn parse(s: &str) -> Result<Self, CidrError> {
        let (addr, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let ip: IpAddr = addr
            .parse()
            .map_err(|_| CidrError::Malformed(s.to_string()))?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let prefix = match len {
            None => max,
            Some(l) => {
                if l.is_empty() || l.len() > 3 || !l.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(CidrError::Malformed(s.to_string()));
                }
                let p: u8 = l.parse().map_err(|_| CidrError::Malformed(s.to_string()))?;
                if p > max {
                    return Err(CidrError::Malformed(s.to_string()));
                }
                p
            }
        };
        let raw = Self::from_addr(ip, prefix);
        let masked = Cidr {
            bits: raw.bits & raw.mask(),
            ..raw
        };
        if masked.bits != raw.bits {
            return Err(CidrError::HostBits(s.to_string(), masked.to_string()));
        }
        Ok(masked)
    }

    fn from_addr(ip: IpAddr, prefix: u8) -> Self {
        match ip {
            IpAddr::V4(a) => Cidr {
                v6: false,
                bits: u128::from(u32::from(a)),
                prefix,
            },
            IpAddr::V6(a) => Cidr {
                v6: true,
                bits: u128::from(a),
                prefix,
            },
        }
    }

    /// The whole IPv4 space, `0.0.0.0/0`.
    pub fn all_v4() -> Self {
        Cidr {
            v6: false,
            bits: 0,
            prefix: 0,
        }
    }

    /// The whole IPv6 space, `::/0`.
    pub fn all_v6() -> Self {
        Cidr {
            v6: true,
            bits: 0,
            prefix: 0,
        }
    }

    fn width(&self) -> u8 {
        if self.v6 {
            128
        } else {
            32
        }
    }

    fn mask(&self) -> u128 {
        let w = self.width();
        let host = w - self.prefix;
        let full: u128 = if w == 128 {
            u128::MAX
        } else {
            (1u128 << w) - 1
        };
        if host >= 128 {
            0
        } else {
            full & !((1u128 << host).wrapping_sub(1))
        }
    }

    /// True for IPv6 prefixes.
    pub fn is_ipv6(&self) -> bool {
        self.v6
    }

    /// The prefix length.
    pub fn prefix_len(&self) -> u8 {
        self.prefix
    }

    /// The network address (host bits are always zero).
    pub fn network(&self) -> IpAddr {
        if self.v6 {
            IpAddr::V6(std::net::Ipv6Addr::from(self.bits))
        } else {
            IpAddr::V4(std::net::Ipv4Addr::from(self.bits as u32))
        }
    }

    /// Whether `ip` lies inside this prefix (an IPv4 address never matches an IPv6 prefix;
    /// IPv4-mapped IPv6 addresses are matched as IPv4 by [`Cidr::contains`] callers via
    /// [`canonical_ip`]).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let other = Self::from_addr(ip, 0);
        other.v6 == self.v6 && (other.bits & self.mask()) == self.bits
    }

    /// Whether two prefixes share any address.
    pub fn overlaps(&self, other: &Cidr) -> bool {
        if self.v6 != other.v6 {
            return false;
        }
        let shorter = if self.prefix <= other.prefix {
            self
        } else {
            other
        };
        (self.bits & shorter.mask()) == (other.bits & shorter.mask())
    }

    /// Whether `other` lies entirely inside `self`.
    pub fn covers(&self, other: &Cidr) -> bool {
        self.v6 == other.v6
            && self.prefix <= other.prefix
            && (other.bits & self.mask()) == self.bits
    }
}

/// IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) are the IPv4 address for policy purposes,
/// so a workload cannot dodge an IPv4 rule by writing the address in IPv6 form.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.v6 {
            write!(f, "{}/{}", Ipv6Addr::from(self.bits), self.prefix)
        } else {
            write!(f, "{}/{}", Ipv4Addr::from(self.bits as u32), self.prefix)
        }
    }
}

impl fmt::Debug for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cidr({self})")
    }
}

impl std::str::FromStr for Cidr {
    type Err = CidrError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Cidr::parse(s)
    }
}

impl Serialize for Cidr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Cidr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Cidr::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_contains() {
        let c = Cidr::parse("203.0.113.0/24").unwrap();
        assert!(c.contains("203.0.113.7".parse().unwrap()));
        assert!(!c.contains("203.0.114.7".parse().unwrap()));
        assert!(!c.contains("2001:db8::1".parse().unwrap()));
        let c6 = Cidr::parse("2001:db8::/32").unwrap();
        assert!(c6.contains("2001:db8:ffff::1".parse().unwrap()));
        assert!(!c6.contains("2001:db9::1".parse().unwrap()));
        assert_eq!(Cidr::parse("10.1.2.3").unwrap().to_string(), "10.1.2.3/32");
        assert!(Cidr::all_v4().contains("1.2.3.4".parse().unwrap()));
        assert!(Cidr::all_v6().contains("::1".parse().unwrap()));
        assert_eq!(Cidr::parse("::/0").unwrap(), Cidr::all_v6());
    }

    #[test]
    fn rejects_bad_prefixes() {
        for bad in [
            "",
            "/",
            "1.2.3.4/",
            "1.2.3.4/33",
            "::/129",
            "1.2.3/8",
            "x/8",
            "1.2.3.4/+8",
        ] {
            assert!(
                matches!(Cidr::parse(bad), Err(CidrError::Malformed(_))),
                "{bad}"
            );
        }
        assert_eq!(
            Cidr::parse("10.0.0.1/8"),
            Err(CidrError::HostBits(
                "10.0.0.1/8".into(),
                "10.0.0.0/8".into()
            ))
        );
    }

    #[test]
    fn overlap_and_cover() {
        let a = Cidr::parse("10.0.0.0/8").unwrap();
        let b = Cidr::parse("10.1.0.0/16").unwrap();
        let c = Cidr::parse("11.0.0.0/8").unwrap();
        assert!(a.overlaps(&b) && b.overlaps(&a));
        assert!(!a.overlaps(&c));
        assert!(a.covers(&b) && !b.covers(&a));
        assert!(!a.overlaps(&Cidr::all_v6()));
    }

    #[test]
    fn mapped_addresses_are_ipv4() {
        let ip: IpAddr = "::ffff:203.0.113.9".parse().unwrap();
        assert_eq!(canonical_ip(ip), "203.0.113.9".parse::<IpAddr>().unwrap());
    }
}
