//! The platform's firewall for instances on networks of their own: nftables, one table
//! (`inet runway`) whose rules never change with the services, and sets keyed by instance
//! address that do. Rules scale with sets, not with one chain per service.
//!
//! What an instance reaches, checked in this order on every new connection it makes:
//! - of the host, the platform address alone (the ingress's private listener and the DNS
//!   resolver on it), never another address of the host, whatever listens there;
//! - never loopback, link-local (cloud metadata), multicast, `0.0.0.0/8`, or the instance
//!   range (other instances), whatever a policy says ([`runway_manifest::egress::NEVER`]);
//! - never what its service denies (`spec.workload.egress.deny`);
//! - a private range only with `spec.vpc_access.enabled`, and only within the operator's
//!   `runtime.egress.private_ranges`;
//! - nothing more when the operator turned the internet off (`runtime.egress.internet: false`);
//! - what its service allows on the internet (`spec.workload.egress.allow`);
//! - the rest of the internet, unless the service turned it off
//!   (`spec.workload.egress.internet: false`).
//!
//! Replies to what the host starts (the ingress, the probes) pass as established traffic;
//! nothing from outside starts a connection to an instance. What leaves the host is
//! masqueraded to the host's address. IPv6 is refused: instances have no IPv6 address but
//! their link-local one, and the host's ends have IPv6 off.
//!
//! Policy is enforced on packets, so no DNS answer can widen it. The per-instance elements are
//! written when an address is leased and removed when it is given back; what was written is
//! kept beside the lease (`<address>.egress`), so the next holder of the address starts with
//! none of its predecessor's.

use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use runway_manifest::EgressConfig;
use runway_manifest::egress::{self, Range, Rule};
use serde::{Deserialize, Serialize};

/// The table's name, in the `inet` family.
pub const TABLE: &str = "runway";

/// The prefix of the host's ends of instances' links.
const LINKS: &str = "rw*";

/// What the operator allows every service (`runtime.egress`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressLimits {
    /// Whether instances may reach the internet at all.
    pub internet: bool,
    /// The private ranges a service may be given (by `vpc_access` or its allow list); none
    /// by default.
    pub private_ranges: Vec<Range>,
}

impl Default for EgressLimits {
    fn default() -> Self {
        Self {
            internet: true,
            private_ranges: Vec::new(),
        }
    }
}

/// One instance's egress, bounded by the operator's limits: the elements its address has in
/// the table's sets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    pub allow: Vec<Rule>,
    pub deny: Vec<Rule>,
    /// Whether it reaches the internet beyond `allow`.
    pub internet: bool,
    /// Whether it may reach private ranges at all (`spec.vpc_access.enabled`).
    #[serde(default)]
    pub vpc: bool,
}

/// The firewall of one machine's instance range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Firewall {
    range: Range,
    platform: Ipv4Addr,
    limits: EgressLimits,
    /// Where what was written for each address is kept (the pool's lease directory).
    records: PathBuf,
}

impl Firewall {
    /// The firewall for instances on `range`, reaching the host at `platform` only.
    pub fn new(
        range: Range,
        platform: Ipv4Addr,
        limits: EgressLimits,
        records: impl Into<PathBuf>,
    ) -> Self {
        Self {
            range,
            platform,
            limits,
            records: records.into(),
        }
    }

    /// The platform address: where instances reach the private listener and DNS.
    pub fn platform_address(&self) -> Ipv4Addr {
        self.platform
    }

    /// Whether this machine has nftables' `nft` on `PATH`.
    pub fn check_tools() -> Result<(), String> {
        if crate::local::on_path(Path::new("nft")) {
            Ok(())
        } else {
            Err("nft (nftables) not found on PATH".to_owned())
        }
    }

    /// Makes the host ready: the platform address on the loopback link, IPv4 forwarding on,
    /// and the table's rules (re)written in one transaction. The sets and their elements are
    /// kept, so instances that outlived a restart of the server keep their policies.
    pub fn install(&self) -> Result<(), String> {
        let platform = format!("{}/32", self.platform);
        let present = run("ip", &["-4", "addr", "show", "dev", "lo"], "")?;
        if !present.contains(&format!("inet {platform} ")) {
            run("ip", &["addr", "add", &platform, "dev", "lo"], "")?;
        }
        // Forwarding is what lets instances out. When the platform turned it on, the table
        // forwards nothing else, so the host does not become a router for its other links;
        // the table itself remembers that (its forward chain ends in `drop`), in this network
        // namespace, for the next start.
        let forwarding = "/proc/sys/net/ipv4/ip_forward";
        let on = std::fs::read_to_string(forwarding).map_err(|e| format!("{forwarding}: {e}"))?;
        let turned_on_here = if on.trim() == "0" {
            std::fs::write(forwarding, "1\n").map_err(|e| format!("{forwarding}: {e}"))?;
            true
        } else {
            run("nft", &["list", "chain", "inet", TABLE, "forward"], "")
                .is_ok_and(|chain| chain.lines().any(|line| line.trim() == "drop"))
        };
        run("nft", &["-f", "-"], &self.ruleset(turned_on_here))?;
        Ok(())
    }

