//! The renderer through its public API: snapshots of every target for three services, errors,
//! determinism, and the Kubernetes objects against the API's strict schema.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers, where a failing unwrap is a failing test, as clippy.toml allows in tests"
)]

mod support;

use std::path::PathBuf;
use std::process::Command;

use runway_manifest::{ServiceConfig, ServiceFiles, SourceFile, load};
use runway_render::{RenderError, RenderOptions, RenderedFile, Target, render, stream};
use saphyr::{LoadableYamlNode, Yaml};
use serde_json::{Value, json};
use support::{TempDir, helm_installed, to_json};

/// A plain HTTP service with probes, variables and secrets, in an environment.
const WEB: &str = r#"
apiVersion: runway/v1
kind: RunwayService
metadata:
  name: web_app
  owner_email_handle: "@web-team"
  department: engineering
  department_group: platform
  product_category: storefront
spec:
  image: registry.example.com/team/web:1.4.2
  command: [/app/web]
  args: [--log-format, json]
  request_timeout: 60
  resources:
    limits:
      cpu: 2000m
      memory: 1Gi
    startup_cpu_boost: true
  scalability:
    min_instances: 2
    max_instances: 10
    max_instance_request_concurrency: 40
  startup_probe:
    path: /healthz
    initial_delay_seconds: 2
    period_seconds: 2
    failure_threshold: 30
  liveness_probe:
    path: /livez
    timeout_seconds: 3
  readiness_probe:
    path: /readyz
    success_threshold: 2
  vpc_access:
    enabled: true
    egress: ALL_TRAFFIC
  execution_environment: EXECUTION_ENVIRONMENT_GEN2
  request_based_billing: false
  workload:
    env:
      LOG_LEVEL: info
      UPSTREAM_PORT: "8080"
      FEATURE_NEW_CHECKOUT: "true"
      EMPTY: ""
    secrets: [STRIPE_KEY, DATABASE_URL]
"#;

/// A gRPC service speaking h2c, with a gRPC startup check and a fixed number of instances.
const GRPC: &str = r#"
apiVersion: runway/v1
kind: RunwayService
metadata:
  name: users-api
spec:
  image: registry.example.com/users-api@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
  container_port: 50051
  scalability:
    min_instances: 3
    max_instances: 3
  startup_probe:
    grpc_service: users.v1.Users
    period_seconds: 1
    failure_threshold: 60
  load_balancing:
    external_load_balancer:
      enabled: false
    internal_load_balancer:
      enabled: true
      backend_protocol: grpc
"#;

/// A worker: no port, stopped with SIGQUIT and a long grace period.
const WORKER: &str = r#"
apiVersion: runway/v1
kind: RunwayService
metadata:
  name: ci-runner
  owner_email_handle: runners
spec:
  image: registry.example.com/ci-runner:2024-05-01
  scalability:
    min_instances: 1
    max_instances: 4
  workload:
    kind: worker
    env:
      CONCURRENT: "4"
    secrets: [RUNNER_TOKEN]
"#;

/// A service that runs a plain process.
const PROCESS: &str = r#"
apiVersion: runway/v1
kind: RunwayService
metadata:
  name: local-dev
spec:
  workload:
    process:
      command: [./bin/server]
"#;

/// A service whose manifest names no image.
const NO_IMAGE: &str =
    "apiVersion: runway/v1\nkind: RunwayService\nmetadata:\n  name: bare\nspec: {}\n";

fn config(text: &str, environment: Option<&str>) -> ServiceConfig {
    let files = ServiceFiles {
        base: Some(SourceFile::new(".runway/runway.yml", text)),
        ..ServiceFiles::default()
    };
    let loaded = load(&files);
    let errors: Vec<_> = loaded.diagnostics.iter().filter(|d| d.is_error()).collect();
    assert!(errors.is_empty(), "{errors:#?}");
    loaded.service.unwrap().config(environment).unwrap()
}

/// WEB's options: its `vpc_access` reaches the cluster's private ranges, which must be given.
fn web_options() -> RenderOptions {
    RenderOptions {
        network: runway_render::NetworkOptions {
            vpc_ranges: vec!["10.20.0.0/16".parse().unwrap()],
            ingress: None,
        },
        ..RenderOptions::default()
    }
}

