//! An instance's own network. A container given an [`InstanceNetwork`] runs in a network
//! namespace of its own (the OCI runtime makes it, with its loopback), joined to the host by a
//! veth pair on a `/30` of its own: the host's end has the first address, the instance's end
//! (`eth0`) the second. The host reaches the instance there (the ingress and the probes); the
//! instance reaches only its `/30`, so its host end (what listens on all the host's addresses,
//! like the ingress's public listeners) and nothing else: no route leads out, not to another
//! instance, not to what listens on the host's loopback (the API, the ingress's control), not
//! to the internet. Without capabilities it cannot add one. IPv6 is off on the host's end.
//! Every port is unprivileged in it, so an app without capabilities may listen on 80.
//!
//! Addresses come from an [`AddressPool`], a range the operator chose, leased one `/30` per
//! instance through files in a directory shared by every runtime on the machine, under a lock:
//! two servers on one host never hand out the same address. A lease whose instance's state
//! directory is gone is stale and taken back.
//!
//! The pair is made by iproute2's `ip`, as the container itself is made by the OCI runtime:
//! between `create` and `start`, at every start (a restarted container has a new namespace).
//! It goes with the namespace when the container ends.

use std::collections::HashSet;
use std::fs;
use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::firewall::{EgressLimits, Firewall, Policy};
use runway_manifest::egress::Range;

/// An instance's addresses and the host's end of its veth pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceNetwork {
    /// The host's end of the pair: `rw` and the instance's address in hex.
    pub link: String,
    /// The host's address on the link: what the instance reaches of the host.
    pub host: Ipv4Addr,
    /// The instance's address, where it is reached.
    pub address: Ipv4Addr,
    /// With a firewall ([`crate::firewall`]): the platform address, the instance's resolver
    /// and private listener; the instance's default route then leads through the host.
    /// Without one the instance reaches nothing beyond its link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Ipv4Addr>,
}

/// Every instance's network is a `/30`: the host's end, the instance's end.
pub const PREFIX_LEN: u8 = 30;

/// The instance's end of the pair, inside its namespace.
const INSIDE_LINK: &str = "eth0";

/// How long one `ip` command may take.
const IP_TIMEOUT: Duration = Duration::from_secs(10);

/// The operator's range of instance addresses and where leases on it are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressPool {
    base: u32,
    prefix_len: u8,
    leases: PathBuf,
    firewall: Option<Firewall>,
}

/// Where leases are kept unless told: shared by every runtime on the machine, gone at boot
/// with the interfaces they describe.
pub const DEFAULT_LEASES_DIR: &str = "/run/runway/network";

/// The default range: 16,383 instances.
pub const DEFAULT_RANGE: &str = "10.213.0.0/16";

impl AddressPool {
    /// A pool over `range` (`a.b.c.d/n`, `n` from 8 to 29, no host bits set), leased in
    /// `leases`.
    pub fn new(range: &str, leases: impl Into<PathBuf>) -> Result<Self, String> {
        let invalid =
            |why: &str| format!("{range:?} is not an IPv4 range like 10.213.0.0/16: {why}");
        let (address, prefix_len) = range
            .split_once('/')
            .ok_or_else(|| invalid("no /prefix length"))?;
        let address: Ipv4Addr = address
            .parse()
            .map_err(|_| invalid("the address is not dotted IPv4"))?;
        let prefix_len: u8 = prefix_len
            .parse()
            .ok()
            .filter(|n| (8..PREFIX_LEN).contains(n))
            .ok_or_else(|| {
                invalid(
                    "the prefix length must be 8 to 29 (the platform's address and an instance)",
                )
            })?;
        let base = u32::from(address);
        let host_bits = u32::MAX >> prefix_len;
        if base & host_bits != 0 {
            return Err(invalid(&format!(
                "it has host bits set; the range starts at {}/{prefix_len}",
                Ipv4Addr::from(base & !host_bits)
            )));
        }
        if address.is_loopback() || address.is_unspecified() || address.is_multicast() {
            return Err(invalid(
                "loopback, unspecified and multicast ranges cannot be used",
            ));
        }
        Ok(Self {
            base,
            prefix_len,
            leases: leases.into(),
            firewall: None,
        })
    }

    /// Lets instances out through the host, under the platform's firewall and the operator's
    /// `limits` ([`crate::firewall`]): each gets a default route, a resolver and its service's
    /// egress policy.
    pub fn with_firewall(mut self, limits: EgressLimits) -> Self {
        self.firewall = Some(Firewall::new(
            Range::new(Ipv4Addr::from(self.base), self.prefix_len),
            self.platform_address(),
            limits,
            self.leases.clone(),
        ));
        self
    }

