//! The API server's configuration: a YAML (or JSON) file, every key optional, unknown keys
//! refused, an error naming the file, line and key path.
//!
//! ```yaml
//! listen: 127.0.0.1:7443
//! data_dir: /var/lib/runway
//! tls:
//!   enabled: true          # false: plain HTTP (tests, or behind a TLS proxy)
//!   ca_dir: null           # default {data_dir}/ca, shared with the ingress
//!   hostnames: [localhost, 127.0.0.1]
//! environments: [dev, staging, production]   # also the promotion order; `preview` adds previews
//! previews:
//!   ttl_seconds: 259200    # a preview goes 3 days after its last deploy
//!   max_per_service: 10
//! limits:
//!   body_bytes: 1048576
//!   request_timeout_seconds: 30
//!   tls_handshake_timeout_seconds: 10
//!   header_read_timeout_seconds: 30
//!   shutdown_grace_seconds: 30
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::server::{Limits, ServeOptions};

/// The API server's settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiConfig {
    /// Where to listen.
    pub listen: SocketAddr,
    /// The control plane's state: the store, the master key, the local CA.
    pub data_dir: PathBuf,
    /// TLS.
    pub tls: TlsConfig,
    /// The environments, in promotion order.
    pub environments: Vec<String>,
    /// Bounds on requests and connections.
    pub limits: LimitsConfig,
    /// Identity tokens from CI (OIDC issuers) accepted as bearer tokens.
    pub oidc: crate::oidc::OidcConfig,
    /// Preview environments, where `environments` lists `preview`.
    pub previews: PreviewsConfig,
    /// People sign in through an OpenID Connect provider.
    pub sso: Option<crate::sso::SsoConfig>,
}

/// The longest a preview may live after its last deploy: a year.
const MAX_PREVIEW_TTL_SECONDS: u64 = 365 * 24 * 3600;

/// Preview environments (`runway deploy --preview NAME`): how long one lives after its last
/// deploy, and how many a service may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PreviewsConfig {
    /// Seconds from a preview's last deploy to its decommission.
    pub ttl_seconds: u64,
    /// The most previews one service may have at once; a new one past it is refused.
    pub max_per_service: u32,
}

impl Default for PreviewsConfig {
    fn default() -> Self {
        Self {
            ttl_seconds: 3 * 24 * 3600,
            max_per_service: 10,
        }
    }
}

impl PreviewsConfig {
    /// [`Self::ttl_seconds`] as a duration.
    pub fn ttl(&self) -> Duration {
        Duration::from_secs(self.ttl_seconds)
    }
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 7443)),
            data_dir: PathBuf::from("/var/lib/runway"),
            tls: TlsConfig::default(),
            environments: ["dev", "staging", "production"].map(str::to_owned).to_vec(),
            limits: LimitsConfig::default(),
            oidc: crate::oidc::OidcConfig::default(),
            previews: PreviewsConfig::default(),
            sso: None,
        }
    }
}

/// TLS settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// Serve HTTPS (the default) or plain HTTP.
    pub enabled: bool,
    /// The local certificate authority's directory; `{data_dir}/ca` when absent.
    pub ca_dir: Option<PathBuf>,
    /// The names the API's certificate is for.
    pub hostnames: Vec<String>,
}

impl Default for TlsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            ca_dir: None,
            hostnames: vec!["localhost".to_owned(), "127.0.0.1".to_owned()],
        }
    }
}

/// Every bound, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// The largest request body, in bytes.
    pub body_bytes: usize,
    /// From a request's arrival to its response's head.
    pub request_timeout_seconds: u64,
    /// A TLS handshake.
    pub tls_handshake_timeout_seconds: u64,
    /// A request's head.
    pub header_read_timeout_seconds: u64,
    /// Open connections after shutdown is asked.
    pub shutdown_grace_seconds: u64,
    /// Client connections served at once; more are closed at accept.
    pub max_connections: usize,
    /// The largest code snapshot (a process revision's source tree), as an uncompressed tar
    /// archive, in bytes.
    pub source_bytes: u64,
    /// An upload of a code snapshot, from its request's arrival to its answer.
    pub upload_timeout_seconds: u64,
}