/// The three services the snapshots cover, with the options each is rendered with.
fn services() -> Vec<(&'static str, ServiceConfig, RenderOptions)> {
    vec![
        ("web", config(WEB, Some("production")), web_options()),
        ("grpc", config(GRPC, None), RenderOptions::default()),
        (
            "worker",
            config(WORKER, Some("staging")),
            RenderOptions {
                namespace: Some("ci".into()),
                ..RenderOptions::default()
            },
        ),
    ]
}

/// The files as one text, each under a `# path` line.
fn listing(files: &[RenderedFile]) -> String {
    files
        .iter()
        .map(|f| format!("# {}\n{}", f.path, f.contents))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Parses every YAML document of a file, failing on invalid YAML.
fn parse(file: &RenderedFile) -> Vec<Yaml<'_>> {
    Yaml::load_from_str(&file.contents)
        .unwrap_or_else(|e| panic!("{} is not YAML: {e}\n{}", file.path, file.contents))
}

#[test]
fn snapshots() {
    for (name, config, options) in services() {
        for target in [Target::Kubernetes, Target::Knative, Target::Helm] {
            let files = match render(&config, target, &options) {
                Ok(files) => files,
                Err(RenderError::WorkerUnsupported { .. }) if name == "worker" => continue,
                Err(e) => panic!("{name} to {target}: {e}"),
            };
            for file in files.iter().filter(|f| !f.path.contains("templates/")) {
                assert_eq!(parse(file).len(), 1, "{}", file.path);
            }
            insta::assert_snapshot!(format!("{target}_{name}"), listing(&files));
        }
    }
}

#[test]
fn kubernetes_files_are_the_objects_the_service_needs() {
    let paths = |text, env, options: &RenderOptions| -> Vec<String> {
        render(&config(text, env), Target::Kubernetes, options)
            .unwrap()
            .into_iter()
            .map(|f| f.path)
            .collect()
    };
    let default = RenderOptions::default();
    assert_eq!(
        paths(WEB, None, &web_options()),
        [
            "web-app/deployment.yaml",
            "web-app/serviceaccount.yaml",
            "web-app/service.yaml",
            "web-app/hpa.yaml",
            "web-app/pdb.yaml",
            "web-app/networkpolicy.yaml",
            "web-app/secret-database-url.yaml",
            "web-app/secret-stripe-key.yaml"
        ]
    );
    assert_eq!(
        paths(GRPC, None, &default),
        [
            "users-api/deployment.yaml",
            "users-api/serviceaccount.yaml",
            "users-api/service.yaml",
            "users-api/service-internal.yaml",
            "users-api/pdb.yaml",
            "users-api/networkpolicy.yaml"
        ]
    );
    assert_eq!(
        paths(WORKER, None, &default),
        [
            "ci-runner/deployment.yaml",
            "ci-runner/serviceaccount.yaml",
            "ci-runner/hpa.yaml",
            "ci-runner/pdb.yaml",
            "ci-runner/networkpolicy.yaml",
            "ci-runner/secret-runner-token.yaml"
        ]
    );
}

#[test]
fn rendering_twice_gives_the_same_bytes() {
    for (_, config, options) in services() {
        for target in [Target::Kubernetes, Target::Knative, Target::Helm] {
            assert_eq!(
                render(&config, target, &options),
                render(&config, target, &options)
            );
        }
    }
}

#[test]
fn image_option_overrides_the_manifest() {
    let options = RenderOptions {
        image: Some("registry.example.com/team/web:2.0.0".into()),
        ..web_options()
    };
    let files = render(&config(WEB, None), Target::Kubernetes, &options).unwrap();
    assert!(
        files[0]
            .contents
            .contains("image: \"registry.example.com/team/web:2.0.0\"\n")
    );
    assert!(!files[0].contents.contains("1.4.2"));
}