    /// The firewall, when instances are let out.
    pub fn firewall(&self) -> Option<&Firewall> {
        self.firewall.as_ref()
    }

    /// The range's first address, which no instance is given: the platform's own, where
    /// instances reach the private listener and the resolver.
    pub fn platform_address(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.base + 1)
    }

    /// Whether this machine has what joins instances to the host: iproute2's `ip` and
    /// util-linux's `nsenter`, on `PATH`.
    pub fn check_tools() -> Result<(), String> {
        let missing: Vec<&str> = ["ip", "nsenter"]
            .into_iter()
            .filter(|tool| !crate::local::on_path(Path::new(tool)))
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!("{} not found on PATH", missing.join(" and ")))
        }
    }

    /// How many instances the range has room for: one `/30` each, the first kept for the
    /// platform address.
    pub fn capacity(&self) -> u32 {
        (1 << (PREFIX_LEN - self.prefix_len)) - 1
    }

    /// The network of the `slot`th instance: the range's `slot + 1`th `/30`.
    fn network(&self, slot: u32) -> InstanceNetwork {
        let first = self.base + (slot + 1) * 4;
        let address = Ipv4Addr::from(first + 2);
        InstanceNetwork {
            link: format!("rw{:08x}", first + 2),
            host: Ipv4Addr::from(first + 1),
            address,
            platform: self.firewall.as_ref().map(Firewall::platform_address),
        }
    }

    /// Leases a network to the instance whose state directory is `owner` (the one it has
    /// already, if it has one), with its egress `policy` in the firewall when there is one.
    /// Blocks on the pool's lock while another runtime leases.
    pub(crate) fn lease(
        &self,
        owner: &Path,
        policy: Option<&Policy>,
    ) -> io::Result<InstanceNetwork> {
        let network = self.lease_address(owner)?;
        if let (Some(firewall), Some(policy)) = (&self.firewall, policy)
            && let Err(error) = firewall.apply(network.address, policy)
        {
            self.release(&network, owner);
            return Err(error);
        }
        Ok(network)
    }

    fn lease_address(&self, owner: &Path) -> io::Result<InstanceNetwork> {
        let _lock = self.lock()?;
        let mut taken = std::collections::BTreeSet::new();
        for entry in fs::read_dir(&self.leases)? {
            let entry = entry?;
            let Some(address) = entry
                .file_name()
                .to_str()
                .and_then(|name| name.parse::<Ipv4Addr>().ok())
            else {
                continue;
            };
            let holder = fs::read_to_string(entry.path()).unwrap_or_default();
            let holder = Path::new(holder.trim_end());
            if holder == owner {
                if let Some(slot) = self.slot_of(address) {
                    return Ok(self.network(slot));
                }
            } else if holder.as_os_str().is_empty() || !holder.is_dir() {
                // The instance is gone (a lease being written holds the lock we hold).
                let _ = fs::remove_file(entry.path());
                continue;
            }
            taken.insert(address);
        }
        let slot = (0..self.capacity())
            .find(|&slot| !taken.contains(&self.network(slot).address))
            .ok_or_else(|| {
                io::Error::other(format!(
                    "all {} instance addresses of {}/{} are taken (runtime.instance_network)",
                    self.capacity(),
                    Ipv4Addr::from(self.base),
                    self.prefix_len
                ))
            })?;
        let network = self.network(slot);
        let mut file = fs::File::create(self.leases.join(network.address.to_string()))?;
        file.write_all(owner.as_os_str().as_encoded_bytes())?;
        file.sync_all()?;
        Ok(network)
    }

    /// Gives back `owner`'s lease on `network`'s address, and its place in the firewall.
    pub(crate) fn release(&self, network: &InstanceNetwork, owner: &Path) {
        let path = self.leases.join(network.address.to_string());
        if let Ok(_lock) = self.lock()
            && fs::read_to_string(&path).is_ok_and(|holder| Path::new(holder.trim_end()) == owner)
        {
            if let Some(firewall) = &self.firewall
                && let Err(error) = firewall.remove(network.address)
            {
                tracing::warn!(address = %network.address, "cannot remove the instance's egress policy: {error}");
            }
            let _ = fs::remove_file(&path);
        }
    }

    /// The pool's lock, held by whoever reads or writes its leases, in any process.
    fn lock(&self) -> io::Result<fs::File> {
        fs::create_dir_all(&self.leases)?;
        let lock = fs::File::create(self.leases.join(".lock"))?;
        lock.lock()?;
        Ok(lock)
    }

    fn slot_of(&self, address: Ipv4Addr) -> Option<u32> {
        let offset = u32::from(address).checked_sub(self.base)?;
        let slot = (offset / 4).checked_sub(1)?;
        (offset % 4 == 2 && slot < self.capacity()).then_some(slot)
    }
}

