//! Renders a Runway service to Kubernetes objects, a Knative `serving.knative.dev/v1` Service as
//! Cloud Run accepts it, a Helm chart, and the Flux objects that install that chart from an OCI
//! registry; and its monitoring ([`observability`]): Prometheus recording rules and alerts, and
//! a Grafana dashboard. Pure: it returns files and writes nothing. Output is deterministic:
//! stable key order, no timestamps, the same bytes for the same input.
//!
//! ```
//! use runway_manifest::{ServiceFiles, SourceFile, load};
//! use runway_render::{RenderOptions, Target, render};
//!
//! let manifest = "kind: RunwayService\nmetadata: {name: hello}\nspec: {image: hello:1.0}\n";
//! let files = ServiceFiles { base: Some(SourceFile::new("runway.yml", manifest)), ..ServiceFiles::default() };
//! let config = load(&files).service.unwrap().config(None).unwrap();
//! let rendered = render(&config, Target::Kubernetes, &RenderOptions::default()).unwrap();
//! assert_eq!(rendered[0].path, "hello/deployment.yaml");
//! assert!(rendered[0].contents.contains("image: \"hello:1.0\""));
//! ```
//!
//! # Files
//!
//! - `kubernetes.rs`, `knative.rs`, `helm.rs`: the three targets that run the service.
//!   `kubernetes.rs` also builds one revision's objects for the Kubernetes driver
//!   (`revision_objects`); `helm.rs` has the chart's version ([`ChartVersion`]).
//! - `flux.rs`: Flux's OCIRepository and HelmRelease, which install the chart as it was pushed
//!   to an OCI registry ([`ChartRepository`]) at a deployment stage.
//! - `common.rs`: what they share: labels, image parts, env and secret references with the one way
//!   a Secret is named (`secret_name`), probes, the container's start.
//! - `network.rs`: a service's NetworkPolicy and its internal Service's name.
//! - `observability.rs`: a service's monitoring from `spec.workload.slo` over the ingress's own
//!   series: `ServiceSlo` per service and environment (or for every environment no other entry
//!   names); `rules`, one Prometheus rule file for any number of them, a group each; `dashboard`,
//!   a Grafana dashboard whose `uid` is the service's; `files`, what
//!   `runway render -t observability` writes. `tests/observability.rs` checks the rules with
//!   `promtool check rules` and `promtool test rules`.
//! - `yaml.rs`: the one place values become YAML text, quoting whatever YAML 1.1 readers such as
//!   kubectl and helm would misread.
//!
//! Rendered output is checked by its real consumers in the tests: every Kubernetes object by
//! `kubernetes-validate --strict`, every Helm chart by `helm template`, whose objects (for a
//! release named after the service) must equal the Kubernetes target's, and Flux's objects by
//! Flux's own CustomResourceDefinitions (`tests/flux.rs`, fetched by `scripts/flux-crds`). A
//! secret's value never appears in rendered output, only its name, as a reference.

// Library code logs through `tracing` (runway-log sets up where it goes); it never prints.
#![deny(clippy::print_stderr)]

use std::fmt;

use runway_manifest::ServiceConfig;

mod common;
mod flux;
mod helm;
mod knative;
mod kubernetes;
mod network;
pub mod observability;
mod yaml;

pub use flux::ChartRepository;
pub use helm::ChartVersion;
pub use kubernetes::{
    DEFAULT_CONTAINER, REVISION_ANNOTATION, REVISION_LABEL, Revision, RevisionObjects,
    SERVICE_LABEL, object_name, revision_objects,
};
pub use network::{NetworkOptions, Peer};

/// What to render to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Deployment, Service, HorizontalPodAutoscaler, PodDisruptionBudget, NetworkPolicy, the
    /// internal Service of a service with a private name, and a Secret without its value for
    /// each of the service's secrets.
    Kubernetes,
    /// A Knative Service as `gcloud run services replace` takes it.
    Knative,
    /// A chart directory: Chart.yaml, values.yaml, templates/. The image is a value, which
    /// the manifest need not name.
    Helm,
    /// `ocirepository.yaml` and `helmrelease.yaml`: Flux's `OCIRepository`, which fetches the
    /// chart pushed to [`ChartOptions::repository`], and its `HelmRelease`, which installs it
    /// under the service's name and labels its objects with the stage. It names the chart, not
    /// an image, so a worker or a service without an image renders too; a name longer than a
    /// Helm release's (53 characters) does not.
    Flux,
    /// `<service>.rules.yml`, Prometheus recording rules and multi-window, multi-burn-rate
    /// alerts over the ingress's metrics, and `<service>.dashboard.json`, a Grafana dashboard
    /// ([`observability`]). Through [`render`] the alerts have no runbook unless the manifest
    /// names one; [`observability::files`] takes a base URL for it.
    Observability,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Kubernetes => "kubernetes",
            Self::Knative => "knative",
            Self::Helm => "helm",
            Self::Flux => "flux",
            Self::Observability => "observability",
        })
    }
}

