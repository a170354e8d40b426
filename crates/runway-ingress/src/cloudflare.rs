//! The operator's Cloudflare ranges: which peers a route with `cloudflare: true` admits on the
//! public listeners, and whose `CF-Connecting-IP` is passed on.
//!
//! They come from a file (`--cloudflare-ranges FILE`: one CIDR a line, IPv4 or IPv6, `#`
//! comments), read again when its modification time or size changes. A bad file keeps the
//! last good list, and the log names the file and line. With no file, every Cloudflare route
//! refuses every client (fail closed).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwapOption;

/// A network: its address (host bits cleared) and prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Whether `address` is in it (an IPv4-mapped IPv6 address counts as its IPv4 one).
    pub fn contains(&self, address: IpAddr) -> bool {
        match (self.network, address.to_canonical()) {
            (IpAddr::V4(network), IpAddr::V4(address)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(address) & mask == u32::from(network)
            }
            (IpAddr::V6(network), IpAddr::V6(address)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(address) & mask == u128::from(network)
            }
            _ => false,
        }
    }
}

impl std::str::FromStr for Cidr {
    type Err = String;

    /// `192.0.2.0/24`, `2001:db8::/32`, or a bare address (one host). Host bits set under
    /// the prefix are refused: `192.0.2.1/24` is likely a typo.
    fn from_str(text: &str) -> Result<Self, String> {
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let network: IpAddr = address
            .parse()
            .map_err(|_| format!("{address:?} is not an IPv4 or IPv6 address"))?;
        let bits = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(prefix) => prefix
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= bits)
                .ok_or_else(|| format!("prefix {prefix:?} is not a number from 0 to {bits}"))?,
            None => bits,
        };
        let cidr = Self { network, prefix };
        if !cidr.contains(network) || cidr.masked() != network {
            return Err(format!(
                "{text} has host bits set under its /{prefix} (the network is {}/{prefix})",
                cidr.masked()
            ));
        }
        Ok(cidr)
    }
}

impl Cidr {
    fn masked(&self) -> IpAddr {
        match self.network {
            IpAddr::V4(a) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V4((u32::from(a) & mask).into())
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V6((u128::from(a) & mask).into())
            }
        }
    }
}

/// The ranges read from the file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ranges {
    cidrs: Vec<Cidr>,
}

impl Ranges {
    /// Parses the file's text; the error names the line (from 1) and what is wrong.
    pub fn parse(text: &str) -> Result<Self, (usize, String)> {
        let mut cidrs = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            cidrs.push(line.parse().map_err(|message| (index + 1, message))?);
        }
        Ok(Self { cidrs })
    }

    pub fn contains(&self, address: IpAddr) -> bool {
        self.cidrs.iter().any(|cidr| cidr.contains(address))
    }

    pub fn len(&self) -> usize {
        self.cidrs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cidrs.is_empty()
    }
}

/// Why the file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum RangesError {
    #[error("cannot read the Cloudflare ranges file {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}: {message}")]
    Line {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

/// What the ingress's requests read: the ranges, or none when no file is configured.
#[derive(Debug, Default)]
pub(crate) struct Cloudflare {
    /// Set when a file is configured (even one not read yet: an empty list, fail closed).
    ranges: ArcSwapOption<Ranges>,
}

impl Cloudflare {
    /// The ranges in force, none when no file is configured.
    pub(crate) fn ranges(&self) -> Option<Arc<Ranges>> {
        self.ranges.load_full()
    }

    pub(crate) fn set(&self, ranges: Ranges) {
        self.ranges.store(Some(Arc::new(ranges)));
    }
}

/// The file's identity for "has it changed": its modification time and size.
fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let metadata = std::fs::metadata(path).ok()?;
    Some((metadata.modified().ok()?, metadata.len()))
}

/// Reads and parses the file.
pub fn load(path: &Path) -> Result<Ranges, RangesError> {
    let text = std::fs::read_to_string(path).map_err(|source| RangesError::Read {
        path: path.to_owned(),
        source,
    })?;
    Ranges::parse(&text).map_err(|(line, message)| RangesError::Line {
        path: path.to_owned(),
        line,
        message,
    })
}

/// Reads the file now, and again every `period` when it changed, until the task is dropped.
/// A file that cannot be used leaves the last good list in force (at first, none: every
/// Cloudflare route refuses), and says why in the log.
pub(crate) async fn watch(cloudflare: Arc<Cloudflare>, path: PathBuf, period: Duration) {
    let mut seen = None;
    let mut last_error = None;
    let mut ticks = crate::timer::Interval::new(period);
    loop {
        ticks.tick().await;
        let now = stamp(&path);
        if now.is_some() && now == seen {
            continue;
        }
        seen = now;
        let read_path = path.clone();
        let Ok(loaded) = tokio::task::spawn_blocking(move || load(&read_path)).await else {
            continue;
        };
        match loaded {
            Ok(ranges) => {
                tracing::info!(
                    file = %path.display(),
                    ranges = ranges.len(),
                    "Cloudflare ranges read"
                );
                cloudflare.set(ranges);
                last_error = None;
            }
            Err(error) => {
                // Said once, not every period while the file stays as it is (or missing).
                let message = runway_log::chain(&error);
                if last_error.as_ref() != Some(&message) {
                    tracing::warn!(error = %message, "kept the previous Cloudflare ranges");
                }
                last_error = Some(message);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_with_comments_and_name_the_bad_line() {
        let ranges =
            Ranges::parse("# Cloudflare\n173.245.48.0/20\n\n2400:cb00::/32 # v6\n198.51.100.7\n")
                .unwrap();
        assert_eq!(ranges.len(), 3);
        for (address, inside) in [
            ("173.245.48.1", true),
            ("173.245.63.255", true),
            ("173.245.64.0", false),
            ("2400:cb00::1", true),
            ("2400:cb01::1", false),
            ("::ffff:173.245.48.9", true),
            ("198.51.100.7", true),
            ("198.51.100.8", false),
        ] {
            let address: IpAddr = address.parse().unwrap();
            assert_eq!(ranges.contains(address), inside, "{address}");
        }
        assert_eq!(
            Ranges::parse("10.0.0.0/8\nnot-an-address\n").unwrap_err().0,
            2
        );
        assert!(
            Ranges::parse("10.0.0.1/8")
                .unwrap_err()
                .1
                .contains("host bits")
        );
        assert!(
            Ranges::parse("10.0.0.0/33")
                .unwrap_err()
                .1
                .contains("0 to 32")
        );
        assert!(
            Ranges::parse("0.0.0.0/0")
                .unwrap()
                .contains("8.8.8.8".parse().unwrap())
        );
        assert!(
            Ranges::parse("::/0")
                .unwrap()
                .contains("2001:db8::1".parse().unwrap())
        );
    }
}
