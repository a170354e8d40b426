//! `runway render`.

use std::fs;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::ValueEnum;
use runway_manifest::Service;
use runway_render::{RenderOptions, Target};

use crate::repo::{discover, display, is_named, valid_services};
use crate::{EXIT_INVALID, RepoArg, print_stdout};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    repo: RepoArg,
    /// What to render to.
    #[arg(long, short = 't', value_enum)]
    target: TargetArg,
    /// Environment whose overrides (`runway-<env>.yml`) and variables (`env-<env>.yml`) apply.
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
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum TargetArg {
    /// Deployment, Service, HorizontalPodAutoscaler and PodDisruptionBudget.
    Kubernetes,
    /// A `serving.knative.dev/v1` Service, as `gcloud run services replace` takes it.
    Knative,
    /// A Helm chart directory.
    Helm,
}

impl From<TargetArg> for Target {
    fn from(t: TargetArg) -> Self {
        match t {
            TargetArg::Kubernetes => Self::Kubernetes,
            TargetArg::Knative => Self::Knative,
            TargetArg::Helm => Self::Helm,
        }
    }
}

pub(crate) fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let repo = discover(&args.repo.path)?;
    let options = RenderOptions {
        image: args.image.clone(),
        namespace: args.namespace.clone(),
    };
    let target = Target::from(args.target);
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
        let config = service.config(args.env.as_deref())?;
        files.extend(runway_render::render(&config, target, &options)?);
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