/// Settings that come from the command line rather than the manifest.
#[derive(Debug, Clone, Default)]
pub struct RenderOptions {
    /// Image to run; overrides the manifest's `spec.image`.
    pub image: Option<String>,
    /// Kubernetes namespace to put the objects in; none leaves it to the client.
    pub namespace: Option<String>,
    /// The cluster's network, for the NetworkPolicy (Kubernetes and Helm).
    pub network: NetworkOptions,
    /// What a release of the service is labelled with (Kubernetes, Helm and Flux).
    pub release: ReleaseLabels,
    /// The chart as it is published (Helm and Flux).
    pub chart: ChartOptions,
}

/// A chart as it is published: `helm package` makes `<dns_name>-<version>.tgz` of it, and
/// `helm push` of that to `oci://HOST/PATH` stores it as `HOST/PATH/<dns_name>:<version>`,
/// where Flux's objects read it.
#[derive(Debug, Clone, Default)]
pub struct ChartOptions {
    /// Chart.yaml's `version`, and the tag Flux's OCIRepository asks for.
    pub version: ChartVersion,
    /// Where the chart is pushed; Flux needs it, the chart itself does not.
    pub repository: Option<ChartRepository>,
    /// The registry speaks plain HTTP, not HTTPS: the OCIRepository says `insecure: true`. For a
    /// registry inside the cluster or on a developer's machine; any other should have TLS.
    pub insecure: bool,
}

/// The two dimensions a release of a service's objects and chart is labelled with: the GitLab
/// release it is compatible with, and the deployment stage. Each is a label of every object
/// and pod (`runway.dev/gitlab-release`, `runway.dev/stage`) and an annotation of the chart.
#[derive(Debug, Clone, Default)]
pub struct ReleaseLabels {
    /// The GitLab release (`17.6`, say); none leaves the label out.
    pub gitlab_release: Option<String>,
    /// The deployment stage; none makes it the environment, `default` without one.
    pub stage: Option<String>,
}

/// One rendered file, its path relative to the output directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedFile {
    /// Relative path, `/`-separated, e.g. `hello/templates/deployment.yaml`.
    pub path: String,
    /// The file's contents.
    pub contents: String,
}

