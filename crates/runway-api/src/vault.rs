//! Secrets from OpenBao or HashiCorp Vault (`secrets.vault`), as upstream keeps them: a KV
//! version 2 engine, one secret per variable at `runway/env/{environment}/service/{service}/
//! {NAME}`, its value under the key `value`.
//!
//! A deploy reads each secret its manifest names from Vault, and mirrors it into the sealed
//! store as a new version only when Vault's version changed (the sealed version records where
//! it came from: `vault secret/runway/env/production/service/app/API_KEY version 3`). The
//! revision pins sealed versions as always, so a rollback gets the values it had, and running
//! instances never depend on Vault: only a deploy or a promotion reads it. A secret missing in
//! Vault, or Vault unreachable, refusing or slower than `timeout_ms`, fails the deploy before
//! anything is recorded. Values never reach an error, a log or the store in plaintext.
//!
//! Runway signs in with a token from a file (read at each sign-in, so a rotated one is taken)
//! or with Vault's JWT auth method: a role and an identity token from a file (a Kubernetes
//! service account's projected token, say), the client token it gives kept until near the end
//! of its lease.

use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use runway_secrets::SecretValue;
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

/// Secrets read from Vault at once for one deploy (the sign-in is one, shared).
pub const READS_AT_ONCE: usize = 8;

/// The path template upstream uses.
pub const DEFAULT_PATH: &str = "runway/env/{environment}/service/{service}";

/// `secrets` in the server's configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SecretsConfig {
    /// Where deploys read secrets from; without it, the sealed store alone (`runway secrets
    /// set`).
    pub vault: Option<VaultConfig>,
}

/// `secrets.vault`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VaultConfig {
    /// `https://vault.example.com:8200`.
    pub address: String,
    /// The authority (PEM) Vault's certificate comes from; default the system's roots.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// A Vault Enterprise or OpenBao namespace, sent as `X-Vault-Namespace`.
    #[serde(default)]
    pub namespace: Option<String>,
    /// How Runway signs in.
    pub auth: VaultAuth,
    /// The KV version 2 engine's mount.
    #[serde(default = "default_mount")]
    pub mount: String,
    /// Where a service's secrets are in an environment: `{service}` and `{environment}` are
    /// replaced; each secret is `{path}/{NAME}`.
    #[serde(default = "default_path")]
    pub path: String,
    /// The bound on reading all of one deploy's secrets (and signing in).
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
}

fn default_mount() -> String {
    "secret".to_owned()
}

fn default_path() -> String {
    DEFAULT_PATH.to_owned()
}

fn default_timeout_ms() -> u64 {
    5_000
}

/// How Runway signs in to Vault.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum VaultAuth {
    /// A Vault token, read from a file at each sign-in.
    Token {
        /// The file.
        token_file: PathBuf,
    },
    /// The JWT auth method: `POST /v1/auth/{mount}/login` with a role and an identity token.
    Jwt {
        /// The role, whose bound claims and policies Vault checks.
        role: String,
        /// The identity token's file, read at each sign-in.
        token_file: PathBuf,
        /// The auth method's mount.
        #[serde(default = "default_jwt_mount")]
        mount: String,
    },
}

fn default_jwt_mount() -> String {
    "jwt".to_owned()
}

