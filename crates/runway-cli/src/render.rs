//! `runway render`.

use std::fs;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::ValueEnum;
use runway_manifest::{Service, ServiceConfig};
use runway_render::observability::{self, ServiceSlo};
use runway_render::{ChartRepository, ChartVersion, RenderOptions, RenderedFile, Target};

use crate::repo::{Repository, discover, display, is_named, valid_services};
use crate::{EXIT_INVALID, RepoArg, print_stdout};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    repo: RepoArg,
    /// What to render to.
    #[arg(long, short = 't', value_enum)]
    target: TargetArg,
    /// Environment whose overrides (`runway-<env>.yml`) and variables (`env-<env>.yml`) apply.
    /// For `observability`, without it the rules cover every environment: each one with a
    /// `runway-<env>.yml` or `env-<env>.yml` by its own objectives, any other by the base
    /// manifest's.
    #[arg(long, short = 'e')]
    env: Option<String>,
    /// Render only this service (its `metadata.name` or its directory under `.runway/`).
    #[arg(long, short = 's')]
    service: Option<String>,
    /// Write the files under this directory instead of printing them.
    #[arg(long = "output-dir", short = 'o', value_name = "DIR")]
    output_dir: Option<PathBuf>,
    /// Image to run, overriding `spec.image`.
    #[arg(long)]
    image: Option<String>,
    /// Kubernetes namespace for the objects.
    #[arg(long, short = 'n')]
    namespace: Option<String>,
    /// For `kubernetes` and `helm`: a private range of the cluster's network (within
    /// 10.0.0.0/8, 100.64.0.0/10, 172.16.0.0/12 or 192.168.0.0/16) that a service with
    /// `spec.vpc_access.enabled: true` reaches; repeat for several. Such a service is refused
    /// without one.
    #[arg(long = "vpc-range", value_name = "CIDR", value_parser = parse_range)]
    vpc_ranges: Vec<runway_manifest::egress::Range>,
    /// For `kubernetes` and `helm`: the namespace of the cluster's ingress controller, whose
    /// pods (those with every `--ingress-label`, else all) a public service's NetworkPolicy
    /// admits; then a service's pods admit only it, their callers and metrics scrapes. Without
    /// it (and without `--ingress-label`), a public service's pods admit anyone.
    #[arg(long, value_name = "NAMESPACE")]
    ingress_namespace: Option<String>,
    /// For `kubernetes` and `helm`: a label of the ingress controller's pods, `KEY=VALUE`;
    /// repeat for several. Without `--ingress-namespace`, those pods in any namespace.
    #[arg(long = "ingress-label", value_name = "KEY=VALUE", value_parser = parse_label)]
    ingress_labels: Vec<(String, String)>,
    /// For `kubernetes`, `helm` and `flux`: the GitLab release the objects are for (`17.6`,
    /// say): a label of every object and pod (`runway.dev/gitlab-release`) and an annotation
    /// of the chart, as a release of the chart to a package registry is labelled. Flux's
    /// objects carry it, and give it to the chart's objects they install.
    #[arg(long, value_name = "VERSION", value_parser = parse_label_value)]
    gitlab_release: Option<String>,
    /// For `kubernetes`, `helm` and `flux`: the deployment stage, a label of every object and
    /// pod (`runway.dev/stage`) and an annotation of the chart. Flux's objects carry it, and
    /// give it to the chart's objects they install. Default: the environment (`-e`), else
    /// `default`.
    #[arg(long, value_name = "STAGE", value_parser = parse_label_value)]
    stage: Option<String>,
    /// For `helm` and `flux`: the chart's version, SemVer 2 (`1.4.0`, `1.5.0-rc.1`):
    /// Chart.yaml's `version`, and the tag Flux fetches (`helm push` tags `1.4.0+build.7` as
    /// `1.4.0_build.7`). Default: 0.1.0.
    #[arg(long, value_name = "VERSION", value_parser = parse_chart_version)]
    chart_version: Option<ChartVersion>,
    /// For `flux`, which needs it: the OCI repository the chart is pushed to,
    /// `oci://HOST[:PORT]/PATH`, as `helm push` takes it. Flux fetches the chart from
    /// `<URL>/<service>`.
    #[arg(long, value_name = "URL", value_parser = parse_chart_repository)]
    chart_repository: Option<ChartRepository>,
    /// For `flux`: the chart's registry speaks plain HTTP, not HTTPS (`insecure: true` in the
    /// OCIRepository): a registry in the cluster or on this machine.
    #[arg(long)]
    chart_repository_insecure: bool,
    /// For `observability`: where the alerts' runbooks live. A service's alerts link to
    /// `<URL>/<service>` unless its manifest names a runbook (`spec.workload.slo.runbook_url`).
    #[arg(long, value_name = "URL")]
    runbook_base: Option<String>,
}

