//! Signed images, through a real `runway server`: images in a registry on loopback, signed by
//! the real `cosign` (built from its Go module by `scripts/cosign`) with a key, and with
//! certificates from a certificate authority the test makes, like those Fulcio gives a GitLab
//! CI job. The server's `signatures` rule for production lets through only the key's signature
//! or a certificate naming `group/project` at `refs/heads/main`; the refusals say why, and the
//! revision records what verified it. Promotion holds to the target environment's rule.

#![allow(clippy::unwrap_used, clippy::print_stderr, reason = "tests")]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, CustomExtension, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use reqwest::Method;
use serde_json::Value;
use support::{Platform, Settings, run};

/// Bound on one cosign or skopeo run.
const TOOL: Duration = Duration::from_secs(120);
const PASSWORD: &str = "test-password";
const ISSUER: &str = "https://gitlab.example.com";
const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

/// cosign's directory (`scripts/cosign` prints it), or `None` said on a developer's machine
/// without it; under `CI=true`, a failure.
fn cosign() -> Option<PathBuf> {
    let dir = std::env::var_os("RUNWAY_COSIGN_BIN").map(PathBuf::from);
    match dir.filter(|d| d.join("cosign").is_file()) {
        Some(dir) => Some(dir.join("cosign")),
        None => {
            let reason = "cosign is not built: RUNWAY_COSIGN_BIN=$(scripts/cosign | tail -n 1)";
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{reason}");
            eprintln!("skipped: {reason}");
            None
        }
    }
}

/// Runs cosign in `dir` with `args`, its password set, asserting it succeeds.
fn cosign_run(cosign: &Path, dir: &Path, args: &[&str]) {
    let mut command = Command::new(cosign);
    command
        .current_dir(dir)
        .args(args)
        .env("COSIGN_PASSWORD", PASSWORD)
        // No login of the machine's, no update check, nothing but loopback.
        .env("DOCKER_CONFIG", dir.join("docker"))
        .env("HOME", dir)
        .env("TUF_ROOT", dir.join("tuf"));
    let ran = run(command, None, TOOL);
    assert!(ran.ok(), "cosign {args:?}: {}", ran.all());
}

/// `cosign sign` by digest, in cosign's `.sig` format, with no transparency log: with `key`
/// (cosign's own format), and a certificate and its chain when given.
fn sign(cosign: &Path, dir: &Path, image: &str, key: &str, certificate: Option<&str>) {
    let mut args = vec![
        "sign",
        "--use-signing-config=false",
        "--tlog-upload=false",
        "--new-bundle-format=false",
        "--allow-http-registry",
        "-y",
        "--key",
        key,
    ];
    if let Some(certificate) = certificate {
        args.extend([
            "--certificate",
            certificate,
            "--certificate-chain",
            "chain.pem",
        ]);
    }
    args.push(image);
    cosign_run(cosign, dir, &args);
}

/// A DER UTF8String, as Fulcio writes its extensions from 1.3.6.1.4.1.57264.1.8 on.
fn utf8_string(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut der = vec![0x0c];
    match bytes.len() {
        n @ 0..=127 => der.push(n as u8),
        n @ 128..=255 => der.extend([0x81, n as u8]),
        n => der.extend([0x82, (n >> 8) as u8, n as u8]),
    }
    der.extend_from_slice(bytes);
    der
}

/// A certificate authority like Fulcio's: a root and an intermediate, both trusted by the
/// rule (as Fulcio's trusted root lists both), written to `dir` as `ca.pem` and `chain.pem`
/// (intermediate then root, as cosign's `--certificate-chain` takes it).
struct Authority {
    intermediate: Issuer<'static, KeyPair>,
}