#[test]
fn missing_image_is_an_error_except_for_helm() {
    let bare = config(NO_IMAGE, None);
    let options = RenderOptions::default();
    for target in [Target::Kubernetes, Target::Knative] {
        let err = render(&bare, target, &options).unwrap_err();
        assert_eq!(
            err,
            RenderError::NoImage {
                service: "bare".into(),
                target
            }
        );
        let message = err.to_string();
        assert!(
            message.contains("set `spec.image` or pass `--image`"),
            "{message}"
        );
    }
    // A chart takes its image as a value: it renders, with the image left for `helm install`.
    let chart = render(&bare, Target::Helm, &options).unwrap();
    let values = chart.iter().find(|f| f.path == "bare/values.yaml").unwrap();
    assert!(values.contents.contains("names no image (spec.image)"));
    assert!(values.contents.contains("Set image.repository"));
    assert!(values.contents.contains("  repository: \"\"\n"));
    let chart_yaml = chart.iter().find(|f| f.path == "bare/Chart.yaml").unwrap();
    assert!(
        !chart_yaml.contents.contains("appVersion"),
        "no version to claim"
    );
    assert!(chart.iter().all(|f| !f.contents.contains("latest")));
}

/// `app.kubernetes.io/version` is the image's tag, and is there only when the image has one.
#[test]
fn the_version_label_is_the_image_tag_when_there_is_one() {
    let version_labels = |text: &str, options: &RenderOptions| -> Vec<String> {
        render(&config(text, None), Target::Kubernetes, options)
            .unwrap()
            .iter()
            .flat_map(|f| f.contents.lines().map(str::to_owned).collect::<Vec<_>>())
            .filter(|l| l.contains("app.kubernetes.io/version"))
            .map(|l| l.trim().to_owned())
            .collect()
    };
    let default = RenderOptions::default();
    let web = version_labels(WEB, &web_options());
    assert!(!web.is_empty());
    assert!(
        web.iter()
            .all(|l| l == "app.kubernetes.io/version: \"1.4.2\""),
        "{web:?}"
    );
    // Pinned by digest only: no tag, so no version to claim.
    assert_eq!(version_labels(GRPC, &default), Vec::<String>::new());
    let untagged = RenderOptions {
        image: Some("registry.example.com/team/web".into()),
        ..web_options()
    };
    assert_eq!(version_labels(WEB, &untagged), Vec::<String>::new());
}

#[test]
fn plain_processes_need_an_image_except_in_a_chart() {
    let process = config(PROCESS, None);
    for target in [Target::Kubernetes, Target::Knative] {
        assert_eq!(
            render(&process, target, &RenderOptions::default()),
            Err(RenderError::ProcessArtifact {
                service: "local-dev".into(),
                target
            })
        );
    }
    let chart = render(&process, Target::Helm, &RenderOptions::default()).unwrap();
    let values = chart
        .iter()
        .find(|f| f.path == "local-dev/values.yaml")
        .unwrap();
    assert!(values.contents.contains("runs a plain process"));
    assert!(values.contents.contains("  repository: \"\"\n"));
    assert!(
        chart.iter().all(|f| !f.contents.contains("./bin/server")),
        "a host path is not an image's command"
    );

    let options = RenderOptions {
        image: Some("registry.example.com/local-dev:1".into()),
        ..RenderOptions::default()
    };
    let files = render(&process, Target::Kubernetes, &options).unwrap();
    assert!(!files[0].contents.contains("./bin/server"));
}

#[test]
fn knative_refuses_workers() {
    let err = render(
        &config(WORKER, None),
        Target::Knative,
        &RenderOptions::default(),
    )
    .unwrap_err();
    assert_eq!(
        err,
        RenderError::WorkerUnsupported {
            service: "ci-runner".into(),
            target: Target::Knative
        }
    );
    assert!(err.to_string().contains("worker"), "{err}");
}

#[test]
fn stream_joins_documents() {
    let files = render(&config(WEB, None), Target::Kubernetes, &web_options()).unwrap();
    let text = stream(&files);
    assert_eq!(text.matches("\n---\n").count(), files.len() - 1);
    assert_eq!(Yaml::load_from_str(&text).unwrap().len(), files.len());
}

/// The Kubernetes version whose schemas the objects are checked against.
const KUBERNETES_VERSION: &str = "1.31.0";