fn parse_range(text: &str) -> Result<runway_manifest::egress::Range, String> {
    text.parse()
}

/// A Kubernetes label value: at most 63 of `A-Z a-z 0-9 . _ -`, a letter or digit at each end.
fn parse_label_value(text: &str) -> Result<String, String> {
    let allowed = text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    let ends = text.starts_with(|c: char| c.is_ascii_alphanumeric())
        && text.ends_with(|c: char| c.is_ascii_alphanumeric());
    if text.len() <= 63 && allowed && ends {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "`{text}` is not a label value: at most 63 letters, digits, `.`, `_` and `-`, \
             beginning and ending with a letter or digit"
        ))
    }
}

fn parse_chart_version(text: &str) -> Result<ChartVersion, String> {
    text.parse()
        .map_err(|e: runway_render::RenderError| e.to_string())
}

fn parse_chart_repository(text: &str) -> Result<ChartRepository, String> {
    text.parse()
        .map_err(|e: runway_render::RenderError| e.to_string())
}

fn parse_label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("`{text}` is not KEY=VALUE")),
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum TargetArg {
    /// Deployment, Service, HorizontalPodAutoscaler, PodDisruptionBudget, NetworkPolicy, and
    /// for a service with a private name its internal Service (`<name>-internal`).
    Kubernetes,
    /// A `serving.knative.dev/v1` Service, as `gcloud run services replace` takes it.
    Knative,
    /// A Helm chart directory.
    Helm,
    /// Flux's OCIRepository and HelmRelease, which install the chart pushed to
    /// `--chart-repository` at `--stage`.
    Flux,
    /// Monitoring from the ingress's metrics and `spec.workload.slo`: `<service>.rules.yml`,
    /// Prometheus recording rules (request rate, error ratio and apdex over 5m to 3d) and
    /// multi-window, multi-burn-rate alerts (page at 14.4x over 1h and 6x over 6h, ticket at
    /// 1x over 3d), and `<service>.dashboard.json`, a Grafana dashboard.
    Observability,
}

impl From<TargetArg> for Target {
    fn from(t: TargetArg) -> Self {
        match t {
            TargetArg::Kubernetes => Self::Kubernetes,
            TargetArg::Knative => Self::Knative,
            TargetArg::Helm => Self::Helm,
            TargetArg::Flux => Self::Flux,
            TargetArg::Observability => Self::Observability,
        }
    }
}

