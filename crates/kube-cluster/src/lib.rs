//! A real Kubernetes control plane for tests: etcd, kube-apiserver (RBAC, the default admission
//! plugins, PodSecurity among them, an audit log, and the ContainerStopSignals feature), kube-controller-manager and
//! kube-scheduler, built from their upstream sources by `scripts/kubernetes`, on loopback ports;
//! and one simulated node ([`Behavior`]) whose pods answer HTTP.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kube_cluster::Error> {
//! use kube_cluster::{Behavior, Cluster};
//! let cluster = Cluster::start().await?;
//! let kubeconfig = cluster.admin_kubeconfig(); // a file, for kube::Config or kubectl
//! cluster.behave("my-namespace", "r2", Behavior::NotReady);
//! // ... drive the client ...
//! let writes = cluster.requests("system:serviceaccount:runway:runway");
//! cluster.stop();
//! # Ok(()) }
//! ```
//!
//! # Pod addresses
//!
//! The API server refuses loopback addresses in EndpointSlices, so pods cannot answer on
//! 127.0.0.0/8. Each cluster takes a /20 of 198.19.0.0/16 (RFC 2544's benchmarking range) as a
//! `local` route on `lo`: every address in it is the host's own, and traffic to it never leaves
//! the machine. The node is the range's first address and the pods have the others. Adding
//! the route needs `CAP_NET_ADMIN` (root); it is removed when the cluster stops, and when the
//! test process exits (see *Clean-up*).
//!
//! # Images
//!
//! The simulated node pulls what a pod's `imagePullSecrets` have credentials for: the
//! manifest of each such image, over HTTPS trusting [`Cluster::trust_registry`]'s roots, again
//! after a back-off while it fails (the pod `ImagePullBackOff`, with a `Failed` event saying
//! why). Other images are taken as present (`pull.rs`).
//!
//! # Clean-up
//!
//! A small shell per cluster (the reaper) holds the read end of a pipe whose write end is the
//! cluster's: when the cluster stops, or the test process exits however it exits, the reaper
//! kills the components (their pids are in the cluster's directory), removes the route and the
//! directory.
//!
//! # A real node
//!
//! With `RUNWAY_KUBE_NODE=kubelet` the node is real: containerd 2, runc and a kubelet, registered
//! as [`NODE_NAME`], run the pods' containers ([`Behavior`] has no effect then). It is opt-in,
//! needs root, and one runs at a time on a machine; the other tests assume the simulated node.
//!
//! ```sh
//! scripts/kubelet     # builds into ~/.cache/runway/kubelet/<versions>/, prints its bin directory
//! RUNWAY_KUBE_NODE=kubelet RUNWAY_KUBELET_BIN=$(scripts/kubelet | tail -n 1) \
//!   cargo test -p kube-cluster --test kubelet
//! ```
//!
//! What it needed:
//! - kubelet v1.36.3 (in `scripts/kubernetes`' wrapper module), containerd v2.4.2 with ctr and
//!   its runc shim, runc v1.5.3 (cgo, libseccomp linked statically, static-pie), the bridge,
//!   host-local and loopback CNI plugins v1.10.0: all through the Go module proxy. Debian's
//!   gcc, libc6-dev, libseccomp-dev, busybox-static and python3 (`scripts/kubelet` installs
//!   them). Two images made locally as OCI tarballs and imported into containerd:
//!   `runway.invalid/pause:1` (Kubernetes' `pause.c`, `gcc -static`) and
//!   `runway.invalid/busybox:1` (busybox-static); pods name the latter with `imagePullPolicy:
//!   Never` or `IfNotPresent`.
//! - kubelet: `failCgroupV1: false` (the host has cgroup v1, hybrid), `oomScoreAdj: 0` and
//!   containerd's `restrict_oom_score_adj` (no `CAP_SYS_RESOURCE`: nothing may go below its
//!   parent's OOM score), the `ContainerStopSignals` gate (as the API server's), no iptables
//!   chains (`makeIPTablesUtilChains: false`). containerd: its shims' sockets, `opt` and image
//!   verifiers in the cluster's directory, NRI off, no CDI directories.
//! - The node's address on a bridge with no port (the kernel has no `dummy` driver); the pods on
//!   that bridge with addresses of the cluster's /20 and no default route; no forwarding.
//! - Its own certificates: `system:node:<name>` (Node authorization) to the API server, the
//!   API server's `kubelet-client` certificate checked by the kubelet (webhook authorization).
//!
//! What it changes on the host, undone by the reaper (the directory's `reap.sh`) however the
//! test ends: the bridge `kube-cluster` (the node's address, the pods', a route in the `local`
//! table; its existence is the machine's lock); the sysctls the kubelet sets
//! (`vm.overcommit_memory`, `vm.panic_on_oom`, `kernel.panic`, `kernel.panic_on_oops`,
//! `kernel.keys.root_maxkeys`, `kernel.keys.root_maxbytes`), restored; the `kubepods` cgroups in
//! every hierarchy; mounts under the cluster's directory; containerd's shims and the pods'
//! processes; `/var/lib/kubelet` (device plugins' socket), `/var/log/containers` (log links)
//! and `/var/lib/cni` (the CNI library's cache), none of which the kubelet lets be moved. The
//! first two, or `kubepods`, already there mean another kubelet: the cluster does not start. Were
//! the reaper itself killed (`kill -9`), undo by hand in that order: kill what holds the
//! cluster's containerd socket, `umount -l` under its directory, `rmdir` the `kubepods` trees,
//! write the sysctls back, remove the three paths, then `ip link del kube-cluster`.
//!
//! # What a test gets
//!
//! Test support only (`publish = false`): a real Kubernetes control plane per test binary.
//! `scripts/kubernetes` builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
//! kubectl from their upstream modules through the Go module proxy (a wrapper module that requires
//! `k8s.io/kubernetes` and replaces each staging module with its published `v0.X.Y`) and caches
//! them by version outside the checkout. The harness makes the certificates (`pki.rs`, rcgen),
//! starts the components on loopback ports (RBAC and the default admission plugins, PodSecurity
//! among them; an audit log the tests count requests from; the deployment, ReplicaSet,
//! EndpointSlice, garbage collector, namespace, service account and quota controllers), and runs
//! one node as a client of the API server (`node.rs`): a Node with a Lease, and per pod a task that
//! writes its status and events per the `Behavior` of its revision (ready, not ready, crash loop,
//! OOM kill, image pull back-off), answers HTTP on the first container port, serves `pods/log`
//! through its kubelet port, and carries out graceful deletion. Tests share one cluster per binary
//! (`kube_cluster::shared`) in namespaces of their own, or start their own when they restart the
//! API server. `kubelet.rs` is the real node of `RUNWAY_KUBE_NODE=kubelet`.