    /// The table: its sets declared (kept with their elements if they exist), its chains
    /// flushed and written anew.
    fn ruleset(&self, forwards_only_instances: bool) -> String {
        let never: Vec<String> = egress::NEVER
            .iter()
            .chain([&self.range])
            .map(Range::to_string)
            .collect();
        let private: Vec<String> = egress::PRIVATE.iter().map(Range::to_string).collect();
        let ceiling: Vec<String> = self
            .limits
            .private_ranges
            .iter()
            .map(Range::to_string)
            .collect();
        let platform = self.platform;
        let range = self.range;
        let mut text = format!(
            "table inet {TABLE} {{\n\
             \tset never {{ type ipv4_addr; flags interval; auto-merge; }}\n\
             \tset private {{ type ipv4_addr; flags interval; auto-merge; }}\n\
             \tset ceiling {{ type ipv4_addr; flags interval; auto-merge; }}\n\
             \tset allow {{ type ipv4_addr . ipv4_addr . inet_service; flags interval; }}\n\
             \tset deny {{ type ipv4_addr . ipv4_addr . inet_service; flags interval; }}\n\
             \tset locked {{ type ipv4_addr; }}\n\
             \tset vpc {{ type ipv4_addr; }}\n\
             \tchain input {{ type filter hook input priority filter; policy accept; }}\n\
             \tchain forward {{ type filter hook forward priority filter; policy accept; }}\n\
             \tchain instance_to_host {{ }}\n\
             \tchain egress {{ }}\n\
             \tchain postrouting {{ type nat hook postrouting priority srcnat; policy accept; }}\n\
             }}\n\
             flush chain inet {TABLE} input\n\
             flush chain inet {TABLE} forward\n\
             flush chain inet {TABLE} instance_to_host\n\
             flush chain inet {TABLE} egress\n\
             flush chain inet {TABLE} postrouting\n\
             flush set inet {TABLE} never\n\
             flush set inet {TABLE} private\n\
             flush set inet {TABLE} ceiling\n\
             add element inet {TABLE} never {{ {never} }}\n\
             add element inet {TABLE} private {{ {private} }}\n",
            never = never.join(", "),
            private = private.join(", "),
        );
        if !ceiling.is_empty() {
            let _ = writeln!(
                text,
                "add element inet {TABLE} ceiling {{ {} }}",
                ceiling.join(", ")
            );
        }
        let rules = [
            (
                "input",
                format!("iifname \"{LINKS}\" jump instance_to_host"),
            ),
            (
                "input",
                format!("ip daddr {platform} iifname != {{ \"lo\", \"{LINKS}\" }} drop"),
            ),
            (
                "instance_to_host",
                "ct state established,related accept".to_owned(),
            ),
            (
                "instance_to_host",
                format!("ip daddr {platform} udp dport 53 accept"),
            ),
            (
                "instance_to_host",
                format!("ip daddr {platform} tcp dport {{ 53, 80 }} accept"),
            ),
            (
                "instance_to_host",
                "meta l4proto tcp reject with tcp reset".to_owned(),
            ),
            ("instance_to_host", "reject".to_owned()),
            ("forward", format!("iifname \"{LINKS}\" jump egress")),
            (
                "forward",
                format!("oifname \"{LINKS}\" ct state established,related accept"),
            ),
            ("forward", format!("oifname \"{LINKS}\" drop")),
            ("egress", "ct state established,related accept".to_owned()),
            ("egress", "meta nfproto ipv6 reject".to_owned()),
            ("egress", "ip daddr @never reject".to_owned()),
            (
                "egress",
                "ip saddr . ip daddr . th dport @deny reject".to_owned(),
            ),
            (
                "egress",
                "ip daddr @private ip daddr != @ceiling reject".to_owned(),
            ),
            (
                "egress",
                "ip daddr @private ip saddr != @vpc reject".to_owned(),
            ),
            ("egress", "ip daddr @private accept".to_owned()),
        ]
        .into_iter()
        .chain((!self.limits.internet).then(|| ("egress", "reject".to_owned())))
        .chain([
            (
                "egress",
                "ip saddr . ip daddr . th dport @allow accept".to_owned(),
            ),
            ("egress", "ip saddr @locked reject".to_owned()),
            ("egress", "accept".to_owned()),
            (
                "postrouting",
                format!("ip saddr {range} oifname != \"{LINKS}\" masquerade"),
            ),
        ])
        .chain(forwards_only_instances.then(|| ("forward", "drop".to_owned())));
        for (chain, rule) in rules {
            let _ = writeln!(text, "add rule inet {TABLE} {chain} {rule}");
        }
        text
    }