pub(crate) fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let repo = discover(&args.repo.path)?;
    let ingress =
        (args.ingress_namespace.is_some() || !args.ingress_labels.is_empty()).then(|| {
            runway_render::Peer {
                namespace: args.ingress_namespace.clone(),
                labels: args.ingress_labels.iter().cloned().collect(),
            }
        });
    let options = RenderOptions {
        image: args.image.clone(),
        namespace: args.namespace.clone(),
        network: runway_render::NetworkOptions {
            vpc_ranges: args.vpc_ranges.clone(),
            ingress,
        },
        release: runway_render::ReleaseLabels {
            gitlab_release: args.gitlab_release.clone(),
            stage: args.stage.clone(),
        },
        chart: runway_render::ChartOptions {
            version: args.chart_version.clone().unwrap_or_default(),
            repository: args.chart_repository.clone(),
            insecure: args.chart_repository_insecure,
        },
    };
    let target = Target::from(args.target);
    let labelled = args.gitlab_release.is_some() || args.stage.is_some();
    if labelled && !matches!(target, Target::Kubernetes | Target::Helm | Target::Flux) {
        bail!(
            "--gitlab-release and --stage are for `-t kubernetes`, `-t helm` and `-t flux`, not \
             {target}"
        );
    }
    if args.chart_version.is_some() && !matches!(target, Target::Helm | Target::Flux) {
        bail!("--chart-version is for `-t helm` and `-t flux`, not {target}");
    }
    if target == Target::Flux {
        if args.chart_repository.is_none() {
            bail!(
                "`-t flux` needs --chart-repository oci://HOST[:PORT]/PATH: the OCI repository \
                 the chart is pushed to (helm push), which Flux fetches it from"
            );
        }
    } else if args.chart_repository.is_some() || args.chart_repository_insecure {
        bail!("--chart-repository and --chart-repository-insecure are for `-t flux`, not {target}");
    }
    if let Some(base) = &args.runbook_base {
        if target != Target::Observability {
            bail!("--runbook-base is for `-t observability`, not {target}");
        }
        if !is_web_address(base) {
            bail!("--runbook-base `{base}` is not an `http://` or `https://` URL");
        }
    }
    let wanted = |service: &Service| is_named(service, args.service.as_deref());
    let Some(services) = valid_services(&repo, &args.repo.path, wanted) else {
        return Ok(ExitCode::from(EXIT_INVALID));
    };
    if services.is_empty() {
        bail!(
            "no service named `{}` in {}",
            args.service.as_deref().unwrap_or_default(),
            display(&repo.runway_dir)
        );
    }
    let mut files = Vec::new();
    for service in &services {
        if target == Target::Observability {
            files.extend(monitoring(&repo, service, args)?);
            continue;
        }
        let config = service.config(args.env.as_deref())?;
        let rendered = runway_render::render(&config, target, &options).with_context(|| {
            format!(
                "cannot render {} to {target}",
                sources(&repo, service, args.env.as_deref())
            )
        })?;
        files.extend(rendered);
        if let Some(note) = secrets_note(&config, target) {
            eprintln!("note: {note}");
        }
    }

    match &args.output_dir {
        Some(dir) => {
            for file in &files {
                let path = dir.join(&file.path);
                if let Some(parent) = path.parent() {
                    fs::create_dir_all(parent)
                        .with_context(|| format!("cannot create {}", display(parent)))?;
                }
                fs::write(&path, &file.contents)
                    .with_context(|| format!("cannot write {}", display(&path)))?;
                eprintln!("wrote {}", display(&path));
            }
        }
        None => {
            let mut out = String::new();
            for (i, file) in files.iter().enumerate() {
                if i > 0 {
                    out.push_str("---\n");
                }
                out.push_str(&format!("# Source: {}\n", file.path));
                out.push_str(&file.contents);
            }
            print_stdout(&out);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A service's rules and dashboard: for `--env`, that environment's objectives; without it,
/// each environment with files of its own by its own, and every other by the base manifest's.
fn monitoring(
    repo: &Repository,
    service: &Service,
    args: &Args,
) -> anyhow::Result<Vec<RenderedFile>> {
    let mut configs = Vec::new();
    match &args.env {
        Some(env) => configs.push(service.config(Some(env))?),
        None => {
            // A service with only per-environment manifests has no objectives for the rest.
            configs.extend(service.config(None).ok());
            for env in service.environments() {
                configs.push(service.config(Some(env))?);
            }
        }
    }
    let files = configs
        .iter()
        .map(|config| ServiceSlo::new(config, args.runbook_base.as_deref()))
        .collect::<Result<Vec<_>, _>>()
        .and_then(|slos| {
            if slos.iter().any(|slo| slo.runbook_url.is_none()) {
                eprintln!(
                    "note: the alerts of {} link to no runbook: pass --runbook-base or set \
                     spec.workload.slo.runbook_url",
                    service.name()
                );
            }
            observability::files(&slos)
        })
        .with_context(|| {
            format!(
                "cannot render {} to {}",
                sources(repo, service, args.env.as_deref()),
                Target::Observability
            )
        })?;
    Ok(files)
}

/// Whether `url` is an `http://` or `https://` address with a host, as the manifest's
/// `runbook_url` must be.
fn is_web_address(url: &str) -> bool {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/'))
        && !url.chars().any(|ch| ch.is_whitespace() || ch.is_control())
}

/// Where the service's secrets must be set for what was rendered to run: Runway renders their
/// names, never their values. `None` for a service without secrets.
fn secrets_note(config: &ServiceConfig, target: Target) -> Option<String> {
    let mut variables: Vec<&str> = config.secrets.iter().map(String::as_str).collect();
    if variables.is_empty() {
        return None;
    }
    variables.sort_unstable();
    let list = |key: fn(&str) -> String| {
        variables
            .iter()
            .map(|v| format!("{} ({})", runway_render::secret_name(config, v), key(v)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    Some(match target {
        Target::Kubernetes => format!(
            "{} reads its secrets from Secrets rendered without their values: set them on the \
             cluster, as each Secret's file shows: {}",
            config.name,
            list(|v| format!("key {v}"))
        ),
        Target::Knative => format!(
            "{} reads its secrets from Secret Manager, where each must exist before it deploys \
             (gcloud secrets create <name> --data-file=-): {}",
            config.name,
            list(|v| format!("{v}, version latest"))
        ),
        Target::Helm => format!(
            "the {chart} chart creates its Secrets without their values (createSecrets): set them \
             on the cluster after installing; for `helm install {chart}` they are {}",
            list(|v| format!("key {v}")),
            chart = config.dns_name,
        ),
        // The chart Flux installs creates them as `-t helm` said; rules and a dashboard read
        // no secret.
        Target::Flux | Target::Observability => return None,
    })
}

/// The manifest files a service's settings come from, as the user knows them:
/// `.runway/runway.yml`, with `.runway/runway-<env>.yml` when the environment has one.
fn sources(repo: &Repository, service: &Service, env: Option<&str>) -> String {
    let Some(files) = repo.services.iter().find(|f| f.id == service.id) else {
        return format!("service `{}`", service.name());
    };
    let names: Vec<&str> = files
        .base
        .iter()
        .chain(env.and_then(|env| files.overrides.get(env)))
        .map(|f| &*f.name)
        .collect();
    names.join(" with ")
}

#[cfg(test)]
mod tests {
    use runway_manifest::{ServiceFiles, SourceFile};

    use super::*;

    #[test]
    fn an_error_names_the_files_the_settings_come_from() {
        let files = ServiceFiles {
            base: Some(SourceFile::new(
                ".runway/runway.yml",
                "kind: RunwayService\nmetadata: {name: web}\nspec: {}\n",
            )),
            overrides: [(
                "production".to_owned(),
                SourceFile::new(".runway/runway-production.yml", "spec: {}\n"),
            )]
            .into(),
            ..ServiceFiles::default()
        };
        let service = runway_manifest::load(&files).service.expect("valid");
        let repo = Repository {
            services: vec![files],
            ..Repository::default()
        };
        assert_eq!(
            secrets_note(&service.config(None).expect("config"), Target::Kubernetes),
            None
        );
        assert_eq!(sources(&repo, &service, None), ".runway/runway.yml");
        assert_eq!(
            sources(&repo, &service, Some("staging")),
            ".runway/runway.yml"
        );
        assert_eq!(
            sources(&repo, &service, Some("production")),
            ".runway/runway.yml with .runway/runway-production.yml"
        );
    }

    #[test]
    fn the_note_names_each_secret_as_the_target_does() {
        let files = ServiceFiles {
            base: Some(SourceFile::new(
                ".runway/runway.yml",
                "kind: RunwayService\nmetadata: {name: web_app}\n\
                 spec: {image: web:1, workload: {secrets: [STRIPE_KEY, DATABASE_URL]}}\n",
            )),
            ..ServiceFiles::default()
        };
        let config = runway_manifest::load(&files)
            .service
            .expect("valid")
            .config(None)
            .expect("config");
        let note = |target| secrets_note(&config, target).expect("a note");
        assert!(
            note(Target::Kubernetes).ends_with(
                "web-app-database-url (key DATABASE_URL), web-app-stripe-key (key STRIPE_KEY)"
            ),
            "{}",
            note(Target::Kubernetes)
        );
        assert!(
            note(Target::Knative).contains("web-app-stripe-key (STRIPE_KEY, version latest)"),
            "{}",
            note(Target::Knative)
        );
        assert!(note(Target::Helm).contains("createSecrets"));
    }
}