/// Joins the network namespace of the container whose init process is `pid` to the host:
/// the veth pair, the addresses, the links up. A pair left by the instance's last container
/// (its namespace not yet torn down) is deleted first.
pub(crate) async fn attach(network: &InstanceNetwork, pid: u32) -> Result<(), String> {
    let link = network.link.as_str();
    let _ = ip(None, &["link", "del", link], "").await;
    let namespace = format!("/proc/{pid}/ns/net");
    let pid = pid.to_string();
    let add = [
        "link",
        "add",
        link,
        "type",
        "veth",
        "peer",
        "name",
        INSIDE_LINK,
        "netns",
        &pid,
    ];
    ip(None, &add, "").await?;
    // No IPv6 on the host's end: the instance's link-local address reaches nothing.
    let _ = fs::write(
        format!("/proc/sys/net/ipv6/conf/{link}/disable_ipv6"),
        "1\n",
    );
    let host = format!(
        "addr add {}/{PREFIX_LEN} dev {link}\nlink set {link} up\n",
        network.host
    );
    ip(None, &["-batch", "-"], &host).await?;
    let mut inside = format!(
        "addr add {}/{PREFIX_LEN} dev {INSIDE_LINK}\nlink set {INSIDE_LINK} up\nlink set lo up\n",
        network.address
    );
    if network.platform.is_some() {
        // Out through the host, where the firewall decides.
        inside.push_str(&format!("route add default via {}\n", network.host));
    }
    ip(Some(&namespace), &["-batch", "-"], &inside).await
}

/// Why nothing answered where an instance should listen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListenHint {
    /// It listens, elsewhere: no wait will help, the app must change (or listen later).
    pub(crate) elsewhere: bool,
    pub(crate) text: String,
}

/// Why nothing answered at `expected`, where the instance whose process is `pid` should
/// listen, told from what it does listen on: `None` when it listens there after all. On a
/// network of its own everything listening in its namespace is the instance's; on the host's,
/// only the sockets its process (and that process's children) hold.
pub(crate) fn listen_hint(pid: u32, expected: SocketAddr, own_network: bool) -> Option<ListenHint> {
    let mine = (!own_network).then(|| socket_inodes(pid));
    let listening = listening(pid, mine.as_ref());
    let reached = |a: &SocketAddr| {
        a.port() == expected.port()
            && (a.ip().is_unspecified()
                || a.ip() == expected.ip()
                || (!own_network && a.ip().is_loopback()))
    };
    if listening.iter().any(reached) {
        return None;
    }
    let port = expected.port();
    if listening.is_empty() {
        return Some(ListenHint {
            elsewhere: false,
            text: format!(
                "the app listens on no TCP port yet; it must listen on 0.0.0.0:{port} (its PORT)"
            ),
        });
    }
    let shown: Vec<String> = listening.iter().map(SocketAddr::to_string).collect();
    let shown = shown.join(", ");
    let text = if own_network && listening.iter().any(|a| a.port() == port) {
        format!(
            "the app listens on {shown}, where the ingress cannot reach it: it must listen on \
             0.0.0.0:{port} (all addresses, its PORT)"
        )
    } else {
        format!("the app listens on {shown}, not on its PORT {port}: it must listen on $PORT")
    };
    Some(ListenHint {
        elsewhere: true,
        text,
    })
}

/// The TCP sockets listening in the network namespace of process `pid`, from
/// `/proc/<pid>/net/tcp` and `tcp6`; only those with one of the inodes in `only`, if given.
fn listening(pid: u32, only: Option<&HashSet<u64>>) -> Vec<SocketAddr> {
    let mut found = Vec::new();
    for table in ["tcp", "tcp6"] {
        let Ok(text) = fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            continue;
        };
        found.extend(
            text.lines()
                .skip(1)
                .filter_map(listening_socket)
                .filter(|(_, inode)| only.is_none_or(|only| only.contains(inode)))
                .map(|(address, _)| address),
        );
    }
    found.sort();
    found.dedup();
    found
}

