//! `Target::Flux`: its OCIRepository and HelmRelease against Flux's own CustomResourceDefinitions
//! (fetched by `scripts/flux-crds` from source-controller and helm-controller, their schemas made
//! strict), what they name, and what `helm template` of the chart with the HelmRelease's values
//! labels the chart's objects with.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers, where a failing unwrap is a failing test, as clippy.toml allows in tests"
)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use runway_manifest::{ServiceConfig, ServiceFiles, SourceFile, load};
use runway_render::{
    ChartOptions, ChartRepository, ChartVersion, ReleaseLabels, RenderError, RenderOptions,
    RenderedFile, Target, render, stream,
};
use saphyr::{LoadableYamlNode, Yaml};
use serde_json::{Value, json};
use support::{TempDir, helm_installed, to_json};

/// A service with secrets, rendered for an environment.
const WEB: &str = r#"
apiVersion: runway/v1
kind: RunwayService
metadata:
  name: web_app
  owner_email_handle: "@web-team"
spec:
  image: registry.example.com/team/web:1.4.2
  scalability:
    min_instances: 2
    max_instances: 10
  workload:
    env:
      LOG_LEVEL: info
    secrets: [STRIPE_KEY]
"#;

/// A worker: no port.
const WORKER: &str = r#"
apiVersion: runway/v1
kind: RunwayService
metadata:
  name: ci-runner
spec:
  image: registry.example.com/ci-runner:2024-05-01
  workload:
    kind: worker
"#;

/// A plain process, which names no image.
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

const REPOSITORY: &str = "oci://registry.example.com:5000/team/charts";

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

/// Only the repository, which Flux needs.
fn plain() -> RenderOptions {
    RenderOptions {
        chart: ChartOptions {
            repository: Some(REPOSITORY.parse().unwrap()),
            ..ChartOptions::default()
        },
        ..RenderOptions::default()
    }
}

/// Every option Flux's objects follow: a namespace, the release's two labels, a chart version
/// with build metadata (which an OCI tag cannot hold as it is), a registry on plain HTTP.
fn full() -> RenderOptions {
    RenderOptions {
        namespace: Some("apps".into()),
        release: ReleaseLabels {
            gitlab_release: Some("17.6".into()),
            stage: Some("canary".into()),
        },
        chart: ChartOptions {
            version: "1.5.0-rc.1+build.7".parse().unwrap(),
            repository: Some(format!("{REPOSITORY}/").parse().unwrap()),
            insecure: true,
        },
        ..RenderOptions::default()
    }
}

/// The documents of a YAML text, empty ones left out.
fn documents(text: &str) -> Vec<Value> {
    Yaml::load_from_str(text)
        .unwrap_or_else(|e| panic!("not YAML: {e}\n{text}"))
        .iter()
        .map(to_json)
        .filter(|d| !d.is_null())
        .collect()
}

/// The OCIRepository and the HelmRelease of a rendering, checking the files they are in.
fn flux_objects(config: &ServiceConfig, options: &RenderOptions) -> (Value, Value) {
    let files = render(config, Target::Flux, options).unwrap();
    let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
    let name = &config.dns_name;
    assert_eq!(
        paths,
        [
            format!("{name}/ocirepository.yaml"),
            format!("{name}/helmrelease.yaml")
        ]
    );
    let one = |file: &RenderedFile| {
        let mut documents = documents(&file.contents);
        assert_eq!(documents.len(), 1, "{}", file.contents);
        documents.remove(0)
    };
    (one(&files[0]), one(&files[1]))
}

/// The services and options the objects are checked for.
fn cases() -> Vec<(&'static str, ServiceConfig, RenderOptions)> {
    vec![
        ("web", config(WEB, None), plain()),
        ("web, every option", config(WEB, Some("production")), full()),
        ("worker", config(WORKER, Some("staging")), plain()),
        ("process", config(PROCESS, None), full()),
    ]
}

/// Runs `command` to its end, killing it past `limit`.
fn bounded(command: &mut Command, limit: Duration) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{command:?} took longer than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// One kind's CustomResourceDefinition as the tests use it.
struct Crd {
    /// `<group>/<version>` of its served, stored version.
    api_version: String,
    kind: String,
    /// That version's `openAPIV3Schema`, strict.
    validator: jsonschema::Validator,
}