#[test]
fn kubernetes_output_passes_strict_schema_validation() {
    let probe = Command::new("kubernetes-validate")
        .arg("--version")
        .output();
    if probe.is_err() {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "kubernetes-validate is not installed; CI must install it (pip install kubernetes-validate)"
        );
        eprintln!("skipping: kubernetes-validate not installed (pip install kubernetes-validate)");
        return;
    }
    let dir = TempDir::new("validate");
    let mut paths = Vec::new();
    for (_, config, options) in services() {
        for file in render(&config, Target::Kubernetes, &options).unwrap() {
            let path = dir.0.join(file.path.replace('/', "__"));
            std::fs::write(&path, &file.contents).unwrap();
            paths.push(path);
        }
    }
    assert_eq!(paths.len(), 20, "the Secrets are checked too");
    // And each service's objects as the Kubernetes driver runs one revision of it.
    let network = runway_render::NetworkOptions {
        vpc_ranges: vec!["10.20.0.0/16".parse().unwrap()],
        ingress: Some(runway_render::Peer::runway_ingress()),
    };
    let environments = [("dev".to_owned(), "runway-dev".to_owned())];
    let keys = std::collections::BTreeMap::from([("API_KEY".to_owned(), "v3".to_owned())]);
    for (name, config, _) in services() {
        let revision = runway_render::Revision {
            name: "svc-dev-00003",
            image: "registry.example/app@sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae",
            namespace: "runway-dev",
            replicas: 0,
            secret_keys: &keys,
            network: &network,
            environments: &environments,
            image_pull_secrets: &["registry-credentials".to_owned()],
            stop_signal_field: false,
        };
        let objects = runway_render::revision_objects(&config, &revision).unwrap();
        for (kind, object) in [
            ("deployment", Some(objects.deployment)),
            ("service", objects.service),
            ("service-internal", objects.internal_service),
            ("networkpolicy", Some(objects.network_policy)),
            ("pdb", Some(objects.disruption_budget)),
            ("serviceaccount", Some(objects.service_account)),
        ] {
            let Some(object) = object else { continue };
            let path = dir.0.join(format!("revision-{name}-{kind}.json"));
            std::fs::write(&path, object.to_string()).unwrap();
            paths.push(path);
        }
    }
    let output = Command::new("kubernetes-validate")
        .args(["--strict", "--kubernetes-version", KUBERNETES_VERSION])
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

/// The objects of a YAML stream, sorted by kind and name.
fn objects(text: &str) -> Vec<Value> {
    let mut objects: Vec<Value> = Yaml::load_from_str(text)
        .unwrap()
        .iter()
        .map(to_json)
        .filter(|o| !o.is_null())
        .collect();
    objects.sort_by_key(|o| {
        (
            o["kind"].as_str().unwrap().to_owned(),
            o["metadata"]["name"].as_str().unwrap().to_owned(),
        )
    });
    objects
}

/// Every `secretKeyRef` of the objects, as (Secret, key) pairs in the order they appear.
fn secret_refs(value: &Value) -> Vec<(String, String)> {
    match value {
        Value::Object(map) => map
            .iter()
            .flat_map(|(k, v)| match k.as_str() {
                "secretKeyRef" => vec![(
                    v["name"].as_str().unwrap().to_owned(),
                    v["key"].as_str().unwrap().to_owned(),
                )],
                _ => secret_refs(v),
            })
            .collect(),
        Value::Array(items) => items.iter().flat_map(secret_refs).collect(),
        _ => Vec::new(),
    }
}

