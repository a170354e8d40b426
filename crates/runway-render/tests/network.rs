//! A service's network policy on Kubernetes (issue 34): the NetworkPolicy and the internal
//! Service for each case of the manifest's policy, as `runway render` writes them and as the
//! driver applies one revision's, snapshotted, refused where they cannot be rendered, and
//! checked by `kubernetes-validate --strict`.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers, where a failing unwrap is a failing test, as clippy.toml allows in tests"
)]

mod support;

use std::collections::BTreeMap;
use std::process::Command;

use runway_manifest::{ServiceConfig, ServiceFiles, SourceFile, load};
use runway_render::{
    NetworkOptions, Peer, RenderError, RenderOptions, RenderedFile, Revision, Target, render,
    revision_objects,
};
use saphyr::LoadableYamlNode;
use serde_json::{Value, json};
use support::{TempDir, to_json};

/// The default: public, the internet and no private name.
const DEFAULT: &str = "
apiVersion: runway/v1
kind: RunwayService
metadata: {name: shop}
spec:
  image: registry.example.com/shop:1.0
  observability: {scrape_targets: ['localhost:9090']}
";

/// Public, and called at its private name by two services (one in one environment only).
const INTERNAL: &str = "
apiVersion: runway/v1
kind: RunwayService
metadata: {name: users}
spec:
  image: registry.example.com/users:1.0
  workload:
    callers: [web, billing/production]
";

/// Off the public ingress; any service of the platform calls it.
const PRIVATE_ONLY: &str = "
apiVersion: runway/v1
kind: RunwayService
metadata: {name: ledger}
spec:
  image: registry.example.com/ledger:1.0
  load_balancing:
    external_load_balancer: {enabled: false}
    internal_load_balancer: {enabled: true}
";

/// Off the public ingress, with no private name: nothing calls it.
const UNREACHABLE: &str = "
apiVersion: runway/v1
kind: RunwayService
metadata: {name: batch}
spec:
  image: registry.example.com/batch:1.0
  load_balancing:
    external_load_balancer: {enabled: false}
";

/// Locked down: no internet, two ranges allowed, parts of them denied.
const LOCKED: &str = "
apiVersion: runway/v1
kind: RunwayService
metadata: {name: mailer}
spec:
  image: registry.example.com/mailer:1.0
  workload:
    egress:
      internet: false
      allow: ['203.0.113.0/24:443', '198.51.100.0/24']
      deny: ['198.51.100.7:25', '198.51.100.128/25', '203.0.113.9']
";

/// The private network through `vpc_access`, and the internet but one host's SMTP.
const VPC: &str = "
apiVersion: runway/v1
kind: RunwayService
metadata: {name: reports}
spec:
  image: registry.example.com/reports:1.0
  vpc_access: {enabled: true}
  workload:
    egress:
      deny: ['10.20.5.0/24', '192.0.2.25:25']
";

fn config(text: &str) -> ServiceConfig {
    let files = ServiceFiles {
        base: Some(SourceFile::new(".runway/runway.yml", text)),
        ..ServiceFiles::default()
    };
    let loaded = load(&files);
    let errors: Vec<_> = loaded.diagnostics.iter().filter(|d| d.is_error()).collect();
    assert!(errors.is_empty(), "{errors:#?}");
    loaded.service.unwrap().config(Some("production")).unwrap()
}

fn options(network: NetworkOptions) -> RenderOptions {
    RenderOptions {
        namespace: Some("apps".into()),
        network,
        ..RenderOptions::default()
    }
}

fn vpc_ranges() -> Vec<runway_manifest::egress::Range> {
    vec![
        "10.20.0.0/16".parse().unwrap(),
        "172.16.8.0/22".parse().unwrap(),
    ]
}

/// The cluster's ingress controller: every pod of the `ingress-nginx` namespace.
fn nginx() -> Option<Peer> {
    Some(Peer {
        namespace: Some("ingress-nginx".into()),
        labels: BTreeMap::new(),
    })
}