// Library code never prints, but for the one line a skipped test prints.
#![deny(clippy::print_stderr)]

mod kubelet;
mod node;
mod pki;
mod pull;

use std::fmt;
use std::io::{BufRead, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::PostParams;
use kube::{Api, Client, Config};
use serde_json::{Value, json};

use crate::node::Node;
use crate::pki::Pki;

/// How the node runs the pods of a revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Behavior {
    /// Running, and ready `after` the container starts (the readiness probe passes).
    Ready {
        /// From the container's start to readiness.
        after: Duration,
    },
    /// Running, never ready: the readiness probe fails with 503 (an `Unhealthy` event).
    NotReady,
    /// The containers exit with `exit_code` about 100 ms after each start, printing `logs`
    /// and leaving `message` as their termination message; restarted about every second
    /// (`CrashLoopBackOff` in between, with the kubelet's growing back-off in its message).
    CrashLoop {
        /// The exit code.
        exit_code: i32,
        /// `lastState.terminated.message`.
        message: String,
        /// What each attempt prints.
        logs: Vec<String>,
    },
    /// As `CrashLoop`, killed for its memory: exit code 137, reason `OOMKilled`.
    OomKilled,
    /// The image cannot be pulled: Pending, `ImagePullBackOff`.
    ImagePullBackOff,
}

impl Default for Behavior {
    fn default() -> Self {
        Behavior::Ready {
            after: Duration::from_millis(200),
        }
    }
}

/// The label whose value chooses a pod's [`Behavior`] and is the body its listener answers.
pub const REVISION_LABEL: &str = "runway.dev/revision";

/// The simulated node's name.
pub const NODE_NAME: &str = "kube-cluster-node";

/// The user the simulated node's requests are made as (a real kubelet's are
/// `system:node:<NODE_NAME>`).
pub const NODE_USER: &str = "kube-cluster-node";

/// The user [`Cluster::admin_kubeconfig`] and [`Cluster::client`] authenticate as.
pub const ADMIN_USER: &str = "kube-cluster-admin";

/// How long the control plane may take to come up on a loaded 2-core machine.
const STARTUP: Duration = Duration::from_secs(120);

