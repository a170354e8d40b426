//! The Helm chart that installs Runway in a cluster (`deploy/helm/runway`), checked by its
//! real consumers: `helm lint --strict`; `helm template`, whose schema refuses what it should;
//! `kubernetes-validate --strict` against the 1.33 schemas; `runway server`'s own parser for
//! the configuration it writes; the certificates it makes, kept across upgrades (`lookup`
//! against a real API server, `kube-cluster`) and used for real by `runway server check-config` and by an
//! ingress run with the Deployment's arguments and fed by a control plane's fleet over mutual
//! TLS; the server's replicas on a PostgreSQL database (a Deployment, its Secrets mounted as
//! `runway server check-config` takes them, the master key made once and kept); and the
//! Kubernetes driver on the real API server with the chart's ServiceAccount, whose requests
//! are exactly what the chart's Role grants in each environment's namespace.
//!
//! helm comes from `scripts/test` (in `target/tools`), kubernetes-validate from pip: without
//! them a test is skipped with its reason, and fails under `CI=true`.

#![allow(clippy::unwrap_used, clippy::print_stderr, reason = "tests")]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use runway_driver::{Driver, LogQuery, Scale, Workload};
use runway_manifest::{ServiceFiles, SourceFile};
use serde_json::{Value, json};
use support::{Ran, run};

/// The chart, from this crate's directory.
const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/helm/runway");

/// Bound on one helm or kubernetes-validate run, and on one `runway` check.
const TOOL: Duration = Duration::from_secs(60);

/// The Kubernetes version whose schemas the objects are checked against (the driver's
/// k8s-openapi version).
const KUBERNETES_VERSION: &str = "1.33.0";

/// What the driver may do in each environment's namespace, and all of it: (API group,
/// resource, verbs).
const RULES: [(&str, &str, &[&str]); 11] = [
    (
        "apps",
        "deployments",
        &["list", "watch", "create", "patch", "delete"],
    ),
    ("apps", "deployments/scale", &["get", "patch"]),
    ("", "services", &["get", "create", "patch"]),
    ("", "secrets", &["create", "patch", "delete"]),
    ("", "serviceaccounts", &["create", "patch"]),
    ("", "pods", &["list", "watch", "patch", "delete"]),
    ("", "pods/log", &["get"]),
    ("", "events", &["list", "watch"]),
    ("discovery.k8s.io", "endpointslices", &["list", "watch"]),
    (
        "networking.k8s.io",
        "networkpolicies",
        &["get", "create", "patch"],
    ),
    (
        "policy",
        "poddisruptionbudgets",
        &["get", "create", "patch"],
    ),
];

/// A digest the custom values pin the image to.
const DIGEST: &str = "sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae";

/// Every key `serverConfig` accepts, each with a value `runway server` takes: the schema's
/// tree must be this one (`server_config_schema_is_the_servers_keys`), and the server must
/// read the result (`rendered_server_config_is_read_by_runway_server`).
const SERVER_CONFIG: &str = "  api:
    tls:
      enabled: false
    limits:
      body_bytes: 2097152
      request_timeout_seconds: 40
      tls_handshake_timeout_seconds: 10
      header_read_timeout_seconds: 30
      shutdown_grace_seconds: 20
      max_connections: 512
      source_bytes: 67108864
      upload_timeout_seconds: 300
    oidc:
      issuers:
        - issuer: https://gitlab.example.com
          audience: https://runway.example.com
          bindings:
            - claims: {project_path: group/app, ref_protected: 'true'}
              service: app
              environments: [production]
            - claims: {project_path: platform/inventory, ref: main, ref_protected: 'true'}
              role: admin
    previews:
      ttl_seconds: 86400
      max_per_service: 5
    sso:
      issuer: https://gitlab.example.com
      client_id: runway
      client_secret_file: /etc/runway/sso/client-secret
      ca_file: /etc/runway/sso/ca.pem
      public_url: https://runway.example.com
      scopes: [openid, profile, email]
      username_claim: nickname
      groups_claim: groups_direct
      admin_groups: [platform/admins]
      session_hours: 8
  ingress:
    control_timeout_ms: 5000
    stats_interval_ms: 500
    traffic:
      per_client: {requests_per_second: 100, burst: 200}
    remote:
      resolve_interval_ms: 1000
  control:
    reconcile_interval_ms: 2000
    reconcile_concurrency: 8
    deploy_timeout_ms: 300000
    drain_grace_ms: 20000
    policy:
      start_timeout_ms: 600000
      drain_grace_ms: 20000
      max_surge: 2
    autoscale_interval_ms: 1000
    autoscaler:
      min_instances: 0
      max_instances: 50
      container_concurrency: 0
      utilisation: 0.7
      stable_window_ms: 60000
      panic_window_ms: 6000
      panic_threshold: 2.0
      max_scale_up_rate: 1000.0
      max_scale_down_rate: 2.0
      scale_to_zero_grace_ms: 30000
      scale_down_margin: 1.0
  runtime:
    insecure_registries: [registry.internal:5000]
    allowed_registries: [registry.example.com, '*.example.org']
  secrets:
    vault:
      address: https://vault.example.com:8200
      ca_file: /etc/ssl/certs/ca-certificates.crt
      namespace: platform
      auth:
        jwt: {role: runway, token_file: /var/run/secrets/kubernetes.io/serviceaccount/token, mount: kubernetes}
      mount: kv
      path: runway/env/{environment}/service/{service}
      timeout_ms: 3000
  domains:
    interval_ms: 2000
    acme:
      directory: https://acme-v02.api.letsencrypt.org/directory
      contact: [mailto:ops@example.com]
      accept_terms: true
      ca_file: /etc/ssl/certs/ca-certificates.crt
      challenge: tls-alpn-01
      order_timeout_ms: 60000
      retry_ms: 30000
";

