//! Network ranges. Egress rules: an IPv4 range with an optional port or port range, as `spec.workload.egress`
//! and the operator's `runtime.egress` write them (`10.20.0.0/16`, `10.20.0.5/32:5432`,
//! `198.51.100.0/24:8000-8099`, `203.0.113.7` for one address).

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An IPv4 range with no host bits set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Range {
    pub address: Ipv4Addr,
    pub prefix_len: u8,
}

impl Range {
    pub const fn new(address: Ipv4Addr, prefix_len: u8) -> Self {
        Self {
            address,
            prefix_len,
        }
    }

    fn mask(self) -> u32 {
        if self.prefix_len == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.prefix_len))
        }
    }

    /// The first and last address of the range.
    pub fn bounds(self) -> (u32, u32) {
        let first = u32::from(self.address);
        (first, first | !self.mask())
    }

    /// Whether `other` lies wholly within this range.
    pub fn contains(self, other: Range) -> bool {
        let (first, last) = self.bounds();
        let (a, b) = other.bounds();
        first <= a && b <= last
    }

    /// Whether the two ranges share an address.
    pub fn overlaps(self, other: Range) -> bool {
        let (a1, b1) = self.bounds();
        let (a2, b2) = other.bounds();
        a1 <= b2 && a2 <= b1
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix_len)
    }
}

impl FromStr for Range {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (address, prefix_len) = match text.split_once('/') {
            Some((address, len)) => (
                address,
                len.parse::<u8>()
                    .ok()
                    .filter(|n| *n <= 32)
                    .ok_or_else(|| format!("`/{len}` is not a prefix length from 0 to 32"))?,
            ),
            None => (text, 32),
        };
        let address: Ipv4Addr = address
            .parse()
            .map_err(|_| format!("`{address}` is not a dotted IPv4 address"))?;
        let range = Range::new(address, prefix_len);
        if u32::from(address) & !range.mask() != 0 {
            return Err(format!(
                "`{text}` has host bits set; the range starts at {}",
                Range::new(
                    Ipv4Addr::from(u32::from(address) & range.mask()),
                    prefix_len
                )
            ));
        }
        Ok(range)
    }
}

impl Serialize for Range {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Range {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A range and the ports on it (all of them when none is written).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rule {
    pub range: Range,
    /// The first and last port, inclusive.
    pub ports: (u16, u16),
}

impl Rule {
    pub const ALL_PORTS: (u16, u16) = (0, u16::MAX);

    pub const fn all_ports(range: Range) -> Self {
        Self {
            range,
            ports: Self::ALL_PORTS,
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.range)?;
        match self.ports {
            Self::ALL_PORTS => Ok(()),
            (first, last) if first == last => write!(f, ":{first}"),
            (first, last) => write!(f, ":{first}-{last}"),
        }
    }
}

impl FromStr for Rule {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (range, ports) = match text.split_once(':') {
            Some((range, ports)) => (range, Some(ports)),
            None => (text, None),
        };
        let range: Range = range.parse()?;
        let port = |p: &str| {
            p.parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("`{p}` is not a port from 1 to 65535"))
        };
        let ports = match ports {
            None => Self::ALL_PORTS,
            Some(ports) => match ports.split_once('-') {
                Some((first, last)) => {
                    let (first, last) = (port(first)?, port(last)?);
                    if first > last {
                        return Err(format!("the port range `{ports}` ends before it starts"));
                    }
                    (first, last)
                }
                None => {
                    let port = port(ports)?;
                    (port, port)
                }
            },
        };
        Ok(Self { range, ports })
    }
}

