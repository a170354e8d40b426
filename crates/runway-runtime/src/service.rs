//! From a service's settings (the manifest with its defaults applied) to an instance spec.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use runway_manifest::{
    Artifact as ConfigArtifact, ProbeAction, ProbeConfig, ServiceConfig, WorkloadKind,
};

use crate::process::StopSignal;
use crate::spec::{
    Artifact, Check, InstanceSpec, Limits, LogLimits, Probe, Probes, RestartMode, RestartPolicy,
};

/// What the platform decides about an instance beyond the service's settings.
#[derive(Debug, Clone, Default)]
pub struct InstanceOptions {
    pub id: String,
    pub revision: String,
    /// The image to run, pinned by digest; overrides the manifest's.
    pub image: Option<String>,
    /// The directory holding `.runway/`: process artifacts' working directories are relative
    /// to it.
    pub base_dir: PathBuf,
    /// Secrets' values, injected as environment variables.
    pub secret_env: BTreeMap<String, String>,
}

#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error(
        "service {0} names no image: set spec.image in the manifest or give one at deploy time"
    )]
    NoImage(String),
    #[error("service {0}: spec.workload.process.command is empty")]
    EmptyCommand(String),
}

/// The instance spec of one instance of a service. Services get port `Some(0)`: the runtime
/// gives them their `container_port` on a network of their own, a free port on the host's,
/// and sets `PORT` (apps listen on `$PORT`, as on Cloud Run).
pub fn instance_spec(
    config: &ServiceConfig,
    options: &InstanceOptions,
) -> Result<InstanceSpec, SpecError> {
    let artifact = match &config.artifact {
        ConfigArtifact::Image {
            reference,
            command,
            args,
        } => Artifact::Image {
            reference: options
                .image
                .clone()
                .or_else(|| reference.clone())
                .ok_or_else(|| SpecError::NoImage(config.name.clone()))?,
            command: command.clone(),
            args: args.clone(),
            working_dir: None,
        },
        ConfigArtifact::Process {
            command,
            working_dir,
        } => {
            let (program, args) = command
                .split_first()
                .ok_or_else(|| SpecError::EmptyCommand(config.name.clone()))?;
            Artifact::Command {
                program: PathBuf::from(program),
                args: args.to_vec(),
                working_dir: Some(resolve(&options.base_dir, working_dir.as_deref())),
            }
        }
    };
    let service = config.kind == WorkloadKind::Service;
    let mut env = config.env.clone();
    env.insert("K_SERVICE".to_owned(), config.name.clone());
    env.insert("K_REVISION".to_owned(), options.revision.clone());
    env.insert("K_CONFIGURATION".to_owned(), config.name.clone());
    let probes = if service {
        Probes {
            startup: Some(probe(&config.startup_probe)),
            readiness: config.readiness_probe.as_ref().map(probe),
            liveness: config.liveness_probe.as_ref().map(probe),
        }
    } else {
        Probes::default()
    };
    Ok(InstanceSpec {
        id: options.id.clone(),
        service: config.name.clone(),
        revision: options.revision.clone(),
        artifact,
        env,
        secret_env: options.secret_env.clone(),
        port: service.then_some(0),
        container_port: config.port.filter(|_| service),
        probes,
        stop_signal: config
            .stop_signal
            .short_name()
            .parse()
            .unwrap_or(StopSignal::TERM),
        stop_grace_period: Duration::from_secs(config.stop_grace_period_seconds.into()),
        restart: RestartPolicy {
            mode: if service {
                RestartMode::Always
            } else {
                RestartMode::OnFailure
            },
            ..RestartPolicy::default()
        },
        limits: Limits {
            memory_bytes: Some(config.memory_bytes),
            cpu_millis: Some(config.cpu_millis),
        },
        logs: LogLimits::default(),
        managed: false,
        inherit_env: false,
        sandbox: None,
        network: None,
        egress: config.egress.clone(),
        identity_token: None,
    })
}

fn resolve(base: &Path, dir: Option<&str>) -> PathBuf {
    match dir {
        Some(dir) => base.join(dir),
        None => base.to_owned(),
    }
}

fn probe(config: &ProbeConfig) -> Probe {
    Probe {
        check: match &config.action {
            ProbeAction::Http { path } => Check::Http { path: path.clone() },
            ProbeAction::Grpc { service } => Check::Grpc {
                service: service.clone(),
            },
            ProbeAction::Tcp => Check::Tcp,
        },
        initial_delay: Duration::from_secs(config.initial_delay_seconds.into()),
        period: Duration::from_secs(config.period_seconds.into()),
        timeout: Duration::from_secs(config.timeout_seconds.into()),
        failure_threshold: config.failure_threshold,
        success_threshold: config.success_threshold,
    }
}
