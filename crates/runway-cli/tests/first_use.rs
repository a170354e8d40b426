//! What a new user meets, end to end against the real `runway server` and its CLI: errors that
//! point at the fix, the everyday commands (`open`, `env`, `audit`, `completion`, `logs
//! --since`), a rollback that would change nothing refused, and `--wait` telling a lost
//! server from a failed deployment.
//!
//! Every wait is bounded; every server and instance is killed when a test ends
//! (`support::Platform`'s drop).

#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::{Platform, Settings, have_python};

fn can_run() -> bool {
    have_python() && runway_oci::testing::require_tools("the platform's instances", &["runc"])
}

#[test]
fn errors_point_at_the_fix_and_the_everyday_commands_work() {
    if !can_run() {
        return;
    }
    let platform = Platform::start(&Settings::default());
    // A fresh platform, nothing routed: a name under an environment is answered in HTTP (a
    // 404 saying so), after a handshake, not with a TLS alert.
    let (status, body) = platform.get("hello.dev.localhost", "/", Duration::from_secs(10));
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("no service has this name"), "{body}");
    let repo = platform.onboard("hello", &["dev"], "s3cr3t");
    // Registered, never deployed: a 503 saying no revision serves yet, not a 404.
    let (_, body) = platform.get_until(
        "hello.dev.localhost",
        "/",
        Duration::from_secs(10),
        |status, _| status == 503,
    );
    assert!(
        body.starts_with("this service has no revision serving yet"),
        "{body}"
    );

    // A service nobody registered: say how it is registered.
    let ghost = support::write_repo(&repo.join(".."), "ghost");
    let refused =
        platform.runway_with(&["deploy"], Some(ghost.as_os_str()), None, support::COMMAND);
    assert_eq!(refused.code, Some(1), "{}", refused.all());
    assert!(
        refused.stderr.contains("`runway services create ghost`"),
        "{}",
        refused.all()
    );
    // Said before any code is uploaded.
    assert!(
        !refused.stderr.contains("uploading code"),
        "{}",
        refused.all()
    );
    // `runway.yaml` is not read: say to rename it.
    let yaml = repo.join("../yaml");
    std::fs::create_dir_all(yaml.join(".runway")).unwrap();
    std::fs::write(yaml.join(".runway/runway.yaml"), support::manifest("yaml")).unwrap();
    let refused = platform.runway_with(&["deploy"], Some(yaml.as_os_str()), None, support::COMMAND);
    assert_eq!(refused.code, Some(2), "{}", refused.all());
    assert!(
        refused.stderr.contains("rename it to runway.yml"),
        "{}",
        refused.all()
    );
    // With overrides beside it: that one error, not one per override.
    std::fs::write(
        yaml.join(".runway/runway-dev.yml"),
        "spec:\n  request_timeout: 5\n",
    )
    .unwrap();
    let refused = platform.runway_with(&["deploy"], Some(yaml.as_os_str()), None, support::COMMAND);
    assert_ne!(refused.code, Some(0), "{}", refused.all());
    assert!(
        refused.stderr.contains("rename it to runway.yml")
            && !refused.stderr.contains("missing required field"),
        "{}",
        refused.all()
    );
    // The server's own authority, not trusted: say how to trust it.
    let untrusted = support::run(
        {
            let mut login = Command::new(support::RUNWAY);
            login
                .args(["login", "--server", &platform.api(), "--token", "-"])
                .env("RUNWAY_CONFIG", repo.join("../untrusted.json"));
            login
        },
        Some(b"rw_whatever"),
        support::COMMAND,
    );
    assert_ne!(untrusted.code, Some(0), "{}", untrusted.all());
    assert!(
        untrusted.stderr.contains("--ca <data-dir>/ca/ca.pem"),
        "{}",
        untrusted.all()
    );
    // Outside a repository: say to name the service.
    let outside = support::run(
        {
            let mut status = Command::new(support::RUNWAY);
            status
                .arg("status")
                .current_dir(platform.dir.path())
                .env("RUNWAY_CONFIG", platform.cli_config());
            status
        },
        None,
        support::COMMAND,
    );
    assert!(outside.stderr.contains("`-s NAME`"), "{}", outside.all());
    // Plain http:// against the API's HTTPS port: an answer saying so, not a TLS alert.
    let http = platform.api().replacen("https://", "http://", 1);
    let refused = platform.runway_with(
        &["login", "--server", &http, "--token", "-"],
        None,
        Some(b"rw_whatever"),
        support::COMMAND,
    );
    assert_ne!(refused.code, Some(0), "{}", refused.all());
    assert!(
        refused.stderr.contains("HTTPS port: use an https:// URL"),
        "{}",
        refused.all()
    );

    // A first revision that crashes on start: its deploy fails in seconds, and a request is
    // answered with a 503 at once, not held for an instance that will not come.
    support::set_env_file(&repo, "dev", &[("CRASH", "1")]);
    let crashed = platform.deploy(&repo, "dev");
    assert_eq!(crashed.code, Some(1), "{}", crashed.all());
    // A final failure: it does not say the instance starts again, and the crash's output is
    // printed once.
    let failure = crashed.all();
    let failure = failure
        .split("progressing → failed")
        .last()
        .unwrap_or_default();
    assert!(!failure.contains("starting again"), "{}", crashed.all());
    assert_eq!(
        crashed.all().matches("crashing on purpose").count(),
        1,
        "{}",
        crashed.all()
    );
    let asked = Instant::now();
    let (status, body) = platform.get_until(
        "hello.dev.localhost",
        "/",
        Duration::from_secs(5),
        |_, _| true,
    );
    assert_eq!(status, 503, "{body}");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
    support::set_env_file(&repo, "dev", &[("GREETING", "hello")]);

    let deployed = platform.deploy(&repo, "dev");
    assert!(deployed.ok(), "{}", deployed.all());
    let host = "hello.dev.localhost";
    let (_, body) = platform.get(host, "/", Duration::from_secs(30));
    assert!(body.starts_with("hello from hello-dev-00002"), "{body}");
    // Right after the deploy, before the control plane read any figure: `top` lists it.
    let top = platform.runway(&["top", "--once", "--output", "json"]);
    assert!(
        top.json()
            .as_array()
            .is_some_and(|rows| rows.iter().any(|r| r["revision"] == "hello-dev-00002")),
        "{}",
        top.all()
    );

    // `runway open`: the service's URL, in $BROWSER.
    let opened_file = repo.join("../opened");
    let browser = repo.join("../browser.sh");
    std::fs::write(
        &browser,
        format!("#!/bin/sh\necho \"$1\" > {}\n", opened_file.display()),
    )
    .unwrap();
    std::fs::set_permissions(
        &browser,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let opened = platform.runway_env(
        &["open", "--service", "hello"],
        &[("BROWSER", browser.as_os_str())],
    );
    assert!(opened.ok(), "{}", opened.all());
    let url = std::fs::read_to_string(&opened_file).unwrap();
    assert!(url.starts_with("https://hello.dev.localhost:"), "{url}");
    let printed = platform.runway(&["open", "--service", "hello", "--print"]);
    assert_eq!(printed.stdout, url, "{}", printed.all());

    // The `.localhost` note: once, not on every command.
    let _ = std::fs::remove_file(platform.cli_config().with_file_name("localhost-note"));
    let first = platform.runway(&["status", "--service", "hello"]);
    assert!(first.stdout.contains("resolved by curl"), "{}", first.all());
    let again = platform.runway(&["status", "--service", "hello"]);
    assert!(
        again.ok() && !again.stdout.contains("resolved by curl"),
        "{}",
        again.all()
    );

    // `runway env set`: a new revision with the variable, serving it.
    let set = platform.runway_for(
        &[
            "env",
            "set",
            "GREETING=hey",
            "MODE=fast",
            "--service",
            "hello",
            "--wait",
        ],
        Duration::from_secs(120),
    );
    assert!(set.ok(), "{}", set.all());
    assert!(set.stdout.contains("hello-dev-00003"), "{}", set.all());
    let (_, body) = platform.get(host, "/", Duration::from_secs(30));
    assert!(body.starts_with("hey from hello-dev-00003"), "{body}");
    let listed = platform.runway(&["env", "list", "--service", "hello", "--output", "json"]);
    assert!(listed.ok(), "{}", listed.all());
    assert_eq!(listed.json()["variables"]["GREETING"], "hey");
    assert_eq!(listed.json()["variables"]["MODE"], "fast");
    assert_eq!(listed.json()["from"]["MODE"], "runway env set");
    // A deploy from the repository keeps what `env set` set, over the repository's value,
    // and says so, with what else changed.
    support::set_env_file(&repo, "dev", &[("GREETING", "hello"), ("REPO_ONLY", "x")]);
    let deployed = platform.deploy(&repo, "dev");
    assert!(deployed.ok(), "{}", deployed.all());
    assert!(
        deployed
            .stderr
            .contains("kept over the repository's, as set with `runway env set`: GREETING, MODE"),
        "{}",
        deployed.all()
    );
    assert!(
        deployed.stderr.contains("variables added: REPO_ONLY"),
        "{}",
        deployed.all()
    );
    let (_, body) = platform.get(host, "/", Duration::from_secs(30));
    assert!(body.starts_with("hey from hello-dev-00004"), "{body}");
    let listed = platform.runway(&["env", "list", "--service", "hello"]);
    let repo_only = listed.stdout.lines().find(|l| l.starts_with("REPO_ONLY"));
    assert!(
        repo_only.is_some_and(|l| l.contains(".runway/env-dev.yml")),
        "{}",
        listed.all()
    );
    // The repository's own is changed there, not unset here.
    let refused = platform.runway(&["env", "unset", "REPO_ONLY", "--service", "hello"]);
    assert_eq!(refused.code, Some(1), "{}", refused.all());
    assert!(
        refused.stderr.contains("comes from the repository"),
        "{}",
        refused.all()
    );
    let unset = platform.runway_for(
        &["env", "unset", "MODE", "--service", "hello", "--wait"],
        Duration::from_secs(120),
    );
    assert!(unset.ok(), "{}", unset.all());
    let listed = platform.runway(&["env", "list", "--service", "hello"]);
    assert!(!listed.stdout.contains("MODE"), "{}", listed.all());
    assert!(
        listed.stdout.contains("hello-dev-00005 serves"),
        "{}",
        listed.all()
    );
    // What was never set is refused, saying so, and nothing is deployed.
    let refused = platform.runway(&["env", "unset", "NEVER_SET", "--service", "hello"]);
    assert_eq!(refused.code, Some(1), "{}", refused.all());
    assert!(
        refused.stderr.contains("NEVER_SET is not set"),
        "{}",
        refused.all()
    );

    // Rolling back to the revision already serving alone changes nothing: refused.
    let noop = platform.runway(&["rollback", "--service", "hello", "--to", "hello-dev-00005"]);
    assert_eq!(noop.code, Some(1), "{}", noop.all());
    assert!(
        noop.stderr.contains("nothing to roll back"),
        "{}",
        noop.all()
    );

    // Logs: with their time, and only those since a moment.
    let logs = platform.runway(&["logs", "--service", "hello", "--since", "10m"]);
    assert!(logs.ok(), "{}", logs.all());
    let line = logs
        .stdout
        .lines()
        .find(|l| l.contains("listening on"))
        .unwrap_or_else(|| panic!("{}", logs.all()));
    let time = line.split(' ').next().unwrap();
    assert!(
        time.len() >= 8 && time.as_bytes()[2] == b':' && time.as_bytes()[5] == b':',
        "{line}"
    );
    let future = platform.runway(&[
        "logs",
        "--service",
        "hello",
        "--since",
        "2999-01-01T00:00:00Z",
    ]);
    assert_eq!(future.stdout, "", "{}", future.all());
    // The instances the rollouts replaced: their output is kept (`--previous`).
    let previous = platform.runway(&["logs", "--service", "hello", "--previous"]);
    assert!(previous.ok(), "{}", previous.all());
    assert!(
        previous
            .stdout
            .lines()
            .any(|l| l.contains("hello-dev-00002") && l.contains("listening on")),
        "{}",
        previous.all()
    );
    assert!(
        !previous.stdout.contains("hello-dev-00005"),
        "the serving revision's: {}",
        previous.all()
    );

    // An environment added to the service keeps what it has in the others.
    let added = platform.runway(&["services", "update", "hello", "--add-env", "staging"]);
    assert!(added.ok(), "{}", added.all());
    assert!(
        added.stdout.contains("environments: dev, staging"),
        "{}",
        added.all()
    );
    let text = platform.runway(&["revisions", "--service", "hello"]);
    let serving = text
        .stdout
        .lines()
        .find(|l| l.starts_with("hello-dev-00005"));
    assert!(
        serving.is_some_and(|l| l.contains(" 100% ")),
        "{}",
        text.all()
    );
    let revisions = platform.runway(&["revisions", "--service", "hello", "--output", "json"]);
    assert_eq!(
        revisions.json().as_array().unwrap().len(),
        5,
        "{}",
        revisions.all()
    );

    // The audit log: the last entries, newest first.
    let audit = platform.runway(&["audit", "--limit", "3", "--output", "json"]);
    assert!(audit.ok(), "{}", audit.all());
    let entries = audit.json();
    let entries = entries.as_array().unwrap();
    assert_eq!(entries.len(), 3);
    assert!(entries[0]["id"].as_i64() > entries[2]["id"].as_i64());
    let text = platform.runway(&["audit"]);
    assert!(text.stdout.contains("service.create"), "{}", text.all());
    // Filtered: people's actions on the service, a family of actions, the platform's own;
    // the details readable.
    let audit = |args: &[&str]| platform.audit(args);
    let people = audit(&["--service", "hello", "--by", "people"]);
    assert!(!people.is_empty());
    assert!(
        people
            .iter()
            .all(|e| e["actor"] != "reconciler"
                && e["target"].as_str().unwrap_or("").contains("/hello")),
        "{people:#?}"
    );
    let secrets = audit(&["--action", "secret"]);
    assert!(
        !secrets.is_empty() && secrets.iter().all(|e| e["action"] == "secret.set"),
        "{secrets:#?}"
    );
    let platform_own = audit(&["--by", "platform", "--since", "1h"]);
    assert!(
        !platform_own.is_empty() && platform_own.iter().all(|e| e["actor"] == "reconciler"),
        "{platform_own:#?}"
    );
    assert!(audit(&["--since", "2999-01-01T00:00:00Z"]).is_empty());
    let text = platform.runway(&["audit", "--action", "deployment.event", "-n", "1"]);
    assert!(text.stdout.contains("message=\""), "{}", text.all());

    // Shell completion: a script bash accepts, completing runway's commands.
    let script = platform.runway(&["completion", "bash"]);
    assert!(script.ok(), "{}", script.all());
    let file = repo.join("../runway.bash");
    std::fs::write(&file, &script.stdout).unwrap();
    let checked = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {} && complete -p runway && COMP_WORDS=(runway dep) && COMP_CWORD=1 && \
             _runway runway dep runway && echo \"${{COMPREPLY[@]}}\"",
            file.display()
        ))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&checked.stdout);
    assert!(checked.status.success(), "{out}");
    assert!(out.contains("deploy"), "{out}");
    for shell in ["zsh", "fish"] {
        let script = platform.runway(&["completion", shell]);
        assert!(script.ok() && script.stdout.contains("deploy"), "{shell}");
    }

    // An app listening on another port than its PORT is told so within seconds, while it
    // starts, not when its startup probe gives up minutes later.
    let elsewhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = elsewhere.local_addr().unwrap().port().to_string();
    drop(elsewhere);
    support::set_env_file(&repo, "dev", &[("LISTEN_PORT", &port)]);
    let waited = platform.runway_with(
        &["deploy", "--env", "dev", "--wait", "--timeout", "20s"],
        Some(repo.as_os_str()),
        None,
        Duration::from_secs(60),
    );
    assert_eq!(waited.code, Some(3), "{}", waited.all());
    let said = waited.all();
    assert!(said.contains("cannot be reached yet"), "{said}");
    assert!(
        said.contains(&format!(
            "the app listens on 0.0.0.0:{port}, not on its PORT"
        )),
        "{said}"
    );
}