impl VaultConfig {
    /// What serde cannot check; `Err((key, message))`, the key under `secrets.vault`.
    pub fn check(&self) -> Result<(), (String, String)> {
        let invalid = |key: &str, message: String| Err((key.to_owned(), message));
        let Some(rest) = self
            .address
            .strip_prefix("https://")
            .or_else(|| self.address.strip_prefix("http://"))
        else {
            return invalid(
                "address",
                format!("{:?} is not an http:// or https:// URL", self.address),
            );
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        // The token (or the service account's JWT) goes with every request: in clear text
        // only to this machine.
        let host = rest.rsplit_once(':').map_or(rest, |(host, _)| host);
        if self.address.starts_with("http://")
            && !matches!(host, "localhost" | "127.0.0.1" | "[::1]")
        {
            return invalid(
                "address",
                format!(
                    "{:?}: plain http:// sends Vault's token in clear text; use https:// (http:// \
                     is for a Vault on this machine only)",
                    self.address
                ),
            );
        }
        if rest.is_empty() || rest.contains(['/', '?', '#', '@']) {
            return invalid(
                "address",
                format!(
                    "{:?}: give the scheme, host and port only (`https://vault.example.com:8200`)",
                    self.address
                ),
            );
        }
        if !self.path.contains("{service}") {
            return invalid(
                "path",
                format!(
                    "{:?} has no {{service}}: every service would read the same secrets",
                    self.path
                ),
            );
        }
        let mut probe = self
            .path
            .replace("{service}", "s")
            .replace("{environment}", "e");
        if probe.contains(['{', '}']) {
            return invalid(
                "path",
                format!(
                    "{:?}: only {{service}} and {{environment}} are replaced",
                    self.path
                ),
            );
        }
        probe.push('/');
        probe.insert_str(0, &format!("{}/", self.mount));
        for (key, text) in [("mount", self.mount.as_str()), ("path", probe.as_str())] {
            if text.starts_with('/')
                || text.split('/').any(|part| part == ".." || part == ".")
                || text.contains("//")
                || text.contains(|c: char| c.is_whitespace() || c.is_control() || c == '?')
            {
                return invalid(
                    key,
                    format!("{text:?} is not a Vault path (relative, no empty, `.` or `..` parts)"),
                );
            }
        }
        if self.timeout_ms == 0 {
            return invalid("timeout_ms", "must be above 0".into());
        }
        if let Some(namespace) = &self.namespace
            && (namespace.is_empty() || !namespace.bytes().all(|b| b.is_ascii_graphic()))
        {
            return invalid(
                "namespace",
                format!("{namespace:?}: expected printable ASCII without spaces"),
            );
        }
        if let VaultAuth::Jwt { role, mount, .. } = &self.auth {
            if role.is_empty() {
                return invalid("auth.jwt.role", "must not be empty".into());
            }
            if mount.is_empty() || mount.contains(['/', '?', '#']) {
                return invalid("auth.jwt.mount", format!("{mount:?} is not a mount's name"));
            }
        }
        Ok(())
    }

    /// Where `service`'s secret `name` is in `env`, as people and the `bao` CLI name it
    /// (`secret/runway/env/production/service/app/API_KEY`).
    pub fn place(&self, service: &str, env: &str, name: &str) -> String {
        format!("{}/{}", self.mount, self.relative(service, env, name))
    }

    /// The same without the mount.
    fn relative(&self, service: &str, env: &str, name: &str) -> String {
        let path = self
            .path
            .replace("{service}", service)
            .replace("{environment}", env);
        format!("{}/{name}", path.trim_end_matches('/'))
    }
}

/// One secret as read from Vault.
pub struct VaultSecret {
    /// Its variable's name.
    pub name: String,
    /// Its value.
    pub value: SecretValue,
    /// Vault's version of it.
    pub version: u64,
    /// When Vault made that version (`data.metadata.created_time`): a secret whose metadata
    /// was deleted starts again at version 1, so the version alone does not tell it apart.
    pub created: String,
    /// Where it is (`secret/runway/env/…/NAME`).
    pub place: String,
}

impl VaultSecret {
    /// What the sealed version mirrored from it records.
    pub fn origin(&self) -> String {
        format!(
            "vault {} version {} of {}",
            self.place, self.version, self.created
        )
    }
}

impl fmt::Debug for VaultSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VaultSecret")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("place", &self.place)
            .finish_non_exhaustive()
    }
}

/// Why a secret could not be read. No variant carries a value or a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VaultError {
    /// Nothing at that place (or its latest version is deleted or destroyed).
    #[error("secret {name} is not in Vault: nothing at {place}")]
    Missing { name: String, place: String },
    /// Vault could not be reached, or answered too late.
    #[error("Vault at {address} cannot be reached: {reason}")]
    Unreachable { address: String, reason: String },
    /// Vault refused (sign-in, or a read the token's policy does not allow).
    #[error("Vault refused {what}: {status} {reason}")]
    Refused {
        what: String,
        status: u16,
        reason: String,
    },
    /// Vault's answer is not a usable secret.
    #[error("{place}: {reason}")]
    Invalid { place: String, reason: String },
    /// A token file could not be read.
    #[error("cannot read {file}: {reason}")]
    TokenFile { file: String, reason: String },
}

