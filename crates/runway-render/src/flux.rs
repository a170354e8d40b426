//! Flux's objects for a service's chart under `<dns_name>/`: an `OCIRepository` that fetches the
//! chart as `helm push` stored it, and a `HelmRelease` that installs it at a stage. Both are
//! named after the service and carry its descriptive labels, so that `kubectl get helmrelease
//! -l runway.dev/stage=canary` finds them; the HelmRelease gives the chart's `labels` value the
//! stage (and the GitLab release), so the chart's objects are labelled with the stage it is
//! installed at. `tests/flux.rs` checks them against Flux's own CustomResourceDefinitions.

use std::fmt;
use std::str::FromStr;

use runway_manifest::ServiceConfig;
use serde_json::{Map, Value, json};

use crate::common::{self, GITLAB_RELEASE_LABEL, STAGE_LABEL};
use crate::{RenderError, RenderOptions, RenderedFile, Target, yaml};

/// The media type of a chart's layer in an OCI registry, which the OCIRepository copies out.
const CHART_LAYER: &str = "application/vnd.cncf.helm.chart.content.v1.tar+gzip";
/// How often Flux looks for the chart in the registry.
const SOURCE_INTERVAL: &str = "5m";
/// How often Flux makes the release what the HelmRelease says, and mends what drifted.
const RELEASE_INTERVAL: &str = "10m";
/// How many times a failed install or upgrade is tried again, remediated in between.
const RETRIES: u32 = 3;
/// The longest name Helm gives a release.
const MAX_RELEASE_NAME: usize = 53;

/// An OCI repository charts are pushed to, as `helm push` takes it: `oci://HOST[:PORT]/PATH`,
/// the path lower-case parts between `/` (it may be empty). Kept without a trailing `/`. The
/// chart of a service is `<repository>/<dns_name>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChartRepository(String);

impl ChartRepository {
    /// The address of the chart named `chart`: `oci://HOST/PATH/<chart>`.
    pub fn chart_url(&self, chart: &str) -> String {
        format!("{}/{chart}", self.0)
    }
}

impl FromStr for ChartRepository {
    type Err = RenderError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = |reason| RenderError::InvalidChartRepository {
            given: s.to_owned(),
            reason,
        };
        let rest = s
            .strip_prefix("oci://")
            .ok_or_else(|| invalid("it does not start with oci://"))?
            .trim_end_matches('/');
        let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
        if host.is_empty() {
            return Err(invalid("it names no host"));
        }
        if !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c))
        {
            return Err(invalid(
                "the host is letters, digits, `.` and `-`, with an optional :PORT",
            ));
        }
        let part_ok = |part: &str| {
            part.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                && part.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
        };
        if !path.is_empty() && !path.split('/').all(part_ok) {
            return Err(invalid(
                "each part of the path is lower-case letters and digits, with `.`, `_` or `-` \
                 between them, and names no tag or digest",
            ));
        }
        Ok(Self(format!("oci://{rest}")))
    }
}