/// Every case: its name, manifest and options.
fn cases() -> Vec<(&'static str, &'static str, RenderOptions)> {
    let with = |ingress: Option<Peer>, vpc: bool| {
        options(NetworkOptions {
            vpc_ranges: if vpc { vpc_ranges() } else { Vec::new() },
            ingress,
        })
    };
    vec![
        ("default", DEFAULT, with(None, false)),
        ("default_behind_nginx", DEFAULT, with(nginx(), false)),
        ("internal", INTERNAL, with(nginx(), false)),
        ("internal_without_ingress_peer", INTERNAL, with(None, false)),
        ("private_only", PRIVATE_ONLY, with(nginx(), false)),
        ("unreachable", UNREACHABLE, with(None, false)),
        ("locked", LOCKED, with(None, false)),
        ("vpc", VPC, with(None, true)),
    ]
}

/// The rendered files the policy makes: the NetworkPolicy and the internal Service.
fn network_files(files: &[RenderedFile]) -> Vec<&RenderedFile> {
    files
        .iter()
        .filter(|f| f.path.ends_with("/networkpolicy.yaml") || f.path.ends_with("-internal.yaml"))
        .collect()
}

fn object(file: &RenderedFile) -> Value {
    to_json(&saphyr::Yaml::load_from_str(&file.contents).unwrap()[0])
}

fn policy_of(name: &str) -> Value {
    let (_, text, options) = cases().into_iter().find(|(n, _, _)| *n == name).unwrap();
    let files = render(&config(text), Target::Kubernetes, &options).unwrap();
    let file = files
        .iter()
        .find(|f| f.path.ends_with("/networkpolicy.yaml"))
        .unwrap();
    object(file)
}

/// Every `cidr` with its `except` and ports, one line each, in the order rendered.
fn blocks(policy: &Value) -> Vec<String> {
    policy["spec"]["egress"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|rule| {
            let block = &rule["to"][0]["ipBlock"];
            let cidr = block["cidr"].as_str()?;
            let except: Vec<&str> = block["except"]
                .as_array()
                .map(|e| e.iter().map(|e| e.as_str().unwrap()).collect())
                .unwrap_or_default();
            let ports: Vec<String> = rule["ports"]
                .as_array()
                .map(|ports| {
                    ports
                        .iter()
                        .filter(|p| p["protocol"] == "TCP")
                        .map(|p| match p["endPort"].as_u64() {
                            Some(end) => format!("{}-{end}", p["port"]),
                            None => p["port"].to_string(),
                        })
                        .collect()
                })
                .unwrap_or_default();
            Some(format!("{cidr} except {except:?} ports {ports:?}"))
        })
        .collect()
}

#[test]
fn snapshots() {
    for (name, text, options) in cases() {
        let config = config(text);
        let kubernetes = render(&config, Target::Kubernetes, &options).unwrap();
        let listing: Vec<String> = network_files(&kubernetes)
            .iter()
            .map(|f| format!("# {}\n{}", f.path, f.contents))
            .collect();
        insta::assert_snapshot!(format!("network_{name}"), listing.join("\n"));
    }
}

#[test]
fn by_default_pods_reach_dns_runway_and_the_internet_and_anyone_reaches_them() {
    let policy = policy_of("default");
    assert_eq!(policy["spec"]["policyTypes"], json!(["Egress"]));
    assert!(policy["spec"].get("ingress").is_none());
    let egress = policy["spec"]["egress"].as_array().unwrap();
    assert_eq!(
        egress[0],
        json!({
            "to": [{
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
            }],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
        })
    );
    assert_eq!(
        egress[1],
        json!({"to": [{"podSelector": {"matchLabels": {"app.kubernetes.io/managed-by": "runway"}}}]})
    );
    assert_eq!(
        blocks(&policy),
        [
            "0.0.0.0/0 except [\"0.0.0.0/8\", \"10.0.0.0/8\", \"100.64.0.0/10\", \"127.0.0.0/8\", \
             \"169.254.0.0/16\", \"172.16.0.0/12\", \"192.168.0.0/16\", \"224.0.0.0/4\", \
             \"240.0.0.0/4\"] ports []"
        ]
    );
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"],
        json!({"app.kubernetes.io/name": "shop", "app.kubernetes.io/instance": "shop"})
    );
    // Given the ingress controller, a public service admits it on its port, and the scrapes.
    let behind = policy_of("default_behind_nginx");
    assert_eq!(behind["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    assert_eq!(
        behind["spec"]["ingress"],
        json!([
            {
                "from": [{
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}},
                    "podSelector": {},
                }],
                "ports": [{"protocol": "TCP", "port": 8080}],
            },
            {"ports": [{"protocol": "TCP", "port": 9090}]},
        ])
    );
}