/// A server that goes away while `--wait` waits is not a failed deployment: after 30 s of
/// trying, exit code 4, saying the deployment goes on.
#[test]
fn a_lost_server_during_wait_is_its_own_exit_code() {
    if !can_run() {
        return;
    }
    let mut platform = Platform::start(&Settings::default());
    let repo = platform.onboard("hello", &["dev"], "s3cr3t");
    // The app starts slowly, so the deployment is still in progress when the server dies.
    support::set_env_file(&repo, "dev", &[("START_DELAY", "300")]);
    let started = Instant::now();
    let mut waiting = Command::new(env!("CARGO_BIN_EXE_runway"));
    waiting
        .args(["deploy", "--env", "dev", "--wait", "--timeout", "5m"])
        .arg(&repo);
    let waiting = std::thread::spawn({
        let config = platform.cli_config().to_owned();
        move || {
            waiting.env("RUNWAY_CONFIG", config);
            support::run(waiting, None, Duration::from_secs(120))
        }
    });
    std::thread::sleep(Duration::from_secs(4));
    platform.kill9();
    let ran = waiting.join().unwrap();
    assert_eq!(ran.code, Some(4), "{ran:?}");
    assert!(
        ran.stderr.contains("lost the server while waiting"),
        "{ran:?}"
    );
    assert!(ran.stderr.contains("goes on there"), "{ran:?}");
    assert!(
        started.elapsed() >= Duration::from_secs(30),
        "tried 30 s first"
    );
}