impl Serialize for Rule {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Rule {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// The private ranges (RFC 1918, shared address space, benchmarking excluded): no instance
/// reaches them unless its service's policy and the operator allow.
pub const PRIVATE: [Range; 4] = [
    Range::new(Ipv4Addr::new(10, 0, 0, 0), 8),
    Range::new(Ipv4Addr::new(100, 64, 0, 0), 10),
    Range::new(Ipv4Addr::new(172, 16, 0, 0), 12),
    Range::new(Ipv4Addr::new(192, 168, 0, 0), 16),
];

/// Ranges no instance ever reaches, whatever a policy says: "this network", loopback,
/// link-local (cloud metadata), multicast and the reserved block with broadcast.
pub const NEVER: [Range; 5] = [
    Range::new(Ipv4Addr::new(0, 0, 0, 0), 8),
    Range::new(Ipv4Addr::new(127, 0, 0, 0), 8),
    Range::new(Ipv4Addr::new(169, 254, 0, 0), 16),
    Range::new(Ipv4Addr::new(224, 0, 0, 0), 4),
    Range::new(Ipv4Addr::new(240, 0, 0, 0), 4),
];

/// The first two rules of `rules` that share an address and a port, if any: nftables keeps no
/// two such elements in one set.
pub fn overlapping(rules: &[Rule]) -> Option<(Rule, Rule)> {
    rules.iter().enumerate().find_map(|(i, a)| {
        rules[i + 1..]
            .iter()
            .find(|b| a.range.overlaps(b.range) && a.ports.0 <= b.ports.1 && b.ports.0 <= a.ports.1)
            .map(|b| (*a, *b))
    })
}

/// Whether `range` overlaps a private range.
pub fn is_private(range: Range) -> bool {
    PRIVATE.iter().any(|private| private.overlaps(range))
}

/// The never-reached range `range` overlaps, if any.
pub fn never_reached(range: Range) -> Option<Range> {
    NEVER.iter().copied().find(|never| never.overlaps(range))
}

/// A client network of `spec.workload.client_addresses`: IPv4 or IPv6, a network
/// (`203.0.113.0/24`) or one address; host bits under the prefix are refused, as a likely typo.
pub fn client_network(text: &str) -> Result<ipnet::IpNet, String> {
    let network = match text.parse::<std::net::IpAddr>() {
        Ok(address) => ipnet::IpNet::from(address),
        Err(_) => text
            .parse::<ipnet::IpNet>()
            .map_err(|_| "expected an address, or an address and a prefix length".to_owned())?,
    };
    if network.trunc() != network {
        return Err(format!(
            "it has host bits set; the network is {}",
            network.trunc()
        ));
    }
    Ok(network)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_read_and_print_back() {
        for text in [
            "10.20.0.0/16",
            "10.20.0.5/32:5432",
            "198.51.100.0/24:8000-8099",
            "0.0.0.0/0:443",
        ] {
            let rule: Rule = text.parse().unwrap();
            assert_eq!(rule.to_string(), text);
        }
        let one: Rule = "203.0.113.7".parse().unwrap();
        assert_eq!(one.to_string(), "203.0.113.7/32");
    }

    #[test]
    fn bad_rules_say_what_is_wrong() {
        for (text, why) in [
            (
                "10.20.0.1/16",
                "host bits set; the range starts at 10.20.0.0/16",
            ),
            ("10.20.0.0/33", "not a prefix length"),
            ("example.com", "not a dotted IPv4 address"),
            ("10.0.0.0/8:0", "not a port"),
            ("10.0.0.0/8:99-10", "ends before it starts"),
            ("10.0.0.0/8:http", "not a port"),
            ("::1/128", "not a dotted IPv4 address"),
        ] {
            let error = text.parse::<Rule>().unwrap_err();
            assert!(error.contains(why), "{text}: {error}");
        }
    }

    #[test]
    fn ranges_contain_and_overlap() {
        let ten: Range = "10.0.0.0/8".parse().unwrap();
        let inner: Range = "10.20.0.0/16".parse().unwrap();
        assert!(ten.contains(inner) && !inner.contains(ten));
        assert!(ten.overlaps(inner) && inner.overlaps(ten));
        let all: Range = "0.0.0.0/0".parse().unwrap();
        assert!(is_private(all) && is_private(inner));
        assert!(!is_private("198.18.0.0/15".parse().unwrap()));
        assert_eq!(
            never_reached("169.254.169.254/32".parse().unwrap()),
            Some(NEVER[2])
        );
    }
}