/// A Vault client token, never printed.
#[derive(Clone)]
struct ClientToken {
    text: String,
    /// When to sign in again; `None` for a token from a file (read each time).
    renew_at: Option<Instant>,
}

/// The client: Runway's sign-in, kept, and reads.
pub struct Vault {
    config: VaultConfig,
    http: reqwest::Client,
    token: Mutex<Option<ClientToken>>,
}

impl fmt::Debug for Vault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Vault")
            .field("address", &self.config.address)
            .finish_non_exhaustive()
    }
}

impl Vault {
    /// The client of `config` (checked); a CA file that cannot be read is an error.
    pub fn new(config: &VaultConfig) -> Result<Self, String> {
        config
            .check()
            .map_err(|(key, message)| format!("secrets.vault.{key}: {message}"))?;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = reqwest::Client::builder()
            .timeout(Duration::from_millis(config.timeout_ms))
            .user_agent(concat!("runway/", env!("CARGO_PKG_VERSION")))
            // Vault's redirects (to a standby's leader) would carry the token elsewhere.
            .redirect(reqwest::redirect::Policy::none());
        if let Some(ca) = &config.ca_file {
            let pem = std::fs::read(ca)
                .map_err(|e| format!("secrets.vault.ca_file: cannot read {}: {e}", ca.display()))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| format!("secrets.vault.ca_file: {}: {e}", ca.display()))?;
            if certs.is_empty() {
                return Err(format!(
                    "secrets.vault.ca_file: {} holds no PEM certificate",
                    ca.display()
                ));
            }
            builder = builder.tls_certs_only(certs);
        }
        Ok(Self {
            config: config.clone(),
            http: builder
                .build()
                .map_err(|e| format!("secrets.vault: cannot set up HTTPS: {e}"))?,
            token: Mutex::default(),
        })
    }

    /// Its configuration.
    pub fn config(&self) -> &VaultConfig {
        &self.config
    }

    /// Reads `names` of `service` in `env`, up to [`READS_AT_ONCE`] at a time, all within
    /// `timeout_ms`; a failure ends the reads under way and is the answer.
    pub async fn read_all(
        &self,
        service: &str,
        env: &str,
        names: &[String],
    ) -> Result<Vec<VaultSecret>, VaultError> {
        let bound = Duration::from_millis(self.config.timeout_ms);
        tokio::time::timeout(bound, async {
            let mut secrets = Vec::with_capacity(names.len());
            for chunk in names.chunks(READS_AT_ONCE) {
                let reads: Vec<_> = chunk
                    .iter()
                    .map(|name| self.read(service, env, name))
                    .collect();
                secrets.extend(futures_util::future::try_join_all(reads).await?);
            }
            Ok(secrets)
        })
        .await
        .unwrap_or_else(|_| Err(self.too_slow()))
    }

    fn too_slow(&self) -> VaultError {
        VaultError::Unreachable {
            address: self.config.address.clone(),
            reason: format!(
                "no answer within secrets.vault.timeout_ms ({} ms)",
                self.config.timeout_ms
            ),
        }
    }

    /// Reads one secret: `GET /v1/{mount}/data/{path}/{name}`. A token that Vault refuses
    /// (expired) is replaced by a new sign-in once.
    pub async fn read(
        &self,
        service: &str,
        env: &str,
        name: &str,
    ) -> Result<VaultSecret, VaultError> {
        let place = self.config.place(service, env, name);
        let url = format!(
            "{}/v1/{}/data/{}",
            self.config.address.trim_end_matches('/'),
            self.config.mount,
            self.config.relative(service, env, name)
        );
        let mut signed_in_again = false;
        loop {
            let token = self.token().await?;
            let response = self
                .request(self.http.get(&url))
                .header("X-Vault-Token", &token.text)
                .send()
                .await
                .map_err(|e| self.unreachable(&e))?;
            let status = response.status().as_u16();
            if status == 403 && token.renew_at.is_some() && !signed_in_again {
                *self.token.lock().await = None;
                signed_in_again = true;
                continue;
            }
            let mut body: serde_json::Value = response.json().await.unwrap_or_default();
            return match status {
                200 => parse_secret(name, &place, &mut body),
                404 => Err(VaultError::Missing {
                    name: name.to_owned(),
                    place,
                }),
                _ => Err(VaultError::Refused {
                    what: format!("reading {place}"),
                    status,
                    reason: vault_errors(&body),
                }),
            };
        }
    }

    fn request(&self, builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.config.namespace {
            Some(namespace) => builder.header("X-Vault-Namespace", namespace),
            None => builder,
        }
    }

    fn unreachable(&self, error: &reqwest::Error) -> VaultError {
        if error.is_timeout() {
            return self.too_slow();
        }
        let mut reason = error.to_string();
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            reason.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        VaultError::Unreachable {
            address: self.config.address.clone(),
            reason,
        }
    }

    /// The client token: from its file, or the JWT sign-in's while it lasts.
    async fn token(&self) -> Result<ClientToken, VaultError> {
        let mut kept = self.token.lock().await;
        if let Some(token) = kept.as_ref()
            && token.renew_at.is_some_and(|at| Instant::now() < at)
        {
            return Ok(token.clone());
        }
        let token = match &self.config.auth {
            VaultAuth::Token { token_file } => ClientToken {
                text: read_token(token_file)?,
                renew_at: None,
            },
            VaultAuth::Jwt {
                role,
                token_file,
                mount,
            } => {
                self.jwt_login(role, &read_token(token_file)?, mount)
                    .await?
            }
        };
        *kept = token.renew_at.is_some().then(|| token.clone());
        Ok(token)
    }

    async fn jwt_login(
        &self,
        role: &str,
        jwt: &str,
        mount: &str,
    ) -> Result<ClientToken, VaultError> {
        let url = format!(
            "{}/v1/auth/{mount}/login",
            self.config.address.trim_end_matches('/')
        );
        let response = self
            .request(self.http.post(&url))
            .json(&serde_json::json!({ "role": role, "jwt": jwt }))
            .send()
            .await
            .map_err(|e| self.unreachable(&e))?;
        let status = response.status().as_u16();
        let body: serde_json::Value = response.json().await.unwrap_or_default();
        if status != 200 {
            return Err(VaultError::Refused {
                what: format!("signing in with JWT role {role:?} (auth/{mount})"),
                status,
                reason: vault_errors(&body),
            });
        }
        let auth = &body["auth"];
        let text = auth["client_token"]
            .as_str()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| VaultError::Refused {
                what: format!("signing in with JWT role {role:?} (auth/{mount})"),
                status,
                reason: "its answer has no auth.client_token".to_owned(),
            })?;
        // Signed in again at four fifths of the lease; a lease of 0 (a root policy's) is
        // kept a minute.
        let lease = auth["lease_duration"].as_u64().unwrap_or(0);
        let kept = if lease == 0 {
            Duration::from_secs(60)
        } else {
            Duration::from_secs(lease) * 4 / 5
        };
        Ok(ClientToken {
            text: text.to_owned(),
            renew_at: Some(Instant::now() + kept),
        })
    }
}