/// The inodes of the sockets that process `pid` and its descendants (up to a few dozen
/// processes) hold, from their `/proc/<pid>/fd` links (`socket:[N]`).
fn socket_inodes(pid: u32) -> HashSet<u64> {
    const MAX_PROCESSES: usize = 64;
    let mut inodes = HashSet::new();
    let mut pending = vec![pid];
    let mut seen = 0;
    while let Some(pid) = pending.pop() {
        seen += 1;
        if seen > MAX_PROCESSES {
            break;
        }
        if let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) {
            inodes.extend(fds.filter_map(Result::ok).filter_map(|fd| {
                let target = fs::read_link(fd.path()).ok()?;
                let target = target.to_str()?;
                target
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .parse::<u64>()
                    .ok()
            }));
        }
        if let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) {
            for task in tasks.filter_map(Result::ok) {
                let children = fs::read_to_string(task.path().join("children")).unwrap_or_default();
                pending.extend(
                    children
                        .split_whitespace()
                        .filter_map(|c| c.parse::<u32>().ok()),
                );
            }
        }
    }
    inodes
}

/// One line of `/proc/net/tcp{,6}`, if its socket listens (state `0A`), with the socket's
/// inode: addresses are the kernel's words in hex, each in this machine's byte order; the
/// port is plain hex.
fn listening_socket(line: &str) -> Option<(SocketAddr, u64)> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let (local, state) = (*fields.get(1)?, *fields.get(3)?);
    if state != "0A" {
        return None;
    }
    let inode = fields.get(9).and_then(|i| i.parse().ok()).unwrap_or(0);
    let (address, port) = local.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let words: Vec<[u8; 4]> = (0..address.len() / 8)
        .map(|i| {
            u32::from_str_radix(address.get(i * 8..i * 8 + 8)?, 16)
                .ok()
                .map(u32::to_ne_bytes)
        })
        .collect::<Option<_>>()?;
    let ip = match words.as_slice() {
        [word] => IpAddr::V4(Ipv4Addr::from(*word)),
        [a, b, c, d] => {
            let mut bytes = [0u8; 16];
            for (chunk, word) in bytes.chunks_mut(4).zip([a, b, c, d]) {
                chunk.copy_from_slice(word);
            }
            IpAddr::V6(std::net::Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some((SocketAddr::new(ip, port), inode))
}

/// Runs iproute2's `ip` with `args` (`-batch -` reads its commands from `stdin`), in the
/// host's network namespace or, through `nsenter`, in the one at path `namespace`. In an
/// instance's namespace, every port is made the instance's to listen on first (as Docker does):
/// an app without capabilities may take 80, as it would on Cloud Run.
async fn ip(namespace: Option<&str>, args: &[&str], stdin: &str) -> Result<(), String> {
    let mut command = match namespace {
        Some(namespace) => {
            let mut command = Command::new("nsenter");
            command.arg(format!("--net={namespace}")).args([
                "sh",
                "-c",
                "echo 0 > /proc/sys/net/ipv4/ip_unprivileged_port_start && exec ip \"$@\"",
                "ip",
            ]);
            command
        }
        None => Command::new("ip"),
    };
    command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let what = format!("ip {}", args.join(" "));
    let run = async {
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot run {what} (is iproute2 installed?): {e}"))?;
        if let Some(mut pipe) = child.stdin.take() {
            pipe.write_all(stdin.as_bytes())
                .await
                .map_err(|e| format!("{what}: {e}"))?;
        }
        child
            .wait_with_output()
            .await
            .map_err(|e| format!("{what}: {e}"))
    };
    let output = tokio::time::timeout(IP_TIMEOUT, run)
        .await
        .map_err(|_| format!("{what} did not finish in {IP_TIMEOUT:?}"))??;
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "{what} failed: {}",
        String::from_utf8_lossy(&output.stderr).trim()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_sockets_are_read_from_the_kernels_table() {
        // Lines as /proc/net/tcp and tcp6 print them on a little-endian machine.
        let v4 = "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242";
        let v4_any = "   1: 00000000:0BB8 00000000:0000 0A 00000000:00000000 00:00000000 00000000";
        let connected = "   2: 0100007F:1F90 0100007F:D2F0 01 00000000:00000000 00:00000000 0";
        let v6 =
            "   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A";
        if cfg!(target_endian = "little") {
            assert_eq!(
                listening_socket(v4),
                Some(("127.0.0.1:8080".parse().unwrap(), 4242))
            );
            assert_eq!(
                listening_socket(v6),
                Some(("[::1]:8080".parse().unwrap(), 0))
            );
        }
        assert_eq!(
            listening_socket(v4_any),
            Some(("0.0.0.0:3000".parse().unwrap(), 0))
        );
        assert_eq!(listening_socket(connected), None);
        for garbage in [
            "",
            "sl local_address",
            "0: zz:1F90 0:0 0A",
            "0: 0100007F:zz 0:0 0A",
        ] {
            assert_eq!(listening_socket(garbage), None, "{garbage}");
        }
    }

    #[test]
    fn a_process_on_the_hosts_network_is_told_the_port_it_listens_on() {
        // This test's own process, on the host's network: what it listens on is found among
        // the host's sockets by its descriptors.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let bound = listener.local_addr().unwrap();
        let pid = std::process::id();
        assert_eq!(listen_hint(pid, bound, false), None);
        let spare = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = spare.local_addr().unwrap();
        drop(spare);
        let hint = listen_hint(pid, port, false).unwrap();
        assert!(hint.elsewhere);
        let hint = hint.text;
        assert!(hint.contains(&bound.to_string()), "{hint}");
        assert!(
            hint.contains(&format!("not on its PORT {}", port.port())),
            "{hint}"
        );
    }

    #[test]
    fn a_range_is_checked_and_cut_into_slash_30s() {
        let dir = tempfile::tempdir().unwrap();
        let pool = AddressPool::new("10.213.0.0/16", dir.path()).unwrap();
        assert_eq!(pool.capacity(), 16_383, "the first /30 is the platform's");
        let second = pool.network(1);
        assert_eq!(second.host, Ipv4Addr::new(10, 213, 0, 9));
        assert_eq!(second.address, Ipv4Addr::new(10, 213, 0, 10));
        assert_eq!(second.link, "rw0ad5000a");
        assert!(
            second.link.len() <= 15,
            "an interface name has 15 bytes at most"
        );
        assert_eq!(pool.slot_of(second.address), Some(1));
        assert_eq!(pool.slot_of(second.host), None);
        assert_eq!(pool.slot_of(Ipv4Addr::new(10, 213, 0, 2)), None);
        let last = pool.network(pool.capacity() - 1);
        assert_eq!(last.address, Ipv4Addr::new(10, 213, 255, 254));
        for (range, why) in [
            (
                "10.213.0.1/16",
                "host bits set; the range starts at 10.213.0.0/16",
            ),
            ("10.213.0.0", "no /prefix"),
            ("10.213.0.0/30", "8 to 29"),
            ("10.213.0.0/x", "8 to 29"),
            ("fd00::/64", "not dotted IPv4"),
            ("127.0.0.0/8", "loopback"),
        ] {
            let error = AddressPool::new(range, dir.path()).unwrap_err();
            assert!(error.contains(why), "{range}: {error}");
        }
    }

    #[test]
    fn leases_are_one_per_instance_kept_and_taken_back_when_the_instance_is_gone() {
        let leases = tempfile::tempdir().unwrap();
        let instances = tempfile::tempdir().unwrap();
        let pool = AddressPool::new("10.213.7.0/28", leases.path()).unwrap();
        assert_eq!(pool.capacity(), 3);
        assert_eq!(pool.platform_address(), Ipv4Addr::new(10, 213, 7, 1));
        let [a, b, c, d, e] = ["a", "b", "c", "d", "e"].map(|n| instances.path().join(n));
        for dir in [&a, &b, &c, &d, &e] {
            fs::create_dir(dir).unwrap();
        }
        let first = pool.lease(&a, None).unwrap();
        assert_eq!(
            first.address,
            Ipv4Addr::new(10, 213, 7, 6),
            "the first /30 is the platform's"
        );
        assert_eq!(first.platform, None, "no firewall: no way out");
        assert_eq!(
            pool.lease(&a, None).unwrap(),
            first,
            "an instance keeps its lease"
        );
        let second = pool.lease(&b, None).unwrap();
        assert_eq!(second.address, Ipv4Addr::new(10, 213, 7, 10));
        let third = pool.lease(&c, None).unwrap();
        assert_eq!(third.address, Ipv4Addr::new(10, 213, 7, 14));
        let full = pool.lease(&d, None).unwrap_err().to_string();
        assert!(full.contains("all 3 instance addresses"), "{full}");

        // Another runtime's pool over the same leases: the same addresses are taken.
        let other = AddressPool::new("10.213.7.0/29", leases.path()).unwrap();
        assert!(other.lease(&d, None).is_err());

        // Released, or its instance gone: the address is free again.
        pool.release(&second, &a);
        assert!(
            pool.lease(&d, None).is_err(),
            "only its holder releases a lease"
        );
        pool.release(&second, &b);
        assert_eq!(pool.lease(&d, None).unwrap(), second);
        fs::remove_dir(&a).unwrap();
        assert_eq!(pool.lease(&e, None).unwrap(), first);
    }
}