/// From a folder with only a `main.py` to a served URL, as the README says: `runway init`
/// finds the app and writes a manifest running it as a process, its hint ends with `runway
/// deploy --wait`, and that deploy serves it. A folder with nothing to run: `init` says how to
/// give an image, and the deploy's error names all three ways out.
#[test]
fn a_folder_of_code_becomes_a_url() {
    if !can_run() {
        return;
    }
    let platform = Platform::start(&Settings::default());
    let folder = platform.dir.path().join("greeter");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("main.py"), support::APP).unwrap();
    let begun = Instant::now();
    let init = platform.runway_with(&["init"], Some(folder.as_os_str()), None, support::COMMAND);
    assert!(init.ok(), "{}", init.all());
    assert!(init.stderr.contains("`python3 main.py`"), "{}", init.all());
    let hint = init.stderr.lines().last().unwrap_or_default();
    assert!(hint.ends_with("runway deploy --wait`"), "{}", init.all());
    let created = platform.runway(&["services", "create", "greeter", "--env", "dev"]);
    assert!(created.ok(), "{}", created.all());
    let deployed = platform.runway_with(
        &["deploy", "--wait", "--timeout", "90s"],
        Some(folder.as_os_str()),
        None,
        Duration::from_secs(120),
    );
    assert!(deployed.ok(), "{}", deployed.all());
    let (status, body) = platform.get("greeter.dev.localhost", "/", Duration::from_secs(30));
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("from greeter-dev-00001"), "{body}");
    eprintln!(
        "a folder with main.py to a served URL (init, services create, deploy --wait, GET): \
         {:.2} s",
        begun.elapsed().as_secs_f64()
    );

    // Nothing runnable: say how to give an image, and the deploy names the three ways out.
    let empty = platform.dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    std::fs::write(empty.join("README"), "nothing to run").unwrap();
    let init = platform.runway_with(
        &["init", "--name", "empty"],
        Some(empty.as_os_str()),
        None,
        support::COMMAND,
    );
    assert!(init.ok(), "{}", init.all());
    assert!(init.stderr.contains("--image REF"), "{}", init.all());
    let created = platform.runway(&["services", "create", "empty", "--env", "dev"]);
    assert!(created.ok(), "{}", created.all());
    let refused =
        platform.runway_with(&["deploy"], Some(empty.as_os_str()), None, support::COMMAND);
    assert_eq!(refused.code, Some(1), "{}", refused.all());
    for way in [
        "`image`",
        "spec.image",
        "spec.workload.process.command",
        "--image",
    ] {
        assert!(refused.stderr.contains(way), "{way}: {}", refused.all());
    }
}