fn read_token(file: &std::path::Path) -> Result<String, VaultError> {
    let text = std::fs::read_to_string(file).map_err(|e| VaultError::TokenFile {
        file: file.display().to_string(),
        reason: e.to_string(),
    })?;
    let token = text.trim();
    if token.is_empty() {
        return Err(VaultError::TokenFile {
            file: file.display().to_string(),
            reason: "it is empty".to_owned(),
        });
    }
    Ok(token.to_owned())
}

/// Vault's `errors` list, joined; its own words, never a value.
fn vault_errors(body: &serde_json::Value) -> String {
    let errors: Vec<&str> = body["errors"]
        .as_array()
        .map(|list| list.iter().filter_map(serde_json::Value::as_str).collect())
        .unwrap_or_default();
    if errors.is_empty() {
        "(no reason given)".to_owned()
    } else {
        errors.join("; ")
    }
}

/// A KV version 2 read's answer: `data.data.value` and `data.metadata.version`.
fn parse_secret(
    name: &str,
    place: &str,
    body: &mut serde_json::Value,
) -> Result<VaultSecret, VaultError> {
    let invalid = |reason: String| VaultError::Invalid {
        place: place.to_owned(),
        reason,
    };
    let data = &mut body["data"];
    let version = data["metadata"]["version"].as_u64().ok_or_else(|| {
        invalid("no data.metadata.version: is the mount a KV version 2 engine?".into())
    })?;
    // Taken out of the answer rather than copied: the value wiped on drop is the only copy.
    let value = match data["data"]["value"].take() {
        serde_json::Value::String(value) => SecretValue::from(value),
        serde_json::Value::Null => {
            return Err(invalid(
                "no key `value`: Runway reads each secret's value under the key `value`".into(),
            ));
        }
        _ => return Err(invalid("its key `value` is not a string".into())),
    };
    value
        .check()
        .map_err(|e| invalid(format!("version {version}: {e}")))?;
    let created = data["metadata"]["created_time"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    Ok(VaultSecret {
        name: name.to_owned(),
        value,
        version,
        created,
        place: place.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(path: &str) -> VaultConfig {
        VaultConfig {
            address: "https://vault.example.com:8200".into(),
            ca_file: None,
            namespace: None,
            auth: VaultAuth::Token {
                token_file: "/run/token".into(),
            },
            mount: "secret".into(),
            path: path.into(),
            timeout_ms: 5000,
        }
    }

    #[test]
    fn places_follow_the_template() {
        let c = config(DEFAULT_PATH);
        assert_eq!(
            c.place("app", "production", "API_KEY"),
            "secret/runway/env/production/service/app/API_KEY"
        );
        assert!(c.check().is_ok());
    }

    #[test]
    fn templates_that_would_share_or_escape_are_refused() {
        for (path, why) in [
            ("runway/shared", "no {service}"),
            ("runway/{service}/{tenant}", "only {service}"),
            ("/runway/{service}", "not a Vault path"),
            ("runway/../{service}", "not a Vault path"),
            ("runway//{service}", "not a Vault path"),
        ] {
            let (key, message) = config(path).check().unwrap_err();
            assert_eq!(key, "path");
            assert!(message.contains(why), "{path}: {message}");
        }
        let mut c = config(DEFAULT_PATH);
        c.address = "vault.example.com".into();
        assert_eq!(c.check().unwrap_err().0, "address");
        for refused in [
            "https://vault.example.com/v1/secret",
            "https://vault.example.com/v1/",
            "https://user:pass@vault.example.com",
            "https://",
        ] {
            c.address = refused.into();
            assert_eq!(c.check().unwrap_err().0, "address", "{refused}");
        }
        c.address = "https://vault.example.com:8200/".into();
        assert!(c.check().is_ok());
        c.address = "http://vault.example.com:8200".into();
        assert!(c.check().unwrap_err().1.contains("clear text"));
        c.address = "http://127.0.0.1:8200".into();
        assert!(c.check().is_ok());
    }

    #[test]
    fn answers_without_a_usable_value_are_refused_without_showing_it() {
        let place = "secret/x/A";
        let mut ok = serde_json::json!({"data": {"data": {"value": "s3cret"},
            "metadata": {"version": 4, "created_time": "2026-11-24T14:20:12.48Z"}}});
        let secret = parse_secret("A", place, &mut ok).unwrap();
        assert_eq!((secret.version, secret.value.expose()), (4, &b"s3cret"[..]));
        assert_eq!(
            secret.origin(),
            "vault secret/x/A version 4 of 2026-11-24T14:20:12.48Z"
        );
        assert!(!format!("{secret:?}").contains("s3cret"));
        for (mut body, why) in [
            (
                serde_json::json!({"data": {"data": {"password": "s3cret"}, "metadata": {"version": 1}}}),
                "no key `value`",
            ),
            (
                serde_json::json!({"data": {"data": {"value": 7}, "metadata": {"version": 1}}}),
                "not a string",
            ),
            (
                serde_json::json!({"data": {"value": "s3cret"}}),
                "KV version 2",
            ),
            (
                serde_json::json!({"data": {"data": {"value": "a\u{0}s3cret"}, "metadata": {"version": 1}}}),
                "version 1",
            ),
        ] {
            let error = parse_secret("A", place, &mut body).unwrap_err().to_string();
            assert!(error.contains(why), "{error}");
            assert!(!error.contains("s3cret"), "{error}");
        }
    }
}