impl Authority {
    fn new(dir: &Path) -> Authority {
        let ca = |name: &str| {
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            params.distinguished_name.push(DnType::CommonName, name);
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
            params
        };
        let root_key = KeyPair::generate().unwrap();
        let root_params = ca("test-fulcio-root");
        let root = root_params.self_signed(&root_key).unwrap();
        let root_issuer = Issuer::new(root_params, root_key);
        let intermediate_key = KeyPair::generate().unwrap();
        let mut intermediate_params = ca("test-fulcio-intermediate");
        intermediate_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::CodeSigning];
        let intermediate = intermediate_params
            .signed_by(&intermediate_key, &root_issuer)
            .unwrap();
        std::fs::write(
            dir.join("ca.pem"),
            format!("{}{}", root.pem(), intermediate.pem()),
        )
        .unwrap();
        std::fs::write(
            dir.join("chain.pem"),
            format!("{}{}", intermediate.pem(), root.pem()),
        )
        .unwrap();
        Authority {
            intermediate: Issuer::new(intermediate_params, intermediate_key),
        }
    }

    /// A leaf like the one Fulcio gives a GitLab CI job of `project` at `git_ref`, written as
    /// `<name>.pem`, its key imported into cosign's format as `<name>-cosign.key`; expired
    /// when `expired`.
    fn leaf(
        &self,
        cosign: &Path,
        dir: &Path,
        name: &str,
        project: &str,
        git_ref: &str,
        expired: bool,
    ) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        let host = ISSUER.trim_start_matches("https://");
        let config_uri = format!("https://{host}/{project}//.gitlab-ci.yml@{git_ref}");
        params.subject_alt_names = vec![SanType::URI(config_uri.clone().try_into().unwrap())];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::CodeSigning];
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2020, 1, 2);
        }
        let fulcio = |arc: u64, value: &str| {
            CustomExtension::from_oid_content(
                &[1, 3, 6, 1, 4, 1, 57264, 1, arc],
                utf8_string(value),
            )
        };
        params.custom_extensions = vec![
            CustomExtension::from_oid_content(
                &[1, 3, 6, 1, 4, 1, 57264, 1, 1],
                ISSUER.as_bytes().to_vec(),
            ),
            fulcio(8, ISSUER),
            fulcio(9, &config_uri),
            fulcio(12, &format!("{ISSUER}/{project}")),
            fulcio(13, COMMIT),
            fulcio(14, git_ref),
            fulcio(15, "42"),
            fulcio(18, &config_uri),
        ];
        let certificate = params.signed_by(&key, &self.intermediate).unwrap();
        std::fs::write(dir.join(format!("{name}.pem")), certificate.pem()).unwrap();
        std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
        cosign_run(
            cosign,
            dir,
            &[
                "import-key-pair",
                "-y",
                "--key",
                &format!("{name}.key"),
                "--output-key-prefix",
                &format!("{name}-cosign"),
            ],
        );
    }
}

/// The revisions of `hello` in `env`, newest first.
fn revisions(platform: &Platform, env: &str) -> Vec<Value> {
    let (status, revisions) = platform.call(
        Method::GET,
        &format!("/v1/services/hello/environments/{env}/revisions"),
        Some(&platform.token),
        None,
    );
    assert_eq!(status, 200, "{revisions}");
    let mut all = revisions.as_array().unwrap().clone();
    all.sort_by_key(|r| std::cmp::Reverse(r["number"].as_u64()));
    all
}