impl Crd {
    fn load(path: &Path) -> Self {
        let text = std::fs::read_to_string(path).unwrap();
        let crd = documents(&text).remove(0);
        assert_eq!(
            crd["kind"],
            "CustomResourceDefinition",
            "{}",
            path.display()
        );
        let versions = crd["spec"]["versions"].as_array().unwrap();
        let served: Vec<&Value> = versions
            .iter()
            .filter(|v| v["served"] == true && v["storage"] == true)
            .collect();
        assert_eq!(served.len(), 1, "{}", path.display());
        let version = served[0];
        assert_ne!(version["deprecated"], true, "{}", path.display());
        let mut schema = version["schema"]["openAPIV3Schema"].clone();
        strict(&mut schema);
        Self {
            api_version: format!(
                "{}/{}",
                crd["spec"]["group"].as_str().unwrap(),
                version["name"].as_str().unwrap()
            ),
            kind: crd["spec"]["names"]["kind"].as_str().unwrap().to_owned(),
            validator: jsonschema::validator_for(&schema)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        }
    }

    /// What the API server would refuse of `object`, as the schema says (its CEL rules aside).
    fn errors(&self, object: &Value) -> Vec<String> {
        let mut errors: Vec<String> = self
            .validator
            .iter_errors(object)
            .map(|e| format!("{}: {e}", e.instance_path().as_str()))
            .collect();
        if object["apiVersion"] != self.api_version.as_str() || object["kind"] != self.kind.as_str()
        {
            errors.push(format!(
                "not a {} {}: {} {}",
                self.api_version, self.kind, object["apiVersion"], object["kind"]
            ));
        }
        errors
    }
}

/// Makes a structural schema strict, as the API server is with unknown fields: an object
/// schema with `properties` admits no other field, unless it keeps unknown ones or names what
/// others hold.
fn strict(schema: &mut Value) {
    let Value::Object(map) = schema else { return };
    if let Some(Value::Object(properties)) = map.get_mut("properties") {
        properties.values_mut().for_each(strict);
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(inner) = map.get_mut(key) {
            strict(inner);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(inner)) = map.get_mut(key) {
            inner.iter_mut().for_each(strict);
        }
    }
    if map.contains_key("properties")
        && !map.contains_key("additionalProperties")
        && !map.contains_key("x-kubernetes-preserve-unknown-fields")
    {
        map.insert("additionalProperties".into(), json!(false));
    }
}

/// Flux's OCIRepository and HelmRelease definitions, from `scripts/flux-crds` (once for all the
/// tests); `None` when it cannot fetch them (no `go`, no Go module proxy), which fails the test
/// under `CI=true` and skips it elsewhere.
fn crds() -> Option<&'static (Crd, Crd)> {
    static CRDS: OnceLock<Result<(Crd, Crd), String>> = OnceLock::new();
    let crds = CRDS.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/flux-crds");
        let output = bounded(&mut Command::new(&script), Duration::from_secs(300));
        if !output.status.success() {
            return Err(String::from_utf8_lossy(&output.stderr).trim().to_owned());
        }
        let stdout = String::from_utf8(output.stdout).unwrap();
        let dir = PathBuf::from(stdout.lines().last().unwrap().trim());
        Ok((
            Crd::load(&dir.join("source.toolkit.fluxcd.io_ocirepositories.yaml")),
            Crd::load(&dir.join("helm.toolkit.fluxcd.io_helmreleases.yaml")),
        ))
    });
    match crds {
        Ok(crds) => Some(crds),
        Err(reason) => {
            assert_ne!(
                std::env::var("CI").as_deref(),
                Ok("true"),
                "scripts/flux-crds cannot fetch Flux's CRDs, which CI needs (go and the Go \
                 module proxy): {reason}"
            );
            eprintln!(
                "skipping: scripts/flux-crds cannot fetch Flux's CRDs (go and the Go module \
                 proxy are needed): {reason}"
            );
            None
        }
    }
}

/// A HelmRelease names its chart one way only: `chart` or `chartRef` (a CEL rule of the CRD,
/// which the schema alone does not check).
fn chart_or_chart_ref(release: &Value) -> bool {
    release["spec"].get("chart").is_some() != release["spec"].get("chartRef").is_some()
}

#[test]
fn flux_objects_are_what_fluxs_crds_accept() {
    let Some((source_crd, release_crd)) = crds() else {
        return;
    };
    assert_eq!(source_crd.api_version, "source.toolkit.fluxcd.io/v1");
    assert_eq!(release_crd.api_version, "helm.toolkit.fluxcd.io/v2");
    for (name, config, options) in cases() {
        let (source, release) = flux_objects(&config, &options);
        assert_eq!(source_crd.errors(&source), Vec::<String>::new(), "{name}");
        assert_eq!(release_crd.errors(&release), Vec::<String>::new(), "{name}");
        assert!(chart_or_chart_ref(&release), "{name}");
    }
}