/// The largest code snapshot by default: 128 MiB uncompressed.
pub const DEFAULT_SOURCE_BYTES: u64 = 128 << 20;

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            body_bytes: 1 << 20,
            request_timeout_seconds: 30,
            tls_handshake_timeout_seconds: 10,
            header_read_timeout_seconds: 30,
            shutdown_grace_seconds: 30,
            max_connections: ServeOptions::default().max_connections,
            source_bytes: DEFAULT_SOURCE_BYTES,
            upload_timeout_seconds: 600,
        }
    }
}

/// Why the configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a valid configuration.
    #[error("{}{}: {key}: {message}", path.display(), position(*line, *column))]
    Parse {
        /// The file.
        path: PathBuf,
        /// The line, from 1, when known.
        line: Option<u64>,
        /// The column, from 1, when known.
        column: Option<u64>,
        /// The key path (`limits.body_bytes`), `.` for the document.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// The values are valid one by one but not together.
    #[error("{}: {key}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The key at fault.
        key: String,
        /// What is wrong.
        message: String,
    },
}

fn position(line: Option<u64>, column: Option<u64>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(":{l}:{c}"),
        (Some(l), None) => format!(":{l}"),
        _ => String::new(),
    }
}

/// Parses a configuration file's text (YAML; JSON is YAML too) into any serde type, an empty
/// file giving its defaults; errors name the file, line, column and key path. `runway server`
/// reads its whole file, of which [`ApiConfig`] is one section, with it.
///
/// # Errors
/// [`ConfigError::Parse`].
pub fn parse_file<T: serde::de::DeserializeOwned + Default>(
    path: &Path,
    text: &str,
) -> Result<T, ConfigError> {
    if text.trim().is_empty() {
        return Ok(T::default());
    }
    let mut key = String::new();
    serde_saphyr::with_deserializer_from_str(text, |de| {
        serde_path_to_error::deserialize(de).map_err(|e| {
            key = e.path().to_string();
            e.into_inner()
        })
    })
    .map_err(|e| {
        let location = e.location();
        ConfigError::Parse {
            path: path.to_owned(),
            line: location.as_ref().map(serde_saphyr::Location::line),
            column: location.as_ref().map(serde_saphyr::Location::column),
            key: if key.is_empty() { ".".to_owned() } else { key },
            message: first_line(&e.to_string()),
        }
    })
}