/// Values other than the defaults in every part: three environments, another pattern, an
/// image pinned by digest, the ingress's own settings, Secrets of the operator's, and every
/// `serverConfig` key.
fn custom_values() -> String {
    format!(
        "image:
  repository: registry.example.com/platform/runway
  tag: \"0.1.0\"
  digest: {DIGEST}
  pullPolicy: Always
imagePullSecrets: [{{name: registry-credentials}}]
environments: [dev, staging, production]
namespacePattern: apps-{{env}}
namespaceLabels: {{pod-security.kubernetes.io/enforce: baseline}}
namespaceAnnotations: {{owner: platform-team}}
domain: apps.example.com
apiHostnames: [runway.example.com, 203.0.113.7]
registry: {{host: \"registry.apps.example.com:30443\"}}
persistence: {{size: 20Gi, storageClass: fast-ssd}}
ingressService:
  type: NodePort
  annotations: {{service.beta.kubernetes.io/aws-load-balancer-type: nlb}}
  httpsPort: 8443
  httpPort: 8080
ingress:
  replicas: 3
  redirect: false
  shutdownGraceSeconds: 20
  preStopSleepSeconds: 0
  accessLog: true
  maxConnectionsPerClient: 0
  maxRateLimitedClients: 4096
  tracing: {{otlpEndpoint: \"http://otel-collector.observability:4318\", sampleRatio: 0.25}}
  podAnnotations: {{prometheus.io/scrape: \"true\", prometheus.io/port: \"9090\"}}
  podLabels: {{team: edge}}
  resources:
    requests: {{cpu: 200m, memory: 128Mi}}
    limits: {{cpu: 1, memory: 1Gi}}
  nodeSelector: {{node-role.example.com/edge: \"true\"}}
  tolerations:
    - {{key: edge, operator: Exists, effect: NoSchedule}}
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - topologyKey: topology.kubernetes.io/zone
          labelSelector: {{matchLabels: {{app.kubernetes.io/component: ingress}}}}
serviceCA: {{existingSecret: platform-ca}}
controlTLS: {{ingressSecret: platform-ingress-control, serverSecret: platform-server-control}}
networkPolicy: {{enabled: false}}
serviceAccount: {{annotations: {{example.com/role: runway}}}}
podAnnotations: {{example.com/owner: platform-team}}
podLabels: {{team: platform}}
resources:
  requests: {{cpu: 250m, memory: 512Mi}}
  limits: {{cpu: 2, memory: 2Gi}}
nodeSelector: {{kubernetes.io/os: linux}}
tolerations:
  - {{key: dedicated, operator: Equal, value: platform, effect: NoSchedule}}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions: [{{key: kubernetes.io/arch, operator: In, values: [amd64, arm64]}}]
podSecurityContext:
  runAsNonRoot: true
  runAsUser: 10001
  runAsGroup: 10001
  fsGroup: 10001
  seccompProfile: {{type: RuntimeDefault}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  privileged: false
  capabilities: {{drop: [ALL]}}
serverConfig:
{SERVER_CONFIG}"
    )
}

/// The server's replicas on a PostgreSQL database: its URL under a key of the operator's
/// choosing, its authority from a Secret, three replicas and a longer lease; the master key the
/// chart's.
const DATABASE_VALUES: &str = "store:
  urlSecret: {name: platform-db, key: uri}
  caSecret: {name: platform-db-ca, key: root.crt}
server: {replicas: 3, leaseSeconds: 15}
";

// ---- tools ------------------------------------------------------------------------------

/// `program` when `program probe` runs; otherwise says why the caller skips and gives `None`,
/// or, under `CI=true`, fails the test.
fn found(program: &Path, probe: &str, install: &str) -> Option<PathBuf> {
    if support::runs(program, probe, TOOL) {
        return Some(program.to_owned());
    }
    assert_ne!(
        std::env::var("CI").as_deref(),
        Ok("true"),
        "{} is not installed; {install}",
        program.display()
    );
    eprintln!("skipping: {} not installed ({install})", program.display());
    None
}

/// helm: on PATH, else where `scripts/test` puts it (`target/tools/helm`).
fn helm() -> Option<PathBuf> {
    support::kube::helm()
}

fn kubernetes_validate() -> Option<PathBuf> {
    found(
        Path::new("kubernetes-validate"),
        "--version",
        "pip install kubernetes-validate; scripts/test does",
    )
}

/// A directory of its own under the system's temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("runway-chart-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    /// Writes `name` in the directory; returns its path.
    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `helm template <release> CHART -n <namespace> [-f values] [args]`.
fn template(
    helm: &Path,
    release: &str,
    namespace: &str,
    values: Option<&Path>,
    args: &[&str],
) -> Ran {
    let mut command = Command::new(helm);
    command
        .args(["template", release, CHART, "--namespace", namespace])
        .args(args);
    if let Some(values) = values {
        command.arg("--values").arg(values);
    }
    run(command, None, TOOL)
}

/// The objects `helm template` rendered, failing the test when it failed.
fn objects(ran: &Ran) -> Vec<Value> {
    assert!(ran.ok(), "helm template: {}", ran.all());
    let mut objects = Vec::new();
    let mut document = String::new();
    for line in ran.stdout.lines().chain(std::iter::once("---")) {
        if line != "---" {
            document.push_str(line);
            document.push('\n');
            continue;
        }
        let text = std::mem::take(&mut document);
        if text
            .lines()
            .all(|l| l.trim().is_empty() || l.starts_with('#'))
        {
            continue;
        }
        let parsed = runway_manifest::parse(&SourceFile::new("rendered.yaml", text.as_str()))
            .unwrap_or_else(|e| panic!("not YAML: {e:?}\n{text}"));
        objects.push(parsed.value);
    }
    objects
}

/// The chart's Chart.yaml.
fn chart_yaml() -> Value {
    let text = std::fs::read_to_string(format!("{CHART}/Chart.yaml")).unwrap();
    runway_manifest::parse(&SourceFile::new("Chart.yaml", text))
        .unwrap()
        .value
}

fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

fn one<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let found = of_kind(objects, kind);
    assert_eq!(found.len(), 1, "one {kind}: {found:#?}");
    found[0]
}

/// The default render (release `runway` in `runway-system`) and the custom one (release
/// `blue` in `platform`), with their values files.
struct Renders {
    _dir: TempDir,
    custom_values: PathBuf,
    default: Vec<Value>,
    custom: Vec<Value>,
}

fn renders(helm: &Path, name: &str) -> Renders {
    let dir = TempDir::new(name);
    let custom_values = dir.write("custom.yaml", &custom_values());
    let default = objects(&template(helm, "runway", "runway-system", None, &[]));
    let custom = objects(&template(
        helm,
        "blue",
        "platform",
        Some(&custom_values),
        &[],
    ));
    Renders {
        _dir: dir,
        custom_values,
        default,
        custom,
    }
}

// ---- tests ------------------------------------------------------------------------------

#[test]
fn lint_is_clean_with_default_and_custom_values() {
    let Some(helm) = helm() else { return };
    let dir = TempDir::new("lint");
    let custom = dir.write("custom.yaml", &custom_values());
    let database = dir.write("database.yaml", DATABASE_VALUES);
    for values in [None, Some(custom.as_path()), Some(database.as_path())] {
        let mut command = Command::new(&helm);
        command.args(["lint", "--strict", CHART]);
        if let Some(values) = values {
            command.arg("--values").arg(values);
        }
        let ran = run(command, None, TOOL);
        assert!(ran.ok(), "helm lint --strict ({values:?}): {}", ran.all());
        assert!(
            !ran.stdout.contains("[WARNING]") && !ran.stdout.contains("[ERROR]"),
            "helm lint ({values:?}): {}",
            ran.all()
        );
    }
}

#[test]
fn rendered_objects_pass_strict_schema_validation() {
    let Some(helm) = helm() else { return };
    let Some(validate) = kubernetes_validate() else {
        return;
    };
    let dir = TempDir::new("validate");
    let custom = dir.write("custom.yaml", &custom_values());
    let database = dir.write("database.yaml", DATABASE_VALUES);
    let always = [
        "ConfigMap",
        "Deployment",
        "Namespace",
        "PodDisruptionBudget",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
    ];
    for (release, namespace, values, more) in [
        (
            "runway",
            "runway-system",
            None,
            &["NetworkPolicy", "Secret", "StatefulSet"][..],
        ),
        // The operator's Secrets, no NetworkPolicy.
        (
            "blue",
            "platform",
            Some(custom.as_path()),
            &["StatefulSet"][..],
        ),
        // Replicas on a database: a Deployment, no StatefulSet, and the master key's Secret.
        (
            "green",
            "replicated",
            Some(database.as_path()),
            &["NetworkPolicy", "Secret"][..],
        ),
    ] {
        let ran = template(&helm, release, namespace, values, &[]);
        let rendered = objects(&ran);
        let kinds: BTreeSet<&str> = rendered
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            always.iter().chain(more).copied().collect(),
            "{release}"
        );
        // Every object carries the standard labels.
        for object in &rendered {
            let labels = &object["metadata"]["labels"];
            for key in [
                "helm.sh/chart",
                "app.kubernetes.io/name",
                "app.kubernetes.io/instance",
                "app.kubernetes.io/managed-by",
                "app.kubernetes.io/part-of",
            ] {
                assert!(labels[key].is_string(), "{key} on {object:#}");
            }
            assert_eq!(labels["app.kubernetes.io/managed-by"], "Helm");
            assert_eq!(labels["app.kubernetes.io/instance"], release);
            assert_eq!(
                labels["helm.sh/chart"],
                format!("runway-{}", chart_yaml()["version"].as_str().unwrap())
            );
        }
        let path = dir.write(&format!("{release}.yaml"), &ran.stdout);
        let mut command = Command::new(&validate);
        command
            .args(["--strict", "--kubernetes-version", KUBERNETES_VERSION])
            .arg(&path);
        let checked = run(command, None, TOOL);
        assert!(
            checked.ok(),
            "kubernetes-validate ({release}): {}",
            checked.all()
        );
        let passed = checked
            .stdout
            .lines()
            .chain(checked.stderr.lines())
            .filter(|l| l.contains(" passed for resource "))
            .count();
        assert_eq!(
            passed,
            rendered.len(),
            "every document checked: {}",
            checked.all()
        );
    }
}

#[test]
fn each_environment_namespace_has_exactly_the_drivers_rules() {
    let Some(helm) = helm() else { return };
    let renders = renders(&helm, "rbac");
    let expected: BTreeSet<(String, String, String)> = RULES
        .iter()
        .flat_map(|(group, resource, verbs)| {
            verbs.iter().map(|verb| {
                (
                    (*group).to_owned(),
                    (*resource).to_owned(),
                    (*verb).to_owned(),
                )
            })
        })
        .collect();
    for (rendered, namespace, pattern, environments, name) in [
        (
            &renders.default,
            "runway-system",
            "runway-{env}",
            &["dev", "production"][..],
            "runway",
        ),
        (
            &renders.custom,
            "platform",
            "apps-{env}",
            &["dev", "staging", "production"][..],
            "blue-runway",
        ),
    ] {
        for kind in ["ClusterRole", "ClusterRoleBinding"] {
            assert!(of_kind(rendered, kind).is_empty(), "no {kind}");
        }
        // The server's, which the RoleBindings name, and the ingress's, which nothing does.
        let accounts: BTreeMap<&str, &Value> = of_kind(rendered, "ServiceAccount")
            .into_iter()
            .map(|a| (a["metadata"]["name"].as_str().unwrap(), a))
            .collect();
        let ingress_account = format!("{name}-ingress");
        assert_eq!(
            accounts.keys().copied().collect::<BTreeSet<_>>(),
            BTreeSet::from([name, ingress_account.as_str()])
        );
        for account in accounts.values() {
            assert_eq!(account["metadata"]["namespace"], namespace);
        }
        let statefulset = one(rendered, "StatefulSet");
        assert_eq!(
            statefulset["spec"]["template"]["spec"]["serviceAccountName"],
            name
        );

        let wanted: BTreeSet<String> = environments
            .iter()
            .map(|env| pattern.replace("{env}", env))
            .collect();
        let namespaces: BTreeSet<String> = of_kind(rendered, "Namespace")
            .iter()
            .map(|n| {
                let labels = &n["metadata"]["labels"];
                assert_eq!(labels["app.kubernetes.io/managed-by"], "Helm", "{n:#}");
                assert!(
                    environments.contains(&labels["runway.dev/environment"].as_str().unwrap()),
                    "{n:#}"
                );
                assert_eq!(
                    n["metadata"]["annotations"]["helm.sh/resource-policy"],
                    "keep"
                );
                n["metadata"]["name"].as_str().unwrap().to_owned()
            })
            .collect();
        assert_eq!(namespaces, wanted, "a namespace per environment");

        let roles = of_kind(rendered, "Role");
        let bindings = of_kind(rendered, "RoleBinding");
        let in_namespaces = |objects: &[&Value]| -> BTreeSet<String> {
            objects
                .iter()
                .map(|o| o["metadata"]["namespace"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(roles.len(), wanted.len(), "one Role per environment");
        assert_eq!(
            bindings.len(),
            wanted.len(),
            "one RoleBinding per environment"
        );
        assert_eq!(in_namespaces(&roles), wanted);
        assert_eq!(in_namespaces(&bindings), wanted);
        for role in &roles {
            let mut granted = BTreeSet::new();
            for rule in role["rules"].as_array().unwrap() {
                let keys: BTreeSet<&str> = rule
                    .as_object()
                    .unwrap()
                    .keys()
                    .map(String::as_str)
                    .collect();
                assert_eq!(
                    keys,
                    BTreeSet::from(["apiGroups", "resources", "verbs"]),
                    "no resourceNames or nonResourceURLs: {rule:#}"
                );
                for group in rule["apiGroups"].as_array().unwrap() {
                    for resource in rule["resources"].as_array().unwrap() {
                        for verb in rule["verbs"].as_array().unwrap() {
                            let triple = (
                                group.as_str().unwrap().to_owned(),
                                resource.as_str().unwrap().to_owned(),
                                verb.as_str().unwrap().to_owned(),
                            );
                            assert!(granted.insert(triple), "granted twice: {rule:#}");
                        }
                    }
                }
            }
            assert_eq!(granted, expected, "{}", role["metadata"]["namespace"]);
            let binding = bindings
                .iter()
                .find(|b| b["metadata"]["namespace"] == role["metadata"]["namespace"])
                .unwrap();
            assert_eq!(
                binding["roleRef"],
                json!({
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": role["metadata"]["name"],
                })
            );
            assert_eq!(
                binding["subjects"],
                json!([{"kind": "ServiceAccount", "name": name, "namespace": namespace}])
            );
        }
    }
}

/// `server.yml` from the rendered ConfigMap.
fn server_yml(rendered: &[Value]) -> String {
    one(rendered, "ConfigMap")["data"]["server.yml"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// `runway server --config FILE --data-dir EMPTY admin-token`: the server reads and checks
/// its configuration first (unknown keys refused, with their path), then finds no store.
/// There is no flag that only checks the configuration; this is the nearest.
fn runway_reads(dir: &TempDir, name: &str, config: &str) -> Ran {
    let path = dir.write(name, config);
    let data = dir.0.join(format!("{name}.data"));
    std::fs::create_dir_all(&data).unwrap();
    let mut command = Command::new(support::RUNWAY);
    command
        .arg("server")
        .arg("--config")
        .arg(&path)
        .arg("--data-dir")
        .arg(&data)
        .arg("admin-token")
        .env_remove("RUNWAY_DATA_DIR");
    run(command, None, TOOL)
}

/// Whether `runway server` took the configuration: it went on to look for its store.
fn read_cleanly(ran: &Ran) -> bool {
    !ran.ok() && ran.stderr.contains("no store at")
}

#[test]
fn rendered_server_config_is_read_by_runway_server() {
    let Some(helm) = helm() else { return };
    let renders = renders(&helm, "config");
    let dir = TempDir::new("config-files");

    // The check tells a good file from a bad one.
    let misspelt = runway_reads(&dir, "misspelt.yml", "control:\n  domian: example.com\n");
    assert!(!read_cleanly(&misspelt), "{}", misspelt.all());
    assert!(misspelt.stderr.contains("domian"), "{}", misspelt.all());

    let default = server_yml(&renders.default);
    let ran = runway_reads(&dir, "default.yml", &default);
    assert!(read_cleanly(&ran), "{default}\n{}", ran.all());
    let custom = server_yml(&renders.custom);
    let ran = runway_reads(&dir, "custom.yml", &custom);
    assert!(read_cleanly(&ran), "{custom}\n{}", ran.all());

    // What the chart sets, and serverConfig merged beside it.
    let parse = |text: &str| {
        runway_manifest::parse(&SourceFile::new("server.yml", text))
            .unwrap()
            .value
    };
    let default = parse(&default);
    assert_eq!(
        default,
        json!({
            "api": {
                "listen": "0.0.0.0:7443",
                "environments": ["dev", "production"],
                "tls": {
                    "hostnames": [
                        "localhost", "127.0.0.1", "runway-api", "runway-api.runway-system",
                        "runway-api.runway-system.svc",
                        "runway-api.runway-system.svc.cluster.local",
                    ],
                    "ca_dir": "/etc/runway-ca",
                },
            },
            // The ingresses: every pod behind the headless control Service, over mutual TLS;
            // the URLs name the ingress Service's port.
            "ingress": {"remote": {
                "addresses": ["runway-ingress-control.runway-system.svc:9444"],
                "tls_dir": "/etc/runway-control-tls",
                "https_port": 443,
            }},
            "control": {"domain": "localhost"},
            "runtime": {"kind": "kubernetes", "kubernetes": {
                "namespace_pattern": "runway-{env}",
                "image_pull_secrets": [],
            }},
            // No address the nodes reach the registry at: images are not mirrored.
            "registry": {"mirror": false},
        })
    );
    let custom = parse(&custom);
    // With one, they are, and its name is in the API's certificate.
    assert_eq!(
        custom["registry"],
        json!({"mirror": true, "host": "registry.apps.example.com:30443"})
    );
    assert_eq!(
        custom["api"]["environments"],
        json!(["dev", "staging", "production"])
    );
    assert_eq!(
        custom["runtime"]["kubernetes"]["namespace_pattern"],
        "apps-{env}"
    );
    assert_eq!(custom["control"]["domain"], "apps.example.com");
    assert_eq!(
        custom["ingress"],
        json!({
            "control_timeout_ms": 5000,
            "stats_interval_ms": 500,
            "traffic": {"per_client": {"requests_per_second": 100, "burst": 200}},
            "remote": {
                "addresses": ["blue-runway-ingress-control.platform.svc:9444"],
                "tls_dir": "/etc/runway-control-tls",
                "https_port": 8443,
                "resolve_interval_ms": 1000,
            },
        })
    );
    assert_eq!(custom["api"]["tls"]["ca_dir"], "/etc/runway-ca");
    assert_eq!(custom["control"]["deploy_timeout_ms"], 300_000);
    assert_eq!(custom["api"]["limits"]["shutdown_grace_seconds"], 20);
    let hostnames = custom["api"]["tls"]["hostnames"].as_array().unwrap();
    for name in [
        "blue-runway-api.platform.svc",
        "runway.example.com",
        "203.0.113.7",
        "registry.apps.example.com",
    ] {
        assert!(hostnames.contains(&json!(name)), "{name} in {hostnames:?}");
    }
    // The pod follows: the API's shutdown grace and a margin, probes (readiness too: the
    // ingress is not in this pod) on the API, over plain HTTP.
    for (rendered, grace, scheme) in [
        (&renders.custom, 35, "HTTP"),
        (&renders.default, 45, "HTTPS"),
    ] {
        let pod = &one(rendered, "StatefulSet")["spec"]["template"]["spec"];
        assert_eq!(pod["terminationGracePeriodSeconds"], grace);
        for probe in ["startupProbe", "livenessProbe", "readinessProbe"] {
            assert_eq!(
                pod["containers"][0][probe]["httpGet"],
                json!({"path": "/healthz", "port": "api", "scheme": scheme}),
                "{probe}"
            );
        }
    }
    let pod = &one(&renders.default, "StatefulSet")["spec"]["template"]["spec"];
    assert_eq!(
        pod["containers"][0]["args"],
        json!([
            "server",
            "--config",
            "/etc/runway/server.yml",
            "--data-dir",
            "/var/lib/runway"
        ])
    );
}

#[test]
fn services_image_and_data_volume() {
    let Some(helm) = helm() else { return };
    let renders = renders(&helm, "objects");
    for (rendered, name, ingress_type, ingress_ports) in [
        // HTTP redirects name the Service's HTTPS port (`--redirect-port`).
        (
            &renders.default,
            "runway",
            "LoadBalancer",
            &[(443, "https"), (80, "http")][..],
        ),
        // No redirects, and 8443 public anyway.
        (
            &renders.custom,
            "blue-runway",
            "NodePort",
            &[(8443, "https"), (8080, "http")][..],
        ),
    ] {
        let services: BTreeMap<String, &Value> = of_kind(rendered, "Service")
            .into_iter()
            .map(|s| (s["metadata"]["name"].as_str().unwrap().to_owned(), s))
            .collect();
        let api = services[&format!("{name}-api")];
        assert_eq!(api["spec"]["type"], "ClusterIP");
        assert_eq!(
            api["spec"]["ports"],
            json!([{"name": "api", "port": 7443, "targetPort": "api", "protocol": "TCP"}])
        );
        let ingress = services[&format!("{name}-ingress")];
        assert_eq!(ingress["spec"]["type"], ingress_type);
        let ports: Vec<(u64, &str)> = ingress["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["port"].as_u64().unwrap(),
                    p["targetPort"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(ports, ingress_ports);
        let statefulset = one(rendered, "StatefulSet");
        assert_eq!(statefulset["spec"]["replicas"], 1);
        let container = &statefulset["spec"]["template"]["spec"]["containers"][0];
        let ports: Vec<(&str, u64)> = container["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().unwrap(),
                    p["containerPort"].as_u64().unwrap(),
                )
            })
            .collect();
        // The API alone: the ingress is the Deployment's.
        assert_eq!(ports, [("api", 7443)]);
        let selector = &statefulset["spec"]["selector"]["matchLabels"];
        assert_eq!(&api["spec"]["selector"], selector);
        let ingress_selector = &one(rendered, "Deployment")["spec"]["selector"]["matchLabels"];
        assert_eq!(ingress_selector["app.kubernetes.io/component"], "ingress");
        assert_eq!(&ingress["spec"]["selector"], ingress_selector);
        assert_eq!(
            &services[&format!("{name}-ingress-control")]["spec"]["selector"],
            ingress_selector
        );
        assert_eq!(services.len(), 3, "{:?}", services.keys());
        assert_eq!(
            statefulset["spec"]["volumeClaimTemplates"][0]["metadata"]["labels"], *selector,
            "the claim template's labels never change (it is immutable)"
        );
    }

    let image = |rendered: &[Value]| -> (String, Value) {
        let statefulset = one(rendered, "StatefulSet");
        // The ingress runs the same image.
        assert_eq!(
            one(rendered, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"],
            statefulset["spec"]["template"]["spec"]["containers"][0]["image"]
        );
        (
            statefulset["spec"]["template"]["spec"]["containers"][0]["image"]
                .as_str()
                .unwrap()
                .to_owned(),
            statefulset["metadata"]["labels"]["app.kubernetes.io/version"].clone(),
        )
    };
    let chart = chart_yaml();
    let app_version = chart["appVersion"].as_str().unwrap();
    assert_eq!(
        image(&renders.default),
        (format!("runway:{app_version}"), json!(app_version))
    );
    assert_eq!(
        image(&renders.custom),
        (
            format!("registry.example.com/platform/runway:0.1.0@{DIGEST}"),
            json!("0.1.0")
        )
    );
    // A digest alone names the image, and no version is claimed.
    let digest_only = objects(&template(
        &helm,
        "blue",
        "platform",
        Some(&renders.custom_values),
        &["--set", "image.tag="],
    ));
    assert_eq!(
        image(&digest_only),
        (
            format!("registry.example.com/platform/runway@{DIGEST}"),
            Value::Null
        )
    );

    let claim = &one(&renders.custom, "StatefulSet")["spec"]["volumeClaimTemplates"][0];
    assert_eq!(claim["spec"]["storageClassName"], "fast-ssd");
    assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "20Gi");
    let claim = &one(&renders.default, "StatefulSet")["spec"]["volumeClaimTemplates"][0];
    assert!(claim["spec"].get("storageClassName").is_none(), "{claim:#}");
}

#[test]
fn schema_refuses_unknown_keys_and_a_pattern_without_env() {
    let Some(helm) = helm() else { return };
    for (set, why) in [
        ("bogus=1", "bogus"),
        ("image.tags=1.0", "tags"),
        ("persistence.sise=1Gi", "sise"),
        ("securityContext.runAsNonroot=true", "runAsNonroot"),
        ("serverConfig.control.domain=x.example", "domain"),
        ("serverConfig.runtime.oci_runtime=crun", "oci_runtime"),
        ("namespacePattern=runway", "namespacePattern"),
        ("namespacePattern=runway-env", "namespacePattern"),
        ("image.digest=sha256:abc", "digest"),
        ("environments={Dev}", "environments"),
        ("ingressService.type=External", "ingressService"),
        ("ingressService.httpsPort=0", "httpsPort"),
        ("ingress.replicas=0", "replicas"),
        ("ingress.replica=2", "replica"),
        ("serviceCA.existingsecret=mine", "existingsecret"),
        ("controlTLS.ingressSecret=Not_A_Name", "ingressSecret"),
        ("networkPolicy.enabled=yes", "enabled"),
        ("server.replicas=0", "replicas"),
        ("server.replica=2", "replica"),
        ("server.leaseSeconds=0", "leaseSeconds"),
        // The URL is a Secret's, never a value; its name and key are Kubernetes'.
        ("store.url=postgres://runway:pw@db/runway", "url"),
        ("store.urlSecret.name=null", "name is required"),
        ("store.urlSecret.name=Not_A_Name", "name"),
        ("store.urlSecret.key=", "key"),
        ("store.caSecret.key=a/b", "key"),
        ("store.masterKey.existing=mine", "existing"),
        // Keys of an ingress the server would start itself: nothing here.
        ("serverConfig.ingress.redirect=false", "redirect"),
        (
            "serverConfig.ingress.shutdown_grace_ms=1",
            "shutdown_grace_ms",
        ),
        ("serverConfig.ingress.remote.addresses={x:1}", "addresses"),
    ] {
        let ran = template(&helm, "runway", "runway-system", None, &["--set", set]);
        assert!(!ran.ok(), "--set {set} rendered");
        assert!(
            ran.stderr.contains("schema") && ran.stderr.contains(why),
            "--set {set}: {}",
            ran.all()
        );
    }
    // What no schema can see: the release's own namespace as an environment's; one side of
    // the control channel's Secrets without the other; ports that clash.
    let ran = template(&helm, "runway", "runway-dev", None, &[]);
    assert!(
        !ran.ok(),
        "an environment in the release's namespace rendered"
    );
    assert!(ran.stderr.contains("is the release's own"), "{}", ran.all());
    for (set, why) in [
        ("controlTLS.ingressSecret=mine", "serverSecret is not"),
        ("controlTLS.serverSecret=mine", "ingressSecret is not"),
        ("ingressService.httpPort=443", "both 443"),
        // What is for a database, without one.
        (
            "store.caSecret.name=db-ca",
            "store.caSecret.name is set but store.urlSecret.name is not",
        ),
        (
            "store.caConfigMap.name=db-ca",
            "store.caConfigMap.name is set but store.urlSecret.name is not",
        ),
        (
            "store.masterKey.existingSecret=kept",
            "store.masterKey.existingSecret is set but store.urlSecret.name is not",
        ),
        // The database's authority twice; a pod that could not read the master key's Secret
        // (0440, root and fsGroup).
        (
            "store.urlSecret.name=db,store.caSecret.name=a,store.caConfigMap.name=b",
            "one of the two",
        ),
        (
            "store.urlSecret.name=db,podSecurityContext.fsGroup=null",
            "podSecurityContext.fsGroup",
        ),
        (
            "store.urlSecret.name=db,podSecurityContext.runAsGroup=1000",
            "runAsGroup (1000) is not fsGroup (65532)",
        ),
        // Replicas each keep their own registry: no mirror across them.
        (
            "store.urlSecret.name=db,registry.host=runway.example.com:30443",
            "each server pod keeps its own data directory",
        ),
    ] {
        let ran = template(&helm, "runway", "runway-system", None, &["--set", set]);
        assert!(!ran.ok(), "--set {set} rendered");
        assert!(ran.stderr.contains(why), "--set {set}: {}", ran.all());
    }
    // 8443, the pods' own HTTPS port, may be the Service's HTTP port.
    let ran = template(
        &helm,
        "runway",
        "runway-system",
        None,
        &["--set", "ingressService.httpPort=8443"],
    );
    assert!(ran.ok(), "{}", ran.all());
}

/// The keys of every object in `value`, as dotted paths (objects only: lists and scalars
/// are leaves).
fn key_paths(value: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    if let Value::Object(map) = value {
        for (key, value) in map {
            let path = if prefix.is_empty() {
                key.clone()
            } else {
                format!("{prefix}.{key}")
            };
            out.insert(path.clone());
            key_paths(value, &path, out);
        }
    }
}

/// The keys a JSON schema allows, as dotted paths.
fn schema_paths(schema: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    if let Some(properties) = schema["properties"].as_object() {
        for (key, schema) in properties {
            let path = if prefix.is_empty() {
                key.clone()
            } else {
                format!("{prefix}.{key}")
            };
            out.insert(path.clone());
            schema_paths(schema, &path, out);
        }
    }
}

/// Every object in the schema refuses keys it does not name, but maps (labels, annotations,
/// quantities) and Kubernetes' own structures, whose keys are Kubernetes' to check.
fn strict_objects(schema: &Value, path: &str, loose: &mut Vec<String>) {
    if let Value::Object(map) = schema {
        if map.get("type") == Some(&json!("object"))
            && map.get("additionalProperties") != Some(&json!(false))
        {
            loose.push(path.to_owned());
        }
        for (key, value) in map {
            strict_objects(value, &format!("{path}/{key}"), loose);
        }
    } else if let Value::Array(items) = schema {
        for (i, value) in items.iter().enumerate() {
            strict_objects(value, &format!("{path}/{i}"), loose);
        }
    }
}

#[test]
fn server_config_schema_is_the_servers_keys() {
    let text = std::fs::read_to_string(format!("{CHART}/values.schema.json")).unwrap();
    let schema: Value = serde_json::from_str(&text).unwrap();

    let mut loose = Vec::new();
    strict_objects(&schema, "", &mut loose);
    let maps = [
        "/properties/global",
        // An OIDC binding's claims: any claim name, each to its text.
        "/properties/serverConfig/properties/api/properties/oidc/properties/issuers/items/properties/bindings/items/properties/claims",
        "/properties/namespaceLabels",
        "/properties/namespaceAnnotations",
        "/properties/serviceAccount/properties/annotations",
        "/properties/podAnnotations",
        "/properties/podLabels",
        "/properties/nodeSelector",
        "/properties/ingressService/properties/annotations",
        "/properties/resources/properties/requests",
        "/properties/resources/properties/limits",
        "/properties/affinity/properties/nodeAffinity",
        "/properties/affinity/properties/podAffinity",
        "/properties/affinity/properties/podAntiAffinity",
        "/properties/ingress/properties/podAnnotations",
        "/properties/ingress/properties/podLabels",
        "/properties/ingress/properties/nodeSelector",
        "/properties/ingress/properties/resources/properties/requests",
        "/properties/ingress/properties/resources/properties/limits",
        "/properties/ingress/properties/affinity/properties/nodeAffinity",
        "/properties/ingress/properties/affinity/properties/podAffinity",
        "/properties/ingress/properties/affinity/properties/podAntiAffinity",
    ];
    assert_eq!(
        loose.iter().map(String::as_str).collect::<BTreeSet<_>>(),
        BTreeSet::from(maps),
        "objects whose keys are not checked"
    );

    // The sample sets every key the schema allows, and no other.
    let server = &schema["properties"]["serverConfig"];
    let mut allowed = BTreeSet::new();
    schema_paths(server, "", &mut allowed);
    let sample = runway_manifest::parse(&SourceFile::new("sample", SERVER_CONFIG))
        .unwrap()
        .value;
    let mut sampled = BTreeSet::new();
    key_paths(&sample, "", &mut sampled);
    assert_eq!(
        allowed, sampled,
        "SERVER_CONFIG sets every key serverConfig allows"
    );

    // The API's and the controller's keys are all there, but those the chart sets.
    for (section, defaults, managed) in [
        (
            "api",
            {
                // Single sign-on is off by default: its keys are those of a sample.
                let mut api = serde_json::to_value(runway_api::ApiConfig::default()).unwrap();
                api["sso"] = serde_json::to_value(runway_api::sso::SsoConfig {
                    issuer: String::new(),
                    client_id: String::new(),
                    client_secret_file: PathBuf::new(),
                    ca_file: Some(PathBuf::new()),
                    public_url: String::new(),
                    scopes: Vec::new(),
                    username_claim: String::new(),
                    groups_claim: String::new(),
                    admin_groups: Vec::new(),
                    session_hours: 0,
                })
                .unwrap();
                api
            },
            &[
                "listen",
                "data_dir",
                "environments",
                "tls.hostnames",
                "tls.ca_dir",
            ][..],
        ),
        (
            "control",
            serde_json::to_value(runway_control::ControllerConfig::default()).unwrap(),
            &["domain", "https_port"][..],
        ),
    ] {
        let mut server_keys = BTreeSet::new();
        key_paths(&defaults, section, &mut server_keys);
        for key in managed {
            server_keys.remove(&format!("{section}.{key}"));
        }
        let chart_keys: BTreeSet<String> = allowed
            .iter()
            .filter(|k| k.split('.').next() == Some(section))
            .cloned()
            .collect();
        let mut server_keys_with_section = server_keys;
        server_keys_with_section.insert(section.to_owned());
        assert_eq!(
            chart_keys, server_keys_with_section,
            "serverConfig.{section} in values.schema.json against runway server's"
        );
    }
}

// ---- the ingress's Deployment and the certificates ---------------------------------------

/// The object of `kind` named `name`.
fn named<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// A pod spec's Secret volumes: volume name to Secret name.
fn secret_volumes(pod: &Value) -> BTreeMap<String, String> {
    pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v.get("secret").is_some())
        .map(|v| {
            (
                v["name"].as_str().unwrap().to_owned(),
                v["secret"]["secretName"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// A container's read-only mounts: volume name to path.
fn read_only_mounts(container: &Value) -> BTreeMap<String, String> {
    container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["readOnly"] == true)
        .map(|m| {
            (
                m["name"].as_str().unwrap().to_owned(),
                m["mountPath"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Standard base64, as a Secret's `data` holds it.
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => 0,
            _ => panic!("not base64: {text}"),
        })
    };
    let clean: Vec<u8> = text.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    assert_eq!(clean.len() % 4, 0, "not base64: {text}");
    let mut out = Vec::new();
    for chunk in clean.chunks(4) {
        let padding = chunk.iter().filter(|c| **c == b'=').count();
        let n = chunk.iter().fold(0_u32, |n, c| (n << 6) | value(*c));
        out.extend_from_slice(&n.to_be_bytes()[1..4 - padding]);
    }
    out
}

/// The rendered Secrets' data, decoded: Secret name to key to bytes.
fn secret_data(rendered: &[Value]) -> BTreeMap<String, BTreeMap<String, Vec<u8>>> {
    of_kind(rendered, "Secret")
        .into_iter()
        .map(|secret| {
            let data = secret["data"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(key, value)| (key.clone(), base64_decode(value.as_str().unwrap())))
                .collect();
            (
                secret["metadata"]["name"].as_str().unwrap().to_owned(),
                data,
            )
        })
        .collect()
}

/// The ingress in a Deployment of its own, as the server's configuration expects it: its
/// flags, probes, account without a token, the same hardening as the server, spread over
/// nodes, a disruption budget, the headless Service the server finds every pod through, and
/// the control port open to the server's pod alone.
#[test]
fn the_ingress_is_a_deployment_of_its_own() {
    let Some(helm) = helm() else { return };
    let renders = renders(&helm, "ingress");

    let rendered = &renders.default;
    let deployment = named(rendered, "Deployment", "runway-ingress");
    let selector = &deployment["spec"]["selector"]["matchLabels"];
    assert_eq!(
        *selector,
        json!({
            "app.kubernetes.io/name": "runway",
            "app.kubernetes.io/instance": "runway",
            "app.kubernetes.io/component": "ingress",
        })
    );
    let template = &deployment["spec"]["template"];
    for (key, value) in selector.as_object().unwrap() {
        assert_eq!(&template["metadata"]["labels"][key], value, "{key}");
    }
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(
        deployment["spec"]["strategy"]["rollingUpdate"],
        json!({"maxSurge": 1, "maxUnavailable": 0})
    );
    let pod = &template["spec"];
    assert_eq!(pod["containers"].as_array().unwrap().len(), 1);
    let container = &pod["containers"][0];
    assert_eq!(container["command"], json!(["runway-ingress"]));
    assert_eq!(
        container["args"],
        json!([
            "--supervise",
            "--state-dir",
            "/var/lib/runway-ingress",
            "--listen",
            "0.0.0.0:8080",
            "--https",
            "0.0.0.0:8443",
            "--admin",
            "0.0.0.0:9090",
            "--ca-dir",
            "/etc/runway-ca",
            "--control-listen",
            "0.0.0.0:9444",
            "--control-tls",
            "/etc/runway-control-tls",
            "--shutdown-grace-seconds",
            "30",
            "--redirect-port",
            "443",
            "--max-connections-per-client",
            "256",
            "--max-rate-limited-clients",
            "1048576",
        ])
    );
    assert_eq!(
        container["ports"],
        json!([
            {"name": "https", "containerPort": 8443, "protocol": "TCP"},
            {"name": "http", "containerPort": 8080, "protocol": "TCP"},
            {"name": "admin", "containerPort": 9090, "protocol": "TCP"},
            {"name": "control", "containerPort": 9444, "protocol": "TCP"},
        ])
    );
    // Ready once the server fed it; alive while it answers.
    assert_eq!(
        container["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": "admin"})
    );
    assert_eq!(
        container["livenessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": "admin"})
    );
    assert_eq!(
        container["lifecycle"]["preStop"]["exec"]["command"],
        json!(["sleep", "5"])
    );
    // The wait, the shutdown grace, a margin.
    assert_eq!(pod["terminationGracePeriodSeconds"], 50);
    // No Kubernetes API: an account of its own, bound to nothing, without a token.
    assert_eq!(pod["serviceAccountName"], "runway-ingress");
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(
        named(rendered, "ServiceAccount", "runway-ingress")["automountServiceAccountToken"],
        false
    );
    for binding in of_kind(rendered, "RoleBinding") {
        assert_eq!(binding["subjects"].as_array().unwrap().len(), 1);
        assert_eq!(binding["subjects"][0]["name"], "runway");
    }
    // The server's hardening.
    let server_pod = &one(rendered, "StatefulSet")["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"], server_pod["securityContext"]);
    assert_eq!(
        container["securityContext"],
        server_pod["containers"][0]["securityContext"]
    );
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        container["resources"],
        json!({"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}})
    );
    assert_eq!(
        pod["topologySpreadConstraints"],
        json!([{
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector},
        }])
    );
    // The Secrets, read-only: the serving authority in both pods, each side's control
    // certificates.
    assert_eq!(
        secret_volumes(pod),
        BTreeMap::from([
            ("ca".to_owned(), "runway-ca".to_owned()),
            (
                "control-tls".to_owned(),
                "runway-ingress-control-tls".to_owned()
            ),
        ])
    );
    assert_eq!(
        secret_volumes(server_pod),
        BTreeMap::from([
            ("ca".to_owned(), "runway-ca".to_owned()),
            (
                "control-tls".to_owned(),
                "runway-server-control-tls".to_owned()
            ),
        ])
    );
    let mounts = BTreeMap::from([
        ("ca".to_owned(), "/etc/runway-ca".to_owned()),
        (
            "control-tls".to_owned(),
            "/etc/runway-control-tls".to_owned(),
        ),
    ]);
    assert_eq!(read_only_mounts(container), mounts);
    let mut server_mounts = mounts.clone();
    server_mounts.insert("config".to_owned(), "/etc/runway".to_owned());
    assert_eq!(
        read_only_mounts(&server_pod["containers"][0]),
        server_mounts
    );
    // Both pods restart on new certificates; one render's certificates, one checksum.
    let checksum = &template["metadata"]["annotations"]["checksum/tls"];
    assert!(checksum.is_string(), "{template:#}");
    assert_eq!(
        one(rendered, "StatefulSet")["spec"]["template"]["metadata"]["annotations"]["checksum/tls"],
        *checksum
    );

    // The headless Service the server resolves to every pod, ready or not.
    let control = named(rendered, "Service", "runway-ingress-control");
    assert_eq!(control["spec"]["clusterIP"], "None");
    assert_eq!(control["spec"]["publishNotReadyAddresses"], true);
    assert_eq!(control["spec"]["selector"], *selector);
    assert_eq!(
        control["spec"]["ports"],
        json!([{"name": "control", "port": 9444, "targetPort": "control", "protocol": "TCP"}])
    );
    let config = runway_manifest::parse(&SourceFile::new("server.yml", server_yml(rendered)))
        .unwrap()
        .value;
    assert_eq!(
        config["ingress"]["remote"]["addresses"],
        json!(["runway-ingress-control.runway-system.svc:9444"])
    );

    let budget = named(rendered, "PodDisruptionBudget", "runway-ingress");
    assert_eq!(budget["spec"]["maxUnavailable"], 1);
    assert_eq!(budget["spec"]["selector"]["matchLabels"], *selector);

    // The control port from the server's pod alone; the others from anywhere.
    let policy = named(rendered, "NetworkPolicy", "runway-ingress");
    assert_eq!(policy["spec"]["podSelector"]["matchLabels"], *selector);
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress"]));
    let server_selector = &one(rendered, "StatefulSet")["spec"]["selector"]["matchLabels"];
    let mut open = BTreeSet::new();
    for rule in policy["spec"]["ingress"].as_array().unwrap() {
        let ports: BTreeSet<&str> = rule["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["port"].as_str().unwrap())
            .collect();
        if ports.contains("control") {
            assert_eq!(ports, BTreeSet::from(["control"]), "{rule:#}");
            assert_eq!(
                rule["from"],
                json!([{"podSelector": {"matchLabels": server_selector}}])
            );
        } else {
            assert!(rule.get("from").is_none(), "{rule:#}");
            open.extend(ports);
        }
    }
    assert_eq!(open, BTreeSet::from(["https", "http", "admin"]));

    // Other values: more pods, no redirect, the access log, its own placement and resources,
    // the operator's Secrets, no NetworkPolicy, no wait before the signal.
    let rendered = &renders.custom;
    let deployment = named(rendered, "Deployment", "blue-runway-ingress");
    assert_eq!(deployment["spec"]["replicas"], 3);
    let template = &deployment["spec"]["template"];
    assert_eq!(template["metadata"]["labels"]["team"], "edge");
    assert_eq!(
        template["metadata"]["annotations"]["prometheus.io/port"],
        "9090"
    );
    let pod = &template["spec"];
    let container = &pod["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        args[args.len() - 12..],
        [
            "--shutdown-grace-seconds",
            "20",
            "--no-redirect",
            "--access-log",
            "--max-connections-per-client",
            "0",
            "--max-rate-limited-clients",
            "4096",
            "--otlp-endpoint",
            "http://otel-collector.observability:4318",
            "--trace-sample-ratio",
            "0.25",
        ]
    );
    assert!(container.get("lifecycle").is_none(), "{container:#}");
    assert_eq!(pod["terminationGracePeriodSeconds"], 35);
    assert_eq!(container["resources"]["limits"]["memory"], "1Gi");
    assert_eq!(
        pod["nodeSelector"],
        json!({"node-role.example.com/edge": "true"})
    );
    assert_eq!(pod["tolerations"][0]["key"], "edge");
    assert!(pod["affinity"]["podAntiAffinity"].is_object());
    assert_eq!(
        pod["imagePullSecrets"],
        json!([{"name": "registry-credentials"}])
    );
    assert_eq!(
        secret_volumes(pod),
        BTreeMap::from([
            ("ca".to_owned(), "platform-ca".to_owned()),
            (
                "control-tls".to_owned(),
                "platform-ingress-control".to_owned()
            ),
        ])
    );
    assert_eq!(
        secret_volumes(&one(rendered, "StatefulSet")["spec"]["template"]["spec"]),
        BTreeMap::from([
            ("ca".to_owned(), "platform-ca".to_owned()),
            (
                "control-tls".to_owned(),
                "platform-server-control".to_owned()
            ),
        ])
    );
    assert!(of_kind(rendered, "Secret").is_empty(), "the operator's");
    assert!(of_kind(rendered, "NetworkPolicy").is_empty());
    assert_eq!(
        named(rendered, "PodDisruptionBudget", "blue-runway-ingress")["spec"]["maxUnavailable"],
        1
    );

    // One pod: no budget (it would block every drain).
    let single = objects(&template_of(&helm, &["--set", "ingress.replicas=1"]));
    assert!(of_kind(&single, "PodDisruptionBudget").is_empty());
    assert_eq!(one(&single, "Deployment")["spec"]["replicas"], 1);

    // The longest base name still gives Service names that are DNS labels.
    let long = "a".repeat(55);
    let rendered = objects(&template_of(
        &helm,
        &["--set", &format!("fullnameOverride={long}")],
    ));
    for service in of_kind(&rendered, "Service") {
        let name = service["metadata"]["name"].as_str().unwrap();
        assert!(name.len() <= 63, "{name}");
    }
    let control = format!("{}-ingress-control", "a".repeat(47));
    named(&rendered, "Service", &control);
    assert!(
        server_yml(&rendered).contains(&format!("{control}.runway-system.svc:9444")),
        "{}",
        server_yml(&rendered)
    );
}

/// `helm template runway CHART -n runway-system [args]`.
fn template_of(helm: &Path, args: &[&str]) -> Ran {
    template(helm, "runway", "runway-system", None, args)
}

/// Creates `secrets` (rendered objects) in the cluster's `namespace`, made for them.
async fn create_secrets(cluster: &kube_cluster::Cluster, namespace: &str, secrets: &[&Value]) {
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
    cluster.create_namespace(namespace, &[]).await.unwrap();
    let client = cluster.client();
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Secret"));
    let api: Api<DynamicObject> = Api::namespaced_with(client, namespace, &resource);
    for secret in secrets {
        let mut secret = (*secret).clone();
        secret["metadata"]["namespace"] = json!(namespace);
        let object: DynamicObject = serde_json::from_value(secret).unwrap();
        api.create(&PostParams::default(), &object).await.unwrap();
    }
}

/// The certificates: made on the first install; on an upgrade, found in the cluster by
/// `lookup` and kept (checked with `--dry-run=server` against a real API server); the control channel's two made again together when
/// one is missing; and none made for a Secret the values name. With a database the master
/// key likewise.
#[test]
fn certificates_are_made_once_and_kept_across_upgrades() {
    let Some(helm) = helm() else { return };
    let first = objects(&template_of(&helm, &[]));
    let secrets: BTreeMap<&str, &Value> = of_kind(&first, "Secret")
        .into_iter()
        .map(|s| (s["metadata"]["name"].as_str().unwrap(), s))
        .collect();
    assert_eq!(
        secrets.keys().copied().collect::<BTreeSet<_>>(),
        BTreeSet::from([
            "runway-ca",
            "runway-ingress-control-tls",
            "runway-server-control-tls"
        ])
    );
    let keys = |secret: &Value| -> BTreeSet<String> {
        secret["data"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    };
    let ca = secrets["runway-ca"];
    assert_eq!(ca["type"], "Opaque");
    assert_eq!(
        keys(ca),
        BTreeSet::from(["ca.pem".to_owned(), "ca-key.pem".to_owned()])
    );
    // Clients trust it: kept when the release goes, as the data claim is.
    assert_eq!(
        ca["metadata"]["annotations"]["helm.sh/resource-policy"],
        "keep"
    );
    let data = secret_data(&first);
    let pem = String::from_utf8(data["runway-ca"]["ca.pem"].clone()).unwrap();
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
    for name in ["runway-ingress-control-tls", "runway-server-control-tls"] {
        let secret = secrets[name];
        assert_eq!(secret["type"], "kubernetes.io/tls");
        assert_eq!(
            keys(secret),
            BTreeSet::from(["ca.crt", "tls.crt", "tls.key"].map(str::to_owned))
        );
    }
    // One authority for both sides, which is not the serving one.
    let (ingress, server) = (
        &data["runway-ingress-control-tls"],
        &data["runway-server-control-tls"],
    );
    assert_eq!(ingress["ca.crt"], server["ca.crt"]);
    assert_ne!(ingress["tls.crt"], server["tls.crt"]);
    assert_ne!(ingress["ca.crt"], data["runway-ca"]["ca.pem"]);

    // Without a cluster, lookup finds nothing: each render makes new ones.
    assert_ne!(secret_data(&objects(&template_of(&helm, &[]))), data);

    let Some(cluster) = kube_cluster::shared("certificates_are_made_once_and_kept") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let kubeconfig = cluster.admin_kubeconfig().to_str().unwrap();
    let all: Vec<&Value> = secrets.values().copied().collect();
    rt.block_on(create_secrets(cluster, "runway-system", &all));

    // An upgrade: every certificate kept, so neither pod restarts for them.
    let upgrade = objects(&template_of(
        &helm,
        &["--dry-run=server", "--kubeconfig", kubeconfig],
    ));
    assert_eq!(secret_data(&upgrade), data, "kept across an upgrade");
    let checksum = |rendered: &[Value]| {
        one(rendered, "Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/tls"]
            .clone()
    };
    assert_eq!(checksum(&upgrade), checksum(&first));

    // Half the control channel: both sides made again, from a new authority; the serving
    // authority kept.
    rt.block_on(create_secrets(
        cluster,
        "elsewhere",
        &[secrets["runway-ca"], secrets["runway-ingress-control-tls"]],
    ));
    let partial = secret_data(&objects(&template(
        &helm,
        "runway",
        "elsewhere",
        None,
        &["--dry-run=server", "--kubeconfig", kubeconfig],
    )));
    assert_eq!(partial["runway-ca"], data["runway-ca"]);
    let (ingress, server) = (
        &partial["runway-ingress-control-tls"],
        &partial["runway-server-control-tls"],
    );
    assert_eq!(ingress["ca.crt"], server["ca.crt"]);
    assert_ne!(
        ingress["ca.crt"],
        data["runway-ingress-control-tls"]["ca.crt"]
    );
    assert_ne!(
        ingress["tls.crt"],
        data["runway-ingress-control-tls"]["tls.crt"]
    );

    // With a database, the master key: 32 random bytes on the first install, another on
    // each render without a cluster, and the one in the cluster on an upgrade.
    let database = "store.urlSecret.name=runway-db";
    let made = objects(&template(
        &helm,
        "runway",
        "replicated",
        None,
        &["--set", database],
    ));
    let key = &secret_data(&made)["runway-master-key"]["master.key"];
    assert_eq!(key.len(), 32, "{key:?}");
    let again = secret_data(&objects(&template(
        &helm,
        "runway",
        "replicated",
        None,
        &["--set", database],
    )));
    assert_ne!(&again["runway-master-key"]["master.key"], key);
    rt.block_on(create_secrets(
        cluster,
        "replicated",
        &[named(&made, "Secret", "runway-master-key")],
    ));
    let upgrade = secret_data(&objects(&template(
        &helm,
        "runway",
        "replicated",
        None,
        &[
            "--set",
            database,
            "--dry-run=server",
            "--kubeconfig",
            kubeconfig,
        ],
    )));
    assert_eq!(
        &upgrade["runway-master-key"]["master.key"], key,
        "the master key kept across an upgrade"
    );

    // The operator's authority: no CA Secret, both pods mount theirs.
    let brought = objects(&template_of(
        &helm,
        &["--set", "serviceCA.existingSecret=x"],
    ));
    assert_eq!(
        secret_data(&brought)
            .keys()
            .map(String::as_str)
            .collect::<BTreeSet<_>>(),
        BTreeSet::from(["runway-ingress-control-tls", "runway-server-control-tls"])
    );
    for kind in ["Deployment", "StatefulSet"] {
        let pod = &one(&brought, kind)["spec"]["template"]["spec"];
        assert_eq!(secret_volumes(pod)["ca"], "x", "{kind}");
    }
    // The operator's control channel too: no Secret at all.
    let brought = objects(&template_of(
        &helm,
        &[
            "--set",
            "serviceCA.existingSecret=x,controlTLS.ingressSecret=y,controlTLS.serverSecret=z",
        ],
    ));
    assert!(of_kind(&brought, "Secret").is_empty());
    assert_eq!(
        secret_volumes(&one(&brought, "Deployment")["spec"]["template"]["spec"])["control-tls"],
        "y"
    );
    assert_eq!(
        secret_volumes(&one(&brought, "StatefulSet")["spec"]["template"]["spec"])["control-tls"],
        "z"
    );
}

/// A kubeconfig naming a cluster that is never reached: `check-config` reads it only.
const UNREACHED_KUBECONFIG: &str = "apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
";

/// An address on loopback free now.
fn free_address() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// A child process killed when dropped.
struct Killed(std::process::Child);

impl Drop for Killed {
    /// Kills the child and, when it leads a process group of its own (`process_group(0)`),
    /// everything in it: a supervised ingress's worker outlives its supervisor otherwise.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An instance answering `ok` to every request, one per connection.
async fn upstream() -> std::net::SocketAddr {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut reader = tokio::io::BufReader::new(stream);
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
                let _ = reader
                    .get_mut()
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                    )
                    .await;
            });
        }
    });
    address
}

/// The status line of `GET path` at `address`, or why there is none.
async fn status_line(address: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut stream) = tokio::net::TcpStream::connect(address).await else {
        return "refused".to_owned();
    };
    let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return "reset".to_owned();
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response).await;
    response.lines().next().unwrap_or_default().to_owned()
}

/// Waits, at most 20 s, until `check` holds.
async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check().await {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What Helm's genCA and genSignedCert made works where it is used: the serving authority
/// issues certificates; `runway server check-config` takes the rendered configuration with
/// its mounts; an ingress started with the Deployment's arguments (and the image's other
/// binary, `runway ingress`) serves HTTPS with a certificate clients trust through the
/// authority's ca.pem, and takes its route table from a control plane holding the server's
/// certificate, and from no other.
#[test]
fn rendered_certificates_serve_and_control_an_ingress() {
    use runway_ingress::control::RemoteOptions;
    use runway_ingress::control_tls::{self, ClientTls};
    use runway_ingress::fleet::{FleetOptions, IngressFleet};

    let Some(helm) = helm() else { return };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rendered = objects(&template_of(&helm, &[]));
    let data = secret_data(&rendered);
    let dir = TempDir::new("certificates");
    let mount = |name: &str| -> PathBuf {
        let path = dir.0.join(name);
        std::fs::create_dir_all(&path).unwrap();
        for (key, bytes) in &data[name] {
            std::fs::write(path.join(key), bytes).unwrap();
        }
        path
    };
    let ca = mount("runway-ca");
    let ingress_tls = mount("runway-ingress-control-tls");
    let server_tls = mount("runway-server-control-tls");

    // What each side loads, as they load it.
    let authority = runway_ingress::LocalCa::load_or_create(&ca).unwrap();
    assert_eq!(
        authority.cert_pem().as_bytes(),
        &data["runway-ca"]["ca.pem"][..],
        "Helm's authority, used as it is"
    );
    let (chain, _key) = authority
        .issue(&["runway-api.runway-system.svc".to_owned()])
        .unwrap();
    assert_eq!(chain.len(), 2, "the certificate, then the authority's");
    control_tls::acceptor(&ingress_tls).unwrap();
    ClientTls::load(&server_tls, control_tls::SERVER_NAME).unwrap();
    for (name, path) in [
        ("runway-ca", &ca),
        ("runway-ingress-control-tls", &ingress_tls),
        ("runway-server-control-tls", &server_tls),
    ] {
        let files: BTreeMap<String, Vec<u8>> = std::fs::read_dir(path)
            .unwrap()
            .map(|entry| {
                let entry = entry.unwrap();
                (
                    entry.file_name().into_string().unwrap(),
                    std::fs::read(entry.path()).unwrap(),
                )
            })
            .collect();
        assert_eq!(
            files, data[name],
            "{name}: nothing made or changed (the mount is read-only)"
        );
    }

    // The server's configuration as rendered, the Secrets where the pod mounts them.
    let config = server_yml(&rendered)
        .replace("/etc/runway-ca", ca.to_str().unwrap())
        .replace("/etc/runway-control-tls", server_tls.to_str().unwrap());
    let config = dir.write("server.yml", &config);
    let kubeconfig = dir.write("kubeconfig", UNREACHED_KUBECONFIG);
    let mut command = Command::new(support::RUNWAY);
    command
        .arg("server")
        .arg("--config")
        .arg(&config)
        .arg("--data-dir")
        .arg(dir.0.join("data"))
        .arg("check-config")
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("RUNWAY_DATA_DIR");
    let checked = run(command, None, TOOL);
    assert!(checked.ok(), "{}", checked.all());
    let in_force = checked.json();
    assert_eq!(in_force["api"]["tls"]["ca_dir"], json!(ca));
    assert_eq!(
        in_force["ingress"]["remote"]["server_name"],
        control_tls::SERVER_NAME
    );

    // The ingress with the Deployment's arguments: its addresses on loopback, its mounts here.
    let container = &one(&rendered, "Deployment")["spec"]["template"]["spec"]["containers"][0];
    let (http, https, admin, control) = (
        free_address(),
        free_address(),
        free_address(),
        free_address(),
    );
    let state = dir.0.join("state");
    let args: Vec<String> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|arg| match arg.as_str().unwrap() {
            "0.0.0.0:8080" => http.to_string(),
            "0.0.0.0:8443" => https.to_string(),
            "0.0.0.0:9090" => admin.to_string(),
            "0.0.0.0:9444" => control.to_string(),
            "/var/lib/runway-ingress" => state.to_str().unwrap().to_owned(),
            "/etc/runway-ca" => ca.to_str().unwrap().to_owned(),
            "/etc/runway-control-tls" => ingress_tls.to_str().unwrap().to_owned(),
            other => {
                assert!(
                    !other.starts_with('/') && !other.contains("0.0.0.0"),
                    "{other}"
                );
                other.to_owned()
            }
        })
        .collect();
    std::fs::create_dir_all(&state).unwrap();
    let log = dir.0.join("ingress.log");
    let _ingress = Killed(
        Command::new(support::RUNWAY)
            .arg("ingress")
            .args(&args)
            .args(["--event-loops", "1", "--threads", "1"])
            // The chart's `--supervise`: a group of its own, the worker in it, killed whole.
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let logged = || std::fs::read_to_string(&log).unwrap_or_default();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let pem = data["runway-ca"]["ca.pem"].clone();
    let served = rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(60), async {
            eventually("the ingress answers on its admin port", async || {
                status_line(admin, "/healthz").await.contains("200")
            })
            .await;
            assert!(
                status_line(admin, "/readyz").await.contains("503"),
                "ready before any table"
            );
            let options = |tls: ClientTls| FleetOptions {
                addresses: vec![control.to_string()],
                tls,
                resolve_every: Duration::from_millis(200),
                remote: RemoteOptions::default(),
            };
            // The server's certificate is obeyed: its table is served.
            let fleet = IngressFleet::connect(options(
                ClientTls::load(&server_tls, control_tls::SERVER_NAME).unwrap(),
            ))
            .await;
            eventually("the ingress joins the fleet", async || {
                !fleet.members().is_empty()
            })
            .await;
            let table: runway_ingress::RouteTableConfig = serde_json::from_value(json!({
                "domain": "localhost",
                "routes": [{
                    "service": "hello",
                    "env": "dev",
                    "revisions": [{
                        "name": "hello-dev-00001",
                        "weight": 100,
                        "instances": [{"address": upstream().await}],
                    }],
                }],
            }))
            .unwrap();
            fleet.set_routes(&table).await.unwrap();
            eventually("the ingress is ready once fed", async || {
                status_line(admin, "/readyz").await.contains("200")
            })
            .await;

            // A control plane that trusts the ingress but holds a certificate from another
            // authority is refused.
            let other = dir.0.join("other");
            control_tls::generate(&other.join("ingress"), &other.join("control")).unwrap();
            std::fs::write(
                other.join("control").join(control_tls::CA_FILE),
                &data["runway-server-control-tls"]["ca.crt"],
            )
            .unwrap();
            let stranger = IngressFleet::connect(options(
                ClientTls::load(&other.join("control"), control_tls::SERVER_NAME).unwrap(),
            ))
            .await;
            assert!(
                stranger.members().is_empty(),
                "a stranger's certificate obeyed"
            );
            drop(stranger);
            assert_eq!(fleet.members(), [control], "the server's still obeyed");

            // HTTPS with a certificate from Helm's authority, trusted through its ca.pem.
            let client = reqwest::Client::builder()
                .tls_certs_only([reqwest::Certificate::from_pem(&pem).unwrap()])
                .resolve("hello.dev.localhost", https)
                .timeout(Duration::from_secs(5))
                .build()
                .unwrap();
            let response = client
                .get(format!("https://hello.dev.localhost:{}/", https.port()))
                .send()
                .await
                .unwrap();
            (
                response.status().as_u16(),
                response.text().await.unwrap_or_default(),
            )
        })
        .await
    });
    let served = served.unwrap_or_else(|_| panic!("within 60 s\n{}", logged()));
    assert_eq!(served, (200, "ok".to_owned()), "{}", logged());
}

// ---- the server's replicas on a database -------------------------------------------------

/// A pod spec's volumes by name.
fn volumes(pod: &Value) -> BTreeMap<String, Value> {
    pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["name"].as_str().unwrap().to_owned(), v.clone()))
        .collect()
}

/// Whether `labels` carry every label `selector` matches.
fn selects(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .unwrap()
        .iter()
        .all(|(key, value)| &labels[key] == value)
}

/// With a database the server is a Deployment of replicas, no StatefulSet and no claim: the
/// same container as the StatefulSet's (its probes, `/healthz`, answer on a follower too),
/// the URL's Secret, the database's authority and the master key mounted read-only (the URL
/// and the key 0440, for the pod's fsGroup) where server.yml names them, spread over nodes, a
/// disruption budget, and every replica selected by the API Service and let through to the
/// ingresses' control port.
#[test]
fn with_a_database_the_server_is_a_deployment_of_replicas() {
    let Some(helm) = helm() else { return };
    let sqlite = objects(&template_of(&helm, &[]));
    let sqlite_server = one(&sqlite, "StatefulSet");
    // The defaults but the database's Secret.
    let rendered = objects(&template_of(
        &helm,
        &["--set", "store.urlSecret.name=runway-db"],
    ));
    assert!(of_kind(&rendered, "StatefulSet").is_empty());
    assert!(of_kind(&rendered, "PersistentVolumeClaim").is_empty());
    let server = named(&rendered, "Deployment", "runway");
    assert_eq!(server["spec"]["replicas"], 2);
    assert_eq!(
        server["spec"]["strategy"]["rollingUpdate"],
        json!({"maxSurge": 1, "maxUnavailable": 0})
    );
    // The StatefulSet's selector, on every replica.
    let selector = &server["spec"]["selector"]["matchLabels"];
    assert_eq!(*selector, sqlite_server["spec"]["selector"]["matchLabels"]);
    assert_eq!(selector["app.kubernetes.io/component"], "server");
    let pod_template = &server["spec"]["template"];
    let labels = &pod_template["metadata"]["labels"];
    assert!(selects(selector, labels), "{labels:#}");
    assert_eq!(
        named(&rendered, "Service", "runway-api")["spec"]["selector"],
        *selector,
        "any replica serves the API"
    );
    let pod = &pod_template["spec"];
    let sqlite_pod = &sqlite_server["spec"]["template"]["spec"];
    for key in ["serviceAccountName", "securityContext"] {
        assert_eq!(pod[key], sqlite_pod[key], "{key}");
    }
    assert_eq!(
        pod["securityContext"]["fsGroup"], pod["securityContext"]["runAsGroup"],
        "the server reads the master key through its own group"
    );
    let without_mounts = |container: &Value| {
        let mut container = container.clone();
        container.as_object_mut().unwrap().remove("volumeMounts");
        container
    };
    let container = &pod["containers"][0];
    assert_eq!(
        without_mounts(container),
        without_mounts(&sqlite_pod["containers"][0]),
        "the same server, arguments and probes"
    );
    assert_eq!(
        container["readinessProbe"]["httpGet"]["path"], "/healthz",
        "answered by a follower as by the leader"
    );

    // Nothing on a claim; the Secrets read-only, the URL and the key for the group alone.
    let volumes = volumes(pod);
    assert_eq!(volumes["data"], json!({"name": "data", "emptyDir": {}}));
    assert_eq!(
        volumes["store-url"]["secret"],
        json!({
            "secretName": "runway-db",
            "defaultMode": 0o440,
            "items": [{"key": "url", "path": "url"}],
        })
    );
    assert_eq!(
        volumes["master-key"]["secret"],
        json!({
            "secretName": "runway-master-key",
            "defaultMode": 0o440,
            "items": [{"key": "master.key", "path": "master.key"}],
        })
    );
    assert!(!volumes.contains_key("store-ca"), "the system's roots");
    let mounts = read_only_mounts(container);
    assert_eq!(
        mounts,
        BTreeMap::from(
            [
                ("config", "/etc/runway"),
                ("ca", "/etc/runway-ca"),
                ("control-tls", "/etc/runway-control-tls"),
                ("store-url", "/etc/runway-store"),
                ("master-key", "/etc/runway-master-key"),
            ]
            .map(|(name, path)| (name.to_owned(), path.to_owned()))
        )
    );
    // server.yml names the files where they are mounted.
    let config = runway_manifest::parse(&SourceFile::new("server.yml", server_yml(&rendered)))
        .unwrap()
        .value;
    assert_eq!(
        config["store"],
        json!({
            "url_file": "/etc/runway-store/url",
            "master_key": "/etc/runway-master-key/master.key",
        })
    );
    assert_eq!(config["leader"], json!({"lease_ms": 10_000}));
    assert!(config["leader"].get("replica").is_none(), "the pod's name");
    assert_eq!(
        pod["topologySpreadConstraints"],
        json!([{
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector},
        }])
    );
    let budget = named(&rendered, "PodDisruptionBudget", "runway");
    assert_eq!(budget["spec"]["maxUnavailable"], 1);
    assert_eq!(budget["spec"]["selector"]["matchLabels"], *selector);
    // The ingresses' control port takes every replica (whichever leads feeds them).
    let policy = named(&rendered, "NetworkPolicy", "runway-ingress");
    let control = policy["spec"]["ingress"]
        .as_array()
        .unwrap()
        .iter()
        .find(|rule| rule["ports"][0]["port"] == "control")
        .unwrap();
    let admitted = &control["from"][0]["podSelector"]["matchLabels"];
    assert!(selects(admitted, labels), "{admitted:#} against {labels:#}");
    // The master key: the chart's, kept on uninstall, never changed in place.
    let secret = named(&rendered, "Secret", "runway-master-key");
    assert_eq!(secret["type"], "Opaque");
    assert_eq!(secret["immutable"], true);
    assert_eq!(
        secret["metadata"]["annotations"]["helm.sh/resource-policy"],
        "keep"
    );
    let data = secret_data(&rendered);
    assert_eq!(
        data["runway-master-key"].keys().collect::<Vec<_>>(),
        ["master.key"]
    );
    assert_eq!(data["runway-master-key"]["master.key"].len(), 32);

    // Other values: three replicas, the URL under another key, the database's authority from
    // a Secret, a longer lease, the operator's master key (no Secret made).
    let dir = TempDir::new("replicas");
    let values = dir.write("database.yaml", DATABASE_VALUES);
    let rendered = objects(&template(
        &helm,
        "green",
        "replicated",
        Some(&values),
        &[
            "--set",
            "store.masterKey.existingSecret=platform-master-key",
        ],
    ));
    let server = named(&rendered, "Deployment", "green-runway");
    assert_eq!(server["spec"]["replicas"], 3);
    let pod = &server["spec"]["template"]["spec"];
    let volumes = self::volumes(pod);
    assert_eq!(
        volumes["store-url"]["secret"]["items"],
        json!([{"key": "uri", "path": "url"}])
    );
    assert_eq!(
        volumes["store-ca"]["secret"],
        json!({"secretName": "platform-db-ca", "items": [{"key": "root.crt", "path": "ca.crt"}]})
    );
    assert_eq!(
        volumes["master-key"]["secret"]["secretName"],
        "platform-master-key"
    );
    assert_eq!(
        read_only_mounts(&pod["containers"][0])["store-ca"],
        "/etc/runway-store-ca"
    );
    assert!(
        secret_data(&rendered)
            .keys()
            .all(|name| !name.contains("master-key")),
        "the operator's key"
    );
    let config = runway_manifest::parse(&SourceFile::new("server.yml", server_yml(&rendered)))
        .unwrap()
        .value;
    assert_eq!(config["store"]["ca_file"], "/etc/runway-store-ca/ca.crt");
    assert_eq!(config["leader"]["lease_ms"], 15_000);
    named(&rendered, "PodDisruptionBudget", "green-runway");

    // The authority from a ConfigMap; one replica: no budget (it would block every drain).
    let rendered = objects(&template_of(
        &helm,
        &[
            "--set",
            "store.urlSecret.name=db,store.caConfigMap.name=db-ca,server.replicas=1",
        ],
    ));
    let server = named(&rendered, "Deployment", "runway");
    assert_eq!(server["spec"]["replicas"], 1);
    assert_eq!(
        self::volumes(&server["spec"]["template"]["spec"])["store-ca"]["configMap"],
        json!({"name": "db-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]})
    );
    assert!(
        of_kind(&rendered, "PodDisruptionBudget")
            .iter()
            .all(|b| b["metadata"]["name"] != "runway"),
        "no budget for one server pod"
    );
}

/// A replica's configuration as rendered, with every volume the Deployment mounts laid out as
/// the kubelet would (each Secret's items at their paths, in their mode), is what `runway server
/// check-config` takes: the URL read from its file (and shown without its password), the
/// database's authority, and the master key of 32 bytes in mode 0440 of the server's own
/// group; a key others may read (a Secret's mode by default) is refused.
#[test]
fn a_replicas_mounted_configuration_is_checked_by_runway_server() {
    use std::os::unix::fs::PermissionsExt;

    let Some(helm) = helm() else { return };
    let dir = TempDir::new("replica-config");
    let values = dir.write("database.yaml", DATABASE_VALUES);
    let rendered = objects(&template(
        &helm,
        "runway",
        "runway-system",
        Some(&values),
        &[],
    ));
    let url = "postgres://runway:s3cret@db.example.com:5432/runway?sslmode=require";
    // The operator's Secrets beside the chart's: the URL, and an authority (any will do).
    let mut data = secret_data(&rendered);
    let authority = data["runway-ca"]["ca.pem"].clone();
    data.insert(
        "platform-db".to_owned(),
        BTreeMap::from([("uri".to_owned(), url.as_bytes().to_vec())]),
    );
    data.insert(
        "platform-db-ca".to_owned(),
        BTreeMap::from([("root.crt".to_owned(), authority)]),
    );

    let pod = &named(&rendered, "Deployment", "runway")["spec"]["template"]["spec"];
    let volumes = volumes(pod);
    let mut mounted = Vec::new();
    for (name, path) in read_only_mounts(&pod["containers"][0]) {
        let Some(secret) = volumes[&name].get("secret") else {
            continue;
        };
        let here = dir.0.join(&name);
        std::fs::create_dir_all(&here).unwrap();
        let keys = &data[secret["secretName"].as_str().unwrap()];
        let items: Vec<(String, String)> = match secret["items"].as_array() {
            Some(items) => items
                .iter()
                .map(|i| {
                    (
                        i["key"].as_str().unwrap().to_owned(),
                        i["path"].as_str().unwrap().to_owned(),
                    )
                })
                .collect(),
            None => keys.keys().map(|k| (k.clone(), k.clone())).collect(),
        };
        for (key, file) in items {
            let file = here.join(file);
            std::fs::write(&file, &keys[&key]).unwrap();
            if let Some(mode) = secret["defaultMode"].as_u64() {
                let mode = u32::try_from(mode).unwrap();
                std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
            }
        }
        mounted.push((path, here));
    }
    // The longest first: /etc/runway-store-ca before /etc/runway-store.
    mounted.sort_by_key(|(path, _)| std::cmp::Reverse(path.len()));
    let mut config = server_yml(&rendered);
    for (path, here) in &mounted {
        config = config.replace(path.as_str(), here.to_str().unwrap());
    }
    assert!(!config.contains("/etc/"), "{config}");
    let config = dir.write("server.yml", &config);
    let kubeconfig = dir.write("kubeconfig", UNREACHED_KUBECONFIG);
    let check = || {
        let mut command = Command::new(support::RUNWAY);
        command
            .arg("server")
            .arg("--config")
            .arg(&config)
            .arg("--data-dir")
            .arg(dir.0.join("data"))
            .arg("check-config")
            .env("KUBECONFIG", &kubeconfig)
            .env_remove("RUNWAY_DATA_DIR");
        run(command, None, TOOL)
    };
    let checked = check();
    assert!(checked.ok(), "{}", checked.all());
    let in_force = checked.json();
    let key = dir.0.join("master-key").join("master.key");
    assert_eq!(
        in_force["store"],
        json!({
            "url": "postgres://runway:***@db.example.com:5432/runway?sslmode=require",
            "url_file": dir.0.join("store-url").join("url"),
            "ca_file": dir.0.join("store-ca").join("ca.crt"),
            "master_key": key,
        })
    );
    assert_eq!(in_force["leader"]["lease_ms"], 15_000);
    assert!(
        !checked.stdout.contains("s3cret") && !checked.stderr.contains("s3cret"),
        "{}",
        checked.all()
    );
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o440
    );

    // Mounted as a Secret is by default (0644), the key would be refused.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let refused = check();
    assert!(!refused.ok(), "{}", refused.all());
    assert!(
        refused.stderr.contains("store.master_key"),
        "{}",
        refused.all()
    );
}

// ---- the driver against the Role ---------------------------------------------------------

const MANIFEST: &str = "apiVersion: runway/v1
kind: RunwayService
metadata:
  name: hello
  owner_email_handle: platform-team
  department: engineering
spec:
  container_port: 8080
  regions: [local]
  request_timeout: 30
  scalability: {min_instances: 1, max_instances: 3, max_instance_request_concurrency: 100}
  workload:
    env: {GREETING: hello}
    secrets: [API_KEY]
";

/// Waits, at most `bound`, until `check` holds of the driver's replicas of the revision.
async fn until_replicas(
    driver: &runway_kube::KubeDriver,
    revision: &str,
    bound: Duration,
    check: impl Fn(&[runway_driver::Replica]) -> bool,
) -> Vec<runway_driver::Replica> {
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        let replicas: Vec<_> = driver
            .replicas()
            .await
            .unwrap()
            .into_iter()
            .filter(|r| runway_driver::revision_of(&r.id) == Some(revision))
            .collect();
        if check(&replicas) {
            return replicas;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "replicas of {revision} within {bound:?}: {replicas:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every call of the driver on a real API server, as the chart's ServiceAccount: each request is
/// one the chart's Role grants in the environment's namespace (the API server refuses any
/// other), and each right the Role grants is used. A server-side apply that creates is
/// authorized as `create` too: the audit log records it as a `patch` answered 201.
#[test]
fn the_driver_uses_exactly_the_roles_rights() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let Some(helm) = helm() else { return };
    let Some(cluster) = kube_cluster::shared("the_driver_uses_exactly_the_roles_rights") else {
        return;
    };
    let installed =
        support::kube::install(cluster, &helm, &support::kube::release("rights"), &["dev"]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(120), drive(&installed))
            .await
            .expect("the driver's calls within 120 s");
    });
    drop(rt);

    let granted: BTreeSet<(String, String, String)> = RULES
        .iter()
        .flat_map(|(group, resource, verbs)| {
            verbs.iter().map(|verb| {
                (
                    (*group).to_owned(),
                    (*resource).to_owned(),
                    (*verb).to_owned(),
                )
            })
        })
        .collect();
    // The driver's watches are recorded when they end, which its drop did.
    let namespace = installed.namespace("dev");
    let mut used = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        used.clear();
        for request in installed.requests() {
            // The API server's version (is `lifecycle.stopSignal` there?), which every
            // authenticated user may read (system:public-info-viewer): no Role grants it.
            if request.uri == "/version" && request.verb == "get" {
                assert_eq!(request.code, 200, "{request:?}");
                continue;
            }
            assert_eq!(
                request.namespace.as_deref(),
                Some(namespace.as_str()),
                "only in the environment's namespace: {request:?}"
            );
            // The API server refuses a right the Role lacks with 403. A 409 (the scale
            // subresource written with a resourceVersion a controller moved on from) is the
            // driver's to read again, and a 404 an object already gone.
            assert_ne!(request.code, 403, "refused by RBAC: {request:?}");
            let resource = match &request.subresource {
                Some(sub) => format!("{}/{sub}", request.resource),
                None => request.resource.clone(),
            };
            let right = (request.group.clone(), resource, request.verb.clone());
            assert!(
                granted.contains(&right),
                "not granted by the Role: {right:?} ({request:?})"
            );
            if request.verb == "patch" && request.code == 201 {
                used.insert((right.0.clone(), right.1.clone(), "create".to_owned()));
            }
            used.insert(right);
        }
        if used == granted || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let unused: Vec<_> = granted.difference(&used).collect();
    assert!(unused.is_empty(), "granted but never used: {unused:?}");
}

/// The driver's calls, as the chart's ServiceAccount on its environment's namespace.
async fn drive(installed: &support::kube::Installed) {
    let config = kube::config::Kubeconfig::read_from(&installed.kubeconfig).unwrap();
    let config =
        kube::Config::from_custom_kubeconfig(config, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let options = runway_kube::KubeOptions {
        namespace_pattern: installed.pattern.clone(),
        environments: vec!["dev".to_owned()],
        ..runway_kube::KubeOptions::default()
    };
    let driver = runway_kube::KubeDriver::new(client, options, None);
    driver.ready(Duration::from_secs(30)).await.unwrap();

    let loaded = runway_manifest::load(&ServiceFiles {
        base: Some(SourceFile::new(".runway/runway.yml", MANIFEST)),
        ..ServiceFiles::default()
    });
    let config = loaded.service.unwrap().config(Some("dev")).unwrap();
    let revision = "hello-dev-00001";
    let workload = Workload {
        service: "hello".to_owned(),
        service_id: 1,
        env: "dev".to_owned(),
        revision: revision.to_owned(),
        config,
        image: Some(format!("registry.example/hello@{DIGEST}")),
        source: None,
        secrets: BTreeMap::from([("API_KEY".to_owned(), "s3cret".to_owned())]),
        secret_versions: BTreeMap::from([("API_KEY".to_owned(), 1)]),
        identity: None,
    };
    let bound = Duration::from_secs(30);
    let scale = |replicas: u32, retire: Vec<String>| Scale { replicas, retire };

    // Made: the Secret, the NetworkPolicy, the Deployment and its Service.
    driver.scale(&workload, &scale(2, vec![])).await.unwrap();
    let two = until_replicas(&driver, revision, bound, |r| {
        r.len() == 2 && r.iter().all(|r| r.ready)
    })
    .await;
    // Logs, then followed.
    let query = LogQuery {
        service: "hello".to_owned(),
        env: "dev".to_owned(),
        replica: None,
        tail: 10,
        previous: false,
    };
    driver.logs(&query).await.unwrap();
    let mut lines = driver.follow(&query).await.unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(1), lines.recv()).await;
    drop(lines);
    // One drained: marked with its deletion cost, the count lowered (the revision made already:
    // its Service and NetworkPolicy read, not applied again).
    driver
        .scale(&workload, &scale(1, vec![two[0].id.clone()]))
        .await
        .unwrap();
    let left = until_replicas(&driver, revision, bound, |r| r.len() == 1).await;
    // One replaced: deleted, and its ReplicaSet starts another.
    driver
        .scale(&workload, &scale(1, vec![left[0].id.clone()]))
        .await
        .unwrap();
    let gone = left[0].id.clone();
    let new = until_replicas(&driver, revision, bound, |r| {
        r.len() == 1 && r[0].id != gone
    })
    .await;
    // Retired through the scale subresource, then removed.
    driver
        .retire("hello", "dev", revision, &[new[0].id.clone()])
        .await
        .unwrap();
    driver.remove("hello", "dev", revision).await.unwrap();
}

/// `registry.external` mirrors to the operator's registry, also with a database (every
/// replica pushes to the one registry): server.yml names it, and the server pod reads the
/// push Secret's logins as its docker `config.json`, read-only. Without the Secret, or with a
/// repository no image reference could begin with, nothing renders.
#[test]
fn an_external_mirror_is_pushed_to_with_its_secret() {
    let Some(helm) = helm() else { return };
    const REPOSITORY: &str = "registry.gitlab.com/acme/runway";
    const PROCESS_BASE: &str = "registry.example.com/platform/python@sha256:\
                                0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let rendered = objects(&template_of(
        &helm,
        &[
            "--set",
            "store.urlSecret.name=runway-db",
            "--set",
            &format!("registry.external.repository={REPOSITORY}"),
            "--set",
            "registry.external.pushSecret=mirror-push",
            "--set",
            &format!("registry.processBase={PROCESS_BASE}"),
        ],
    ));
    let config = server_yml(&rendered);
    let parsed = runway_manifest::parse(&SourceFile::new("server.yml", config.clone()))
        .unwrap()
        .value;
    assert_eq!(
        parsed["registry"],
        json!({"mirror": true, "external": {"repository": REPOSITORY}, "process_base": PROCESS_BASE})
    );
    // The server takes that section (the rest names the database's files, not here).
    let dir = TempDir::new("external-mirror");
    let section = format!("registry: {}\n", parsed["registry"]);
    let read = runway_reads(&dir, "server.yml", &section);
    assert!(read_cleanly(&read), "{section}{}", read.all());

    let pod = &named(&rendered, "Deployment", "runway")["spec"]["template"]["spec"];
    assert_eq!(
        volumes(pod)["registry-push"]["secret"],
        json!({
            "secretName": "mirror-push",
            "items": [{"key": ".dockerconfigjson", "path": "config.json"}],
        })
    );
    let container = &pod["containers"][0];
    assert_eq!(
        read_only_mounts(container)
            .get("registry-push")
            .map(String::as_str),
        Some("/etc/runway-docker")
    );
    assert_eq!(
        container["env"],
        json!([{"name": "DOCKER_CONFIG", "value": "/etc/runway-docker"}])
    );
    // Without it: no push login, no env, no volume.
    let plain = objects(&template_of(&helm, &[]));
    let plain_pod = &one(&plain, "StatefulSet")["spec"]["template"]["spec"];
    assert!(plain_pod["containers"][0].get("env").is_none());
    assert!(!volumes(plain_pod).contains_key("registry-push"));

    for (set, why) in [
        (
            format!("registry.external.repository={REPOSITORY}"),
            "registry.external.pushSecret",
        ),
        (
            "registry.external.repository=Acme/runway".to_owned(),
            "registry.external.repository",
        ),
        (
            "registry.processBase=python:3".to_owned(),
            "registry.processBase",
        ),
    ] {
        let ran = template_of(&helm, &["--set", &set]);
        assert!(!ran.ok(), "--set {set} rendered");
        assert!(ran.stderr.contains(why), "--set {set}: {}", ran.all());
    }
}