impl fmt::Display for ChartRepository {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Renders the OCIRepository and the HelmRelease.
pub(crate) fn render(
    config: &ServiceConfig,
    options: &RenderOptions,
) -> Result<Vec<RenderedFile>, RenderError> {
    let name = &config.dns_name;
    let repository =
        options
            .chart
            .repository
            .as_ref()
            .ok_or_else(|| RenderError::NoChartRepository {
                service: config.name.clone(),
                target: Target::Flux,
            })?;
    if name.len() > MAX_RELEASE_NAME {
        return Err(RenderError::ReleaseNameTooLong {
            service: config.name.clone(),
            name: name.clone(),
            target: Target::Flux,
        });
    }
    let labels = common::descriptive_labels(config, &options.release);
    let mut metadata = Map::new();
    metadata.insert("name".into(), json!(name));
    if let Some(namespace) = &options.namespace {
        metadata.insert("namespace".into(), json!(namespace));
    }
    metadata.insert("labels".into(), Value::Object(labels.clone()));

    let mut source_spec = json!({
        "interval": SOURCE_INTERVAL,
        "url": repository.chart_url(name),
        "ref": {"tag": options.chart.version.oci_tag()},
        "layerSelector": {"mediaType": CHART_LAYER, "operation": "copy"},
    });
    if options.chart.insecure {
        source_spec["insecure"] = json!(true);
    }
    let source = json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "OCIRepository",
        "metadata": metadata,
        "spec": source_spec,
    });

    let mut chart_ref = json!({"kind": "OCIRepository", "name": name});
    if let Some(namespace) = &options.namespace {
        chart_ref["namespace"] = json!(namespace);
    }
    // The stage (and GitLab release) this object installs at, over the chart's own: Helm
    // merges maps, so the chart's other labels stay.
    let stage_labels: Map<String, Value> = labels
        .iter()
        .filter(|(key, _)| *key == STAGE_LABEL || *key == GITLAB_RELEASE_LABEL)
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    let release = json!({
        "apiVersion": "helm.toolkit.fluxcd.io/v2",
        "kind": "HelmRelease",
        "metadata": metadata,
        "spec": {
            "interval": RELEASE_INTERVAL,
            "releaseName": name,
            "chartRef": chart_ref,
            "install": {"remediation": {"retries": RETRIES}},
            "upgrade": {
                "cleanupOnFail": true,
                "remediation": {"retries": RETRIES, "remediateLastFailure": true},
            },
            "values": {"labels": stage_labels},
        },
    });

    let mut source_yaml = format!(
        "# Where Flux finds the {name} chart, version {version}: `helm package` of it makes\n\
         # {name}-{version}.tgz, which\n\
         # `helm push {name}-{version}.tgz {repository}`\n\
         # stores here.\n",
        version = options.chart.version,
    );
    source_yaml.push_str(&yaml::document(&source));
    let mut release_yaml = format!(
        "# Flux installs the {name} chart from the OCIRepository {name} as the Helm release\n\
         # {name}, so its objects are named as `runway render -t kubernetes` names them, and\n\
         # its values label them with stage {stage} (Helm merges them over the chart's labels).\n",
        stage = common::stage(config, &options.release),
    );
    if common::image(config, options).is_none() {
        release_yaml.push_str(
            "# The manifest names no image: the chart needs one, given when it was rendered\n\
             # (--image) or here as values.image.repository.\n",
        );
    }
    release_yaml.push_str(&yaml::document(&release));
    Ok(vec![
        RenderedFile {
            path: format!("{name}/ocirepository.yaml"),
            contents: source_yaml,
        },
        RenderedFile {
            path: format!("{name}/helmrelease.yaml"),
            contents: release_yaml,
        },
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_repositories_are_oci_addresses_kept_without_a_trailing_slash() {
        for (given, url) in [
            (
                "oci://registry.example.com/charts",
                "oci://registry.example.com/charts/web",
            ),
            (
                "oci://registry.example.com/charts/",
                "oci://registry.example.com/charts/web",
            ),
            (
                "oci://localhost:5000/a/b-c/d.e",
                "oci://localhost:5000/a/b-c/d.e/web",
            ),
            ("oci://localhost:5000", "oci://localhost:5000/web"),
            ("oci://localhost:5000//", "oci://localhost:5000/web"),
        ] {
            let repository: ChartRepository = given.parse().unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(repository.chart_url("web"), url, "{given}");
        }
        for given in [
            "registry.example.com/charts",
            "https://registry.example.com/charts",
            "oci://",
            "oci:///charts",
            "oci://registry.example.com/Charts",
            "oci://registry.example.com/charts//web",
            "oci://registry.example.com/charts:1.0",
            "oci://registry.example.com/charts@sha256:ab",
            "oci://registry example.com/charts",
            "oci://registry.example.com/-charts",
        ] {
            let error = given.parse::<ChartRepository>().expect_err(given);
            assert!(
                error
                    .to_string()
                    .contains("expected oci://HOST[:PORT]/PATH"),
                "{error}"
            );
        }
    }
}