/// Two failed first deploys in a row: nothing ever served, so nothing is "restored", nothing
/// claims traffic, no instance of either revision is started again, and nothing more is
/// written to the deployments once they ended.
#[test]
fn a_revision_that_never_served_is_not_brought_back() {
    if !can_run() {
        return;
    }
    let platform = Platform::start(&Settings::default());
    let repo = platform.onboard("hello", &["dev"], "s3cr3t");
    support::set_env_file(&repo, "dev", &[("CRASH", "1")]);
    for _ in 0..2 {
        let failed = platform.deploy(&repo, "dev");
        assert_eq!(failed.code, Some(1), "{}", failed.all());
        assert!(!failed.all().contains("restored"), "{}", failed.all());
        assert!(
            failed
                .all()
                .contains("nothing served before this deployment"),
            "{}",
            failed.all()
        );
    }
    let status = |platform: &Platform| {
        let ran = platform.runway(&[
            "status",
            "--service",
            "hello",
            "--env",
            "dev",
            "--output",
            "json",
        ]);
        assert!(ran.ok(), "{}", ran.all());
        ran.json()
    };
    let audit = |platform: &Platform| platform.audit(&["--limit", "500"]);
    // Settled, then watched for a while (reconcile passes are 250 ms apart here).
    std::thread::sleep(Duration::from_secs(1));
    let before = audit(&platform);
    std::thread::sleep(Duration::from_secs(4));
    let now = status(&platform);
    let instances = now["instances"].as_array().cloned().unwrap_or_default();
    assert!(instances.is_empty(), "instances still there: {now:#}");
    let said = platform.runway(&["status", "--service", "hello", "--env", "dev"]);
    assert!(said.stdout.contains("traffic: none"), "{}", said.all());
    let after = audit(&platform);
    let new: Vec<&serde_json::Value> = after.iter().filter(|row| !before.contains(row)).collect();
    assert!(
        new.is_empty(),
        "written after the deployments ended: {new:#?}"
    );
}

