//! A real node, with `RUNWAY_KUBE_NODE=kubelet`: containerd 2 and a kubelet, built by
//! `scripts/kubelet`, registered as [`NODE_NAME`] in place of the simulated one.
//!
//! The kubelet authenticates with a client certificate of the cluster's authority as
//! `system:node:<name>` in `system:nodes` (the API server's Node authorizer gives it what a node
//! may do), serves on the node's address with the cluster's `kubelet` certificate, and
//! authenticates and authorizes the API server's calls (logs, exec) against the API server
//! (webhook). The API server, in turn, calls it with its `kubelet-client` certificate.
//!
//! Network: the node's address is the first of the cluster's /20 (as the simulated node's), on a
//! bridge with no port of its own, `kube-cluster`; the pods are on that bridge, with addresses
//! of the /20's upper /21 (host-local), and a route of their subnet only: no default route, no
//! forwarding, no masquerading. A `unicast` route for the /21 in the `local` table takes it out
//! of the /20 the cluster routes `local` on `lo`, so the host reaches the pods over the bridge.
//!
//! The bridge's name is also the machine's lock: the kubelet writes places and settings that are
//! the host's, not the cluster's, so one real node runs at a time.
//!
//! Everything else is in the cluster's directory: containerd's root and state (images, the
//! containers' root filesystems, the pods' network namespaces), its shims' sockets, runc's state,
//! the CNI configuration and address store, the kubelet's root, certificates and the pods' logs.
//! `reap.sh` there, which the cluster's reaper runs, undoes the rest: it kills the shims and the
//! pods' processes, unmounts what is mounted under the directory, removes the pods' cgroups,
//! restores the sysctls the kubelet set, removes the fixed paths it made, and last the bridge.

use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node as NodeObject;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::pki::{self, Identity, Pki};
use crate::{Component, Error, NODE_NAME, Range, STARTUP, exited, free_port, log_tail, spawn};

/// The switch.
pub(crate) const SWITCH: &str = "RUNWAY_KUBE_NODE";

/// The bridge the node's address and the pods are on; its existence is the machine's lock.
const BRIDGE: &str = "kube-cluster";

/// The CNI network's name.
const NETWORK: &str = "kube-cluster";

/// The images `scripts/kubelet` makes, `images/<name>.tar`: `runway.invalid/pause:1` and
/// `runway.invalid/busybox:1`.
const IMAGES: [&str; 2] = ["pause", "busybox"];

/// The pods' sandbox (infrastructure) image.
const SANDBOX_IMAGE: &str = "runway.invalid/pause:1";

/// The sysctls the kubelet sets at its start (its "kernel tunables"), restored at the end.
const SYSCTLS: [&str; 6] = [
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
];

/// Where the kubelet writes whatever its configuration says: the device plugins' socket, the
/// containers' log links. Neither may be there before (another kubelet's), and both go.
const KUBELET_PATHS: [&str; 2] = ["/var/lib/kubelet", "/var/log/containers"];

/// The CNI library's cache of results (containerd does not move it): removed when it was not
/// there before, else only this network's entries.
const CNI_CACHE: &str = "/var/lib/cni";

/// The longest one setup command (`ctr version`, `ctr images import`) may take.
const COMMAND_LIMIT: Duration = Duration::from_secs(60);

/// How long to wait for the machine's lock: the reaper of a cluster that just stopped may
/// still be undoing its node.
const LOCK_WAIT: Duration = Duration::from_secs(30);

/// The real node's parts, as `scripts/kubelet` built them.
#[derive(Debug, Clone)]
pub(crate) struct Parts {
    bin: PathBuf,
    images: PathBuf,
}