#[test]
fn an_internal_service_admits_its_callers_and_has_an_internal_service() {
    let config = config(INTERNAL);
    let (_, _, options) = cases().into_iter().find(|c| c.0 == "internal").unwrap();
    let files = render(&config, Target::Kubernetes, &options).unwrap();
    let internal = files
        .iter()
        .find(|f| f.path == "users/service-internal.yaml")
        .expect("an internal Service");
    let internal = object(internal);
    assert_eq!(internal["metadata"]["name"], "users-internal");
    assert_eq!(internal["spec"]["type"], "ClusterIP");
    assert_eq!(
        internal["spec"]["selector"],
        json!({"app.kubernetes.io/name": "users", "app.kubernetes.io/instance": "users"})
    );
    let policy = policy_of("internal");
    let from = &policy["spec"]["ingress"][0]["from"];
    assert_eq!(
        from,
        &json!([
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}},
                "podSelector": {},
            },
            {"podSelector": {"matchLabels": {
                "app.kubernetes.io/managed-by": "runway",
                "app.kubernetes.io/name": "web",
            }}},
            {"podSelector": {"matchLabels": {
                "app.kubernetes.io/managed-by": "runway",
                "app.kubernetes.io/name": "billing",
                "runway.dev/environment": "production",
            }}},
        ])
    );
    // Public with no ingress controller named: anyone reaches it anyway.
    let open = policy_of("internal_without_ingress_peer");
    assert!(open["spec"].get("ingress").is_none(), "{open:#}");
    // Without a private name, no internal Service.
    let files = render(&self::config(DEFAULT), Target::Kubernetes, &options).unwrap();
    assert!(!files.iter().any(|f| f.path.contains("internal")));
}

#[test]
fn off_the_public_ingress_only_callers_reach_the_pods() {
    let policy = policy_of("private_only");
    assert_eq!(
        policy["spec"]["ingress"],
        json!([{
            "from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/managed-by": "runway"}}}],
            "ports": [{"protocol": "TCP", "port": 8080}],
        }]),
        "the ingress controller is not admitted"
    );
    // Neither public nor private: nothing reaches it.
    let policy = policy_of("unreachable");
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    assert!(policy["spec"].get("ingress").is_none(), "{policy:#}");
}

#[test]
fn a_locked_service_reaches_what_it_allows_without_what_it_denies() {
    let policy = policy_of("locked");
    assert_eq!(
        blocks(&policy),
        [
            // 203.0.113.0/24:443, without 203.0.113.9.
            "203.0.113.0/24 except [\"203.0.113.9/32\"] ports [\"443\"]",
            // 198.51.100.0/24, without its upper half and 198.51.100.7 but on port 25...
            "198.51.100.0/24 except [\"198.51.100.7/32\", \"198.51.100.128/25\"] ports []",
            // ...where 198.51.100.7 comes back on every other port.
            "198.51.100.7/32 except [] ports [\"1-24\", \"26-65535\"]",
        ]
    );
}

#[test]
fn vpc_access_reaches_the_ranges_given_and_is_refused_without_them() {
    let policy = policy_of("vpc");
    assert_eq!(
        blocks(&policy),
        [
            "0.0.0.0/0 except [\"0.0.0.0/8\", \"10.0.0.0/8\", \"100.64.0.0/10\", \"127.0.0.0/8\", \
             \"169.254.0.0/16\", \"172.16.0.0/12\", \"192.0.2.25/32\", \"192.168.0.0/16\", \
             \"224.0.0.0/4\", \"240.0.0.0/4\"] ports []",
            "192.0.2.25/32 except [] ports [\"1-24\", \"26-65535\"]",
            "10.20.0.0/16 except [\"10.20.5.0/24\"] ports []",
            "172.16.8.0/22 except [] ports []",
        ]
    );
    let config = config(VPC);
    for target in [Target::Kubernetes, Target::Helm] {
        let error = render(&config, target, &options(NetworkOptions::default())).unwrap_err();
        assert_eq!(
            error,
            RenderError::VpcWithoutRanges {
                service: "reports".into()
            }
        );
        assert!(error.to_string().contains("--vpc-range"), "{error}");
    }
    let public = NetworkOptions {
        vpc_ranges: vec!["198.18.0.0/15".parse().unwrap()],
        ingress: None,
    };
    let error = render(&config, Target::Kubernetes, &options(public)).unwrap_err();
    assert!(error.to_string().contains("198.18.0.0/15"), "{error}");
}

