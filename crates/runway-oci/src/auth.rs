//! Registry credentials: explicit, or from a docker-style `config.json`.

use std::fmt;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use oci_client::secrets::RegistryAuth;
use serde::Deserialize;

use crate::error::OciError;

/// Where the credentials for a pull come from.
#[derive(Clone, Default)]
pub enum Credentials {
    /// `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`; anonymous when the file does
    /// not exist or has no entry for the registry.
    #[default]
    DockerConfig,
    /// A docker-style `config.json` at this path; anonymous when it has no entry for the registry.
    DockerConfigFile(PathBuf),
    /// HTTP basic credentials (also exchanged for a bearer token when the registry asks).
    Basic {
        /// User name.
        username: String,
        /// Password or token; never printed.
        password: String,
    },
    /// No credentials.
    Anonymous,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credentials::DockerConfig => f.write_str("DockerConfig"),
            Credentials::DockerConfigFile(path) => {
                f.debug_tuple("DockerConfigFile").field(path).finish()
            }
            Credentials::Basic { username, .. } => f
                .debug_struct("Basic")
                .field("username", username)
                .field("password", &"<redacted>")
                .finish(),
            Credentials::Anonymous => f.write_str("Anonymous"),
        }
    }
}

#[derive(Deserialize)]
struct DockerConfigFile {
    #[serde(default)]
    auths: std::collections::BTreeMap<String, DockerAuth>,
}

#[derive(Deserialize)]
struct DockerAuth {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

/// The default docker config path: `$DOCKER_CONFIG/config.json` or `$HOME/.docker/config.json`.
pub(crate) fn default_docker_config() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DOCKER_CONFIG").filter(|d| !d.is_empty()) {
        return Some(Path::new(&dir).join("config.json"));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|home| Path::new(&home).join(".docker").join("config.json"))
}

/// The credentials to use for `registry` (as `host[:port]`).
pub(crate) fn resolve(credentials: &Credentials, registry: &str) -> Result<RegistryAuth, OciError> {
    let path = match credentials {
        Credentials::Anonymous => return Ok(RegistryAuth::Anonymous),
        Credentials::Basic { username, password } => {
            return Ok(RegistryAuth::Basic(username.clone(), password.clone()));
        }
        Credentials::DockerConfigFile(path) => path.clone(),
        Credentials::DockerConfig => match default_docker_config() {
            Some(path) => path,
            None => return Ok(RegistryAuth::Anonymous),
        },
    };
    let text = match std::fs::read(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(RegistryAuth::Anonymous),
        Err(e) => {
            return Err(OciError::DockerConfig {
                path,
                reason: e.to_string(),
            });
        }
    };
    from_docker_config(&path, &text, registry)
}

fn from_docker_config(path: &Path, text: &[u8], registry: &str) -> Result<RegistryAuth, OciError> {
    let bad = |reason: String| OciError::DockerConfig {
        path: path.to_path_buf(),
        reason,
    };
    let config: DockerConfigFile =
        serde_json::from_slice(text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
    let want = canonical_registry(registry);
    let Some((key, entry)) = config
        .auths
        .iter()
        .find(|(key, _)| canonical_registry(key) == want)
    else {
        return Ok(RegistryAuth::Anonymous);
    };
    if let Some(encoded) = entry.auth.as_deref().filter(|a| !a.is_empty()) {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .ok_or_else(|| bad(format!("auths.{key}.auth is not base64 of user:password")))?;
        let (user, password) = decoded
            .split_once(':')
            .ok_or_else(|| bad(format!("auths.{key}.auth is not base64 of user:password")))?;
        return Ok(RegistryAuth::Basic(user.to_string(), password.to_string()));
    }
    match (&entry.username, &entry.password) {
        (Some(user), Some(password)) => Ok(RegistryAuth::Basic(user.clone(), password.clone())),
        _ => Ok(RegistryAuth::Anonymous),
    }
}

/// `https://index.docker.io/v1/` and `docker.io` name the same registry; so do `host:port` and
/// `http://host:port/v2/`.
fn canonical_registry(key: &str) -> String {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = key.split('/').next().unwrap_or(key).to_ascii_lowercase();
    match host.as_str() {
        "docker.io" | "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => {
            "docker.io".to_string()
        }
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_config_entries() {
        let text = br#"{"auths":{
            "https://index.docker.io/v1/":{"auth":"aHViOnNlY3JldA=="},
            "127.0.0.1:5000":{"auth":"dTpwOnc="},
            "plain.example":{"username":"a","password":"b"},
            "broken.example":{"auth":"bm9jb2xvbg=="}}}"#;
        let p = Path::new("config.json");
        let basic = |u: &str, p: &str| RegistryAuth::Basic(u.to_string(), p.to_string());
        assert_eq!(
            from_docker_config(p, text, "index.docker.io").ok(),
            Some(basic("hub", "secret"))
        );
        assert_eq!(
            from_docker_config(p, text, "127.0.0.1:5000").ok(),
            Some(basic("u", "p:w"))
        );
        assert_eq!(
            from_docker_config(p, text, "plain.example").ok(),
            Some(basic("a", "b"))
        );
        assert_eq!(
            from_docker_config(p, text, "other.example").ok(),
            Some(RegistryAuth::Anonymous)
        );
        let err = from_docker_config(p, text, "broken.example")
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(
                "registry credentials config.json: auths.broken.example.auth is not base64 of user:password"
            )
        );
        assert!(from_docker_config(p, b"{", "x").is_err());
    }

    #[test]
    fn debug_hides_the_password() {
        let c = Credentials::Basic {
            username: "u".into(),
            password: "hunter2".into(),
        };
        assert!(!format!("{c:?}").contains("hunter2"));
    }
}
