//! The Helm chart that installs Runway in a cluster (`deploy/helm/runway`), checked by its
//! real consumers: `helm lint --strict`; `helm template`, whose schema refuses what it should;
//! `kubernetes-validate --strict` against the 1.33 schemas; `runway server`'s own parser for
//! the configuration it writes; and the Kubernetes driver on the stand-in cluster, whose
//! requests are exactly what the chart's Role grants in each environment's namespace.
//!
//! helm comes from `scripts/test` (in `target/tools`), kubernetes-validate from pip: without
//! them a test is skipped with its reason, and fails under `CI=true`.

#![allow(clippy::unwrap_used, clippy::print_stderr, reason = "tests")]

mod support;

use std::collections::{BTreeMap, BTreeSet};
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
const RULES: [(&str, &str, &[&str]); 8] = [
    ("apps", "deployments", &["list", "watch", "patch", "delete"]),
    ("apps", "deployments/scale", &["get", "patch"]),
    ("", "services", &["patch"]),
    ("", "secrets", &["patch"]),
    ("", "pods", &["list", "watch", "patch", "delete"]),
    ("", "pods/log", &["get"]),
    ("", "events", &["list", "watch"]),
    ("discovery.k8s.io", "endpointslices", &["list", "watch"]),
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
  ingress:
    redirect: false
    start_timeout_ms: 15000
    shutdown_grace_ms: 20000
    control_timeout_ms: 5000
    stats_interval_ms: 500
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
";

/// Values other than the defaults in every part: three environments, another pattern, an
/// image pinned by digest, and every `serverConfig` key.
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
persistence: {{size: 20Gi, storageClass: fast-ssd}}
ingressService:
  type: NodePort
  annotations: {{service.beta.kubernetes.io/aws-load-balancer-type: nlb}}
serviceAccount: {{annotations: {{example.com/role: runway}}}}
podAnnotations: {{prometheus.io/scrape: \"true\", prometheus.io/port: \"9090\"}}
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

// ---- tools ------------------------------------------------------------------------------

/// Whether `program arg` runs and succeeds, within [`TOOL`].
fn runs(program: &Path, arg: &str) -> bool {
    let Ok(mut child) = Command::new(program)
        .arg(arg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    else {
        return false;
    };
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.success();
        }
        if started.elapsed() > TOOL {
            let _ = child.kill();
            let _ = child.wait();
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `program` when `program probe` runs; otherwise says why the caller skips and gives `None`,
/// or, under `CI=true`, fails the test.
fn found(program: &Path, probe: &str, install: &str) -> Option<PathBuf> {
    if runs(program, probe) {
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
    if runs(Path::new("helm"), "version") {
        return Some(PathBuf::from("helm"));
    }
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/tools/helm");
    found(&tools, "version", "scripts/test installs it")
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
    for values in [None, Some(custom.as_path())] {
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
    for (release, namespace, values) in [
        ("runway", "runway-system", None),
        ("blue", "platform", Some(custom.as_path())),
    ] {
        let ran = template(&helm, release, namespace, values, &[]);
        let rendered = objects(&ran);
        let kinds: BTreeSet<&str> = rendered
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            BTreeSet::from([
                "ConfigMap",
                "Namespace",
                "Role",
                "RoleBinding",
                "Service",
                "ServiceAccount",
                "StatefulSet"
            ]),
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
        let account = one(rendered, "ServiceAccount");
        assert_eq!(account["metadata"]["name"], name);
        assert_eq!(account["metadata"]["namespace"], namespace);
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
                "tls": {"hostnames": [
                    "localhost", "127.0.0.1", "runway-api", "runway-api.runway-system",
                    "runway-api.runway-system.svc", "runway-api.runway-system.svc.cluster.local",
                ]},
            },
            "ingress": {"https": "0.0.0.0:8443", "http": "0.0.0.0:8080", "admin": "0.0.0.0:9090"},
            "control": {"domain": "localhost"},
            "runtime": {"kind": "kubernetes", "kubernetes": {"namespace_pattern": "runway-{env}"}},
        })
    );
    let custom = parse(&custom);
    assert_eq!(
        custom["api"]["environments"],
        json!(["dev", "staging", "production"])
    );
    assert_eq!(
        custom["runtime"]["kubernetes"]["namespace_pattern"],
        "apps-{env}"
    );
    assert_eq!(custom["control"]["domain"], "apps.example.com");
    assert_eq!(custom["control"]["deploy_timeout_ms"], 300_000);
    assert_eq!(custom["api"]["limits"]["shutdown_grace_seconds"], 20);
    let hostnames = custom["api"]["tls"]["hostnames"].as_array().unwrap();
    for name in [
        "blue-runway-api.platform.svc",
        "runway.example.com",
        "203.0.113.7",
    ] {
        assert!(hostnames.contains(&json!(name)), "{name} in {hostnames:?}");
    }
    // The pod follows: the API's shutdown grace and a margin, probes over plain HTTP.
    let pod = &one(&renders.custom, "StatefulSet")["spec"]["template"]["spec"];
    assert_eq!(pod["terminationGracePeriodSeconds"], 35);
    assert_eq!(
        pod["containers"][0]["livenessProbe"]["httpGet"]["scheme"],
        "HTTP"
    );
    let pod = &one(&renders.default, "StatefulSet")["spec"]["template"]["spec"];
    assert_eq!(pod["terminationGracePeriodSeconds"], 45);
    assert_eq!(
        pod["containers"][0]["livenessProbe"]["httpGet"]["scheme"],
        "HTTPS"
    );
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
    for (rendered, name, ingress_type) in [
        (&renders.default, "runway", "LoadBalancer"),
        (&renders.custom, "blue-runway", "NodePort"),
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
        assert_eq!(ports, [(443, "https"), (80, "http"), (8443, "https")]);
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
        assert_eq!(
            ports,
            [
                ("api", 7443),
                ("https", 8443),
                ("http", 8080),
                ("admin", 9090)
            ]
        );
        let selector = &statefulset["spec"]["selector"]["matchLabels"];
        for service in services.values() {
            assert_eq!(&service["spec"]["selector"], selector);
        }
        assert_eq!(
            statefulset["spec"]["volumeClaimTemplates"][0]["metadata"]["labels"], *selector,
            "the claim template's labels never change (it is immutable)"
        );
    }

    let image = |rendered: &[Value]| -> (String, Value) {
        let statefulset = one(rendered, "StatefulSet");
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
    ] {
        let ran = template(&helm, "runway", "runway-system", None, &["--set", set]);
        assert!(!ran.ok(), "--set {set} rendered");
        assert!(
            ran.stderr.contains("schema") && ran.stderr.contains(why),
            "--set {set}: {}",
            ran.all()
        );
    }
    // What no schema can see: the release's own namespace as an environment's.
    let ran = template(&helm, "runway", "runway-dev", None, &[]);
    assert!(
        !ran.ok(),
        "an environment in the release's namespace rendered"
    );
    assert!(ran.stderr.contains("is the release's own"), "{}", ran.all());
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
            serde_json::to_value(runway_api::ApiConfig::default()).unwrap(),
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

/// Every call of the driver on the stand-in cluster: each request is one the chart's Role
/// grants in the environment's namespace, and each right the Role grants is used.
#[test]
fn the_driver_uses_exactly_the_roles_rights() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let made = rt.block_on(async { tokio::time::timeout(Duration::from_secs(120), drive()).await });
    let (standin, seen) = made.expect("the driver's calls within 120 s");

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
    let mut used = BTreeSet::new();
    for request in &standin.requests()[seen..] {
        if request.verb.is_empty() {
            // Discovery: every authenticated client may (system:discovery).
            continue;
        }
        assert_eq!(
            request.namespace.as_deref(),
            Some("runway-dev"),
            "only in the environment's namespace: {request:?}"
        );
        let resource = match &request.subresource {
            Some(sub) => format!("{}/{sub}", request.resource),
            None => request.resource.clone(),
        };
        let right = (request.group.clone(), resource, request.verb.clone());
        assert!(
            granted.contains(&right),
            "not granted by the Role: {right:?} ({request:?})"
        );
        used.insert(right);
    }
    let unused: Vec<_> = granted.difference(&used).collect();
    assert!(unused.is_empty(), "granted but never used: {unused:?}");
    rt.block_on(standin.stop());
}

/// The stand-in, and how many of its requests came before the driver's.
async fn drive() -> (kube_standin::StandIn, usize) {
    let standin = kube_standin::StandIn::start().await.unwrap();
    // The chart's part: the environment's namespace.
    standin.create_namespace("runway-dev").await.unwrap();
    let client = standin.client().await.unwrap();
    let seen = standin.requests().len();

    let options = runway_kube::KubeOptions {
        namespace_pattern: "runway-{env}".to_owned(),
        environments: vec!["dev".to_owned()],
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
    };
    let bound = Duration::from_secs(30);
    let scale = |replicas: u32, retire: Vec<String>| Scale { replicas, retire };

    // Applied: the Secret, the Deployment and its Service.
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
    };
    driver.logs(&query).await.unwrap();
    let mut lines = driver.follow(&query).await.unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(1), lines.recv()).await;
    drop(lines);
    // One drained: marked with its deletion cost, the count lowered.
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
    (standin, seen)
}
