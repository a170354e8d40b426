//! The platform registry a real `runway server` serves at `/v2/` beside its API, over the API's
//! TLS (the server's own CA), to the API's tokens: a real client (skopeo) pushes and pulls
//! with a service's deploy token under that service's repositories, and everything else is
//! refused: another service's repositories, the mirror the server writes, an anonymous pull.

#![allow(clippy::unwrap_used, clippy::print_stderr, reason = "tests")]

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use support::{Platform, Settings, run};

/// Bound on one skopeo or helm run.
const TOOL: Duration = Duration::from_secs(120);

/// A deploy token for `service` in `environments`.
fn deploy_token(platform: &Platform, name: &str, service: &str, environments: &[&str]) -> String {
    let (status, created) = platform.call(
        Method::POST,
        "/v1/tokens",
        Some(&platform.token),
        Some(json!({"name": name, "scope": {"deploy": {"service": service, "environments": environments}}})),
    );
    assert_eq!(status, 201, "{created}");
    created["token"].as_str().unwrap().to_owned()
}

/// `skopeo copy` from `from` to `to` (each `transport:reference`), trusting the server's CA,
/// with `creds` (`user:token`) on the registry's side of the copy.
fn skopeo_copy(certs: &Path, from: &str, to: &str, creds: Option<&str>) -> support::Ran {
    let mut copy = Command::new("skopeo");
    copy.args(["copy", "--quiet"]);
    let registry_side = if to.starts_with("docker://") {
        "dest"
    } else {
        "src"
    };
    copy.arg(format!("--{registry_side}-cert-dir")).arg(certs);
    match creds {
        Some(creds) => copy.arg(format!("--{registry_side}-creds={creds}")),
        None => copy.arg(format!("--{registry_side}-no-creds")),
    };
    copy.args([from, to]);
    run(copy, None, TOOL)
}

#[test]
fn the_platform_registry_takes_a_services_images_and_refuses_the_rest() {
    if !runway_oci::testing::require_tools("platform registry", &["skopeo", "umoci", "busybox"]) {
        return;
    }
    let platform = Platform::start(&Settings::default());
    for service in ["hello", "other"] {
        let created = platform.runway(&[
            "services",
            "create",
            service,
            "--owner",
            "team@example.com",
            "--env",
            "dev",
        ]);
        assert!(created.ok(), "{}", created.all());
    }
    let hello = deploy_token(&platform, "ci-hello", "hello", &["dev"]);
    let other = deploy_token(&platform, "ci-other", "other", &["dev"]);
    let admin = platform.token.clone();
    let host = platform.api().trim_start_matches("https://").to_owned();
    // skopeo reads the registry's CA from a directory, as `ca.crt`.
    let certs = tempfile::tempdir().unwrap();
    std::fs::copy(platform.ca(), certs.path().join("ca.crt")).unwrap();
    let layout = runway_oci::testing::busybox_layout().unwrap();
    let source = format!("oci:{}:base", layout.display());
    let creds = |token: &str| format!("ci:{token}");

    // A service's token pushes under its service, and pulls it back.
    let pushed = skopeo_copy(
        certs.path(),
        &source,
        &format!("docker://{host}/hello/app:1.0"),
        Some(&creds(&hello)),
    );
    assert!(
        pushed.ok(),
        "push with the service's token: {}",
        pushed.all()
    );
    let back = tempfile::tempdir().unwrap();
    let pulled = skopeo_copy(
        certs.path(),
        &format!("docker://{host}/hello/app:1.0"),
        &format!("oci:{}:back", back.path().display()),
        Some(&creds(&hello)),
    );
    assert!(
        pulled.ok(),
        "pull with the service's token: {}",
        pulled.all()
    );
    let admin_pull = skopeo_copy(
        certs.path(),
        &format!("docker://{host}/hello/app:1.0"),
        &format!("oci:{}:admin", back.path().display()),
        Some(&creds(&admin)),
    );
    assert!(admin_pull.ok(), "pull as the admin: {}", admin_pull.all());

    // Refused: another service's repository, either way; the mirror; no token at all.
    for (what, ran) in [
        (
            "a push to another service",
            skopeo_copy(
                certs.path(),
                &source,
                &format!("docker://{host}/other/app:1.0"),
                Some(&creds(&hello)),
            ),
        ),
        (
            "a pull of another service's image",
            skopeo_copy(
                certs.path(),
                &format!("docker://{host}/hello/app:1.0"),
                &format!("oci:{}:stolen", back.path().display()),
                Some(&creds(&other)),
            ),
        ),
        (
            "a push to the mirror",
            skopeo_copy(
                certs.path(),
                &source,
                &format!("docker://{host}/hello/mirror:1.0"),
                Some(&creds(&hello)),
            ),
        ),
        (
            "an anonymous pull",
            skopeo_copy(
                certs.path(),
                &format!("docker://{host}/hello/app:1.0"),
                &format!("oci:{}:anonymous", back.path().display()),
                None,
            ),
        ),
    ] {
        assert!(!ran.ok(), "{what} went through: {}", ran.all());
        let said = ran.all().to_lowercase();
        assert!(
            said.contains("denied")
                || said.contains("unauthorized")
                || said.contains("401")
                || said.contains("403"),
            "{what}: {}",
            ran.all()
        );
    }
    // The answers themselves: 401 with a challenge without a token, 403 for another service.
    let (status, _) = platform.call(Method::GET, "/v2/", None, None);
    assert_eq!(status, 401);
    let (status, body) = platform.call(Method::GET, "/v2/hello/app/tags/list", Some(&other), None);
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["errors"][0]["code"], "DENIED", "{body}");
    let (status, body) = platform.call(Method::GET, "/v2/hello/app/tags/list", Some(&hello), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["tags"], json!(["1.0"]));
    // The images are under the data directory, not in memory.
    assert!(platform.data.join("registry").is_dir());
    eprintln!("pushed and pulled busybox through {host}");
}
