//! `runway server`: its arguments and a thin main over `runway_server` (the configuration,
//! `start`, the driver, the platform): the file loaded, the data directory given, the
//! commands besides serving, then the server started, its addresses said, and stopped on
//! SIGTERM or SIGINT.

use std::path::PathBuf;

use anyhow::Context;
use runway_ingress::daemon::Outcome;
use runway_server::{ServerConfig, shutdown_signal, start};

/// `runway server`'s arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The configuration file (YAML): `api`, `ingress`, `control`, `runtime`, `store`,
    /// `leader`, `secrets`, `observability`, `domains`, `registry`, `audit`, `signatures` and
    /// `identity` sections, every key optional, unknown keys refused
    /// (docs/server-configuration.md has a sample with every key; `runway server check-config`
    /// prints the configuration in force, ports included).
    #[arg(long, value_name = "FILE", global = true)]
    pub(crate) config: Option<PathBuf>,
    /// Where the store, the master key, the certificate authority and the instances' state
    /// live (overrides `api.data_dir`).
    #[arg(long, value_name = "DIR", env = "RUNWAY_DATA_DIR", global = true)]
    pub(crate) data_dir: Option<PathBuf>,
    /// How this process's log lines are written on stderr: `text` (readable) or `json` (one
    /// object a line, with the spans it happened in: service, environment, deployment,
    /// revision, instance); `RUST_LOG` filters them (default `info`).
    #[arg(long, value_name = "FORMAT", default_value = "text", global = true)]
    pub(crate) log_format: runway_log::LogFormat,
    #[command(subcommand)]
    pub(crate) command: Option<ServerCommand>,
}

/// What `runway server` does besides serving.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum ServerCommand {
    /// Recover admin access: revoke every admin token and print a new one.
    ///
    /// For an operator who lost the admin token (or never saw it). Needs what the server
    /// itself needs: to read and write the data directory's store, so local root (or the
    /// server's user) on this machine. Works whether or not the server is running; the old
    /// admin tokens stop working at once. The new token goes to standard output, alone.
    AdminToken,
    /// Check the configuration and what it names, start nothing, and print the configuration
    /// in force (every default applied) as JSON.
    ///
    /// Checks the file's keys and values, the certificate authority when it exists, the
    /// control channel's certificates with `ingress.remote`, the store URL's form and a named
    /// master key, and with `runtime.kind: kubernetes` the kubeconfig (or the pod's service
    /// account), reaching neither the database nor the cluster. Exits non-zero, naming the
    /// key or file, on the first problem.
    CheckConfig,
    /// Copy this data directory's SQLite store into an empty PostgreSQL database.
    ///
    /// Everything is copied as it is: services and their identities, revisions, deployments
    /// with their events, desired state, secrets (still sealed: the copy never sees a value),
    /// tokens and the audit log. The server must not be running on the data directory (its
    /// lock is held for the copy), and the target must hold nothing. Afterwards set
    /// `store.url` in the configuration, and give every replica this data directory's
    /// `master.key`: the secrets are sealed with it.
    MigrateStore {
        /// The PostgreSQL database to copy into (`postgres://user:password@host:port/db`), or
        /// `-` to read it from standard input, keeping a password out of the process list.
        /// Over TLS its certificate is checked against `store.ca_file` from --config, or the
        /// system's roots.
        #[arg(long, value_name = "URL")]
        to: String,
    },
}

/// `runway server`: runs until SIGTERM or SIGINT.
pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let mut config = ServerConfig::load(args.config.as_deref())?;
    if let Some(dir) = &args.data_dir {
        config.api.data_dir.clone_from(dir);
    } else if args.config.is_none() {
        config.api.data_dir = crate::local::default_state_dir()?.join("server");
    }
    if let Some(ServerCommand::AdminToken) = args.command {
        let (token, revoked) = runway_server::admin_token(&config)?;
        eprintln!(
            "runway server: revoked {revoked} admin token{}; the new one, shown this once:",
            if revoked == 1 { "" } else { "s" }
        );
        crate::print_stdout(&format!("{token}\n"));
        return Ok(());
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    match &args.command {
        Some(ServerCommand::CheckConfig) => {
            for note in runway_server::check_config(&config, &runway_server::drivers())? {
                eprintln!("runway server: {note}");
            }
            let text =
                serde_json::to_string_pretty(&config).context("cannot write the configuration")?;
            crate::print_stdout(&format!("{text}\n"));
            eprintln!(
                "runway server: {} is good",
                args.config.as_deref().map_or_else(
                    || "the default configuration".to_owned(),
                    |p| p.display().to_string()
                )
            );
            return Ok(());
        }
        Some(ServerCommand::MigrateStore { to }) => {
            let done =
                runway_server::migrate_store(&config.api.data_dir, to, &config.store.trust()?)?;
            for line in done {
                eprintln!("runway server: {line}");
            }
            return Ok(());
        }
        _ => {}
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(async move {
            let running = start(config).await?;
            let scheme = if running.ca_pem.is_empty() { "http" } else { "https" };
            eprintln!("runway server: API on {scheme}://{}", running.api);
            eprintln!(
                "runway server: the console on {scheme}://{}/ui/ (sign in with a token)",
                running.api
            );
            match &running.ingress {
                Some(process) => {
                    eprintln!(
                        "runway server: services on https://{{service}}.{{env}}.localhost:{} (HTTP \
                         on {})",
                        running.https_port, process.bound.http
                    );
                    eprintln!(
                        "runway server: ingress metrics on http://{}/metrics",
                        process.bound.admin
                    );
                    let pid = process.pid;
                    match &process.outcome {
                        Outcome::Started => eprintln!("runway server: ingress pid {pid} (started)"),
                        Outcome::Adopted => eprintln!("runway server: ingress pid {pid} (adopted)"),
                        Outcome::Replaced { old_pid, reason } => eprintln!(
                            "runway server: ingress pid {pid} (replaced pid {old_pid}: {reason})"
                        ),
                    }
                }
                None => eprintln!(
                    "runway server: services on port {} of the ingresses fed over the network",
                    running.https_port
                ),
            }
            eprintln!(
                "runway server: clients trust the certificate authority in {}",
                running.ca_path.display()
            );
            if let Some(token) = &running.admin_token {
                eprintln!(
                    "runway server: the admin token, shown this once (it is stored hashed):\n{token}\n\
                     log in with: runway login --server https://{} --ca {} --token -",
                    running.api,
                    running.ca_path.display()
                );
            }
            shutdown_signal().await?;
            match &running.ingress {
                Some(process) => eprintln!(
                    "runway server: stopping (the ingress, pid {}, and the instances keep \
                     running)",
                    process.pid
                ),
                None => eprintln!("runway server: stopping (the ingresses keep serving)"),
            }
            running.stop().await?;
            eprintln!("runway server: stopped");
            Ok(())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_help_names_every_section() {
        use clap::CommandFactory;
        let help = crate::Cli::command()
            .find_subcommand_mut("server")
            .map(|server| server.render_long_help().to_string())
            .unwrap_or_default();
        let sections = serde_json::to_value(ServerConfig::default()).unwrap();
        for section in sections.as_object().unwrap().keys() {
            assert!(help.contains(&format!("`{section}`")), "{section}: {help}");
        }
    }
}
