//! GitLab CI run on this machine: a test OIDC issuer standing in for GitLab's
//! ([`TestIssuer`]), and `gitlab-ci-local` running a service repository's pipeline with the CI
//! component (`templates/runway.yml`) against a real `runway server` ([`Pipeline`]).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::support::Platform;

/// A test OIDC issuer standing in for GitLab's: its key set served on loopback (plain HTTP,
/// `jwks_url`), and tokens it signs for a job of `group/hello` on `main`, whose ref is
/// protected or not.
pub struct TestIssuer {
    keys_at: std::net::SocketAddr,
    pkcs8: ring::pkcs8::Document,
}

impl TestIssuer {
    pub fn start() -> TestIssuer {
        use base64::Engine as _;
        use ring::signature::KeyPair as _;
        let rng = ring::rand::SystemRandom::new();
        let alg = &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = ring::signature::EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
        let pair = ring::signature::EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).unwrap();
        let point = pair.public_key().as_ref();
        let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        let jwks = serde_json::json!({"keys": [{"kty": "EC", "crv": "P-256", "alg": "ES256",
            "kid": "k1", "x": b64(&point[1..33]), "y": b64(&point[33..65])}]})
        .to_string();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let keys_at = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            use std::io::{Read, Write};
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut head = [0u8; 4096];
                let _ = stream.read(&mut head);
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{jwks}",
                    jwks.len()
                );
            }
        });
        TestIssuer { keys_at, pkcs8 }
    }

    /// `api.oidc` trusting it, with `group/hello`'s protected refs bound to `hello` in `envs`.
    pub fn api_config(&self, envs: &str) -> String {
        self.api_config_with(&format!(
            "          - claims: {{project_path: group/hello, ref_protected: 'true'}}\n            \
             service: hello\n            environments: [{envs}]\n"
        ))
    }

    /// `api.oidc` trusting it, with `bindings` (YAML items indented by ten spaces).
    pub fn api_config_with(&self, bindings: &str) -> String {
        format!(
            "  oidc:\n    issuers:\n      - issuer: https://gitlab.test\n        audience: runway\n        \
             jwks_url: http://{}/keys\n        bindings:\n{bindings}",
            self.keys_at
        )
    }

    /// `api.oidc` as [`TestIssuer::api_config`], and the pipelines of merge requests into
    /// `group/hello` (forks' among them: `job_project_path` is the project they run in) bound
    /// to `hello`'s previews.
    pub fn api_config_with_previews(&self, envs: &str) -> String {
        format!(
            "{}          - claims: {{job_project_path: group/hello}}\n            service: hello\n            \
             environments: [preview]\n",
            self.api_config(envs)
        )
    }

    /// A job's identity token, its ref protected (`"true"`) or not.
    pub fn token(&self, protected: &str) -> String {
        self.token_with(&serde_json::json!({ "ref_protected": protected }))
    }

    /// A job's identity token: a pipeline of `group/hello` on `main` with `claims` over its
    /// claims (a `null` removes one).
    pub fn token_with(&self, claims: &serde_json::Value) -> String {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let mut all = serde_json::json!({"iss": "https://gitlab.test", "aud": "runway",
            "iat": now, "exp": now + 600, "sub": "project_path:group/hello:ref_type:branch:ref:main",
            "project_path": "group/hello", "job_project_path": "group/hello", "ref": "main",
            "ref_protected": "true", "pipeline_id": "77"});
        for (name, value) in claims.as_object().into_iter().flatten() {
            match value {
                serde_json::Value::Null => all.as_object_mut().unwrap().remove(name),
                value => all
                    .as_object_mut()
                    .unwrap()
                    .insert(name.clone(), value.clone()),
            };
        }
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        header.kid = Some("k1".to_owned());
        jsonwebtoken::encode(
            &header,
            &all,
            &jsonwebtoken::EncodingKey::from_ec_der(self.pkcs8.as_ref()),
        )
        .unwrap()
    }
}

/// `gitlab-ci-local` (npm), which runs a pipeline's jobs on this machine; `None` (skip) when
/// it is missing outside CI.
pub fn gitlab_ci_local() -> Option<&'static str> {
    let found = Command::new("gitlab-ci-local")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        let reason = "gitlab-ci-local is not installed (scripts/test installs it from npm)";
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{reason}");
        eprintln!("skipped: {reason}");
        return None;
    }
    Some("gitlab-ci-local")
}

/// A repository that includes a CI component (`templates/runway.yml`, or another with
/// [`Pipeline::of`]), run with `gitlab-ci-local`'s shell executor against a real `runway
/// server`: [`Pipeline::new`] copies the component into the repository as `ci/runway.yml`,
/// includes it once per environment and commits the repository on `main`, its GitLab remote's
/// default branch; [`Pipeline::run`] runs
/// the pipeline, or some of its jobs, with a job identity token the test issuer signs (standing
/// in for GitLab's: gitlab-ci-local makes no `id_tokens`).
pub struct Pipeline<'a> {
    glci: &'static str,
    repo: &'a Path,
    issuer: &'a TestIssuer,
    /// gitlab-ci-local's home, the jobs' CLI configurations and the CLI's image cache.
    home: tempfile::TempDir,
    /// `PATH` with the directory of the `runway` under test first.
    path: String,
}