/// An image no retry can start (no entrypoint; a program it does not have) fails its deploy
/// at once, saying why, instead of trying until the deploy's timeout; the reason is said once.
#[test]
fn a_permanent_start_error_fails_the_deploy_at_once() {
    if !runway_oci::testing::require_tools("permanent start errors", &["docker-registry", "runc"]) {
        return;
    }
    let registry = runway_oci::testing::Registry::start().unwrap();
    let platform = Platform::start(&Settings {
        sections: format!(
            "runtime:\n  insecure_registries: [\"{}\"]\n",
            registry.host()
        ),
        ..Settings::default()
    });
    let repo = platform.onboard("hello", &["dev"], "s3cr3t");
    support::set_image_manifest(&repo, 1, 1);
    let layer = || {
        let tar = runway_oci::testing::raw_tar(&[(
            tar::EntryType::Regular,
            "README",
            "",
            b"no program here",
        )])
        .unwrap();
        runway_oci::testing::RawLayer::gzip(tar).unwrap()
    };
    for (tag, config, reason) in [
        (
            "none",
            serde_json::json!({}),
            "the image has no entrypoint or cmd",
        ),
        (
            "missing",
            serde_json::json!({"Cmd": ["/app/serve"]}),
            "/app/serve is not in the image",
        ),
    ] {
        let pushed =
            runway_oci::testing::push_image(&registry, "team/broken", tag, &[layer()], config)
                .unwrap();
        let started = Instant::now();
        let failed = platform.deploy_image(&repo, "dev", &pushed.reference);
        let took = started.elapsed();
        eprintln!("an image that cannot start ({tag}): its deploy failed after {took:?}");
        assert_eq!(failed.code, Some(1), "{tag}: {}", failed.all());
        assert!(failed.stderr.contains(reason), "{tag}: {}", failed.all());
        // The server's 60 s timeout is far: it failed on the first start.
        assert!(
            took < Duration::from_secs(15),
            "{tag}: failed after {took:?}"
        );
        assert!(
            failed.stderr.matches("cannot start an instance").count() <= 2,
            "{tag}: said again and again: {}",
            failed.all()
        );
    }
}
