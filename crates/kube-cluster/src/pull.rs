//! A pod's images, as the simulated node pulls them. A kubelet pulls each container's image
//! with the pod's `imagePullSecrets`; the node fetches the manifest of every image one of
//! those Secrets (`kubernetes.io/dockerconfigjson`) has credentials for, over HTTPS trusting
//! the roots given to [`crate::Cluster::trust_registry`], with HTTP Basic authentication (what
//! the platform registry takes; a registry that wants a token exchange is not spoken to). An
//! image no pull secret names a registry of is taken as present: the tests name images by
//! digests no registry has, and the node runs no image's content anyway.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::{Api, Client, ResourceExt};
use serde_json::Value;

/// The bound on one manifest fetch.
const FETCH: Duration = Duration::from_secs(10);

/// The manifest types a pull accepts.
const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
                      application/vnd.oci.image.manifest.v1+json, \
                      application/vnd.docker.distribution.manifest.list.v2+json, \
                      application/vnd.docker.distribution.manifest.v2+json";

/// A user and password for a registry.
pub(crate) type Login = (String, String);

/// The credentials the pod's `imagePullSecrets` hold, by registry host. A Secret that is
/// missing or malformed holds none, as for a kubelet.
pub(crate) async fn logins(client: &Client, pod: &Pod) -> BTreeMap<String, Login> {
    let namespace = pod.namespace().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let names = pod
        .spec
        .as_ref()
        .and_then(|spec| spec.image_pull_secrets.clone())
        .unwrap_or_default();
    let mut logins = BTreeMap::new();
    for name in names {
        let Ok(secret) = api.get(&name.name).await else {
            continue;
        };
        let config = secret
            .data
            .as_ref()
            .and_then(|data| data.get(".dockerconfigjson"))
            .and_then(|bytes| serde_json::from_slice::<Value>(&bytes.0).ok());
        let Some(auths) = config.as_ref().and_then(|c| c["auths"].as_object()) else {
            continue;
        };
        for (host, entry) in auths {
            if let Some(login) = login_of(entry) {
                logins.entry(host.clone()).or_insert(login);
            }
        }
    }
    logins
}

/// An `auths` entry's user and password: `username` and `password`, else `auth`.
fn login_of(entry: &Value) -> Option<Login> {
    if let (Some(user), Some(password)) = (entry["username"].as_str(), entry["password"].as_str()) {
        return Some((user.to_owned(), password.to_owned()));
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(entry["auth"].as_str()?)
        .ok()?;
    let (user, password) = std::str::from_utf8(&decoded).ok()?.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

/// An image reference's registry host, repository and tag or digest:
/// `host/name[:tag][@digest]`. `None` for a reference without a registry host.
pub(crate) fn parse(image: &str) -> Option<(&str, &str, &str)> {
    let (host, rest) = image.split_once('/')?;
    if !(host.contains('.') || host.contains(':') || host == "localhost") {
        return None;
    }
    if let Some((name, digest)) = rest.split_once('@') {
        return Some((host, name, digest));
    }
    match rest.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => Some((host, name, tag)),
        _ => Some((host, rest, "latest")),
    }
}

/// Fetches `image`'s manifest with `login`, trusting `roots` (PEM); the error says why, as a
/// kubelet's event would.
pub(crate) async fn pull(image: &str, login: &Login, roots: &[Vec<u8>]) -> Result<(), String> {
    let (host, name, reference) =
        parse(image).ok_or_else(|| format!("{image} names no registry"))?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = reqwest::Client::builder().timeout(FETCH);
    for pem in roots {
        for certificate in reqwest::Certificate::from_pem_bundle(pem).map_err(|e| e.to_string())? {
            builder = builder.add_root_certificate(certificate);
        }
    }
    let client = builder.build().map_err(|e| e.to_string())?;
    let response = client
        .get(format!("https://{host}/v2/{name}/manifests/{reference}"))
        .basic_auth(&login.0, Some(&login.1))
        .header("Accept", ACCEPT)
        .send()
        .await
        .map_err(|e| format!("{e:?}"))?;
    match response.status().as_u16() {
        200 => Ok(()),
        401 => Err("401 Unauthorized: the pull secret's credentials were refused".to_owned()),
        403 => Err("403 Forbidden: the pull secret's credentials may not pull it".to_owned()),
        404 => Err("not found".to_owned()),
        status => Err(format!("the registry answered {status}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_split_into_host_name_and_tag_or_digest() {
        assert_eq!(
            parse("127.0.0.1:7443/hello/mirror@sha256:ab"),
            Some(("127.0.0.1:7443", "hello/mirror", "sha256:ab"))
        );
        assert_eq!(
            parse("registry.example/hello:1"),
            Some(("registry.example", "hello", "1"))
        );
        assert_eq!(
            parse("registry.example/team/hello"),
            Some(("registry.example", "team/hello", "latest"))
        );
        assert_eq!(parse("busybox:1"), None);
        assert_eq!(parse("library/busybox"), None);
    }

    #[test]
    fn a_login_is_its_user_and_password_or_its_auth() {
        let plain = serde_json::json!({"username": "u", "password": "p"});
        assert_eq!(login_of(&plain), Some(("u".into(), "p".into())));
        let auth = serde_json::json!({"auth": "dTpwOnE="});
        assert_eq!(login_of(&auth), Some(("u".into(), "p:q".into())));
        assert_eq!(login_of(&serde_json::json!({"auth": "%%"})), None);
    }
}
