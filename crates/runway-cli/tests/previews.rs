//! Preview environments end to end: the CI component in a merge request's pipeline (run by
//! `gitlab-ci-local` against a real `runway server`, with a test issuer's identity tokens)
//! deploys a preview, links its URL, updates it on a second push and stops it; a fork's
//! pipeline gets no secrets; an abandoned preview scales to zero and goes when its time runs
//! out. The service is the tests' Python program, run as a plain process.

#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::gitlab::{Pipeline, TestIssuer, gitlab_ci_local};
use support::{Platform, Settings, have_python, set_env_file};

const PREVIEW: &str = "mr-12--hello.preview.localhost";

/// A platform with previews: `dev` and `preview`, each preview living `ttl_seconds` after its
/// last deploy; `api` more of the `api` section.
fn platform(ttl_seconds: u64, api: &str) -> Platform {
    Platform::start(&Settings {
        api: format!(
            "  environments: [dev, preview]\n  previews:\n    ttl_seconds: {ttl_seconds}\n{api}"
        ),
        control: support::FAST_AUTOSCALER.to_owned(),
        ..Settings::default()
    })
}

/// The CLI's previews of `hello`, as JSON.
fn previews(platform: &Platform) -> Vec<Value> {
    let listed = platform.runway(&["preview", "list", "--service", "hello", "--output", "json"]);
    assert!(listed.ok(), "{}", listed.all());
    listed.json().as_array().cloned().unwrap_or_default()
}

/// The variables of a merge request's pipeline, `!iid`, from a branch nobody protects.
fn merge_request(iid: &str) -> [(&'static str, &str); 3] {
    [
        ("CI_PIPELINE_SOURCE", "merge_request_event"),
        ("CI_MERGE_REQUEST_IID", iid),
        ("CI_COMMIT_REF_PROTECTED", "false"),
    ]
}

/// The identity token of a merge request's review job (`environment: review/hello/mr-IID`)
/// in a pipeline of project `project` for the changes of `source` (a fork, when they differ).
fn review_token(issuer: &TestIssuer, iid: &str, source: &str, project: &str) -> String {
    issuer.token_with(&json!({
        "sub": format!("project_path:{source}:ref_type:branch:ref:feature"),
        "project_path": source,
        "job_project_path": project,
        "ref": "feature",
        "ref_protected": "false",
        "environment": format!("review/hello/mr-{iid}"),
        "pipeline_id": format!("9{iid}"),
    }))
}

/// The dotenv report a job of the pipeline in `repo` wrote, found where gitlab-ci-local keeps
/// its artifacts.
fn dotenv(repo: &Path, file: &str) -> String {
    let mut pending = vec![repo.join(".gitlab-ci-local")];
    let mut found: Vec<PathBuf> = Vec::new();
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.file_name().is_some_and(|n| n == file) {
                found.push(path);
            }
        }
    }
    let newest = found
        .iter()
        .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .unwrap_or_else(|| panic!("no {file} under {}", repo.display()));
    std::fs::read_to_string(newest).unwrap()
}