#[test]
fn an_allow_rule_no_pod_reaches_is_refused_with_its_place() {
    let text = LOCKED.replace("'198.51.100.0/24'", "'10.1.0.0/16:5432'");
    let config = config(&text);
    let error = render(
        &config,
        Target::Kubernetes,
        &options(NetworkOptions::default()),
    )
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("spec.workload.egress.allow[1] (10.1.0.0/16:5432) lies within 10.0.0.0/8"),
        "{error}"
    );
    assert!(error.contains("vpc_access"), "{error}");
}

/// One revision's policy, as the driver applies it: callers found in their environments'
/// namespaces, Runway's ingress admitted (it carries private calls too) and reached.
#[test]
fn a_revisions_policy_names_namespaces_and_runways_ingress() {
    let config = config(INTERNAL);
    let keys = BTreeMap::new();
    let network = NetworkOptions {
        vpc_ranges: Vec::new(),
        ingress: Some(Peer::runway_ingress()),
    };
    let environments = [
        ("staging".to_owned(), "runway-staging".to_owned()),
        ("production".to_owned(), "runway-production".to_owned()),
    ];
    let revision = Revision {
        name: "users-production-00004",
        image: "registry.example.com/users@sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae",
        namespace: "runway-production",
        replicas: 2,
        secret_keys: &keys,
        network: &network,
        environments: &environments,
        image_pull_secrets: &[],
        stop_signal_field: false,
    };
    let objects = revision_objects(&config, &revision).unwrap();
    let policy = &objects.network_policy;
    assert_eq!(policy["metadata"]["name"], "users-production-00004");
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"]["runway.dev/revision"],
        "users-production-00004"
    );
    let runway_ingress = json!({
        "namespaceSelector": {},
        "podSelector": {"matchLabels": {
            "app.kubernetes.io/component": "ingress",
            "app.kubernetes.io/part-of": "runway",
        }},
    });
    assert_eq!(
        policy["spec"]["ingress"][0]["from"],
        json!([
            runway_ingress,
            {
                "namespaceSelector": {"matchExpressions": [{
                    "key": "kubernetes.io/metadata.name",
                    "operator": "In",
                    "values": ["runway-staging", "runway-production"],
                }]},
                "podSelector": {"matchLabels": {
                    "app.kubernetes.io/managed-by": "runway",
                    "app.kubernetes.io/name": "web",
                }},
            },
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "runway-production"}},
                "podSelector": {"matchLabels": {
                    "app.kubernetes.io/managed-by": "runway",
                    "app.kubernetes.io/name": "billing",
                }},
            },
        ])
    );
    assert_eq!(policy["spec"]["egress"][1]["to"][1], runway_ingress);
    let internal = objects.internal_service.expect("an internal Service");
    assert_eq!(internal["metadata"]["name"], "users-internal");
    assert!(
        internal["spec"]["selector"]
            .get("runway.dev/revision")
            .is_none()
    );
    assert!(
        internal["metadata"]["labels"]
            .get("app.kubernetes.io/version")
            .is_none(),
        "every revision applies the same labels"
    );
    // The driver refuses what `runway render` refuses.
    let revision = Revision {
        network: &NetworkOptions::default(),
        ..revision
    };
    assert!(matches!(
        revision_objects(&self::config(VPC), &revision),
        Err(RenderError::VpcWithoutRanges { .. })
    ));
}