/// The same validation refuses what Flux would: a misspelt field at any depth, a value out of
/// its enum or pattern, a wrong kind; so the test above cannot pass for want of a check.
#[test]
fn a_wrong_object_is_refused_by_the_same_validation() {
    let Some((source_crd, release_crd)) = crds() else {
        return;
    };
    let (source, release) = flux_objects(&config(WEB, None), &full());
    type Change = fn(&mut Value);
    /// Renames a field of an object.
    fn rename(object: &mut Value, from: &str, to: &str) {
        let object = object.as_object_mut().unwrap();
        let value = object.remove(from).unwrap();
        object.insert(to.into(), value);
    }
    // What is wrong, what the refusal says, and the change that makes it.
    let source_changes: [(&str, &str, Change); 6] = [
        (
            "a misspelt spec field",
            "'layerselector' was unexpected",
            |o| rename(&mut o["spec"], "layerSelector", "layerselector"),
        ),
        ("a misspelt nested field", "'tags' was unexpected", |o| {
            rename(&mut o["spec"]["ref"], "tag", "tags")
        }),
        ("an unknown top-level field", "'sepc' was unexpected", |o| {
            o["sepc"] = json!({})
        }),
        ("an interval Flux does not parse", "/spec/interval", |o| {
            o["spec"]["interval"] = json!("5 minutes")
        }),
        (
            "an operation out of the enum",
            "/spec/layerSelector/operation",
            |o| o["spec"]["layerSelector"]["operation"] = json!("unpack"),
        ),
        ("a URL that is not oci://", "/spec/url", |o| {
            o["spec"]["url"] = json!("https://registry.example.com/charts/web-app")
        }),
    ];
    for (what, said, change) in source_changes {
        let mut wrong = source.clone();
        change(&mut wrong);
        let errors = source_crd.errors(&wrong);
        assert!(
            errors.iter().any(|e| e.contains(said)),
            "{what}: {errors:?}"
        );
    }
    let release_changes: [(&str, &str, Change); 6] = [
        ("a misspelt chartRef field", "'nmae' was unexpected", |o| {
            rename(&mut o["spec"]["chartRef"], "name", "nmae")
        }),
        (
            "a misspelt remediation field",
            "'retry' was unexpected",
            |o| rename(&mut o["spec"]["upgrade"]["remediation"], "retries", "retry"),
        ),
        (
            "a chartRef to a kind Flux does not take",
            "/spec/chartRef/kind",
            |o| o["spec"]["chartRef"]["kind"] = json!("HelmRepository"),
        ),
        (
            "a release name longer than Helm's",
            "/spec/releaseName",
            |o| o["spec"]["releaseName"] = json!("a".repeat(54)),
        ),
        (
            "retries as a string",
            "/spec/install/remediation/retries",
            |o| o["spec"]["install"]["remediation"]["retries"] = json!("3"),
        ),
        (
            "another version",
            "not a helm.toolkit.fluxcd.io/v2 HelmRelease",
            |o| o["apiVersion"] = json!("helm.toolkit.fluxcd.io/v2beta1"),
        ),
    ];
    for (what, said, change) in release_changes {
        let mut wrong = release.clone();
        change(&mut wrong);
        let errors = release_crd.errors(&wrong);
        assert!(
            errors.iter().any(|e| e.contains(said)),
            "{what}: {errors:?}"
        );
    }
    // Values are the chart's, which Flux keeps as they are.
    let mut values = release.clone();
    values["spec"]["values"]["anything"] = json!({"at": ["all"]});
    assert_eq!(release_crd.errors(&values), Vec::<String>::new());
    let mut both = release;
    both["spec"]["chart"] = json!({"spec": {"chart": "web-app"}});
    assert!(!chart_or_chart_ref(&both));
}