/// `Some` when the switch asks for a real node, with its parts: `RUNWAY_KUBELET_BIN`, else what
/// `scripts/kubelet --check` prints. Asked for and missing is a failure, not a skip.
pub(crate) fn parts() -> Result<Option<Parts>, Error> {
    match std::env::var(SWITCH).as_deref() {
        Err(_) | Ok("" | "simulated") => return Ok(None),
        Ok("kubelet") => {}
        Ok(other) => {
            return Err(Error::Setup(format!(
                "{SWITCH}={other}: `simulated` (the default) or `kubelet`"
            )));
        }
    }
    let bin = match std::env::var_os("RUNWAY_KUBELET_BIN") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/kubelet");
            let output = Command::new(&script)
                .arg("--check")
                .stdin(Stdio::null())
                .output()
                .map_err(|e| Error::Setup(format!("{}: {e}", script.display())))?;
            let text = String::from_utf8_lossy(&output.stdout);
            match text.lines().last() {
                Some(line) if output.status.success() => PathBuf::from(line.trim()),
                _ => {
                    return Err(Error::Setup(format!(
                        "{SWITCH}=kubelet: {}",
                        String::from_utf8_lossy(&output.stderr).trim()
                    )));
                }
            }
        }
    };
    let images = bin.join("../images");
    let mut wanted: Vec<PathBuf> = [
        "kubelet",
        "containerd",
        "containerd-shim-runc-v2",
        "ctr",
        "runc",
        "cni/bridge",
        "cni/host-local",
        "cni/loopback",
    ]
    .iter()
    .map(|name| bin.join(name))
    .collect();
    wanted.extend(IMAGES.iter().map(|name| images.join(format!("{name}.tar"))));
    if let Some(missing) = wanted.iter().find(|path| !path.is_file()) {
        return Err(Error::Setup(format!(
            "{SWITCH}=kubelet: {} is missing (run scripts/kubelet; RUNWAY_KUBELET_BIN is the \
             directory it prints)",
            missing.display()
        )));
    }
    Ok(Some(Parts { bin, images }))
}

/// The pods' addresses: the upper /21 of the cluster's /20; the bridge has the first.
struct PodNetwork {
    subnet: Ipv4Addr,
    gateway: Ipv4Addr,
}

impl PodNetwork {
    const PREFIX: u8 = 21;

    fn of(range: Range) -> Self {
        let subnet = u32::from(range.base) + Range::SIZE / 2;
        PodNetwork {
            subnet: Ipv4Addr::from(subnet),
            gateway: Ipv4Addr::from(subnet + 1),
        }
    }

    fn cidr(&self) -> String {
        format!("{}/{}", self.subnet, Self::PREFIX)
    }
}