    /// A service's egress as its instances get it, bounded by the operator's limits. What
    /// can never be reached is refused rather than left to fail silently: an allowed range
    /// wholly within a never-reached or a private range (private ranges come whole with
    /// `vpc_access`, narrowed by `deny`), a public one when the operator turned the internet
    /// off, `vpc_access` where the operator gives no private range. A rule that spans kinds
    /// (`0.0.0.0/0:443`) is kept, and its packets are judged one by one.
    pub fn policy(&self, wanted: &EgressConfig) -> Result<Policy, String> {
        if wanted.vpc && self.limits.private_ranges.is_empty() {
            return Err(
                "spec.vpc_access.enabled asks for the private network, and this platform gives \
                 services none (runtime.egress.private_ranges is empty)"
                    .to_owned(),
            );
        }
        for rule in &wanted.allow {
            let refuse = |why: String| Err(format!("spec.workload.egress.allow: {rule} {why}"));
            if let Some(never) = egress::NEVER
                .iter()
                .chain([&self.range])
                .find(|never| never.contains(rule.range))
            {
                return refuse(format!("lies within {never}, which no instance reaches"));
            }
            if egress::PRIVATE.iter().any(|r| r.contains(rule.range)) {
                return refuse(format!(
                    "is private: private ranges come with spec.vpc_access.enabled: true, all of \
                     those this platform gives (runtime.egress.private_ranges: {}), narrowed by \
                     spec.workload.egress.deny",
                    list(&self.limits.private_ranges)
                ));
            }
            if !self.limits.internet {
                return refuse(
                    "is on the internet, which this platform's instances do not reach \
                     (runtime.egress.internet: false)"
                        .to_owned(),
                );
            }
        }
        for (name, rules) in [("allow", &wanted.allow), ("deny", &wanted.deny)] {
            if let Some((a, b)) = egress::overlapping(rules) {
                return Err(format!(
                    "spec.workload.egress.{name}: {a} and {b} overlap; write them as one"
                ));
            }
        }
        Ok(Policy {
            allow: wanted.allow.clone(),
            deny: wanted.deny.clone(),
            internet: wanted.internet && self.limits.internet,
            vpc: wanted.vpc,
        })
    }

    /// Gives `address` the elements of `policy`, removing first whatever an earlier holder of
    /// the address left; one transaction.
    pub fn apply(&self, address: Ipv4Addr, policy: &Policy) -> io::Result<()> {
        // The record is written aside first: on a full disk nothing reaches the table, and
        // once the table has the elements the rename (which needs no room) records them, so
        // no element is ever left without a record for the address's next holder to remove.
        let record = self.record(address);
        let pending = record.with_extension("egress.new");
        std::fs::write(
            &pending,
            serde_json::to_vec(policy).map_err(io::Error::other)?,
        )?;
        let mut text = self.removal(address);
        text.push_str(&elements("add", address, policy));
        if let Err(error) = run("nft", &["-f", "-"], &text) {
            let _ = std::fs::remove_file(&pending);
            return Err(io::Error::other(error));
        }
        std::fs::rename(&pending, &record)
    }