/// The HelmRelease installs the chart the OCIRepository fetches, from `<repository>/<dns_name>`
/// at the chart's version, as a release named after the service; both carry the service's
/// labels, and the release gives the chart's objects the stage and the GitLab release.
#[test]
fn the_helmrelease_installs_the_chart_the_ocirepository_fetches() {
    let web = config(WEB, Some("production"));
    let (source, release) = flux_objects(&web, &full());
    for object in [&source, &release] {
        assert_eq!(object["metadata"]["name"], "web-app");
        assert_eq!(object["metadata"]["namespace"], "apps");
        assert_eq!(
            object["metadata"]["labels"],
            json!({
                "app.kubernetes.io/managed-by": "runway",
                "runway.dev/environment": "production",
                "runway.dev/stage": "canary",
                "runway.dev/gitlab-release": "17.6",
            })
        );
    }
    assert_eq!(
        source["spec"],
        json!({
            "interval": "5m",
            "url": format!("{REPOSITORY}/web-app"),
            "ref": {"tag": "1.5.0-rc.1_build.7"},
            "layerSelector": {
                "mediaType": "application/vnd.cncf.helm.chart.content.v1.tar+gzip",
                "operation": "copy",
            },
            "insecure": true,
        })
    );
    assert_eq!(
        release["spec"]["chartRef"],
        json!({"kind": "OCIRepository", "name": source["metadata"]["name"], "namespace": "apps"})
    );
    assert_eq!(release["spec"]["releaseName"], "web-app");
    assert_eq!(release["spec"]["interval"], "10m");
    assert_eq!(
        release["spec"]["install"],
        json!({"remediation": {"retries": 3}})
    );
    assert_eq!(
        release["spec"]["upgrade"],
        json!({"cleanupOnFail": true, "remediation": {"retries": 3, "remediateLastFailure": true}})
    );
    assert_eq!(
        release["spec"]["values"],
        json!({"labels": {"runway.dev/stage": "canary", "runway.dev/gitlab-release": "17.6"}})
    );

    // Without options: no namespace, the default version, HTTPS, the stage the environment's
    // (`default` without one), no GitLab release.
    let (source, release) = flux_objects(&config(WEB, None), &plain());
    for object in [&source, &release] {
        assert!(object["metadata"].get("namespace").is_none(), "{object}");
    }
    assert_eq!(source["spec"]["ref"], json!({"tag": "0.1.0"}));
    assert!(source["spec"].get("insecure").is_none());
    assert_eq!(
        release["spec"]["chartRef"],
        json!({"kind": "OCIRepository", "name": "web-app"})
    );
    assert_eq!(
        release["spec"]["values"],
        json!({"labels": {"runway.dev/stage": "default"}})
    );
    let (_, release) = flux_objects(&config(WORKER, Some("staging")), &plain());
    assert_eq!(
        release["spec"]["values"],
        json!({"labels": {"runway.dev/stage": "staging"}})
    );
}

#[test]
fn snapshot() {
    let files = render(&config(WEB, Some("production")), Target::Flux, &full()).unwrap();
    let listing: Vec<String> = files
        .iter()
        .map(|f| format!("# {}\n{}", f.path, f.contents))
        .collect();
    insta::assert_snapshot!("flux_web", listing.join("\n"));
    let again = render(&config(WEB, Some("production")), Target::Flux, &full()).unwrap();
    assert_eq!(files, again, "the same bytes twice");
}

/// Flux needs the repository, and installs the chart as a release named after the service,
/// which Helm takes up to 53 characters; it needs no image, as the chart does not.
#[test]
fn flux_needs_a_repository_and_a_name_helm_takes() {
    let web = config(WEB, None);
    assert_eq!(
        render(&web, Target::Flux, &RenderOptions::default()),
        Err(RenderError::NoChartRepository {
            service: "web_app".into(),
            target: Target::Flux
        })
    );
    let named = |length: usize| {
        config(
            &format!(
                "kind: RunwayService\nmetadata: {{name: {}}}\nspec: {{image: a:1}}\n",
                "a".repeat(length)
            ),
            None,
        )
    };
    assert!(render(&named(53), Target::Flux, &plain()).is_ok());
    let error = render(&named(54), Target::Flux, &plain()).unwrap_err();
    assert!(
        matches!(error, RenderError::ReleaseNameTooLong { .. }),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains("at most 53 characters (54 here)")
    );
    let process = render(&config(PROCESS, None), Target::Flux, &plain()).unwrap();
    assert!(
        process[1].contents.contains("the chart needs one"),
        "{}",
        process[1].contents
    );
}

/// A chart version is SemVer 2; it is Chart.yaml's `version`, 0.1.0 unless given.
#[test]
fn chart_versions_are_semver_2() {
    for good in [
        "0.1.0",
        "1.4.0",
        "1.5.0-rc.1",
        "2.0.0+build.7",
        "1.0.0-alpha.1+sha.5114f85",
    ] {
        let version: ChartVersion = good.parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(version.to_string(), good);
        assert!(!version.oci_tag().contains('+'), "{}", version.oci_tag());
    }
    for bad in [
        "", "1", "1.4", "v1.4.0", "01.4.0", "1.4.0-", "1.4.0 ", "latest",
    ] {
        let error = bad.parse::<ChartVersion>().expect_err(bad);
        assert!(
            error.to_string().contains("is not a SemVer 2 version"),
            "{error}"
        );
    }
    assert_eq!(ChartVersion::default().to_string(), "0.1.0");
    let web = config(WEB, None);
    let chart_yaml = |options: &RenderOptions| {
        let files = render(&web, Target::Helm, options).unwrap();
        let file = files
            .iter()
            .find(|f| f.path.ends_with("Chart.yaml"))
            .unwrap();
        documents(&file.contents).remove(0)
    };
    assert_eq!(chart_yaml(&RenderOptions::default())["version"], "0.1.0");
    assert_eq!(chart_yaml(&full())["version"], "1.5.0-rc.1+build.7");
    assert_eq!(
        "oci://localhost:5000/charts/"
            .parse::<ChartRepository>()
            .unwrap()
            .to_string(),
        "oci://localhost:5000/charts"
    );
}

