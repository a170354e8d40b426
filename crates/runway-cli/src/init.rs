//! `runway init`.

use std::fs;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use runway_manifest::{ServiceFiles, SourceFile, load};

use crate::repo::display;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Repository root to create `.runway/runway.yml` in.
    #[arg(default_value = ".")]
    dir: PathBuf,
    /// Service name, a DNS label. Default: the directory's name.
    #[arg(long)]
    name: Option<String>,
    /// Port the service listens on.
    #[arg(long)]
    port: Option<u16>,
    /// Container image; may be left out and given at deploy time.
    #[arg(long)]
    image: Option<String>,
    /// Replace an existing `.runway/runway.yml`.
    #[arg(long)]
    force: bool,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let path = args.dir.join(".runway").join("runway.yml");
    if path.exists() && !args.force {
        bail!(
            "{} already exists; pass --force to replace it",
            display(&path)
        );
    }
    let interactive = std::io::stdin().is_terminal();
    let default_name = default_name(&args.dir);
    let name = match &args.name {
        Some(name) => name.clone(),
        None if interactive => ask("Service name", &default_name)?,
        None => default_name,
    };
    let port = match args.port {
        Some(port) => port,
        None if interactive => {
            let answer = ask("Port", "8080")?;
            answer
                .parse()
                .with_context(|| format!("`{answer}` is not a port number (1-65535)"))?
        }
        None => 8080,
    };
    let image = match &args.image {
        Some(image) => Some(image.clone()),
        None if interactive => {
            Some(ask("Image (empty to give it at deploy time)", "")?).filter(|i| !i.is_empty())
        }
        None => None,
    };

    let text = template(&name, port, image.as_deref());
    // Check what we are about to write, so that a bad --name is refused with the usual message.
    let files = ServiceFiles {
        base: Some(SourceFile::new(display(&path), text.clone())),
        ..ServiceFiles::default()
    };
    let loaded = load(&files);
    if let Some(error) = loaded.diagnostics.iter().find(|d| d.is_error()) {
        bail!("{}", error.headline());
    }
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).with_context(|| format!("cannot create {}", display(parent)))?;
    }
    fs::write(&path, text).with_context(|| format!("cannot write {}", display(&path)))?;
    eprintln!("created {}", display(&path));
    eprintln!(
        "next: `runway validate {}`, then `runway render --target kubernetes {}`",
        display(&args.dir),
        display(&args.dir)
    );
    Ok(ExitCode::SUCCESS)
}

fn ask(question: &str, default: &str) -> anyhow::Result<String> {
    let mut stderr = std::io::stderr();
    if default.is_empty() {
        write!(stderr, "{question}: ")?;
    } else {
        write!(stderr, "{question} [{default}]: ")?;
    }
    stderr.flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let answer = line.trim();
    Ok(if answer.is_empty() {
        default.to_owned()
    } else {
        answer.to_owned()
    })
}

/// The directory's name as a DNS label: lower-case, other characters as `-`.
fn default_name(dir: &Path) -> String {
    let dir = fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let raw = dir
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    let mut name: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    name = name.trim_matches('-').to_owned();
    name.truncate(63);
    let name = name.trim_end_matches('-');
    if name.starts_with(|c: char| c.is_ascii_lowercase()) {
        name.to_owned()
    } else {
        format!("service-{name}").trim_end_matches('-').to_owned()
    }
}

fn template(name: &str, port: u16, image: Option<&str>) -> String {
    let image = match image {
        Some(image) => format!("  image: {image}\n"),
        None => "  # The image is given at deploy time (`runway deploy --image REF`), or here:\n  # image: registry.example.com/team/service:1.0.0\n".to_owned(),
    };
    format!(
        r#"# The Runway manifest: `runway validate` checks it, `runway render` turns it into Kubernetes,
# Knative or Helm. Per-environment changes go in runway-<env>.yml beside this file, and
# environment variables in env-<env>.yml. Every field: `runway schema` prints the JSON Schema.
apiVersion: runway/v1
kind: RunwayService
metadata:
  name: {name}
  # owner_email_handle: your-team
spec:
{image}  # The port the service listens on; instances get it as $PORT.
  container_port: {port}
  regions: [us-east1]
  # Seconds a request may take before the platform answers 504.
  request_timeout: 60
  resources:
    limits:
      cpu: 1000m
      memory: 512Mi
  scalability:
    # 0 lets the service scale to zero when idle.
    min_instances: 0
    max_instances: 10
    max_instance_request_concurrency: 80
  # Checked until the service has started. Without it, a TCP connection to the port counts.
  # startup_probe:
  #   path: /healthz
  #   period_seconds: 1
  #   failure_threshold: 30
  # Failing this takes an instance out of traffic until it passes again.
  # readiness_probe:
  #   path: /healthz
  deployment:
    # legacy: rolling; regional_rollout: region by region in steps; expedited: at once.
    strategy: legacy
  # workload:
  #   env:
  #     LOG_LEVEL: info
  #   secrets: [DATABASE_PASSWORD]   # values: `runway secrets set`
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_directories() {
        assert_eq!(default_name(Path::new("/tmp/My_Service")), "my-service");
        assert_eq!(default_name(Path::new("/tmp/123")), "service-123");
        assert_eq!(default_name(Path::new("/tmp/--a--")), "a");
    }

    #[test]
    fn the_template_is_valid() {
        for image in [None, Some("registry.example.com/a:1")] {
            let files = ServiceFiles {
                base: Some(SourceFile::new("t", template("svc", 9000, image))),
                ..ServiceFiles::default()
            };
            let loaded = load(&files);
            assert_eq!(loaded.diagnostics, vec![]);
        }
    }
}