/// Every Secret a Kubernetes rendering references is in it, empty, and the Knative rendering
/// names the same Secrets: one per variable, `<service>-<variable>`.
#[test]
fn referenced_secrets_are_rendered_and_named_alike() {
    for (name, config, options) in services() {
        let kubernetes = objects(&stream(
            &render(&config, Target::Kubernetes, &options).unwrap(),
        ));
        let refs = secret_refs(&Value::Array(kubernetes.clone()));
        assert_eq!(refs.len(), config.secrets.len(), "{name}");
        for (secret, key) in &refs {
            let object = kubernetes
                .iter()
                .find(|o| o["kind"] == "Secret" && o["metadata"]["name"] == secret.as_str())
                .unwrap_or_else(|| panic!("{name}: Secret {secret} is referenced, not rendered"));
            assert!(config.secrets.contains(key), "{name}: {key}");
            assert!(secret.ends_with(&key.to_lowercase().replace('_', "-")));
            assert_eq!(object["data"], Value::Null, "{name}: no value is rendered");
            assert_eq!(
                object["stringData"],
                Value::Null,
                "{name}: no value is rendered"
            );
            assert_eq!(
                object["metadata"]["namespace"],
                options
                    .namespace
                    .as_deref()
                    .map_or(Value::Null, |n| json!(n))
            );
        }
        let secrets = kubernetes.iter().filter(|o| o["kind"] == "Secret").count();
        assert_eq!(secrets, refs.len(), "{name}: a Secret for each reference");
        let Ok(knative) = render(&config, Target::Knative, &options) else {
            continue;
        };
        let knative_refs = secret_refs(&Value::Array(objects(&stream(&knative))));
        let names =
            |refs: &[(String, String)]| refs.iter().map(|r| r.0.clone()).collect::<Vec<_>>();
        assert_eq!(names(&knative_refs), names(&refs), "{name}");
        assert!(knative_refs.iter().all(|(_, key)| key == "latest"));
    }
    let web = render(&config(WEB, None), Target::Kubernetes, &web_options()).unwrap();
    let stub = web
        .iter()
        .find(|f| f.path == "web-app/secret-stripe-key.yaml")
        .unwrap();
    assert!(
        stub.contents
            .starts_with("# STRIPE_KEY's value, which Runway never renders."),
        "{}",
        stub.contents
    );
    assert!(
        stub.contents
            .contains("kubectl patch secret web-app-stripe-key"),
        "{}",
        stub.contents
    );
}

/// Writes `config`'s chart under `dir` and returns its directory.
fn write_chart(dir: &TempDir, config: &ServiceConfig, options: &RenderOptions) -> PathBuf {
    for file in render(config, Target::Helm, options).unwrap() {
        let path = dir.0.join(&file.path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &file.contents).unwrap();
    }
    dir.0.join(&config.dns_name)
}

/// `helm template <release> <chart>`.
fn helm_template(release: &str, chart: &std::path::Path) -> std::process::Output {
    Command::new("helm")
        .arg("template")
        .arg(release)
        .arg(chart)
        .output()
        .unwrap()
}