/// A merge request's pipeline deploys a preview with the component: its URL in the dotenv
/// report, served with the `dev` settings and `hello`'s `preview` secret; a second push
/// updates it and extends its life; the stop job (as GitLab runs it on merge or close)
/// removes it. A fork's merge request, run in the project, gets a preview without secrets; a
/// fork's own pipeline gets nothing.
#[test]
fn a_merge_request_gets_a_preview_that_follows_its_pushes_and_stops_with_it() {
    if !have_python() {
        return;
    }
    let Some(glci) = gitlab_ci_local() else {
        return;
    };
    let issuer = TestIssuer::start();
    let platform = platform(3600, &issuer.api_config_with_previews("dev"));
    let repo = platform.onboard("hello", &["dev", "preview"], "s3cr3t-preview");
    set_env_file(&repo, "dev", &[("GREETING", "first push")]);
    let pipeline = Pipeline::new(
        glci,
        &platform,
        &issuer,
        &repo,
        &["dev"],
        "      preview: true\n",
    );
    let token = review_token(&issuer, "12", "group/hello", "group/hello");
    let mr = merge_request("12");

    // A merge request's pipeline has the preview's jobs, and no deploy.
    let listed = pipeline.run_as(&["--list"], &token, &mr, "mr");
    assert!(listed.ok(), "{}", listed.all());
    let job = |name: &str| {
        listed
            .stdout
            .lines()
            .find(|l| l.starts_with(name))
            .map(str::to_owned)
    };
    assert!(job("runway-preview-dev ").is_some(), "{}", listed.all());
    assert!(
        job("runway-preview-stop-dev").is_some_and(|l| l.contains("manual")),
        "{}",
        listed.all()
    );
    assert!(job("runway-deploy-dev").is_none(), "{}", listed.all());

    let first = pipeline.run_as(&["runway-preview-dev"], &token, &mr, "mr");
    assert!(first.ok(), "{}\n{}", first.all(), platform.log());
    assert!(
        first.stdout.contains("PASS  runway-preview-dev"),
        "{}",
        first.all()
    );
    let report = dotenv(&repo, "runway-preview.env");
    let url = report
        .trim()
        .strip_prefix("RUNWAY_PREVIEW_URL=")
        .unwrap_or_else(|| panic!("{report}"))
        .to_owned();
    assert!(url.starts_with(&format!("https://{PREVIEW}:")), "{url}");
    let (status, body) = platform.get(PREVIEW, "/", Duration::from_secs(30));
    assert_eq!(status, 200, "{body}");
    assert!(
        body.starts_with("first push from mr-12--hello-preview-00001"),
        "{body}"
    );
    let (_, env) = platform.get(PREVIEW, "/env", Duration::from_secs(10));
    assert!(env.lines().any(|l| l == "API_KEY"), "{env}");
    eprintln!(
        "a merge request's push to its preview serving: {:.1} s (the component's job, with \
         --wait, through gitlab-ci-local)",
        first.took.as_secs_f64()
    );
    let listed = previews(&platform);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(
        (
            &listed[0]["name"],
            &listed[0]["base_env"],
            &listed[0]["url"]
        ),
        (&json!("mr-12"), &json!("dev"), &json!(url))
    );
    let expires = listed[0]["expires_at"].as_str().unwrap().to_owned();
    // It is a service of its own, listed with its parent's previews, not among the services.
    let services = platform.runway(&["services", "list", "--output", "json"]);
    assert!(
        !services.stdout.contains("mr-12--hello"),
        "{}",
        services.all()
    );

    // A second push: the same preview, a new revision, a longer life.
    set_env_file(&repo, "dev", &[("GREETING", "second push")]);
    pipeline.commit("second push");
    let second = pipeline.run_as(&["runway-preview-dev"], &token, &mr, "mr");
    assert!(second.ok(), "{}\n{}", second.all(), platform.log());
    let (_, body) = platform.get_until(PREVIEW, "/", Duration::from_secs(30), |s, b| {
        s == 200 && b.starts_with("second push from mr-12--hello-preview-00002")
    });
    assert!(body.starts_with("second push"), "{body}");
    let listed = previews(&platform);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(
        listed[0]["expires_at"].as_str().unwrap() > expires.as_str(),
        "{listed:?}"
    );

    // A fork's merge request, its pipeline run in the project: a preview, without secrets.
    let fork = review_token(&issuer, "13", "fork/hello", "group/hello");
    let forked = pipeline.run_as(&["runway-preview-dev"], &fork, &merge_request("13"), "fork");
    assert!(forked.ok(), "{}\n{}", forked.all(), platform.log());
    let (status, env) = platform.get(
        "mr-13--hello.preview.localhost",
        "/env",
        Duration::from_secs(30),
    );
    assert_eq!(status, 200, "{env}");
    assert!(!env.lines().any(|l| l == "API_KEY"), "{env}");
    let events = platform.runway(&["events", "--service", "mr-13--hello", "--env", "preview"]);
    assert!(
        events.stdout.contains("a merge request from a fork") && events.stdout.contains("API_KEY"),
        "{}",
        events.all()
    );
    // A fork's own pipeline is bound to nothing: its job fails.
    let own = review_token(&issuer, "14", "fork/hello", "fork/hello");
    let refused = pipeline.run_as(&["runway-preview-dev"], &own, &merge_request("14"), "own");
    assert!(!refused.ok(), "{}", refused.all());
    assert_eq!(previews(&platform).len(), 2);

    // The stop job, as GitLab runs it when the merge request is merged or closed; again, it
    // finds nothing and passes.
    for _ in 0..2 {
        let stopped = pipeline.run_as(&["runway-preview-stop-dev"], &token, &mr, "mr");
        assert!(stopped.ok(), "{}\n{}", stopped.all(), platform.log());
        assert!(
            stopped.stdout.contains("PASS  runway-preview-stop-dev"),
            "{}",
            stopped.all()
        );
    }
    let left: Vec<Value> = previews(&platform)
        .into_iter()
        .map(|p| p["name"].clone())
        .collect();
    assert_eq!(left, [json!("mr-13")]);
    let (status, _) = platform.get_until(PREVIEW, "/", Duration::from_secs(30), |s, _| s == 404);
    assert_eq!(status, 404);
    let audit = platform.audit(&["--service", "mr-12--hello"]);
    assert!(
        audit.iter().any(|e| e["action"] == "service.decommission"
            && e["actor"]
                .as_str()
                .unwrap_or_default()
                .contains("pipeline 912")),
        "{audit:?}"
    );
}