/// Why a cluster could not start, or a request failed.
#[derive(Debug)]
pub enum Error {
    /// The binaries are not built (`scripts/kubernetes`), or the machine lacks what is needed.
    Missing(String),
    /// A component failed to start: the message names it and ends with its last log lines.
    Setup(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Missing(why) | Error::Setup(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for Error {}

/// One request from the API server's audit log.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Request {
    /// The user it was authenticated as.
    pub user: String,
    /// get, list, watch, create, update, patch, delete, deletecollection.
    pub verb: String,
    /// The API group ("" for core).
    pub group: String,
    /// The resource's plural name ("" for paths that name none).
    pub resource: String,
    /// `log`, `scale`, `status`, ...
    pub subresource: Option<String>,
    /// The namespace, when the request names one.
    pub namespace: Option<String>,
    /// The object's name, when the request names one.
    pub name: Option<String>,
    /// The request's path and query.
    pub uri: String,
    /// The response's status code.
    pub code: u16,
}

impl Request {
    /// Whether the request changes anything.
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where `scripts/kubernetes` put the binaries: `RUNWAY_KUBERNETES_BIN`, else what
/// `scripts/kubernetes --check` prints.
pub fn binaries() -> Result<PathBuf, Error> {
    if let Some(dir) = std::env::var_os("RUNWAY_KUBERNETES_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/kubernetes");
    let output = Command::new(&script)
        .arg("--check")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::Missing(format!("{}: {e}", script.display())))?;
    if !output.status.success() {
        return Err(Error::Missing(
            String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        ));
    }
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .last()
        .map(|line| PathBuf::from(line.trim()))
        .ok_or_else(|| Error::Missing("scripts/kubernetes --check printed nothing".into()))
}

/// Under `CI=true` a missing part fails the test; elsewhere it is skipped with its reason.
fn skip(test: &str, why: &Error) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test}: the real control plane is needed under CI=true: {why}"
    );
    #[allow(clippy::print_stderr, reason = "the reason a test is skipped")]
    {
        eprintln!("skipping {test}: {why}");
    }
}

/// The process's cluster, started on first use on a runtime of its own (which outlives every
/// test), or `None` after printing why it cannot run (a failure under `CI=true`).
pub fn shared(test: &str) -> Option<&'static Cluster> {
    static SHARED: OnceLock<Result<Cluster, String>> = OnceLock::new();
    let cluster = SHARED.get_or_init(|| {
        let (sender, receiver) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("kube-cluster".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = sender.send(Err(Error::Setup(format!("a runtime: {e}"))));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let _ = sender.send(Cluster::start().await);
                    std::future::pending::<()>().await;
                });
            });
        if let Err(e) = spawned {
            return Err(format!("a thread: {e}"));
        }
        match receiver.recv() {
            Ok(Ok(cluster)) => Ok(cluster),
            Ok(Err(Error::Missing(why))) => Err(why),
            Ok(Err(Error::Setup(why))) => panic!("the shared cluster did not start: {why}"),
            Err(_) => panic!("the shared cluster's thread ended"),
        }
    });
    match cluster {
        Ok(cluster) => Some(cluster),
        Err(why) => {
            skip(test, &Error::Missing(why.clone()));
            None
        }
    }
}

/// A cluster of its own for one test, or `None` after printing why it cannot run (a failure
/// under `CI=true`). Its node runs on the caller's runtime.
pub async fn start_or_skip(test: &str) -> Option<Cluster> {
    match Cluster::start().await {
        Ok(cluster) => Some(cluster),
        Err(Error::Missing(why)) => {
            skip(test, &Error::Missing(why));
            None
        }
        Err(Error::Setup(why)) => panic!("{test}: the cluster did not start: {why}"),
    }
}

