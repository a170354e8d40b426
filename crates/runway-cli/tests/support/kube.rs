//! Runway installed on a real Kubernetes control plane (`kube-cluster`) as an operator installs
//! it: the chart's environment namespaces (enforcing the `restricted` Pod Security Standard,
//! the chart's default), ServiceAccount and Roles, through `helm template | kubectl apply`;
//! the driver then runs with that ServiceAccount's token, never as a cluster administrator.

#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    reason = "test support, each user takes what it needs"
)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use kube_cluster::Cluster;
use serde_json::Value;

use super::{Ran, run};

/// The chart, from this crate's directory.
pub const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/helm/runway");

/// Bound on one helm or kubectl run.
const TOOL: Duration = Duration::from_secs(60);

/// helm: on PATH, else where `scripts/test` puts it (`target/tools/helm`); `None` after
/// printing why (a failure under `CI=true`).
pub fn helm() -> Option<PathBuf> {
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/tools/helm");
    for candidate in [PathBuf::from("helm"), tools] {
        if super::runs(&candidate, "version", TOOL) {
            return Some(candidate);
        }
    }
    assert_ne!(
        std::env::var("CI").as_deref(),
        Ok("true"),
        "helm is not installed (scripts/test installs it)"
    );
    eprintln!("skipping: helm is not installed (scripts/test installs it)");
    None
}

/// One installation of Runway's chart on a cluster: a release of its own, its environments'
/// namespaces named `<release>-{env}`.
#[derive(Debug)]
pub struct Installed {
    pub cluster: &'static Cluster,
    pub release: String,
    /// The namespace pattern (`<release>-{env}`).
    pub pattern: String,
    /// A kubeconfig with the chart's ServiceAccount's token.
    pub kubeconfig: PathBuf,
    /// That ServiceAccount as the API server names it (the audit log's user).
    pub user: String,
}

/// A release name unique in this process.
pub fn release(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    format!("{prefix}{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Runs `command`, failing the test with its output when it fails.
fn ok(command: Command, stdin: Option<&[u8]>, what: &str) -> Ran {
    let ran = run(command, stdin, TOOL);
    assert!(ran.ok(), "{what}: {}", ran.all());
    ran
}

/// Installs the chart's namespaces, ServiceAccount and Roles for `environments` under
/// `release` (its own namespace `<release>-system`), and returns the driver's kubeconfig.
pub fn install(
    cluster: &'static Cluster,
    helm: &Path,
    release: &str,
    environments: &[&str],
) -> Installed {
    let system = format!("{release}-system");
    let pattern = format!("{release}-{{env}}");
    let mut kubectl = cluster.kubectl();
    kubectl.args(["create", "namespace", &system]);
    ok(kubectl, None, "kubectl create namespace");
    let mut template = Command::new(helm);
    template.args([
        "template",
        release,
        CHART,
        "--namespace",
        &system,
        "--set",
        &format!("environments={{{}}}", environments.join(",")),
        "--set",
        &format!("namespacePattern={pattern}"),
        "--show-only",
        "templates/namespaces.yaml",
        "--show-only",
        "templates/serviceaccount.yaml",
        "--show-only",
        "templates/rbac.yaml",
    ]);
    let rendered = ok(template, None, "helm template");
    let mut apply = cluster.kubectl();
    apply.args(["apply", "-f", "-"]);
    ok(apply, Some(rendered.stdout.as_bytes()), "kubectl apply");
    let account = rendered
        .stdout
        .split("\n---")
        .find(|doc| doc.contains("kind: ServiceAccount"))
        .and_then(|doc| {
            doc.lines()
                .find_map(|line| line.trim().strip_prefix("name: "))
                .map(|name| name.trim_matches('"').to_owned())
        })
        .expect("the chart renders a ServiceAccount");
    let mut token = cluster.kubectl();
    token.args([
        "create",
        "token",
        &account,
        "--namespace",
        &system,
        "--duration",
        "4h",
    ]);
    let token = ok(token, None, "kubectl create token")
        .stdout
        .trim()
        .to_owned();
    let kubeconfig = cluster.token_kubeconfig(release, &token).unwrap();
    Installed {
        cluster,
        release: release.to_owned(),
        pattern,
        kubeconfig,
        user: format!("system:serviceaccount:{system}:{account}"),
    }
}

impl Installed {
    /// The namespace of `env`.
    pub fn namespace(&self, env: &str) -> String {
        self.pattern.replace("{env}", env)
    }

    /// The server's `runtime` section for this installation, and images not mirrored: the
    /// tests deploy an image by a digest no registry has, which the simulated node runs
    /// without pulling (tests/kubernetes.rs's mirror test uses [`Installed::runtime_only`]).
    pub fn runtime_section(&self) -> String {
        format!("{}registry:\n  mirror: false\n", self.runtime_only())
    }

    /// The server's `runtime` section for this installation, alone.
    pub fn runtime_only(&self) -> String {
        format!(
            "runtime:\n  kind: kubernetes\n  kubernetes:\n    kubeconfig: {}\n    namespace_pattern: '{}'\n",
            self.kubeconfig.display(),
            self.pattern
        )
    }

    /// `kubectl get <resource> -n <env's namespace> -o json`: the items.
    pub fn objects(&self, resource: &str, env: &str) -> Vec<Value> {
        let mut get = self.cluster.kubectl();
        get.args([
            "get",
            resource,
            "-n",
            &self.namespace(env),
            "-o",
            "json",
            "--show-managed-fields",
        ]);
        let ran = ok(get, None, "kubectl get");
        let list: Value = serde_json::from_str(&ran.stdout).unwrap();
        list["items"].as_array().cloned().unwrap_or_default()
    }

    /// One object, if it exists.
    pub fn object(&self, resource: &str, env: &str, name: &str) -> Option<Value> {
        self.objects(resource, env)
            .into_iter()
            .find(|o| o["metadata"]["name"] == name)
    }

    /// The pods of a revision that are not being deleted.
    pub fn pods_of(&self, env: &str, revision: &str) -> usize {
        self.objects("pods", env)
            .iter()
            .filter(|pod| pod["metadata"]["labels"]["runway.dev/revision"] == revision)
            .filter(|pod| pod["metadata"]["deletionTimestamp"].is_null())
            .count()
    }

    /// The driver's requests so far, from the audit log.
    pub fn requests(&self) -> Vec<kube_cluster::Request> {
        self.cluster.requests(&self.user)
    }

    /// The driver's writes so far: `verb resource/namespace name`.
    pub fn writes(&self) -> Vec<String> {
        self.requests()
            .into_iter()
            .filter(kube_cluster::Request::is_write)
            .map(|r| {
                format!(
                    "{} {}/{} {}",
                    r.verb,
                    r.resource,
                    r.namespace.unwrap_or_default(),
                    r.name.unwrap_or_default()
                )
            })
            .collect()
    }

    /// Waits until `check` holds, at most `bound`.
    pub fn wait_for(&self, bound: Duration, what: &str, check: impl Fn(&Installed) -> bool) {
        let deadline = std::time::Instant::now() + bound;
        while !check(self) {
            assert!(
                std::time::Instant::now() < deadline,
                "{what}: not within {bound:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}