#[test]
fn only_images_signed_as_the_rule_says_deploy_where_it_holds() {
    let Some(cosign) = cosign() else { return };
    if !runway_oci::testing::require_tools(
        "signed images",
        &["docker-registry", "skopeo", "umoci", "busybox", "runc"],
    ) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    // Two key pairs: `a` is the rule's, `b` anyone's.
    for prefix in ["a", "b"] {
        cosign_run(
            &cosign,
            dir,
            &["generate-key-pair", "--output-key-prefix", prefix],
        );
    }
    let authority = Authority::new(dir);
    let leaves = [
        ("main", "group/project", "refs/heads/main", false),
        ("other", "group/other", "refs/heads/main", false),
        ("branch", "group/project", "refs/heads/feature", false),
        ("expired", "group/project", "refs/heads/main", true),
    ];
    for (name, project, git_ref, expired) in leaves {
        authority.leaf(&cosign, dir, name, project, git_ref, expired);
    }
    // Another authority's certificate for the right pipeline.
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    Authority::new(&elsewhere).leaf(
        &cosign,
        &elsewhere,
        "main",
        "group/project",
        "refs/heads/main",
        false,
    );

    let upstream = runway_oci::testing::Registry::start().unwrap();
    let push = |tag: &str| {
        runway_oci::testing::push_busybox_image(
            &upstream,
            "group/project",
            tag,
            &support::web_image(&format!("{tag}\n")),
        )
        .unwrap()
    };
    let images: std::collections::BTreeMap<&str, runway_oci::testing::PushedImage> = [
        "key",
        "unsigned",
        "other-key",
        "main",
        "other",
        "branch",
        "expired",
        "elsewhere",
    ]
    .into_iter()
    .map(|tag| (tag, push(tag)))
    .collect();
    let signed = Instant::now();
    sign(&cosign, dir, &images["key"].pinned, "a.key", None);
    sign(&cosign, dir, &images["other-key"].pinned, "b.key", None);
    for name in ["main", "other", "branch", "expired"] {
        let (key, certificate) = (format!("{name}-cosign.key"), format!("{name}.pem"));
        sign(&cosign, dir, &images[name].pinned, &key, Some(&certificate));
    }
    sign(
        &cosign,
        &elsewhere,
        &images["elsewhere"].pinned,
        "main-cosign.key",
        Some("main.pem"),
    );
    eprintln!(
        "cosign signed 7 images in {:.1} s",
        signed.elapsed().as_secs_f64()
    );

    let platform = Platform::start(&Settings {
        sections: format!(
            "runtime:\n  insecure_registries: [\"{}\"]\nsignatures:\n  - services: [hello]\n    \
             environments: [production]\n    keys: [{}]\n    keyless:\n      ca_file: {}\n      \
             issuer: {ISSUER}\n      projects: [group/project]\n      refs: [refs/heads/main]\n",
            upstream.host(),
            dir.join("a.pub").display(),
            dir.join("ca.pem").display(),
        ),
        ..Settings::default()
    });
    let repo = platform.onboard("hello", &["dev", "production"], "signature-secret");
    support::set_image_manifest(&repo, 0, 1);

    // Refused in production, each saying why, by the image's name and the rule's.
    for (tag, why) in [
        (
            "unsigned",
            "has no cosign signature, and signatures[0] requires one",
        ),
        ("other-key", "no signature by its key (a.pub)"),
        (
            "other",
            "names project https://gitlab.example.com/group/other, not https://gitlab.example.com/group/project",
        ),
        (
            "branch",
            "names ref refs/heads/feature, not refs/heads/main",
        ),
        (
            "expired",
            "its certificate is not one this authority issued for code signing and valid now",
        ),
        (
            "elsewhere",
            "its certificate is not one this authority issued",
        ),
    ] {
        let refused = platform.deploy_image(&repo, "production", &images[tag].reference);
        assert!(!refused.ok(), "{tag} deployed: {}", refused.all());
        let said = refused.all();
        assert!(
            said.contains("may not deploy to production") && said.contains(why),
            "{tag}: {said}"
        );
    }
    assert!(revisions(&platform, "production").is_empty());

    // Deployed in production: the key's signature, and the pipeline's certificate; the
    // revision records what verified each, and runs the digest that was verified.
    let deployed = platform.deploy_image(&repo, "production", &images["key"].reference);
    assert!(deployed.ok(), "{}\n{}", deployed.all(), platform.log());
    let revision = &revisions(&platform, "production")[0];
    assert_eq!(revision["image"], images["key"].pinned, "{revision:#}");
    assert_eq!(
        revision["signature"],
        serde_json::json!(["signatures[0]: signed by key a.pub"]),
        "{revision:#}"
    );
    let deployed = platform.deploy_image(&repo, "production", &images["main"].reference);
    assert!(deployed.ok(), "{}\n{}", deployed.all(), platform.log());
    let revision = &revisions(&platform, "production")[0];
    assert_eq!(
        revision["signature"],
        serde_json::json!([format!(
            "signatures[0]: signed by {ISSUER}/group/project at refs/heads/main, commit {COMMIT} \
             (a certificate from issuer {ISSUER})"
        )]),
        "{revision:#}"
    );

    let table = platform.runway(&["revisions", "--service", "hello", "--env", "production"]);
    assert!(
        table.ok()
            && table
                .stdout
                .contains(&format!("{} (signature verified)", images["main"].pinned)),
        "{}",
        table.all()
    );

    // dev has no rule: the unsigned image deploys there, and records no signature; promoted to
    // production it is refused, and a signed one promoted records production's verification.
    let deployed = platform.deploy_image(&repo, "dev", &images["unsigned"].reference);
    assert!(deployed.ok(), "{}", deployed.all());
    assert!(revisions(&platform, "dev")[0].get("signature").is_none());
    let promote = |platform: &Platform| {
        platform.runway_for(
            &[
                "promote",
                "--service",
                "hello",
                "--from",
                "dev",
                "--to",
                "production",
                "--wait",
            ],
            Duration::from_secs(60),
        )
    };
    let refused = promote(&platform);
    assert!(!refused.ok(), "{}", refused.all());
    assert!(
        refused.all().contains("may not be promoted to production")
            && refused.all().contains("has no cosign signature"),
        "{}",
        refused.all()
    );
    let deployed = platform.deploy_image(&repo, "dev", &images["key"].reference);
    assert!(deployed.ok(), "{}", deployed.all());
    let promoted = promote(&platform);
    assert!(promoted.ok(), "{}\n{}", promoted.all(), platform.log());
    let revision = &revisions(&platform, "production")[0];
    assert_eq!(revision["image"], images["key"].pinned, "{revision:#}");
    assert_eq!(
        revision["signature"],
        serde_json::json!(["signatures[0]: signed by key a.pub"]),
        "{revision:#}"
    );

    // A process is refused where a rule holds: its code carries no signature.
    let process_repo = support::write_repo(dir, "hello");
    let refused = platform.deploy(&process_repo, "production");
    assert!(!refused.ok(), "{}", refused.all());
    assert!(
        refused
            .all()
            .contains("signatures[0] requires a signed image for hello in production"),
        "{}",
        refused.all()
    );

    // The figure: the deploy request (recorded, not rolled out) of the same image to dev (no
    // rule) and to production (its signature checked), alternately.
    let (mut plain, mut checked) = (Vec::new(), Vec::new());
    for round in 0..5 {
        for (env, times) in [("dev", &mut plain), ("production", &mut checked)] {
            let image = if round % 2 == 0 {
                &images["main"]
            } else {
                &images["key"]
            };
            let started = Instant::now();
            let ran = platform.runway_with(
                &[
                    "deploy",
                    "--env",
                    env,
                    "--image",
                    &image.reference,
                    "--output",
                    "json",
                ],
                Some(repo.as_os_str()),
                None,
                Duration::from_secs(60),
            );
            times.push(started.elapsed().as_secs_f64() * 1000.0);
            assert!(ran.ok(), "{}", ran.all());
            platform.wait_deployment(&ran.json()["id"], Duration::from_secs(60));
        }
    }
    let (plain, checked) = (support::median(&plain), support::median(&checked));
    // The check itself, as the server's log times it.
    let mut took: Vec<f64> = platform
        .log()
        .lines()
        .filter(|l| l.contains("image signature verified"))
        .filter_map(|l| {
            l.split("took_ms=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect();
    assert!(
        !took.is_empty(),
        "no verification timed:\n{}",
        platform.log()
    );
    took.sort_by(f64::total_cmp);
    eprintln!(
        "runway deploy (the request, not the rollout), median of 5: {plain:.1} ms without a rule, \
         {checked:.1} ms with the signature checked; the check itself ({} times): median {:.1} \
         ms, max {:.1} ms",
        took.len(),
        support::median(&took),
        took[took.len() - 1]
    );
}