/// A free port on 127.0.0.1, below the range the kernel takes source ports of outgoing
/// connections from (32768 and up by default), so no client's connection takes it before its
/// server binds it. Bound and released: another bind can still race it, and then
/// [`Cluster::start`] tries again.
fn free_port() -> Result<u16, Error> {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    for i in 0..1000u32 {
        let port = 10_000 + (seed.wrapping_mul(2_654_435_761).wrapping_add(i * 7919) % 22_000);
        let port = u16::try_from(port).unwrap_or(10_000);
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(Error::Setup(
        "no free port on 127.0.0.1 in 10000..32000".into(),
    ))
}

/// The pod range: a /20 of 198.19.0.0/16 routed to `lo`.
#[derive(Debug, Clone, Copy)]
struct Range {
    base: Ipv4Addr,
}

impl Range {
    const SIZE: u32 = 4096;

    fn cidr(self) -> String {
        format!("{}/20", self.base)
    }

    fn node(self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.base) + 1)
    }

    fn pods(self) -> Vec<Ipv4Addr> {
        (2..Self::SIZE - 1)
            .map(|i| Ipv4Addr::from(u32::from(self.base) + i))
            .collect()
    }

    /// Takes a free /20 (one another cluster has not routed), starting at a random one.
    fn take() -> Result<Range, Error> {
        let start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
            ^ std::process::id();
        let mut last = String::new();
        for i in 0..16 {
            let block = (start.wrapping_add(i) % 16) as u8;
            let range = Range {
                base: Ipv4Addr::new(198, 19, block * 16, 0),
            };
            let output = Command::new("ip")
                .args(["route", "add", "local", &range.cidr(), "dev", "lo"])
                .stdin(Stdio::null())
                .output()
                .map_err(|e| Error::Missing(format!("ip (iproute2): {e}")))?;
            if output.status.success() {
                return Ok(range);
            }
            last = String::from_utf8_lossy(&output.stderr).trim().to_owned();
            if !last.contains("File exists") {
                return Err(Error::Missing(format!(
                    "pods need a local route for {} on lo (root, CAP_NET_ADMIN): ip route: {last}",
                    range.cidr()
                )));
            }
        }
        Err(Error::Setup(format!(
            "every /20 of 198.19.0.0/16 is routed already: {last}"
        )))
    }
}

/// A component: its command line, its process, and where it logs.
#[derive(Debug)]
struct Component {
    name: &'static str,
    args: Vec<String>,
    child: Option<Child>,
}

/// The cluster's node.
enum NodeKind {
    /// The simulated node, the default.
    Simulated {
        node: Arc<Node>,
        registered_in: Duration,
    },
    /// containerd and a real kubelet (`RUNWAY_KUBE_NODE=kubelet`), among the components.
    Kubelet { ready_in: Duration },
}