impl<'a> Pipeline<'a> {
    /// Includes the component in `repo` once for each of `envs` (deploying `hello` to
    /// `platform` with the `expedited` strategy, waiting at most 90 s, and `inputs`, more
    /// YAML lines of inputs) and commits the repository as it is: its files are written
    /// before.
    pub fn new(
        glci: &'static str,
        platform: &Platform,
        issuer: &'a TestIssuer,
        repo: &'a Path,
        envs: &[&str],
        inputs: &str,
    ) -> Self {
        let includes: String = envs
            .iter()
            .map(|env| {
                format!(
                    "  - local: ci/runway.yml\n    inputs:\n      service: hello\n      environment: {env}\n      \
                     server: {}\n      ca: {}\n      strategy: expedited\n      timeout: 90s\n{inputs}",
                    platform.api(),
                    platform.ca().display()
                )
            })
            .collect();
        Self::of(
            glci,
            issuer,
            repo,
            "runway.yml",
            &format!("stages: [test, deploy]\ninclude:\n{includes}"),
        )
    }

    /// `repo` with the component `templates/COMPONENT` as `ci/COMPONENT` and `gitlab_ci` as
    /// its `.gitlab-ci.yml`, committed on `main`, its GitLab remote's default branch.
    pub fn of(
        glci: &'static str,
        issuer: &'a TestIssuer,
        repo: &'a Path,
        component: &str,
        gitlab_ci: &str,
    ) -> Self {
        let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
        std::fs::create_dir_all(repo.join("ci")).unwrap();
        std::fs::copy(
            root.join("templates").join(component),
            repo.join("ci").join(component),
        )
        .unwrap();
        std::fs::write(repo.join(".gitlab-ci.yml"), gitlab_ci).unwrap();
        let git = |args: &[&str]| git(repo, args);
        git(&["init", "-q", "-b", "main"]);
        git(&["add", "-A"]);
        git(&["commit", "-q", "-m", "hello"]);
        git(&[
            "remote",
            "add",
            "origin",
            "https://gitlab.example.com/group/hello.git",
        ]);
        git(&["update-ref", "refs/remotes/origin/main", "HEAD"]);
        git(&[
            "symbolic-ref",
            "refs/remotes/origin/HEAD",
            "refs/remotes/origin/main",
        ]);
        let runway_dir = Path::new(crate::support::RUNWAY).parent().unwrap();
        let path = format!(
            "{}:{}",
            runway_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Pipeline {
            glci,
            repo,
            issuer,
            home: tempfile::tempdir().unwrap(),
            path,
        }
    }

    /// `gitlab-ci-local ARGS` (`--list`, jobs, or nothing for the whole pipeline) for a protected
    /// branch, the jobs' identity token that of a protected ref (`protected` is `"true"`) or
    /// not; at most 240 s.
    pub fn run(&self, args: &[&str], protected: &str) -> crate::support::Ran {
        // A protected branch's pipeline, as GitLab marks it (the component deploys only from
        // one); the token's own claim is what the server judges.
        self.run_as(
            args,
            &self.issuer.token(protected),
            &[("CI_COMMIT_REF_PROTECTED", "true")],
            &format!("cli-{protected}"),
        )
    }

    /// `gitlab-ci-local ARGS` with `token` as the jobs' identity token and `variables` set
    /// (`CI_PIPELINE_SOURCE`, …), the CLI's configuration kept as `config` in the pipeline's
    /// home; at most 240 s.
    pub fn run_as(
        &self,
        args: &[&str],
        token: &str,
        variables: &[(&str, &str)],
        config: &str,
    ) -> crate::support::Ran {
        let home = self.home.path();
        let mut command = Command::new(self.glci);
        command
            .args(["--force-shell-executor", "--home"])
            .arg(home)
            .arg("--variable")
            .arg(format!("RUNWAY_ID_TOKEN={token}"))
            .arg("--variable")
            .arg(format!(
                "RUNWAY_CONFIG={}",
                home.join(format!("{config}.json")).display()
            ));
        for (name, value) in variables {
            command.arg("--variable").arg(format!("{name}={value}"));
        }
        command
            .args(args)
            .current_dir(self.repo)
            .env("PATH", &self.path)
            // What the CLI caches (a build's base image) stays in the test's directory.
            .env("XDG_CACHE_HOME", home.join("cache"))
            .env_remove("RUNWAY_SERVER")
            .env_remove("RUNWAY_TOKEN")
            .env_remove("RUNWAY_CA")
            .env_remove("CI");
        crate::support::run(command, None, Duration::from_secs(240))
    }

    /// Commits what changed in the repository: the next push.
    pub fn commit(&self, message: &str) {
        git(self.repo, &["add", "-A"]);
        git(self.repo, &["commit", "-q", "-m", message]);
    }
}

/// `git ARGS` in `repo`, as the test's own committer; it must succeed.
fn git(repo: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "user.email=ci@example.com", "-c", "user.name=ci"])
        .args(args)
        .current_dir(repo)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}