    /// Removes what `address` was given, if anything.
    pub fn remove(&self, address: Ipv4Addr) -> io::Result<()> {
        let text = self.removal(address);
        if !text.is_empty() {
            run("nft", &["-f", "-"], &text).map_err(io::Error::other)?;
        }
        match std::fs::remove_file(self.record(address)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// The commands that remove what the record of `address` says it was given: each element
    /// added, then deleted, so that none is missing for the delete (a table written anew by a
    /// reboot has none).
    fn removal(&self, address: Ipv4Addr) -> String {
        let Some(old) = std::fs::read(self.record(address))
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Policy>(&bytes).ok())
        else {
            return String::new();
        };
        let mut text = elements("add", address, &old);
        text.push_str(&elements("delete", address, &old));
        text
    }

    fn record(&self, address: Ipv4Addr) -> PathBuf {
        self.records.join(format!("{address}.egress"))
    }
}

/// `verb element` commands for `address`'s elements of `policy`.
fn elements(verb: &str, address: Ipv4Addr, policy: &Policy) -> String {
    let mut text = String::new();
    for (set, rules) in [("allow", &policy.allow), ("deny", &policy.deny)] {
        if rules.is_empty() {
            continue;
        }
        let items: Vec<String> = rules
            .iter()
            .map(|rule| {
                let (first, last) = rule.ports;
                let ports = if first == last {
                    first.to_string()
                } else {
                    format!("{first}-{last}")
                };
                format!("{address} . {} . {ports}", rule.range)
            })
            .collect();
        let _ = writeln!(
            text,
            "{verb} element inet {TABLE} {set} {{ {} }}",
            items.join(", ")
        );
    }
    for (set, member) in [("locked", !policy.internet), ("vpc", policy.vpc)] {
        if member {
            let _ = writeln!(text, "{verb} element inet {TABLE} {set} {{ {address} }}");
        }
    }
    text
}

fn list(ranges: &[Range]) -> String {
    if ranges.is_empty() {
        return "none".to_owned();
    }
    ranges
        .iter()
        .map(Range::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs `program` with `input` on its standard input; its output, or why it failed.
fn run(program: &str, args: &[&str], input: &str) -> Result<String, String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input.as_bytes())
            .map_err(|e| format!("{program}: {e}"))?;
    }
    let output = child
        .wait_with_output()
        .map_err(|e| format!("{program}: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "{program} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn firewall(private: &[&str], internet: bool) -> Firewall {
        Firewall::new(
            "10.213.0.0/16".parse().unwrap(),
            Ipv4Addr::new(10, 213, 0, 1),
            EgressLimits {
                internet,
                private_ranges: private.iter().map(|r| r.parse().unwrap()).collect(),
            },
            "/nonexistent",
        )
    }

    fn wanted(vpc: bool, allow: &[&str], internet: bool) -> EgressConfig {
        EgressConfig {
            internet,
            vpc,
            allow: allow.iter().map(|r| r.parse().unwrap()).collect(),
            deny: Vec::new(),
        }
    }

    #[test]
    fn a_policy_is_bounded_by_the_operator() {
        let fw = firewall(&["10.20.0.0/16"], true);
        let policy = fw.policy(&wanted(true, &[], true)).unwrap();
        assert!(policy.vpc && policy.internet && policy.allow.is_empty());
        let locked = fw
            .policy(&wanted(false, &["198.18.0.0/15:443"], false))
            .unwrap();
        assert!(!locked.internet && !locked.vpc);
        for (allow, why) in [
            (
                &["10.20.1.0/24"][..],
                "is private: private ranges come with",
            ),
            (&["169.254.169.254/32"], "lies within 169.254.0.0/16"),
            (&["10.213.0.0/24"], "lies within 10.213.0.0/16"),
            (
                &["198.18.0.0/15:443", "198.18.0.0/16:400-500"],
                "198.18.0.0/15:443 and 198.18.0.0/16:400-500 overlap",
            ),
        ] {
            let error = fw.policy(&wanted(true, allow, true)).unwrap_err();
            assert!(error.contains(why), "{allow:?}: {error}");
        }
        // One rule across kinds is kept; packets are judged one by one.
        let https = fw
            .policy(&wanted(false, &["0.0.0.0/0:443"], false))
            .unwrap();
        assert_eq!(https.allow.len(), 1);
        let none = firewall(&[], true).policy(&wanted(true, &[], true));
        assert!(none.unwrap_err().contains("private_ranges is empty"));
        let closed = firewall(&[], false);
        assert!(!closed.policy(&wanted(false, &[], true)).unwrap().internet);
        let error = closed
            .policy(&wanted(false, &["198.18.0.0/15"], true))
            .unwrap_err();
        assert!(error.contains("runtime.egress.internet: false"), "{error}");
    }

    #[test]
    fn elements_are_keyed_by_the_instance() {
        let policy = Policy {
            allow: vec!["203.0.113.0/24:443".parse().unwrap()],
            deny: vec!["198.51.100.0/24:8000-8099".parse().unwrap()],
            internet: false,
            vpc: true,
        };
        let text = elements("add", Ipv4Addr::new(10, 213, 0, 6), &policy);
        assert_eq!(
            text,
            "add element inet runway allow { 10.213.0.6 . 203.0.113.0/24 . 443 }\n\
             add element inet runway deny { 10.213.0.6 . 198.51.100.0/24 . 8000-8099 }\n\
             add element inet runway locked { 10.213.0.6 }\n\
             add element inet runway vpc { 10.213.0.6 }\n"
        );
    }

    #[test]
    fn the_ruleset_forwards_nothing_else_only_when_it_turned_forwarding_on() {
        let fw = firewall(&[], false);
        let shared = fw.ruleset(false);
        assert!(!shared.contains("add rule inet runway forward drop"));
        assert!(shared.contains("add rule inet runway egress ip daddr @private accept\nadd rule inet runway egress reject\n"));
        assert!(!shared.contains("add element inet runway ceiling"));
        assert!(
            fw.ruleset(true)
                .contains("add rule inet runway forward drop\n")
        );
    }
}
