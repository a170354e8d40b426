//! Single sign-on through a real OpenID Connect provider: Dex (built from its Go source by
//! `scripts/dex`) on loopback, whose `authproxy` connector takes who signs in and their
//! groups from the request, as the reverse proxy in front of it would, so each sign-in can
//! bring other groups. A browser is curl (cookies, redirects); the CLI's `runway login --sso`
//! runs with `$BROWSER` that curl.

#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};
use support::{Platform, Settings};

/// Dex's directory (`scripts/dex` prints it), or `None` said on a developer's machine without
/// it; under `CI=true`, a failure.
fn dex() -> Option<PathBuf> {
    let dir = std::env::var_os("RUNWAY_DEX_BIN").map(PathBuf::from);
    match dir.filter(|d| d.join("dex").is_file()) {
        Some(dir) => Some(dir.join("dex")),
        None => {
            let reason = "Dex is not built: RUNWAY_DEX_BIN=$(scripts/dex | tail -n 1)";
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{reason}");
            eprintln!("skipped: {reason}");
            None
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Dex, killed when dropped.
struct Dex(Child);

impl Drop for Dex {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Dex {
    fn start(bin: &Path, dir: &Path, port: u16, callback: &str) -> Self {
        let config = dir.join("dex.yml");
        std::fs::write(
            &config,
            format!(
                "issuer: http://127.0.0.1:{port}/dex\nstorage:\n  type: memory\nweb:\n  \
                 http: 127.0.0.1:{port}\nlogger:\n  level: info\noauth2:\n  \
                 skipApprovalScreen: true\n  responseTypes: [code]\nconnectors:\n  - type: authproxy\n    \
                 id: proxy\n    name: Proxy\n    config:\n      userIDHeader: X-Remote-User-Id\n      \
                 userHeader: X-Remote-User\n      emailHeader: X-Remote-User-Email\n      \
                 groupHeader: X-Remote-Group\nstaticClients:\n  - id: runway\n    \
                 secret: runway-secret-0123456789\n    name: Runway\n    redirectURIs: ['{callback}']\n"
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join("dex.log")).unwrap();
        let child = Command::new(bin)
            .arg("serve")
            .arg(&config)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let dex = Self(child);
        let started = Instant::now();
        let discovery = format!("http://127.0.0.1:{port}/dex/.well-known/openid-configuration");
        while !curl(&["-fsS", "-o", "/dev/null", &discovery])
            .status
            .success()
        {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "Dex did not start: {}",
                std::fs::read_to_string(dir.join("dex.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        dex
    }
}

fn curl(args: &[&str]) -> std::process::Output {
    Command::new("curl")
        .args(["--max-time", "20"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The headers the proxy in front of Dex sends: who signs in, and their groups.
fn person(user: &str, groups: &[&str]) -> Vec<String> {
    vec![
        format!("X-Remote-User: {user}"),
        format!("X-Remote-User-Id: id-{user}"),
        format!("X-Remote-User-Email: {user}@example.com"),
        format!("X-Remote-Group: {}", groups.join(",")),
    ]
}

/// A browser signing in from `start`: where it ended, and the session token its cookie holds.
fn browser(
    platform: &Platform,
    dir: &Path,
    start: &str,
    who: &[String],
) -> (String, Option<String>) {
    let jar = dir.join(format!("jar-{}", free_port()));
    let mut args = vec![
        "-sS".to_owned(),
        "-L".to_owned(),
        "--max-redirs".to_owned(),
        "10".to_owned(),
        "-c".to_owned(),
        jar.display().to_string(),
        "-b".to_owned(),
        jar.display().to_string(),
        "--cacert".to_owned(),
        platform.ca().display().to_string(),
        "-o".to_owned(),
        "/dev/null".to_owned(),
        "-w".to_owned(),
        "%{http_code} %{url_effective}".to_owned(),
    ];
    for header in who {
        args.extend(["-H".to_owned(), header.clone()]);
    }
    args.push(format!("{}{start}", platform.api()));
    let out = curl(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ended = String::from_utf8_lossy(&out.stdout).into_owned();
    let cookies = std::fs::read_to_string(&jar).unwrap_or_default();
    let session = cookies.lines().find_map(|line| {
        let fields: Vec<&str> = line.split('\t').collect();
        (fields.len() == 7 && fields[5] == "runway_session" && !fields[6].is_empty())
            .then(|| fields[6].to_owned())
    });
    (ended, session)
}

fn call(
    platform: &Platform,
    method: Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    platform.call(method, path, Some(token), body)
}

#[test]
fn people_sign_in_through_the_provider_with_their_groups_as_teams() {
    let Some(dex_bin) = dex() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (dex_port, api_port) = (free_port(), free_port());
    let secret = dir.path().join("client-secret");
    std::fs::write(&secret, "runway-secret-0123456789\n").unwrap();
    let platform = Platform::start(&Settings {
        api: format!(
            "  listen: 127.0.0.1:{api_port}\n  sso:\n    issuer: http://127.0.0.1:{dex_port}/dex\n    \
             client_id: runway\n    client_secret_file: {}\n    public_url: https://127.0.0.1:{api_port}\n    \
             scopes: [openid, profile, email, groups]\n    admin_groups: [acme/platform]\n    session_hours: 1\n",
            secret.display()
        ),
        ..Settings::default()
    });
    // The provider is first asked at the first sign-in: down until now, the server started.
    let _dex = Dex::start(
        &dex_bin,
        dir.path(),
        dex_port,
        &format!("https://127.0.0.1:{api_port}/v1/sso/callback"),
    );

    let admin = platform.token.clone();
    let (status, _) = call(
        &platform,
        Method::PUT,
        "/v1/teams/payments",
        &admin,
        Some(json!({"members": [
            {"subject": "group:acme/payments", "role": "deployer"},
            {"subject": "group:acme/auditors", "role": "viewer"},
        ]})),
    );
    assert_eq!(status, 200);
    for name in ["billing", "search"] {
        let (status, body) = call(
            &platform,
            Method::POST,
            "/v1/services",
            &admin,
            Some(json!({"name": name})),
        );
        assert_eq!(status, 201, "{body}");
    }
    let (status, _) = call(
        &platform,
        Method::PATCH,
        "/v1/services/billing",
        &admin,
        Some(json!({"team": "payments"})),
    );
    assert_eq!(status, 200);
    let status =
        |token: &str, method: Method, path: &str| call(&platform, method, path, token, None).0;
    let pause = "/v1/services/billing/environments/dev/rollout";

    // Alice, in acme/payments: a deployer of the team's services, and of nothing else.
    let (ended, alice) = browser(
        &platform,
        dir.path(),
        "/v1/sso/login?to=/ui/services/billing",
        &person("alice", &["acme/payments"]),
    );
    assert!(
        ended.starts_with("200 ") && ended.ends_with("/ui/services/billing"),
        "{ended}"
    );
    let alice = alice.expect("a session cookie");
    let (_, who) = call(&platform, Method::GET, "/v1/whoami", &alice, None);
    assert_eq!(who["name"], "sso: alice", "{who}");
    assert_eq!(
        who["scope"]["person"]["groups"],
        json!(["acme/payments"]),
        "{who}"
    );
    assert_eq!(
        who["grants"],
        json!([{"role": "deployer", "team": "payments"}]),
        "{who}"
    );
    let (_, services) = call(&platform, Method::GET, "/v1/services", &alice, None);
    assert_eq!(services.as_array().unwrap().len(), 1, "{services}");
    assert_eq!(services[0]["name"], "billing");
    assert_ne!(
        status(&alice, Method::POST, pause),
        403,
        "a deployer pauses"
    );
    assert_eq!(status(&alice, Method::GET, "/v1/services/search"), 403);
    assert_eq!(status(&alice, Method::GET, "/v1/audit"), 403);

    // Her groups change at the provider: the next sign-in has the new ones; the session she
    // had keeps what she signed in with until it ends.
    let (_, again) = browser(
        &platform,
        dir.path(),
        "/v1/sso/login",
        &person("alice", &["acme/auditors"]),
    );
    let again = again.expect("a session cookie");
    let (_, who) = call(&platform, Method::GET, "/v1/whoami", &again, None);
    assert_eq!(
        who["grants"],
        json!([{"role": "viewer", "team": "payments"}]),
        "{who}"
    );
    assert_eq!(
        status(&again, Method::POST, pause),
        403,
        "a viewer does not pause"
    );
    assert_eq!(status(&again, Method::GET, "/v1/services/billing"), 200);
    // A team's members change at once, for every session.
    let (status_put, _) = call(
        &platform,
        Method::PUT,
        "/v1/teams/payments",
        &admin,
        Some(json!({"members": [
            {"subject": "group:acme/auditors", "role": "viewer"},
        ]})),
    );
    assert_eq!(status_put, 200);
    assert_eq!(
        status(&alice, Method::GET, "/v1/services/billing"),
        403,
        "out of the team"
    );

    // A group of the server's admin groups makes a platform admin.
    let (_, root) = browser(
        &platform,
        dir.path(),
        "/v1/sso/login",
        &person("bob", &["acme/platform"]),
    );
    let root = root.expect("a session cookie");
    let (_, who) = call(&platform, Method::GET, "/v1/whoami", &root, None);
    assert_eq!(who["admin"], true, "{who}");
    assert_eq!(status(&root, Method::GET, "/v1/audit"), 200);

    // A revoked session stops at once; signing out ends one too.
    let (_, tokens) = call(&platform, Method::GET, "/v1/tokens", &admin, None);
    let first = tokens
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "sso: alice")
        .unwrap()["id"]
        .as_i64()
        .unwrap();
    assert_eq!(
        status(&admin, Method::DELETE, &format!("/v1/tokens/{first}")),
        200
    );
    assert_eq!(status(&alice, Method::GET, "/v1/whoami"), 401);
    let out = curl(&[
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-X",
        "DELETE",
        "--cacert",
        &platform.ca().display().to_string(),
        "-H",
        "X-Runway-Console: 1",
        "-H",
        &format!("Cookie: runway_session={again}"),
        &format!("{}/v1/session", platform.api()),
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "204");
    assert_eq!(status(&again, Method::GET, "/v1/whoami"), 401);
    let (_, audit) = call(
        &platform,
        Method::GET,
        "/v1/audit?action=token",
        &admin,
        None,
    );
    let by_people: Vec<&str> = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "token.create")
        .filter_map(|e| e["actor"].as_str())
        .filter(|a| a.starts_with("sso: "))
        .collect();
    assert_eq!(
        by_people,
        ["sso: alice", "sso: alice", "sso: bob"],
        "{audit}"
    );

    // Refusals: another sign-in's answer, a redirect off this console, a CLI's half request.
    let forged = format!("{}/v1/sso/callback?code=x&state=y", platform.api());
    let out = curl(&[
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--cacert",
        &platform.ca().display().to_string(),
        &forged,
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "401");
    let (ended, _) = browser(
        &platform,
        dir.path(),
        "/v1/sso/login?to=https://evil.example/",
        &person("carol", &["acme/auditors"]),
    );
    assert!(
        ended.ends_with(&format!("127.0.0.1:{api_port}/ui/")),
        "{ended}"
    );
    let out = curl(&[
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--cacert",
        &platform.ca().display().to_string(),
        &format!("{}/v1/sso/login?cli_port=4000", platform.api()),
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "400");

    // Someone in no team is not signed in at all.
    let (ended, none) = browser(
        &platform,
        dir.path(),
        "/v1/sso/login",
        &person("mallory", &["elsewhere"]),
    );
    assert!(ended.starts_with("403 "), "{ended}");
    assert!(none.is_none());

    // A CLI sign-in someone else started (a link with their port and challenge) goes nowhere
    // without the person's yes: the provider's answer is a page with one button.
    let challenge = "A".repeat(43);
    let (ended, _) = browser(
        &platform,
        dir.path(),
        &format!(
            "/v1/sso/login?cli_port=4000&cli_challenge={challenge}&cli_state=state-of-the-cli"
        ),
        &person("alice", &["acme/auditors"]),
    );
    assert!(
        ended.starts_with("200 ") && ended.contains("/v1/sso/callback"),
        "{ended}"
    );
    // And the button works from this API's own page only.
    let out = curl(&[
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--cacert",
        &platform.ca().display().to_string(),
        "-H",
        "Origin: https://evil.example",
        "--data",
        "handoff=x",
        &format!("{}/v1/sso/cli", platform.api()),
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "403");

    // The CLI: `runway login --sso`, its browser a script that signs in as dave, checks the
    // code the page shows is the one the CLI printed, and says yes.
    let script = dir.path().join("browser");
    let headers: Vec<(String, String)> = person("dave", &["acme/auditors"])
        .iter()
        .filter_map(|h| {
            h.split_once(": ")
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
        })
        .collect();
    std::fs::write(
        &script,
        format!(
            r#"#!/usr/bin/env python3
import http.cookiejar, re, ssl, sys, urllib.parse, urllib.request
api, shown = {api:?}, {shown:?}
context = ssl.create_default_context(cafile={ca:?})
opener = urllib.request.build_opener(
    urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()),
    urllib.request.HTTPSHandler(context=context))
opener.addheaders = {headers:?}
page = opener.open(sys.argv[1], timeout=20).read().decode()
code = re.search(r"the code <b>([0-9A-F-]+)</b>", page).group(1)
with open(shown, "w") as f:
    f.write(code)
handoff = re.search(r'name=handoff value="([^"]+)"', page).group(1)
form = urllib.parse.urlencode({{"handoff": handoff}}).encode()
request = urllib.request.Request(api + "/v1/sso/cli", data=form, headers={{"Origin": api}})
opener.open(request, timeout=20).read()
"#,
            api = platform.api(),
            shown = dir.path().join("shown").display().to_string(),
            ca = platform.ca().display().to_string(),
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let config = dir.path().join("cli.json");
    let ca = platform.ca().display().to_string();
    let login = platform.runway_env(
        &["login", "--sso", "--server", &platform.api(), "--ca", &ca],
        &[
            ("RUNWAY_CONFIG", config.as_os_str()),
            ("BROWSER", script.as_os_str()),
            ("RUNWAY_TOKEN", "".as_ref()),
        ],
    );
    assert!(login.ok(), "{}", login.all());
    assert!(
        login
            .stdout
            .contains("dave, signed in (groups acme/auditors)"),
        "{}",
        login.all()
    );
    let shown = std::fs::read_to_string(dir.path().join("shown")).unwrap();
    assert!(
        login.stderr.contains(&format!("shows the code {shown}")),
        "the page showed {shown}: {}",
        login.all()
    );
    let listed = platform.runway_env(
        &["services", "list", "--output", "json"],
        &[
            ("RUNWAY_CONFIG", config.as_os_str()),
            ("RUNWAY_TOKEN", "".as_ref()),
        ],
    );
    assert!(listed.ok(), "{}", listed.all());
    let names: Value = serde_json::from_str(&listed.stdout).unwrap();
    assert_eq!(names.as_array().unwrap().len(), 1, "{names}");
    assert_eq!(names[0]["name"], "billing");
    // The console in Chromium: the sign-in page's button, the provider, the services page.
    console_signs_in(&platform, dir.path(), &person("erin", &["acme/auditors"]));

    // A code redeemed with another verifier gives nothing.
    let (refused, body) = platform.call(
        Method::POST,
        "/v1/sso/token",
        None,
        Some(json!({"code": "AAAA", "verifier": "x"})),
    );
    assert_eq!(refused, 401, "{body}");
}

/// Chromium signs in to the console through the provider as `who` and lands on the services
/// its team shows. Node, Chromium and playwright-core as the console's own test has them.
fn console_signs_in(platform: &Platform, dir: &Path, who: &[String]) {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let node_path = workspace.join("target/tools/node_modules");
    let chromium = std::env::var_os("RUNWAY_CHROMIUM")
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from);
    let ready = Command::new("node")
        .args(["-e", "require('playwright-core')"])
        .env("NODE_PATH", &node_path)
        .status()
        .is_ok_and(|s| s.success())
        && chromium.is_file();
    if !ready {
        let reason = "node, playwright-core or chromium is missing (scripts/test installs them)";
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{reason}");
        eprintln!("skipped the console's sign-in: {reason}");
        return;
    }
    let headers: serde_json::Map<String, Value> = who
        .iter()
        .filter_map(|h| h.split_once(": "))
        .map(|(k, v)| (k.to_owned(), json!(v)))
        .collect();
    let script = dir.join("console-sso.cjs");
    std::fs::write(
        &script,
        format!(
            "const {{ chromium }} = require('playwright-core');\n\
             (async () => {{\n\
               const browser = await chromium.launch({{ executablePath: {chromium:?}, args: ['--no-sandbox'] }});\n\
               const context = await browser.newContext({{ ignoreHTTPSErrors: true, extraHTTPHeaders: {headers} }});\n\
               const page = await context.newPage();\n\
               await page.goto('{api}/ui/');\n\
               await page.getByRole('link', {{ name: 'Sign in with single sign-on' }}).click();\n\
               await page.locator('main[data-ready=\"true\"] h1', {{ hasText: 'Services' }}).waitFor({{ timeout: 30000 }});\n\
               const who = await page.locator('#who-name').textContent();\n\
               if (!who.includes('sso: erin')) throw new Error(`signed in as: ${{who}}`);\n\
               const services = await page.locator('main h2 a').allTextContents();\n\
               if (services.join() !== 'billing') throw new Error(`services shown: ${{services}}`);\n\
               await browser.close();\n\
             }})().catch((e) => {{ console.error(e); process.exit(1); }});\n",
            chromium = chromium.display().to_string(),
            headers = Value::Object(headers),
            api = platform.api(),
        ),
    )
    .unwrap();
    let out = Command::new("timeout")
        .args(["90", "node"])
        .arg(&script)
        .env("NODE_PATH", &node_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the console's sign-in: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