/// A running cluster. Stopped by [`Cluster::stop`], or when dropped.
pub struct Cluster {
    dir: PathBuf,
    bin: PathBuf,
    url: String,
    etcd: String,
    admin: PathBuf,
    ca: PathBuf,
    ca_pem: String,
    client: Client,
    components: Mutex<Vec<Component>>,
    node: NodeKind,
    /// The reaper's stdin: closing it cleans up.
    reaper: Mutex<Option<Child>>,
    started_in: Duration,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("url", &self.url)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// Starts etcd, the API server, the controller manager, the scheduler and the node, and
    /// waits until the API server is ready and the node registered.
    pub async fn start() -> Result<Cluster, Error> {
        let bin = binaries()?;
        for name in [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
        ] {
            if !bin.join(name).is_file() {
                return Err(Error::Missing(format!(
                    "{} is not built (scripts/kubernetes)",
                    bin.join(name).display()
                )));
            }
        }
        let real_node = kubelet::parts()?;
        let started = Instant::now();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let range = Range::take()?;
            let dir = tempfile::Builder::new()
                .prefix("kube-cluster-")
                .tempdir()
                .map_err(|e| Error::Setup(format!("a directory: {e}")))?
                .keep();
            // Dropped on a failure, the reaper cleans up what this attempt started.
            let reaper = reaper(&dir, range)?;
            match Self::start_in(bin.clone(), dir, range, reaper, real_node.as_ref()).await {
                Ok(mut cluster) => {
                    cluster.started_in = started.elapsed();
                    return Ok(cluster);
                }
                Err(Error::Setup(why)) if why.contains("address already in use") && attempt < 3 => {
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn start_in(
        bin: PathBuf,
        dir: PathBuf,
        range: Range,
        reaper: Child,
        real_node: Option<&kubelet::Parts>,
    ) -> Result<Cluster, Error> {
        let pki = Pki::new(&dir)?;
        let service_ip = Ipv4Addr::new(10, 96, 0, 1);
        let serving = pki.server(
            "apiserver",
            &[Ipv4Addr::LOCALHOST, service_ip, range.node()],
            &[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
        )?;
        let (sa_key, sa_public) = pki.key_pair("service-account")?;
        let kubelet_client = pki.client(
            "kubelet-client",
            "kube-apiserver-kubelet-client",
            Some("system:masters"),
        )?;
        let (kubelet_serving, kubelet_tls) =
            pki.serving("kubelet", &[range.node()], &[NODE_NAME])?;
        let audit_policy = dir.join("audit-policy.yaml");
        pki::write(
            &audit_policy,
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived, ResponseStarted]\nrules:\n- level: Metadata\n",
        )?;

        let etcd_port = free_port()?;
        let peer_port = free_port()?;
        let api_port = free_port()?;
        let etcd = format!("http://127.0.0.1:{etcd_port}");
        let url = format!("https://127.0.0.1:{api_port}");
        let d = |p: &str| dir.join(p).display().to_string();
        let peer = format!("http://127.0.0.1:{peer_port}");
        let etcd_args = vec![
            format!("--data-dir={}", d("etcd")),
            "--name=default".into(),
            format!("--listen-client-urls={etcd}"),
            format!("--advertise-client-urls={etcd}"),
            format!("--listen-peer-urls={peer}"),
            format!("--initial-advertise-peer-urls={peer}"),
            format!("--initial-cluster=default={peer}"),
            // A test's data is thrown away: no fsync (etcd's own flag for this).
            "--unsafe-no-fsync".into(),
            "--log-level=warn".into(),
        ];
        let api_args = vec![
            format!("--etcd-servers={etcd}"),
            "--bind-address=127.0.0.1".into(),
            format!("--advertise-address={}", range.node()),
            format!("--secure-port={api_port}"),
            format!("--tls-cert-file={}", serving.cert.display()),
            format!("--tls-private-key-file={}", serving.key.display()),
            format!("--client-ca-file={}", pki.ca_file().display()),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            format!("--service-account-key-file={}", sa_public.display()),
            format!("--service-account-signing-key-file={}", sa_key.display()),
            "--service-cluster-ip-range=10.96.0.0/16".into(),
            "--authorization-mode=Node,RBAC".into(),
            // `lifecycle.stopSignal`, alpha since 1.33: the API server keeps the field only
            // with it, and Runway's workers ask for SIGQUIT with it.
            "--feature-gates=ContainerStopSignals=true".into(),
            format!(
                "--kubelet-client-certificate={}",
                kubelet_client.cert.display()
            ),
            format!("--kubelet-client-key={}", kubelet_client.key.display()),
            "--kubelet-preferred-address-types=InternalIP".into(),
            format!("--audit-policy-file={}", audit_policy.display()),
            format!("--audit-log-path={}", d("audit.log")),
            "--audit-log-maxsize=0".into(),
            format!("--cert-dir={}", d("apiserver-certs")),
            "--profiling=false".into(),
            "--v=1".into(),
        ];
        let controller_manager =
            pki.client("controller-manager", "system:kube-controller-manager", None)?;
        let cm_kubeconfig =
            pki.kubeconfig("controller-manager.kubeconfig", &url, &controller_manager)?;
        let cm_args = vec![
            format!("--kubeconfig={}", cm_kubeconfig.display()),
            format!(
                "--controllers={}",
                [
                    "deployment-controller",
                    "replicaset-controller",
                    "endpointslice-controller",
                    "garbage-collector-controller",
                    "namespace-controller",
                    "serviceaccount-controller",
                    "serviceaccount-token-controller",
                    "resourcequota-controller",
                    "pod-garbage-collector-controller",
                    "disruption-controller",
                    "root-ca-certificate-publisher-controller",
                ]
                .join(",")
            ),
            format!("--service-account-private-key-file={}", sa_key.display()),
            format!("--root-ca-file={}", pki.ca_file().display()),
            "--use-service-account-credentials=true".into(),
            // The default 20 requests a second throttles a test that makes hundreds of
            // Deployments at once; busy clusters raise it likewise.
            "--kube-api-qps=500".into(),
            "--kube-api-burst=1000".into(),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
            "--v=1".into(),
        ];
        let scheduler = pki.client("scheduler", "system:kube-scheduler", None)?;
        let scheduler_kubeconfig = pki.kubeconfig("scheduler.kubeconfig", &url, &scheduler)?;
        let scheduler_args = vec![
            format!("--kubeconfig={}", scheduler_kubeconfig.display()),
            "--kube-api-qps=500".into(),
            "--kube-api-burst=1000".into(),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
            "--v=1".into(),
        ];
        let admin_identity = pki.client("admin", ADMIN_USER, Some("system:masters"))?;
        let admin = pki.kubeconfig("admin.kubeconfig", &url, &admin_identity)?;

        let mut components = vec![
            Component {
                name: "etcd",
                args: etcd_args,
                child: None,
            },
            Component {
                name: "kube-apiserver",
                args: api_args,
                child: None,
            },
            Component {
                name: "kube-controller-manager",
                args: cm_args,
                child: None,
            },
            Component {
                name: "kube-scheduler",
                args: scheduler_args,
                child: None,
            },
        ];
        let launch = |component: &mut Component| spawn(&bin, &dir, component);
        launch(&mut components[0])?;
        wait_for_etcd(&dir, etcd_port, &mut components[0]).await?;
        launch(&mut components[1])?;
        let client = client_for(&admin).await?;
        wait_for_api(&dir, &client, &mut components[1]).await?;
        launch(&mut components[2])?;
        launch(&mut components[3])?;
        let node_started = Instant::now();
        let node = if let Some(parts) = real_node {
            let (real, ready_in) =
                kubelet::start(parts, &pki, &dir, &url, range, &client, &kubelet_serving).await?;
            components.extend(real);
            NodeKind::Kubelet { ready_in }
        } else {
            // The node has an identity of its own, so its writes are told apart in the audit log.
            let node_identity = pki.client("node", NODE_USER, Some("system:masters"))?;
            let node_kubeconfig = pki.kubeconfig("node.kubeconfig", &url, &node_identity)?;
            let node_client = client_for(&node_kubeconfig).await?;
            let node = Node::start(
                node_client,
                NODE_NAME,
                range.node(),
                range.pods(),
                kubelet_tls,
            )
            .await?;
            NodeKind::Simulated {
                node,
                registered_in: node_started.elapsed(),
            }
        };
        Ok(Cluster {
            ca: pki.ca_file(),
            ca_pem: pki.ca_pem.clone(),
            dir,
            bin,
            url,
            etcd,
            admin,
            client,
            components: Mutex::new(components),
            node,
            reaper: Mutex::new(Some(reaper)),
            started_in: Duration::ZERO,
        })
    }

    /// How long [`Cluster::start`] took, to the node registered.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// How long the node took: the simulated one to register; a real one (the bridge,
    /// containerd, its images imported, the kubelet) to its Node Ready.
    pub fn node_started_in(&self) -> Duration {
        match &self.node {
            NodeKind::Simulated { registered_in, .. } => *registered_in,
            NodeKind::Kubelet { ready_in } => *ready_in,
        }
    }

    /// The API server's URL (`https://127.0.0.1:<port>`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The cluster's certificate authority (PEM).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A kubeconfig file for a cluster administrator (`system:masters`).
    pub fn admin_kubeconfig(&self) -> &Path {
        &self.admin
    }

    /// A kubeconfig authenticating with a bearer `token` (a ServiceAccount's), written to a
    /// file of the cluster's directory.
    pub fn token_kubeconfig(&self, name: &str, token: &str) -> Result<PathBuf, Error> {
        let path = self.dir.join(format!("{name}.kubeconfig"));
        pki::write(
            &path,
            &pki::kubeconfig(&self.url, &self.ca, &format!("token: {token}")),
        )?;
        Ok(path)
    }

    /// An administrator's client.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The directory of the built binaries (kubectl is there).
    pub fn bin(&self) -> &Path {
        &self.bin
    }

    /// `kubectl` with the administrator's kubeconfig.
    pub fn kubectl(&self) -> Command {
        let mut command = Command::new(self.bin.join("kubectl"));
        command.env("KUBECONFIG", &self.admin).stdin(Stdio::null());
        command
    }

    /// Trusts registries whose certificates `pem`'s roots sign, from the node's next pull (see
    /// *Images*). A real kubelet's containerd trusts what its own configuration says.
    pub fn trust_registry(&self, pem: &[u8]) {
        if let NodeKind::Simulated { node, .. } = &self.node {
            node.trust_registry(pem);
        }
    }

    /// Chooses how the node runs the pods labelled `runway.dev/revision: <revision>` in
    /// `namespace` ("" for any), from their next start. A real kubelet runs the pods' own
    /// containers: nothing to choose there.
    pub fn behave(&self, namespace: &str, revision: &str, behavior: Behavior) {
        if let NodeKind::Simulated { node, .. } = &self.node {
            node.behave(namespace, revision, behavior);
        }
    }

    /// Creates a namespace (labels as `key=value`), as an installation does.
    pub async fn create_namespace(
        &self,
        name: &str,
        labels: &[(&str, &str)],
    ) -> Result<(), kube::Error> {
        let labels: serde_json::Map<String, Value> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
            .collect();
        let namespace: Namespace = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
        }))
        .map_err(kube::Error::SerdeError)?;
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &namespace)
            .await?;
        Ok(())
    }

    /// Every request the API server completed so far, from its audit log, by `user` ("" for
    /// everyone's).
    pub fn requests(&self, user: &str) -> Vec<Request> {
        let Ok(file) = std::fs::File::open(self.dir.join("audit.log")) else {
            return Vec::new();
        };
        std::io::BufReader::new(file)
            .lines()
            .map_while(Result::ok)
            .filter_map(|line| serde_json::from_str::<Value>(&line).ok())
            .map(|event| {
                let text = |pointer: &str| {
                    event
                        .pointer(pointer)
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                };
                Request {
                    user: text("/user/username").unwrap_or_default(),
                    verb: text("/verb").unwrap_or_default(),
                    group: text("/objectRef/apiGroup").unwrap_or_default(),
                    resource: text("/objectRef/resource").unwrap_or_default(),
                    subresource: text("/objectRef/subresource"),
                    namespace: text("/objectRef/namespace"),
                    name: text("/objectRef/name"),
                    uri: text("/requestURI").unwrap_or_default(),
                    code: event
                        .pointer("/responseStatus/code")
                        .and_then(Value::as_u64)
                        .and_then(|c| u16::try_from(c).ok())
                        .unwrap_or(0),
                }
            })
            .filter(|request| user.is_empty() || request.user == user)
            .collect()
    }

    /// Compacts etcd's history up to now, then writes a key of its own: a watch or an exact
    /// list from before gets 410 Gone once the API server's watch cache no longer holds it (see
    /// [`Cluster::restart_api_server`]). The write puts etcd's present past every resource
    /// version a client holds, even one that was the present when compacted (a watch at
    /// exactly the cache's start would be served, not refused).
    pub fn compact(&self) -> Result<(), Error> {
        let range = etcd_post(&self.etcd, "/v3/kv/range", &json!({"key": "AA=="}))?;
        let revision = range
            .pointer("/header/revision")
            .and_then(|r| {
                r.as_str()
                    .map(str::to_owned)
                    .or_else(|| r.as_u64().map(|n| n.to_string()))
            })
            .ok_or_else(|| Error::Setup(format!("etcd's revision: {range}")))?;
        etcd_post(
            &self.etcd,
            "/v3/kv/compaction",
            &json!({"revision": revision, "physical": true}),
        )?;
        // `/kube-cluster/compacted`, base64: outside the API server's `/registry` prefix.
        etcd_post(
            &self.etcd,
            "/v3/kv/put",
            &json!({"key": "L2t1YmUtY2x1c3Rlci9jb21wYWN0ZWQ=", "value": "MQ=="}),
        )?;
        Ok(())
    }

    /// Kills the API server and starts it again on the same port: every watch ends, and its
    /// watch cache starts from etcd's present, so older resource versions are 410 Gone.
    pub async fn restart_api_server(&self) -> Result<(), Error> {
        let mut api = {
            let mut components = lock(&self.components);
            let api = components
                .iter_mut()
                .find(|c| c.name == "kube-apiserver")
                .ok_or_else(|| Error::Setup("no API server".into()))?;
            kill(api);
            Component {
                name: api.name,
                args: api.args.clone(),
                child: None,
            }
        };
        spawn(&self.bin, &self.dir, &mut api)?;
        let ready = wait_for_api(&self.dir, &self.client, &mut api).await;
        let mut components = lock(&self.components);
        if let Some(slot) = components.iter_mut().find(|c| c.name == "kube-apiserver") {
            *slot = api;
        }
        ready
    }

    /// Stops everything and removes the route and the directory.
    pub fn stop(&self) {
        for component in lock(&self.components).iter_mut().rev() {
            kill(component);
        }
        if let Some(mut reaper) = lock(&self.reaper).take() {
            drop(reaper.stdin.take());
            let _ = reaper.wait();
        }
    }

    /// The last lines of a component's log, for a failure's message.
    pub fn log_tail(&self, component: &str) -> String {
        log_tail(&self.dir, component)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The reaper: kills what the cluster started, removes the route and the directory once its
/// stdin closes (the cluster stopped, or the process that holds it ended); a real node's
/// `reap.sh` in between. It outlives a Ctrl-C or a SIGTERM sent to the test's process group.
fn reaper(dir: &Path, range: Range) -> Result<Child, Error> {
    Command::new("sh")
        .args([
            "-c",
            r#"trap '' INT HUP TERM; read -r _ ; for f in "$1"/*.pid; do [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done
               [ -f "$1/reap.sh" ] && sh "$1/reap.sh"
               ip route del local "$2" dev lo 2>/dev/null; rm -rf --one-file-system "$1""#,
            "kube-cluster-reaper",
        ])
        .arg(dir)
        .arg(range.cidr())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| Error::Setup(format!("the reaper: {e}")))
}