/// `ip ARGS`: its error output when it fails.
fn ip(args: &[&str]) -> Result<(), String> {
    let output = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Shell quoting, for the paths written into `reap.sh`.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Starts the node: takes the machine's lock, writes `reap.sh`, sets up the bridge, starts
/// containerd with the images imported and the kubelet, and waits until the Node is Ready.
/// Returns containerd and the kubelet (their pid files are in `dir`, for the reaper) and how long
/// the node took to be Ready once it had the lock.
pub(crate) async fn start(
    parts: &Parts,
    pki: &Pki,
    dir: &Path,
    url: &str,
    range: Range,
    client: &Client,
    serving: &Identity,
) -> Result<(Vec<Component>, Duration), Error> {
    let network = PodNetwork::of(range);
    lock(dir).await?;
    let started = Instant::now();
    for args in [
        vec!["link", "set", BRIDGE, "up"],
        vec![
            "addr",
            "add",
            &format!("{}/32", range.node()),
            "dev",
            BRIDGE,
        ],
        vec![
            "addr",
            "add",
            &format!("{}/{}", network.gateway, PodNetwork::PREFIX),
            "dev",
            BRIDGE,
        ],
        // More specific than the cluster's `local` /20 on lo: the pods' /21 is on the bridge.
        vec![
            "route",
            "add",
            &network.cidr(),
            "dev",
            BRIDGE,
            "src",
            &network.gateway.to_string(),
            "table",
            "local",
        ],
    ] {
        ip(&args).map_err(Error::Setup)?;
    }

    let d = |p: &str| dir.join(p).display().to_string();
    let socket = d("containerd/containerd.sock");
    let bin = |p: &str| parts.bin.join(p).display().to_string();
    pki::write(
        &dir.join("containerd.toml"),
        &containerd_config(dir, &parts.bin, &socket),
    )?;
    std::fs::create_dir_all(dir.join("cni"))
        .map_err(|e| Error::Setup(format!("{}: {e}", d("cni"))))?;
    pki::write(
        &dir.join("cni/10-kube-cluster.conflist"),
        &json!({
            "cniVersion": "1.0.0",
            "name": NETWORK,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": false,
                    "ipMasq": false,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": d("cni-addresses"),
                        "ranges": [[{"subnet": network.cidr(), "gateway": network.gateway.to_string()}]],
                    },
                },
                {"type": "loopback"},
            ],
        })
        .to_string(),
    )?;

    let mut containerd = Component {
        name: "containerd",
        args: vec![format!("--config={}", d("containerd.toml"))],
        child: None,
    };
    spawn(&parts.bin, dir, &mut containerd)?;
    let ctr = |args: &[&str]| {
        let mut command = Command::new(bin("ctr"));
        command.arg(format!("--address={socket}")).args(args);
        command
    };
    let deadline = Instant::now() + STARTUP;
    while !Path::new(&socket).exists() {
        exited(dir, &mut containerd)?;
        if Instant::now() > deadline {
            return Err(Error::Setup(format!(
                "containerd did not listen within {STARTUP:?}:\n{}",
                log_tail(dir, "containerd")
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    run(dir, ctr(&["version"])).await?;
    for name in IMAGES {
        let tar = parts
            .images
            .join(format!("{name}.tar"))
            .display()
            .to_string();
        run(
            dir,
            ctr(&[
                "--namespace=k8s.io",
                "images",
                "import",
                "--platform=linux/amd64",
                &tar,
            ]),
        )
        .await?;
    }

    let node_identity = pki.client(
        "kubelet-node",
        &format!("system:node:{NODE_NAME}"),
        Some("system:nodes"),
    )?;
    let kubeconfig = pki.kubeconfig("kubelet-node.kubeconfig", url, &node_identity)?;
    let port = free_port()?;
    pki::write(
        &dir.join("kubelet.yaml"),
        &kubelet_config(dir, &socket, range.node(), port, &pki.ca_file(), serving),
    )?;
    let mut kubelet = Component {
        name: "kubelet",
        args: vec![
            format!("--config={}", d("kubelet.yaml")),
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--root-dir={}", d("kubelet")),
            format!("--cert-dir={}", d("kubelet-certs")),
            format!("--hostname-override={NODE_NAME}"),
            format!("--node-ip={}", range.node()),
            "--v=1".into(),
        ],
        child: None,
    };
    spawn(&parts.bin, dir, &mut kubelet)?;
    let mut components = vec![containerd, kubelet];
    wait_until_ready(dir, client, &mut components).await?;
    let ready_in = started.elapsed();
    // The API server taints a new Node not-ready; the node lifecycle controller, which this
    // cluster does not run, lifts it once the Node is Ready.
    untaint(client).await?;
    Ok((components, ready_in))
}

/// Takes the machine's lock (makes the bridge), then writes `reap.sh`; fails when a kubelet's
/// fixed places are taken.
async fn lock(dir: &Path) -> Result<(), Error> {
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        match ip(&["link", "add", BRIDGE, "type", "bridge"]) {
            Ok(()) => break,
            Err(e) if e.contains("File exists") && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) if e.contains("File exists") => {
                return Err(Error::Setup(format!(
                    "the bridge {BRIDGE} exists: another kube-cluster with a real kubelet runs on \
                     this machine (one at a time), or one was killed with its reaper (then see \
                     the crate's docs, \"A real node\", for what to undo)"
                )));
            }
            Err(e) => return Err(Error::Setup(e)),
        }
    }
    let reap = dir.join("reap.sh");
    let taken: Vec<String> = KUBELET_PATHS
        .iter()
        .map(PathBuf::from)
        .chain(cgroups())
        .filter(|path| path.exists())
        .map(|path| path.display().to_string())
        .collect();
    if !taken.is_empty() {
        pki::write(&reap, &format!("ip link del {BRIDGE}\n"))?;
        return Err(Error::Setup(format!(
            "a kubelet's places are taken on this machine: {} (another kubelet runs here, or \
             one left them)",
            taken.join(", ")
        )));
    }
    let mut sysctls = Vec::new();
    for name in SYSCTLS {
        let path = format!("/proc/sys/{name}");
        let value =
            std::fs::read_to_string(&path).map_err(|e| Error::Setup(format!("{path}: {e}")))?;
        sysctls.push((path, value.trim().to_owned()));
    }
    pki::write(
        &reap,
        &reap_script(dir, &sysctls, Path::new(CNI_CACHE).exists()),
    )
}

/// The pods' cgroups the kubelet makes (cgroupfs driver, cgroup root `/`): one per hierarchy of
/// cgroup v1, or one of v2.
fn cgroups() -> Vec<PathBuf> {
    let mut paths = vec![PathBuf::from("/sys/fs/cgroup/kubepods")];
    if let Ok(entries) = std::fs::read_dir("/sys/fs/cgroup") {
        paths.extend(
            entries
                .filter_map(Result::ok)
                .map(|e| e.path().join("kubepods")),
        );
    }
    paths
}

/// What the reaper runs after killing the cluster's processes: every step bounded, the lock
/// (the bridge) released last.
fn reap_script(dir: &Path, sysctls: &[(String, String)], cni_existed: bool) -> String {
    let d = quote(&dir.display().to_string());
    let socket = quote(&dir.join("containerd/containerd.sock").display().to_string());
    let mut script = format!(
        r#"# kube-cluster's real node: what its reaper undoes once the cluster's processes are killed.
d={d}
socket={socket}
cgroups='/sys/fs/cgroup/kubepods /sys/fs/cgroup/*/kubepods'
cgroups_left() {{
  for c in $cgroups; do [ -d "$c" ] && return 0; done
  return 1
}}
# The shims containerd started (they outlive it), and anything else given its socket.
for p in /proc/[0-9]*; do
  case "$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null)" in
    *"$socket"*) kill -KILL "${{p#/proc/}}" 2>/dev/null ;;
  esac
done
# The pods' processes, by their cgroups (every hierarchy), until none is left (5 s at most).
i=0
while [ $i -lt 50 ]; do
  pids=$(find $cgroups -name cgroup.procs -exec cat {{}} + 2>/dev/null)
  [ -n "$pids" ] || break
  kill -KILL $pids 2>/dev/null
  sleep 0.1
  i=$((i + 1))
done
# What is mounted under the directory (root filesystems, the pods' shm, network namespaces and
# volumes, the kubelet's root), deepest first.
awk -v d="$d/" 'index($5, d) == 1 {{ print $5 }}' /proc/self/mountinfo | sort -r | while read -r m; do
  umount -l "$m" 2>/dev/null
done
# The pods' cgroups, deepest first (5 s at most).
i=0
while [ $i -lt 50 ] && cgroups_left; do
  find $cgroups -depth -type d -exec rmdir {{}} + 2>/dev/null
  sleep 0.1
  i=$((i + 1))
done
# The sysctls the kubelet set, as they were.
"#
    );
    for (path, value) in sysctls {
        script.push_str(&format!("echo {} >{path} 2>/dev/null\n", quote(value)));
    }
    script.push_str("# What the kubelet and the CNI library wrote in fixed places.\n");
    for path in KUBELET_PATHS {
        script.push_str(&format!("rm -rf --one-file-system {path}\n"));
    }
    if cni_existed {
        // This network's results, and the loopback's of the same containers.
        script.push_str(&format!(
            r#"for f in {CNI_CACHE}/results/{NETWORK}-*-eth0; do
  id=${{f#*/{NETWORK}-}}
  rm -f "$f" {CNI_CACHE}/results/cni-loopback-${{id%-eth0}}-lo
done
"#
        ));
    } else {
        script.push_str(&format!("rm -rf --one-file-system {CNI_CACHE}\n"));
    }
    script.push_str(&format!(
        "# Last, the bridge: the machine's lock.\nip link del {BRIDGE} 2>/dev/null\n"
    ));
    script
}

/// containerd's configuration: everything under the cluster's directory.
fn containerd_config(dir: &Path, bin: &Path, socket: &str) -> String {
    let d = |p: &str| dir.join(p).display().to_string();
    let b = |p: &str| bin.join(p).display().to_string();
    format!(
        r#"version = 4
root = "{root}"
state = "{state}"

[plugins]
  [plugins.'io.containerd.server.v1.grpc']
    address = "{socket}"
  [plugins.'io.containerd.server.v1.ttrpc']
    address = "{socket}.ttrpc"

  # Each is a fixed place on the host unless told otherwise.
  [plugins.'io.containerd.internal.v1.opt']
    path = "{opt}"
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
  [plugins.'io.containerd.image-verifier.v1.bindir']
    bin_dir = "{verifiers}"
  [plugins.'io.containerd.shim.v1.manager']
    socket_dir = "{shims}"

  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "{pause}"

  [plugins.'io.containerd.cri.v1.runtime']
    cdi_spec_dirs = []
    netns_mounts_under_state_dir = true
    # Without CAP_SYS_RESOURCE (a container's bounding set, as on this VM) nothing may lower
    # oom_score_adj below containerd's own: the pause container's -998 and a Guaranteed pod's
    # -997 are clamped to it instead of failing the pod.
    restrict_oom_score_adj = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        runtime_path = "{shim}"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = "{runc}"
          Root = "{runc_root}"
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["{cni_bin}"]
      conf_dir = "{cni_conf}"

  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
"#,
        root = d("containerd/root"),
        state = d("containerd/state"),
        opt = d("containerd/opt"),
        verifiers = d("containerd/verifiers"),
        shims = d("s"),
        pause = SANDBOX_IMAGE,
        shim = b("containerd-shim-runc-v2"),
        runc = b("runc"),
        runc_root = d("runc"),
        cni_bin = b("cni"),
        cni_conf = d("cni"),
    )
}

/// The kubelet's configuration.
fn kubelet_config(
    dir: &Path,
    socket: &str,
    address: Ipv4Addr,
    port: u16,
    ca: &Path,
    serving: &Identity,
) -> String {
    let d = |p: &str| dir.join(p).display().to_string();
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1 (this VM's hybrid hierarchy): 1.36 refuses to start on it unless told.
failCgroupV1: false
cgroupDriver: cgroupfs
featureGates:
  ContainerStopSignals: true
containerRuntimeEndpoint: unix://{socket}
podLogsDir: {pod_logs}
volumePluginDir: {volume_plugins}
address: {address}
port: {port}
readOnlyPort: 0
healthzPort: 0
tlsCertFile: {cert}
tlsPrivateKeyFile: {key}
rotateCertificates: false
serverTLSBootstrap: false
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: {ca}
authorization:
  mode: Webhook
# No KUBE-IPTABLES-HINT or KUBE-FIREWALL chains: nothing here reads them.
makeIPTablesUtilChains: false
# Not below its parent's: lowering oom_score_adj needs CAP_SYS_RESOURCE.
oomScoreAdj: 0
failSwapOn: false
# The pods resolve nothing (they have no route out).
resolvConf: ""
# Thresholds a shared machine's disk does not trip; the images are never collected.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
  imagefs.inodesFree: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
"#,
        pod_logs = d("pod-logs"),
        volume_plugins = d("volume-plugins"),
        cert = serving.cert.display(),
        key = serving.key.display(),
        ca = ca.display(),
    )
}

/// Runs a setup command to its end, [`COMMAND_LIMIT`] at most, its output in `node-setup.log`.
async fn run(dir: &Path, mut command: Command) -> Result<(), Error> {
    let what = format!("{command:?}");
    let path = dir.join("node-setup.log");
    let failed = |e: std::io::Error| Error::Setup(format!("{}: {e}", path.display()));
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(failed)?;
    writeln!(log, "$ {what}").map_err(failed)?;
    let err = log.try_clone().map_err(failed)?;
    let mut child = command
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .spawn()
        .map_err(|e| Error::Setup(format!("{what}: {e}")))?;
    let deadline = Instant::now() + COMMAND_LIMIT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => {
                return Err(Error::Setup(format!(
                    "{what}: {status}\n{}",
                    log_tail(dir, "node-setup")
                )));
            }
            Ok(None) if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Error::Setup(format!(
                    "{what}: not done within {COMMAND_LIMIT:?}"
                )));
            }
            Ok(None) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => return Err(Error::Setup(format!("{what}: {e}"))),
        }
    }
}