impl ApiConfig {
    /// Reads and checks the configuration file at `path` (YAML; JSON is YAML too).
    ///
    /// # Errors
    /// See [`ConfigError`]; each names the file, and a parse error the line and key path.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(path, &text)
    }

    /// Parses and checks `text`, as read from `path`.
    ///
    /// # Errors
    /// See [`ConfigError`].
    pub fn parse(path: &Path, text: &str) -> Result<Self, ConfigError> {
        let config: Self = parse_file(path, text)?;
        config.check(path)?;
        Ok(config)
    }

    /// Checks what serde cannot: values valid one by one but not together. `path` names the
    /// file in the errors.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the key at fault.
    pub fn check(&self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            path: path.to_owned(),
            key: key.to_owned(),
            message,
        };
        if self.environments.is_empty() {
            return Err(invalid(
                "environments",
                "at least one environment is needed".into(),
            ));
        }
        for (i, env) in self.environments.iter().enumerate() {
            if !crate::routes::is_label(env) {
                return Err(invalid(
                    &format!("environments[{i}]"),
                    format!("{env:?} is not a DNS label ({})", crate::routes::LABEL_RULE),
                ));
            }
            if self.environments[..i].contains(env) {
                return Err(invalid(
                    &format!("environments[{i}]"),
                    format!("{env:?} is listed twice"),
                ));
            }
        }
        // A revision is named `{service}-{env}-{number}`: with `prod` and `eu-prod`, service
        // `web-eu` in prod and `web` in eu-prod would name theirs alike, and one service could
        // take names the other needs.
        for (i, env) in self.environments.iter().enumerate() {
            if let Some(other) = self
                .environments
                .iter()
                .find(|other| env.ends_with(&format!("-{other}")))
            {
                let head = &env[..env.len() - other.len() - 1];
                return Err(invalid(
                    &format!("environments[{i}]"),
                    format!(
                        "{env:?} ends with \"-{other}\", another environment's name: revisions \
                         of a service `x-{head}` in {other} and `x` in {env} would have the same \
                         names; rename one of them"
                    ),
                ));
            }
        }
        for (i, issuer) in self.oidc.issuers.iter().enumerate() {
            for (j, binding) in issuer.bindings.iter().enumerate() {
                binding
                    .check()
                    .map_err(|why| invalid(&format!("oidc.issuers[{i}].bindings[{j}]"), why))?;
            }
        }
        if let Some(sso) = &self.sso {
            sso.check().map_err(|(key, why)| invalid(&key, why))?;
        }
        if !(1..=MAX_PREVIEW_TTL_SECONDS).contains(&self.previews.ttl_seconds) {
            return Err(invalid(
                "previews.ttl_seconds",
                format!(
                    "{} is out of range: a preview lives from 1 second to a year \
                     ({MAX_PREVIEW_TTL_SECONDS}) after its last deploy",
                    self.previews.ttl_seconds
                ),
            ));
        }
        if self.previews.max_per_service == 0 {
            return Err(invalid(
                "previews.max_per_service",
                "0 would refuse every preview: give at least 1, or leave `preview` out of \
                 `environments` to have none"
                    .into(),
            ));
        }
        if self.tls.enabled && self.tls.hostnames.is_empty() {
            return Err(invalid(
                "tls.hostnames",
                "TLS needs at least one host name".into(),
            ));
        }
        let l = &self.limits;
        for (key, value) in [
            ("limits.request_timeout_seconds", l.request_timeout_seconds),
            (
                "limits.tls_handshake_timeout_seconds",
                l.tls_handshake_timeout_seconds,
            ),
            (
                "limits.header_read_timeout_seconds",
                l.header_read_timeout_seconds,
            ),
            (
                "limits.body_bytes",
                u64::try_from(l.body_bytes).unwrap_or(u64::MAX),
            ),
            (
                "limits.max_connections",
                u64::try_from(l.max_connections).unwrap_or(u64::MAX),
            ),
            ("limits.source_bytes", l.source_bytes),
            ("limits.upload_timeout_seconds", l.upload_timeout_seconds),
        ] {
            if value == 0 {
                return Err(invalid(key, "must be above 0".into()));
            }
        }
        Ok(())
    }

    /// The local CA's directory: `tls.ca_dir`, or `{data_dir}/ca`.
    pub fn ca_dir(&self) -> PathBuf {
        self.tls
            .ca_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("ca"))
    }

    /// The bounds on one request.
    pub fn request_limits(&self) -> Limits {
        Limits {
            body_bytes: self.limits.body_bytes,
            request_timeout: Duration::from_secs(self.limits.request_timeout_seconds),
            upload_timeout: Duration::from_secs(self.limits.upload_timeout_seconds),
        }
    }

    /// The bounds on connections.
    pub fn serve_options(&self) -> ServeOptions {
        ServeOptions {
            tls_handshake_timeout: Duration::from_secs(self.limits.tls_handshake_timeout_seconds),
            header_read_timeout: Duration::from_secs(self.limits.header_read_timeout_seconds),
            shutdown_grace: Duration::from_secs(self.limits.shutdown_grace_seconds),
            max_connections: self.limits.max_connections,
        }
    }
}

/// The message's first line without serde-saphyr's `error: line N column M: ` prefix, which
/// the error already says in its own place.
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    let line = line.strip_prefix("error: ").unwrap_or(line);
    match line
        .strip_prefix("line ")
        .and_then(|rest| rest.split_once(": "))
    {
        Some((_, message)) => message.to_owned(),
        None => line.to_owned(),
    }
}