/// Every object of every case, rendered and one revision's, passes `kubernetes-validate
/// --strict`.
#[test]
fn every_object_passes_strict_schema_validation() {
    if Command::new("kubernetes-validate")
        .arg("--version")
        .output()
        .is_err()
    {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "kubernetes-validate is not installed; CI must install it (pip install kubernetes-validate)"
        );
        eprintln!("skipping: kubernetes-validate not installed (pip install kubernetes-validate)");
        return;
    }
    let dir = TempDir::new("network");
    let mut paths = Vec::new();
    let keys = BTreeMap::new();
    let environments = [("production".to_owned(), "runway-production".to_owned())];
    for (name, text, options) in cases() {
        let config = config(text);
        for file in render(&config, Target::Kubernetes, &options).unwrap() {
            let path = dir
                .0
                .join(format!("{name}__{}", file.path.replace('/', "__")));
            std::fs::write(&path, &file.contents).unwrap();
            paths.push(path);
        }
        let revision = Revision {
            name: "svc-production-00001",
            image: "registry.example.com/svc@sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae",
            namespace: "runway-production",
            replicas: 1,
            secret_keys: &keys,
            network: &NetworkOptions {
                vpc_ranges: vpc_ranges(),
                ingress: Some(Peer::runway_ingress()),
            },
            environments: &environments,
            image_pull_secrets: &[],
            stop_signal_field: false,
        };
        let objects = revision_objects(&config, &revision).unwrap();
        for (kind, object) in [
            ("networkpolicy", Some(objects.network_policy)),
            ("internal", objects.internal_service),
        ] {
            let Some(object) = object else { continue };
            let path = dir.0.join(format!("revision-{name}-{kind}.json"));
            std::fs::write(&path, object.to_string()).unwrap();
            paths.push(path);
        }
    }
    let output = Command::new("kubernetes-validate")
        .args(["--strict", "--kubernetes-version", "1.31.0"])
        .args(&paths)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "kubernetes-validate failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `helm template` of the chart gives the same NetworkPolicy and internal Service as the
/// Kubernetes target, and `networkPolicy.enabled: false` leaves the pods unrestricted.
#[test]
fn the_chart_carries_the_same_policy() {
    if Command::new("helm").arg("version").output().is_err() {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "helm is not installed; scripts/test installs it"
        );
        eprintln!("skipping: helm not installed (scripts/test installs it)");
        return;
    }
    let dir = TempDir::new("network");
    for (name, text, options) in cases() {
        let config = config(text);
        for file in render(&config, Target::Helm, &options).unwrap() {
            let path = dir.0.join(name).join(&file.path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &file.contents).unwrap();
        }
        let chart = dir.0.join(name).join(&config.dns_name);
        let template = |extra: &[&str]| {
            let output = Command::new("helm")
                .arg("template")
                .arg(&config.dns_name)
                .arg(&chart)
                .args(extra)
                .output()
                .unwrap();
            assert!(
                output.status.success(),
                "{name}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            let text = String::from_utf8(output.stdout).unwrap();
            saphyr::Yaml::load_from_str(&text)
                .unwrap()
                .iter()
                .map(to_json)
                .filter(|o| {
                    o["kind"] == "NetworkPolicy"
                        || o["metadata"]["name"]
                            .as_str()
                            .is_some_and(|n| n.ends_with("-internal"))
                })
                .collect::<Vec<_>>()
        };
        let kubernetes = render(&config, Target::Kubernetes, &options).unwrap();
        let expected: Vec<Value> = network_files(&kubernetes).into_iter().map(object).collect();
        let mut chart_objects = template(&[]);
        // The chart's objects are in the release's namespace unless `namespace` is set.
        chart_objects.sort_by_key(|o| o["kind"].to_string());
        let mut expected = expected;
        for object in &mut expected {
            object["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("namespace");
        }
        expected.sort_by_key(|o| o["kind"].to_string());
        let chart_objects: Vec<Value> = chart_objects
            .into_iter()
            .map(|mut o| {
                o["metadata"].as_object_mut().unwrap().remove("namespace");
                o
            })
            .collect();
        assert_eq!(chart_objects, expected, "{name}");
        let off = template(&["--set", "networkPolicy.enabled=false"]);
        assert!(off.iter().all(|o| o["kind"] != "NetworkPolicy"), "{name}");
    }
}