fn helm(args: &[&str], dir: &Path) -> String {
    let output = Command::new("helm")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "helm {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// `helm template` of the chart, as the HelmRelease installs it (its release name, namespace
/// and values), labels every object and pod with the HelmRelease's stage: the chart rendered
/// with the same options, and that one chart installed at another stage, whose objects keep the
/// chart's other labels. `helm package` names the chart as the OCIRepository looks for it.
#[test]
fn helm_template_with_the_helmreleases_values_labels_every_object_with_its_stage() {
    if !helm_installed() {
        return;
    }
    let dir = TempDir::new("flux");
    let web = config(WEB, Some("production"));
    let options = full();
    for file in render(&web, Target::Helm, &options).unwrap() {
        let path = dir.0.join(&file.path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &file.contents).unwrap();
    }
    let chart = dir.0.join(&web.dns_name);

    // The package is <name>-<version>.tgz: the name the OCIRepository's URL ends with, the
    // version its tag (with `_` for `+`, as `helm push` tags it).
    let (source, _) = flux_objects(&web, &options);
    helm(&["package", chart.to_str().unwrap()], &dir.0);
    let url = source["spec"]["url"].as_str().unwrap();
    let chart_name = url.rsplit('/').next().unwrap();
    let version = options.chart.version.to_string();
    assert!(
        dir.0.join(format!("{chart_name}-{version}.tgz")).is_file(),
        "helm package made no {chart_name}-{version}.tgz"
    );
    assert_eq!(source["spec"]["ref"]["tag"], version.replace('+', "_"));

    let kubernetes_names: Vec<(String, String)> = documents(&stream(
        &render(&web, Target::Kubernetes, &options).unwrap(),
    ))
    .iter()
    .map(kind_and_name)
    .collect();
    let canary = RenderOptions {
        release: ReleaseLabels {
            gitlab_release: None,
            stage: Some("canary".into()),
        },
        ..options.clone()
    };
    let production = RenderOptions {
        release: ReleaseLabels {
            gitlab_release: None,
            stage: Some("production".into()),
        },
        ..options.clone()
    };
    for (stage, flux_options) in [
        ("canary", &options),
        ("canary", &canary),
        ("production", &production),
    ] {
        let (_, release) = flux_objects(&web, flux_options);
        let values = dir.0.join(format!("values-{stage}.json"));
        std::fs::write(&values, release["spec"]["values"].to_string()).unwrap();
        let rendered = helm(
            &[
                "template",
                release["spec"]["releaseName"].as_str().unwrap(),
                chart.to_str().unwrap(),
                "--namespace",
                release["metadata"]["namespace"].as_str().unwrap(),
                "-f",
                values.to_str().unwrap(),
            ],
            &dir.0,
        );
        let objects = documents(&rendered);
        let mut names: Vec<(String, String)> = objects.iter().map(kind_and_name).collect();
        names.sort();
        let mut expected = kubernetes_names.clone();
        expected.sort();
        assert_eq!(
            names, expected,
            "the release's objects are named as the Kubernetes target's"
        );
        for object in &objects {
            let mut labelled = vec![&object["metadata"]["labels"]];
            if object["kind"] == "Deployment" {
                labelled.push(&object["spec"]["template"]["metadata"]["labels"]);
            }
            for labels in labelled {
                assert_eq!(labels["runway.dev/stage"], stage, "{object}");
                // The chart's own labels stay: Helm merges the values' map into the chart's.
                assert_eq!(labels["runway.dev/gitlab-release"], "17.6", "{object}");
                assert_eq!(labels["runway.dev/environment"], "production", "{object}");
                assert_eq!(labels["app.kubernetes.io/managed-by"], "runway", "{object}");
            }
            assert_eq!(object["metadata"]["namespace"], "apps", "{object}");
        }
    }
}

fn kind_and_name(object: &Value) -> (String, String) {
    (
        object["kind"].as_str().unwrap().to_owned(),
        object["metadata"]["name"].as_str().unwrap().to_owned(),
    )
}