/// An abandoned preview: scaled to zero while idle, woken by a request, and decommissioned
/// when its time to live has passed since its last deploy.
#[test]
fn an_idle_preview_runs_nothing_and_goes_when_its_time_runs_out() {
    if !have_python() {
        return;
    }
    let platform = platform(20, "");
    let repo = platform.onboard("hello", &["dev", "preview"], "s3cr3t");
    let deployed = platform.runway_with(
        &[
            "deploy",
            "--env",
            "dev",
            "--preview",
            "mr-1",
            "--wait",
            "--timeout",
            "90s",
        ],
        Some(repo.as_os_str()),
        None,
        Duration::from_secs(120),
    );
    assert!(deployed.ok(), "{}\n{}", deployed.all(), platform.log());
    assert!(
        deployed.stdout.contains("preview mr-1 of hello (from dev)")
            && deployed
                .stdout
                .contains("https://mr-1--hello.preview.localhost:"),
        "{}",
        deployed.all()
    );
    let deployed_at = Instant::now();
    let host = "mr-1--hello.preview.localhost";
    // The manifest says one instance at least; a preview runs none while idle.
    let running = |platform: &Platform| {
        platform.status("mr-1--hello", "preview")["instances"]
            .as_array()
            .map_or(0, |all| {
                all.iter().filter(|i| i["phase"] == "running").count()
            })
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    while running(&platform) > 0 {
        assert!(
            Instant::now() < deadline,
            "{}",
            platform.status("mr-1--hello", "preview")
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let (status, body) = platform.get(host, "/", Duration::from_secs(30));
    assert_eq!(status, 200, "{body}");

    // Gone with its time: the reaper decommissions it, and says so in the audit log.
    let deadline = deployed_at + Duration::from_secs(60);
    while !previews(&platform).is_empty() {
        assert!(Instant::now() < deadline, "{:?}", previews(&platform));
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        deployed_at.elapsed() >= Duration::from_secs(20),
        "gone before its time"
    );
    let audit = platform.audit(&["--service", "mr-1--hello"]);
    assert!(
        audit
            .iter()
            .any(|e| e["action"] == "service.decommission"
                && e["actor"] == "runway (preview expired)"),
        "{audit:?}"
    );
    let (status, _) = platform.get_until(host, "/", Duration::from_secs(30), |s, _| s == 404);
    assert_eq!(status, 404);
}