/// Waits until the kubelet has registered the Node and reports it Ready, failing when
/// containerd or the kubelet exits.
async fn wait_until_ready(
    dir: &Path,
    client: &Client,
    components: &mut [Component],
) -> Result<(), Error> {
    let nodes: Api<NodeObject> = Api::all(client.clone());
    let deadline = Instant::now() + STARTUP;
    let mut last = String::from("not registered");
    while Instant::now() < deadline {
        for component in components.iter_mut() {
            exited(dir, component)?;
        }
        if let Ok(Some(node)) = nodes.get_opt(NODE_NAME).await {
            let ready = node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
            match ready {
                Some(c) if c.status == "True" => return Ok(()),
                Some(c) => {
                    last = format!(
                        "{}: {}",
                        c.reason.as_deref().unwrap_or(""),
                        c.message.as_deref().unwrap_or("")
                    );
                }
                None => last = "registered, no Ready condition".into(),
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(Error::Setup(format!(
        "the kubelet's Node was not Ready within {STARTUP:?} ({last}):\n{}\ncontainerd:\n{}",
        log_tail(dir, "kubelet"),
        log_tail(dir, "containerd")
    )))
}

/// Lifts the not-ready taint the API server gave the new Node.
async fn untaint(client: &Client) -> Result<(), Error> {
    let nodes: Api<NodeObject> = Api::all(client.clone());
    let node = nodes
        .get(NODE_NAME)
        .await
        .map_err(|e| Error::Setup(format!("the Node: {e}")))?;
    let taints: Vec<Value> = node
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.key != "node.kubernetes.io/not-ready")
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()
        .map_err(|e| Error::Setup(format!("the Node's taints: {e}")))?;
    nodes
        .patch(
            NODE_NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": taints}})),
        )
        .await
        .map_err(|e| Error::Setup(format!("the Node's taints: {e}")))?;
    Ok(())
}