/// `helm template` of the chart with its default values gives the Kubernetes target's objects.
#[test]
fn helm_chart_renders_the_kubernetes_objects() {
    if !helm_installed() {
        return;
    }
    let dir = TempDir::new("helm");
    for bare in [config(NO_IMAGE, None), config(PROCESS, None)] {
        let chart = write_chart(&dir, &bare, &RenderOptions::default());
        let output = helm_template(&bare.dns_name, &chart);
        assert!(
            !output.status.success(),
            "{} renders without an image",
            bare.name
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("set image.repository"), "{stderr}");
    }
    for (name, config, options) in services() {
        let output = helm_template(&config.dns_name, &write_chart(&dir, &config, &options));
        let rendered = String::from_utf8(output.stdout).unwrap();
        assert!(
            output.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let kubernetes = render(&config, Target::Kubernetes, &options).unwrap();
        assert_eq!(
            objects(&rendered),
            objects(&stream(&kubernetes)),
            "{name}:\n{rendered}"
        );
    }
}

/// The chart's version label follows `image.tag` as installed, and is absent without one.
#[test]
fn helm_version_label_follows_the_image_tag_value() {
    if !helm_installed() {
        return;
    }
    let dir = TempDir::new("helm-version");
    let web = config(WEB, None);
    let chart = write_chart(&dir, &web, &web_options());
    let version = |tag: &str| {
        let output = Command::new("helm")
            .arg("template")
            .arg("web")
            .arg(&chart)
            .args(["--set-string", &format!("image.tag={tag}")])
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let objects = objects(&String::from_utf8(output.stdout).unwrap());
        let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
        let image = deployment["spec"]["template"]["spec"]["containers"][0]["image"].clone();
        let labels = [
            &deployment["metadata"]["labels"],
            &deployment["spec"]["template"]["metadata"]["labels"],
        ];
        assert_eq!(labels[0], labels[1]);
        (labels[0]["app.kubernetes.io/version"].clone(), image)
    };
    assert_eq!(
        version("2.0.0"),
        (json!("2.0.0"), json!("registry.example.com/team/web:2.0.0"))
    );
    assert_eq!(
        version(""),
        (Value::Null, json!("registry.example.com/team/web"))
    );
}

/// Two releases of one chart in one namespace name their objects apart and select only their
/// own pods.
#[test]
fn helm_releases_of_one_chart_do_not_collide() {
    if !helm_installed() {
        return;
    }
    let dir = TempDir::new("helm-releases");
    let web = config(WEB, Some("production"));
    let chart = write_chart(&dir, &web, &web_options());
    let release = |name: &str| {
        let output = helm_template(name, &chart);
        assert!(
            output.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        objects(&String::from_utf8(output.stdout).unwrap())
    };
    let (blue, green) = (release("blue"), release("green"));
    let names = |objects: &[Value]| -> Vec<String> {
        objects
            .iter()
            .map(|o| format!("{}/{}", o["kind"], o["metadata"]["name"].as_str().unwrap()))
            .collect()
    };
    let blue_names = names(&blue);
    assert!(
        blue_names.contains(&"\"Deployment\"/blue-web-app".to_owned()),
        "{blue_names:?}"
    );
    for name in names(&green) {
        assert!(!blue_names.contains(&name), "both releases make {name}");
    }
    for (release, objects) in [("blue", &blue), ("green", &green)] {
        let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
        let selector = &deployment["spec"]["selector"]["matchLabels"];
        assert_eq!(selector["app.kubernetes.io/instance"], release);
        assert_eq!(
            deployment["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/instance"],
            release
        );
        let service = objects.iter().find(|o| o["kind"] == "Service").unwrap();
        assert_eq!(&service["spec"]["selector"], selector);
        let hpa = objects
            .iter()
            .find(|o| o["kind"] == "HorizontalPodAutoscaler")
            .unwrap();
        assert_eq!(
            hpa["spec"]["scaleTargetRef"]["name"],
            deployment["metadata"]["name"]
        );
    }
}

/// The Kubernetes driver's objects are the rendered ones, made one revision's: named after it,
/// its pods selected by it too, its count set (no HorizontalPodAutoscaler), its secrets read
/// from their versions' keys.
#[test]
fn a_revision_is_the_rendered_service_made_one_revisions() {
    let (_, config, options) = services()
        .into_iter()
        .find(|(_, config, _)| !config.secrets.is_empty())
        .expect("a service with secrets");
    let rendered = render(&config, Target::Kubernetes, &options).unwrap();
    let keys: std::collections::BTreeMap<String, String> = config
        .secrets
        .iter()
        .map(|s| (s.clone(), "v7".to_owned()))
        .collect();
    let revision = runway_render::Revision {
        name: "web-dev-00007",
        image: "registry.example/web@sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae",
        namespace: "runway-dev",
        replicas: 4,
        secret_keys: &keys,
        network: &options.network,
        environments: &[("dev".to_owned(), "runway-dev".to_owned())],
        image_pull_secrets: &[],
        stop_signal_field: false,
    };
    let objects = runway_render::revision_objects(&config, &revision).unwrap();
    // A revision's Service holds no cluster IP (the ingress reads its EndpointSlices), and a
    // PodDisruptionBudget lets a drain take one of its pods at a time.
    assert_eq!(
        objects.service.as_ref().unwrap()["spec"]["clusterIP"],
        "None"
    );
    assert_eq!(
        objects.disruption_budget["spec"]["selector"]["matchLabels"]["runway.dev/revision"],
        "web-dev-00007"
    );
    assert!(objects.deployment["spec"]["template"]["spec"]["imagePullSecrets"].is_null());
    let (deployment, service) = (objects.deployment, objects.service);
    assert_eq!(deployment["metadata"]["name"], "web-dev-00007");
    assert_eq!(deployment["metadata"]["namespace"], "runway-dev");
    assert_eq!(deployment["spec"]["replicas"], 4);
    let selector = &deployment["spec"]["selector"]["matchLabels"];
    assert_eq!(selector["runway.dev/revision"], "web-dev-00007");
    assert_eq!(
        deployment["spec"]["template"]["metadata"]["labels"]["runway.dev/revision"],
        "web-dev-00007"
    );
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    for reference in container["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["valueFrom"]["secretKeyRef"].as_object())
    {
        assert_eq!(reference["key"], "v7", "{reference:?}");
    }
    // Everything else is what `runway render` wrote for the service.
    let rendered_deployment = rendered
        .iter()
        .find(|f| f.path.ends_with("/deployment.yaml"))
        .unwrap();
    let probes = ["startupProbe", "resources", "ports"];
    for key in probes {
        let rendered_text = &rendered_deployment.contents;
        if !container[key].is_null() {
            assert!(rendered_text.contains(key), "{key} not rendered");
        }
    }
    let service = service.expect("a service has a Service");
    assert_eq!(service["metadata"]["name"], "web-dev-00007");
    assert_eq!(
        service["spec"]["selector"]["runway.dev/revision"],
        "web-dev-00007"
    );
}

/// A revision's objects take its name when Kubernetes would, and a short one of their own
/// otherwise: a label's value and a Service's name are at most 63 characters, a letter first.
#[test]
fn long_revision_names_get_object_names_kubernetes_takes() {
    assert_eq!(runway_render::object_name("web-dev-00007"), "web-dev-00007");
    let long = format!("{}-production-00001", "a".repeat(60));
    let named = runway_render::object_name(&long);
    assert!(named.len() <= 63, "{named}");
    assert!(named.starts_with('r'), "{named}");
    assert_ne!(
        named,
        runway_render::object_name(&format!("{}-production-00002", "a".repeat(60)))
    );
    let digit = runway_render::object_name("1password-dev-00001");
    assert!(digit.starts_with("r1password-dev-00001-"), "{digit}");
    assert!(digit.len() <= 63);
}

/// The GitLab release and the stage given at render time label every object and pod, and
/// annotate the chart; `helm template` gives the same labels as the Kubernetes target. Without
/// them the stage is the environment's and there is no GitLab release label.
#[test]
fn the_gitlab_release_and_the_stage_label_objects_and_the_chart() {
    let release = runway_render::ReleaseLabels {
        gitlab_release: Some("17.6".into()),
        stage: Some("canary".into()),
    };
    let options = RenderOptions {
        release: release.clone(),
        ..web_options()
    };
    let web = config(WEB, Some("production"));
    let kubernetes = objects(&stream(
        &render(&web, Target::Kubernetes, &options).unwrap(),
    ));
    assert!(!kubernetes.is_empty());
    for object in &kubernetes {
        let labels = &object["metadata"]["labels"];
        assert_eq!(labels["runway.dev/gitlab-release"], "17.6", "{object}");
        assert_eq!(labels["runway.dev/stage"], "canary", "{object}");
        assert_eq!(labels["runway.dev/environment"], "production", "{object}");
    }
    let deployment = kubernetes
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .unwrap();
    let pod = &deployment["spec"]["template"]["metadata"]["labels"];
    assert_eq!(pod["runway.dev/gitlab-release"], "17.6");
    assert_eq!(pod["runway.dev/stage"], "canary");

    let chart = render(&web, Target::Helm, &options).unwrap();
    let path = format!("{}/Chart.yaml", web.dns_name);
    let chart_yaml = chart.iter().find(|f| f.path == path).unwrap();
    let chart_yaml = &objects_unsorted(&chart_yaml.contents)[0];
    assert_eq!(
        chart_yaml["annotations"]["runway.dev/gitlab-release"],
        "17.6"
    );
    assert_eq!(chart_yaml["annotations"]["runway.dev/stage"], "canary");

    let plain = objects(&stream(
        &render(&web, Target::Kubernetes, &web_options()).unwrap(),
    ));
    for object in &plain {
        let labels = &object["metadata"]["labels"];
        assert!(
            labels.get("runway.dev/gitlab-release").is_none(),
            "{object}"
        );
        assert_eq!(labels["runway.dev/stage"], "production", "{object}");
    }

    if !helm_installed() {
        return;
    }
    let dir = TempDir::new("helm-release-labels");
    let output = helm_template(&web.dns_name, &write_chart(&dir, &web, &options));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        objects(&String::from_utf8(output.stdout).unwrap()),
        kubernetes
    );
}

/// The documents of a YAML text, in order.
fn objects_unsorted(text: &str) -> Vec<Value> {
    Yaml::load_from_str(text)
        .unwrap()
        .iter()
        .map(to_json)
        .collect()
}