/// Why a service cannot be rendered, or an option is not what it must be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// The target runs container images and the service names none. (A Helm chart takes its
    /// image as a value, so it renders without one.)
    #[error(
        "service `{service}` names no image and {target} runs container images: set `spec.image` or pass `--image`"
    )]
    NoImage {
        /// The service's name.
        service: String,
        /// The target asked for.
        target: Target,
    },
    /// The service runs a plain process, which a cluster cannot run, and no image is given.
    #[error(
        "service `{service}` runs a plain process (`spec.workload.process`); {target} runs container images: pass `--image`"
    )]
    ProcessArtifact {
        /// The service's name.
        service: String,
        /// The target asked for.
        target: Target,
    },
    /// The service is a worker, which has no port, and the target runs only services that serve
    /// requests on one.
    #[error(
        "service `{service}` is a worker (`spec.workload.kind: worker`); {target} runs only services that serve requests on a port"
    )]
    WorkerUnsupported {
        /// The service's name.
        service: String,
        /// The target asked for.
        target: Target,
    },
    /// Flux installs the chart from an OCI repository, and none is given.
    #[error(
        "{target} installs the chart of service `{service}` from an OCI repository, and none is given: pass `--chart-repository oci://HOST[:PORT]/PATH`, where the chart is pushed"
    )]
    NoChartRepository {
        /// The service's name.
        service: String,
        /// The target asked for.
        target: Target,
    },
    /// The service's name is longer than a Helm release's may be, and Flux installs its chart
    /// as a release of that name.
    #[error(
        "service `{service}`: {target} installs the chart as a Helm release named `{name}`, and a release's name is at most 53 characters ({} here)", name.len()
    )]
    ReleaseNameTooLong {
        /// The service's name.
        service: String,
        /// The release's name (the service's as a DNS label).
        name: String,
        /// The target asked for.
        target: Target,
    },
    /// A chart version that is not SemVer 2, as Helm requires.
    #[error(
        "`{given}` is not a SemVer 2 version: expected MAJOR.MINOR.PATCH with an optional -PRERELEASE and +BUILD, such as 1.4.0 or 1.5.0-rc.1 ({reason})"
    )]
    InvalidChartVersion {
        /// What was given.
        given: String,
        /// What the SemVer parser said of it.
        reason: String,
    },
    /// A chart repository that is not an `oci://` address.
    #[error(
        "`{given}` is not an OCI repository: expected oci://HOST[:PORT]/PATH, as `helm push` takes it ({reason})"
    )]
    InvalidChartRepository {
        /// What was given.
        given: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// One service's objectives were given twice for one environment (or twice for every
    /// environment): their rules would record the same series twice.
    #[error("service `{service}` has two sets of objectives for {}", env.as_ref().map_or_else(|| "every environment".to_owned(), |env| format!("environment `{env}`")))]
    DuplicateSlo {
        /// The service's name.
        service: String,
        /// The environment, `None` for every environment.
        env: Option<String>,
    },
    /// The service asks for the private network (`spec.vpc_access.enabled: true`) and the
    /// cluster's private ranges were not given.
    #[error(
        "service `{service}` asks for the private network (`spec.vpc_access.enabled: true`) and the cluster's private ranges are not known: pass `--vpc-range CIDR` (one for each range its pods may reach), or turn `vpc_access` off"
    )]
    VpcWithoutRanges {
        /// The service's name.
        service: String,
    },
    /// A private range given for `vpc_access` is not private.
    #[error(
        "the private range {range} given for `vpc_access` is not within 10.0.0.0/8, 100.64.0.0/10, 172.16.0.0/12 or 192.168.0.0/16"
    )]
    VpcRangeNotPrivate {
        /// Its place among those given, from 0.
        index: usize,
        /// The range.
        range: runway_manifest::egress::Range,
    },
    /// An `allow` rule lies wholly within a range no pod reaches through it: a never-reached
    /// range, or a private one (which comes whole with `vpc_access`).
    #[error(
        "service `{service}`: spec.workload.egress.allow[{index}] ({rule}) lies within {within}, which {}", if runway_manifest::egress::NEVER.contains(within) { "no pod reaches" } else { "is private: private ranges come with `spec.vpc_access.enabled: true`, all of those given with `--vpc-range`, narrowed by spec.workload.egress.deny" }
    )]
    EgressAllowUnreachable {
        /// The service's name.
        service: String,
        /// The rule's place in the list, from 0.
        index: usize,
        /// The rule.
        rule: runway_manifest::egress::Rule,
        /// The range it lies within.
        within: runway_manifest::egress::Range,
    },
}

/// Renders `config` to `target`.
pub fn render(
    config: &ServiceConfig,
    target: Target,
    options: &RenderOptions,
) -> Result<Vec<RenderedFile>, RenderError> {
    match target {
        Target::Kubernetes => kubernetes::render(config, options),
        Target::Knative => knative::render(config, options),
        Target::Helm => helm::render(config, options),
        Target::Flux => flux::render(config, options),
        Target::Observability => {
            observability::files(&[observability::ServiceSlo::new(config, None)?])
        }
    }
}

/// The Secret holding the service's secret `variable`, named alike on every target:
/// `<dns_name>-<variable in lower case, `-` for `_`>` (`web-app-stripe-key` for `STRIPE_KEY`).
/// A Kubernetes Secret keeps the value under the variable's name, a Secret Manager secret (Cloud
/// Run) as its versions; a Helm chart puts its objects' name (the release's) in place of
/// `<dns_name>`. Runway renders the name, never the value.
pub fn secret_name(config: &ServiceConfig, variable: &str) -> String {
    common::secret_name(config, variable)
}

/// Joins the files of a Kubernetes or Knative rendering into one multi-document YAML stream,
/// `---` between documents, as `kubectl apply -f -` takes it. (A Helm chart is not a stream.)
pub fn stream(files: &[RenderedFile]) -> String {
    files
        .iter()
        .map(|f| f.contents.as_str())
        .collect::<Vec<_>>()
        .join("---\n")
}