fn spawn(bin: &Path, dir: &Path, component: &mut Component) -> Result<(), Error> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("{}.log", component.name)))
        .map_err(|e| Error::Setup(format!("{}'s log: {e}", component.name)))?;
    let err = log
        .try_clone()
        .map_err(|e| Error::Setup(format!("{}'s log: {e}", component.name)))?;
    let child = Command::new(bin.join(component.name))
        .args(&component.args)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .spawn()
        .map_err(|e| Error::Setup(format!("starting {}: {e}", component.name)))?;
    pki::write(
        &dir.join(format!("{}.pid", component.name)),
        &child.id().to_string(),
    )?;
    component.child = Some(child);
    Ok(())
}

fn kill(component: &mut Component) {
    if let Some(mut child) = component.child.take() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

fn log_tail(dir: &Path, component: &str) -> String {
    let text = std::fs::read_to_string(dir.join(format!("{component}.log"))).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// An error if the component has exited: its status and last log lines.
fn exited(dir: &Path, component: &mut Component) -> Result<(), Error> {
    let status = component
        .child
        .as_mut()
        .and_then(|child| child.try_wait().ok().flatten());
    match status {
        Some(status) => Err(Error::Setup(format!(
            "{} exited ({status}):\n{}",
            component.name,
            log_tail(dir, component.name)
        ))),
        None => Ok(()),
    }
}

async fn wait_for_etcd(dir: &Path, port: u16, etcd: &mut Component) -> Result<(), Error> {
    let deadline = Instant::now() + STARTUP;
    let url = format!("http://127.0.0.1:{port}");
    while Instant::now() < deadline {
        exited(dir, etcd)?;
        if let Ok(health) = etcd_get(&url, "/health")
            && health["health"] == "true"
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(Error::Setup(format!(
        "etcd was not healthy within {STARTUP:?}:\n{}",
        log_tail(dir, "etcd")
    )))
}

async fn client_for(kubeconfig: &Path) -> Result<Client, Error> {
    let config = kube::config::Kubeconfig::read_from(kubeconfig)
        .map_err(|e| Error::Setup(format!("{}: {e}", kubeconfig.display())))?;
    let config =
        Config::from_custom_kubeconfig(config, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| Error::Setup(format!("{}: {e}", kubeconfig.display())))?;
    // kube's TLS takes the process's default provider, which two providers compiled into one
    // build (ring, and aws-lc-rs for the server's signature checks) leave unchosen: ring, as
    // every other TLS here.
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::try_from(config).map_err(|e| Error::Setup(format!("a client: {e}")))
}

async fn wait_for_api(dir: &Path, client: &Client, api: &mut Component) -> Result<(), Error> {
    let deadline = Instant::now() + STARTUP;
    let mut last = String::new();
    while Instant::now() < deadline {
        exited(dir, api)?;
        let request = http::Request::get("/readyz").body(Vec::new());
        if let Ok(request) = request {
            match client.request_text(request).await {
                Ok(text) if text.trim() == "ok" => return Ok(()),
                Ok(text) => last = text,
                Err(e) => last = e.to_string(),
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(Error::Setup(format!(
        "kube-apiserver was not ready within {STARTUP:?} ({last}):\n{}",
        log_tail(dir, "kube-apiserver")
    )))
}

/// One HTTP/1.0 exchange with etcd's JSON gateway.
fn etcd_exchange(url: &str, request: &str) -> Result<Value, Error> {
    let address = url.trim_start_matches("http://");
    let mut stream =
        TcpStream::connect(address).map_err(|e| Error::Setup(format!("etcd at {address}: {e}")))?;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    stream
        .write_all(request.as_bytes())
        .map_err(|e| Error::Setup(format!("etcd: {e}")))?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .map_err(|e| Error::Setup(format!("etcd: {e}")))?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| Error::Setup(format!("etcd answered: {response}")))?;
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        return Err(Error::Setup(format!("etcd answered: {head}\n{body}")));
    }
    serde_json::from_str(body).map_err(|e| Error::Setup(format!("etcd answered {body}: {e}")))
}

fn etcd_get(url: &str, path: &str) -> Result<Value, Error> {
    etcd_exchange(url, &format!("GET {path} HTTP/1.0\r\nHost: etcd\r\n\r\n"))
}

fn etcd_post(url: &str, path: &str, body: &Value) -> Result<Value, Error> {
    let body = body.to_string();
    etcd_exchange(
        url,
        &format!(
            "POST {path} HTTP/1.0\r\nHost: etcd\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    )
}
