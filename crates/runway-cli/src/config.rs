//! Where the CLI finds its server and token: `$RUNWAY_CONFIG` or
//! `$XDG_CONFIG_HOME/runway/config.json` (`~/.config/runway/config.json`), written by
//! `runway login` (mode 0600, created atomically), with `RUNWAY_SERVER`, `RUNWAY_TOKEN` and
//! `RUNWAY_CA` overriding it (for CI).

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

/// The file's contents. The token is never printed.
#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Config {
    /// The control plane's URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) server: Option<String>,
    /// The API token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) token: Option<String>,
    /// The environment variable holding a short-lived identity token (CI's OIDC token), read
    /// at each command instead of a token kept here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) token_env: Option<String>,
    /// A PEM file of the certificate authority to trust for the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ca: Option<PathBuf>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("server", &self.server)
            .field("token", &self.token.as_ref().map(|_| "<hidden>"))
            .field("token_env", &self.token_env)
            .field("ca", &self.ca)
            .finish()
    }
}

/// The settings a command talks to the server with.
#[derive(Clone)]
pub(crate) struct Resolved {
    pub(crate) server: String,
    pub(crate) token: String,
    pub(crate) ca: Option<PathBuf>,
}

impl std::fmt::Debug for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolved")
            .field("server", &self.server)
            .field("ca", &self.ca)
            .finish_non_exhaustive()
    }
}

/// The configuration file's path.
pub(crate) fn path() -> anyhow::Result<PathBuf> {
    if let Some(path) = env("RUNWAY_CONFIG") {
        return Ok(PathBuf::from(path));
    }
    if let Some(dir) = env("XDG_CONFIG_HOME") {
        return Ok(PathBuf::from(dir).join("runway/config.json"));
    }
    match env("HOME") {
        Some(home) => Ok(PathBuf::from(home).join(".config/runway/config.json")),
        None => bail!("no configuration file: set RUNWAY_CONFIG or HOME"),
    }
}

/// A non-empty environment variable.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Reads the file; an absent file is an empty configuration.
pub(crate) fn load(path: &Path) -> anyhow::Result<Config> {
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).with_context(|| {
            format!(
                "{} is not a Runway configuration file; run `runway login` to write it again",
                path.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// The file with the environment's overrides, complete, or why not.
pub(crate) fn resolve() -> anyhow::Result<Resolved> {
    let path = path()?;
    let file = load(&path)?;
    let server = env("RUNWAY_SERVER").or(file.server);
    let from_variable = match &file.token_env {
        Some(name) => Some(env(name).with_context(|| {
            format!("{name} is empty or not set: it holds the identity token `runway login --oidc-token-env {name}` named")
        })?),
        None => None,
    };
    let token = env("RUNWAY_TOKEN").or(file.token).or(from_variable);
    let ca = env("RUNWAY_CA").map(PathBuf::from).or(file.ca);
    match (server, token) {
        (Some(server), Some(token)) => Ok(Resolved {
            server,
            token: token.trim().to_owned(),
            ca,
        }),
        (server, _) => bail!(
            "not logged in{}: run `runway login --server URL --token -` (the token read from standard input), or set RUNWAY_SERVER and RUNWAY_TOKEN",
            match server {
                Some(server) => format!(" to {server} (no token)"),
                None => String::new(),
            }
        ),
    }
}

/// Writes `config` to `path` with mode 0600: into a new file beside it, then renamed over it,
/// so that a reader sees the old file or the new one, never part of one.
pub(crate) fn save(path: &Path, config: &Config) -> anyhow::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "config.json".to_owned());
    let temp = dir.join(format!(".{file_name}.{}.tmp", std::process::id()));
    let text = format!("{}\n", serde_json::to_string_pretty(config)?);
    let written = (|| -> std::io::Result<()> {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        fs::rename(&temp, path)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&temp);
        return Err(e).with_context(|| format!("cannot write {}", path.display()));
    }
    Ok(())
}
