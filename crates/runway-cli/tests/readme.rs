//! The README and the guide (`docs/`) kept true by running what they show.
//!
//! - The README's walkthrough runs top to bottom against a real `runway server`: its
//!   `server.yml` (the block after `<!-- walkthrough: server.yml -->`) and its commands (every
//!   block after `<!-- walkthrough -->`) are read from the README itself, so editing the README
//!   edits the test. The test changes only what a user would: the server's ports (to free ones,
//!   read back from what the server prints), its data directory (a temporary one), and the
//!   admin token `runway login --token -` reads (the one the server printed). A `# → TEXT`
//!   comment says what the command prints: its output must contain TEXT.
//! - The README stays one page, and every relative link in it and in `docs/*.md` names a file
//!   (and a heading) that exists.
//! - Every `runway` command in their `sh` blocks names a real subcommand and real flags.
//! - `runway server check-config` accepts every `server.yml` of the guide (blocks after
//!   `<!-- server.yml -->`, and the complete one after `<!-- every key -->`), and the complete
//!   one names every key the others have, defaults included.

#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Platform, RUNWAY, Server, run};

/// The README's bound, in lines: one page.
const README_LINES: usize = 200;

/// Bound on one walkthrough command (a deploy waits for its rollout).
const STEP: Duration = Duration::from_secs(150);

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// README.md and every page of the guide.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The fenced blocks right after a line that is `marker`: each block's body.
fn marked_blocks(text: &str, marker: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim() != marker {
            continue;
        }
        let fence = lines.by_ref().find(|l| !l.trim().is_empty()).unwrap_or("");
        assert!(
            fence.starts_with("```"),
            "{marker} is not followed by a fenced block but by {fence:?}"
        );
        let body: Vec<&str> = lines
            .by_ref()
            .take_while(|l| !l.starts_with("```"))
            .collect();
        blocks.push(body.join("\n") + "\n");
    }
    blocks
}

/// Every fenced block whose info string is `sh`, as (page, line).
fn sh_lines() -> Vec<(PathBuf, String)> {
    let mut found = Vec::new();
    for page in pages() {
        let text = read(&page);
        let mut in_sh = false;
        let mut in_other = false;
        for line in text.lines() {
            if let Some(info) = line.strip_prefix("```") {
                if in_sh || in_other {
                    (in_sh, in_other) = (false, false);
                } else if info.trim() == "sh" {
                    in_sh = true;
                } else {
                    in_other = true;
                }
            } else if in_sh {
                found.push((page.clone(), line.to_owned()));
            }
        }
    }
    found
}

/// A shell line split into its command and its comment (a `#` after a blank, outside quotes).
fn split_comment(line: &str) -> (&str, Option<&str>) {
    let (mut single, mut double) = (false, false);
    let mut previous = ' ';
    for (at, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && previous.is_whitespace() => {
                return (line[..at].trim_end(), Some(line[at + 1..].trim()));
            }
            _ => {}
        }
        previous = c;
    }
    (line.trim_end(), None)
}

/// A command's words, quotes removed, split into the simple commands of a pipeline or list
/// (`|`, `&&`, `;`, `&`, and redirections ending one).
fn simple_commands(command: &str) -> Vec<Vec<String>> {
    let mut commands = vec![Vec::new()];
    let mut word = String::new();
    let mut in_word = false;
    let (mut single, mut double) = (false, false);
    let mut chars = command.chars().peekable();
    let end_word = |word: &mut String, in_word: &mut bool, commands: &mut Vec<Vec<String>>| {
        if *in_word {
            commands.last_mut().unwrap().push(std::mem::take(word));
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' if !double => {
                single = !single;
                in_word = true;
            }
            '"' if !single => {
                double = !double;
                in_word = true;
            }
            c if single || double => word.push(c),
            c if c.is_whitespace() => end_word(&mut word, &mut in_word, &mut commands),
            '|' | ';' | '&' | '>' | '<' => {
                end_word(&mut word, &mut in_word, &mut commands);
                while chars.peek().is_some_and(|n| matches!(n, '|' | '&' | '>')) {
                    chars.next();
                }
                if matches!(c, '>' | '<') {
                    // The file redirected to is not an argument.
                    commands.last_mut().unwrap().push(String::from(">"));
                }
                commands.push(Vec::new());
            }
            c => {
                word.push(c);
                in_word = true;
            }
        }
    }
    end_word(&mut word, &mut in_word, &mut commands);
    commands.retain(|c| !c.is_empty());
    commands
}

// ─── The walkthrough ────────────────────────────────────────────────────────────────────────

/// True when the walkthrough can run here: root (its server isolates processes), python3 (the
/// example), runc and curl. Outside CI a missing one skips the test, said; under CI it fails.
fn walkthrough_can_run() -> bool {
    let mut missing = Vec::new();
    if !nix::unistd::geteuid().is_root() {
        missing.push("root (the server isolates the example's process with runc)");
    }
    if !support::have_python() {
        return false;
    }
    for (program, why) in [
        ("runc", "runc (apt-get install runc)"),
        ("curl", "curl (apt-get install curl)"),
    ] {
        if !support::runs(Path::new(program), "--version", Duration::from_secs(10)) {
            missing.push(why);
        }
    }
    if missing.is_empty() {
        return true;
    }
    let reason = format!("the README's walkthrough needs {}", missing.join(", "));
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{reason}");
    eprintln!("skipped: {reason}");
    false
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The value of the first `key:` line of a YAML text (`listen: 127.0.0.1:7443` → the address).
fn yaml_value(yaml: &str, key: &str) -> String {
    yaml.lines()
        .find_map(|line| {
            let (code, _) = split_comment(line);
            code.trim().strip_prefix(&format!("{key}:"))
        })
        .map(|value| value.trim().to_owned())
        .unwrap_or_else(|| panic!("the walkthrough's server.yml has no `{key}:`"))
}

/// What `runway server` printed at its start.
struct Started {
    api: String,
    https_port: u16,
    http: Option<std::net::SocketAddr>,
    ca: PathBuf,
    token: String,
    ingress: Option<(u32, String)>,
}

/// Reads the server's start from its stderr (every line also kept in `log`), at most 30 s.
fn read_start(child: &mut std::process::Child, log: &Arc<Mutex<String>>) -> Started {
    let stderr = child.stderr.take().unwrap();
    let (lines, receive) = mpsc::channel();
    let kept = Arc::clone(log);
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            kept.lock().unwrap().push_str(&format!("{line}\n"));
            let _ = lines.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut api, mut https_port, mut http, mut ca, mut token, mut ingress) =
        (None, None, None, None, None, None);
    let mut token_next = false;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(line) = receive.recv_timeout(left) else {
            let _ = child.kill();
            panic!(
                "runway server did not print its start:\n{}",
                log.lock().unwrap()
            );
        };
        if token_next {
            token = Some(line.trim().to_owned());
            token_next = false;
        } else if let Some(rest) = line.strip_prefix("runway server: API on ") {
            api = Some(rest.trim().to_owned());
        } else if let Some(rest) = line.strip_prefix("runway server: services on ") {
            // https://{service}.{env}.localhost:PORT (HTTP on ADDR)
            https_port = rest
                .split("localhost:")
                .nth(1)
                .and_then(|r| r.split(' ').next())
                .and_then(|p| p.parse().ok());
            http = rest
                .split("(HTTP on ")
                .nth(1)
                .and_then(|r| r.trim_end_matches(')').parse().ok());
        } else if let Some(rest) =
            line.strip_prefix("runway server: clients trust the certificate authority in ")
        {
            ca = Some(PathBuf::from(rest.trim()));
        } else if let Some(rest) = line.strip_prefix("runway server: ingress pid ") {
            ingress = rest.split_once(" (").and_then(|(pid, outcome)| {
                Some((
                    pid.parse::<u32>().ok()?,
                    outcome.strip_suffix(')')?.to_owned(),
                ))
            });
        } else if line.starts_with("runway server: the admin token") {
            token_next = true;
        } else if line.starts_with("log in with:") {
            break;
        }
    }
    let (Some(api), Some(https_port), Some(ca), Some(token)) = (api, https_port, ca, token) else {
        let _ = child.kill();
        panic!(
            "runway server printed an incomplete start:\n{}",
            log.lock().unwrap()
        );
    };
    Started {
        api,
        https_port,
        http,
        ca,
        token,
        ingress,
    }
}

#[test]
fn the_readme_walkthrough_runs_top_to_bottom() {
    if !walkthrough_can_run() {
        return;
    }
    let readme = read(&root().join("README.md"));
    let yaml = marked_blocks(&readme, "<!-- walkthrough: server.yml -->");
    assert_eq!(yaml.len(), 1, "the README has one walkthrough server.yml");
    let yaml = &yaml[0];
    let steps: Vec<String> = marked_blocks(&readme, "<!-- walkthrough -->")
        .iter()
        .flat_map(|block| block.lines().map(str::to_owned).collect::<Vec<_>>())
        .filter(|line| !line.trim().is_empty() && !line.trim_start().starts_with('#'))
        .collect();
    assert!(
        steps.len() >= 5,
        "the README's walkthrough has {} commands",
        steps.len()
    );

    // The addresses the README names, which the test moves to free ports.
    let listen = yaml_value(yaml, "listen");
    let https_port = yaml_value(yaml, "https")
        .rsplit_once(':')
        .map(|(_, port)| port.to_owned())
        .unwrap();
    let any_port = regex::Regex::new(r"(127\.0\.0\.1|0\.0\.0\.0|localhost):\d+").unwrap();
    let server_yml = any_port.replace_all(yaml, "127.0.0.1:0").into_owned();

    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().to_path_buf();
    std::fs::write(cwd.join("server.yml"), &server_yml).unwrap();
    copy_dir(&root().join("examples"), &cwd.join("examples"));
    let data = cwd.join("data");
    let cli_config = cwd.join("cli.json");
    let bin = Path::new(RUNWAY).parent().unwrap();
    let path = std::env::join_paths(std::iter::once(bin.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();

    // The first command starts the server, in the background.
    let (server_line, _) = split_comment(&steps[0]);
    let words = &simple_commands(server_line)[0];
    assert!(
        words.starts_with(&["runway".to_owned(), "server".to_owned()])
            && server_line.ends_with('&'),
        "the walkthrough starts with `runway server … &`, not {server_line:?}"
    );
    let readme_data = words
        .iter()
        .position(|w| w == "--data-dir")
        .map(|at| words[at + 1].clone())
        .expect("the walkthrough's `runway server` names its --data-dir");
    let args: Vec<String> = words[1..]
        .iter()
        .map(|w| w.replace(&readme_data, &data.to_string_lossy()))
        .collect();
    let started_at = Instant::now();
    let mut child = Command::new(RUNWAY)
        .args(&args)
        .current_dir(&cwd)
        .env_remove("RUNWAY_DATA_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    let started = read_start(&mut child, &log);
    // From here the platform cleans up after itself, as every other test's does: the server,
    // its instances and its ingress are stopped when it is dropped, even on a panic.
    let platform = Platform {
        dir,
        data: data.clone(),
        config: cwd.join("server.yml"),
        cli_config: cli_config.clone(),
        token: started.token.clone(),
        server: Some(Server {
            child,
            api: started.api.clone(),
            https: std::net::SocketAddr::from(([127, 0, 0, 1], started.https_port)),
            http: started.http,
            ca: started.ca.clone(),
            token: Some(started.token.clone()),
            ingress: started.ingress.clone(),
        }),
        log: Arc::clone(&log),
        ingress_pids: started.ingress.iter().map(|i| i.0).collect(),
        rt: tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
        netns: None,
    };
    assert_eq!(
        started.ca,
        data.join("ca/ca.pem"),
        "the CA is where the README says"
    );
    let mut timings = vec![(
        "runway server".to_owned(),
        started_at.elapsed().as_secs_f64(),
    )];

    for step in &steps[1..] {
        let (command, comment) = split_comment(step);
        let substituted = command
            .replace(&readme_data, &data.to_string_lossy())
            .replace(&format!("https://{listen}"), &started.api)
            .replace(
                &format!("localhost:{https_port}"),
                &format!("localhost:{}", started.https_port),
            );
        for stale in [format!("https://{listen}"), format!(":{https_port}/")] {
            assert!(
                !substituted.contains(&stale),
                "{command:?} still names {stale} after the test's substitutions"
            );
        }
        let mut shell = Command::new("bash");
        shell
            .args(["-o", "pipefail", "-c", &substituted])
            .current_dir(&cwd)
            .env("PATH", &path)
            .env("RUNWAY_CONFIG", &cli_config)
            .env_remove("RUNWAY_SERVER")
            .env_remove("RUNWAY_TOKEN")
            .env_remove("RUNWAY_CA")
            .env_remove("RUNWAY_STATE_DIR")
            .env_remove("RUNWAY_DATA_DIR");
        let stdin = substituted
            .contains("--token -")
            .then(|| format!("{}\n", started.token));
        let ran = run(shell, stdin.as_deref().map(str::as_bytes), STEP);
        assert!(
            ran.ok(),
            "the README's walkthrough failed at {command:?} (run as {substituted:?}):\n{}\n\
             --- the server's log\n{}",
            ran.all(),
            platform.log()
        );
        if let Some(expected) = comment.and_then(|c| c.strip_prefix('→')) {
            let expected = expected.trim();
            assert!(
                ran.stdout.contains(expected),
                "{command:?} was to print {expected:?}:\n{}",
                ran.all()
            );
        }
        timings.push((command.to_owned(), ran.took.as_secs_f64()));
    }
    let total = started_at.elapsed();
    drop(platform);
    for (command, seconds) in &timings {
        eprintln!("{seconds:6.2} s  {command}");
    }
    eprintln!(
        "the README's walkthrough: {} commands in {:.1} s (cleanup included: {:.1} s)",
        timings.len(),
        total.as_secs_f64(),
        started_at.elapsed().as_secs_f64()
    );
}

// ─── One page, and links that lead somewhere ───────────────────────────────────────────────

#[test]
fn the_readme_is_one_page() {
    let readme = read(&root().join("README.md"));
    let lines = readme.lines().count();
    let words = readme.split_whitespace().count();
    eprintln!("README.md: {lines} lines, {words} words");
    assert!(
        lines < README_LINES,
        "README.md has {lines} lines: it is one page (under {README_LINES}); move the rest to \
         a page of docs/"
    );
}

/// A heading's anchor as GitHub makes it: lower case, punctuation but `-` and `_` dropped,
/// spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The text outside fenced blocks and inline code.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                out.push(c);
            }
        }
        out.push('\n');
    }
    out
}

fn anchors_of(path: &Path) -> BTreeSet<String> {
    read(path)
        .lines()
        .filter_map(|line| line.strip_prefix('#'))
        .map(|heading| anchor(heading.trim_start_matches('#')))
        .collect()
}

#[test]
fn every_relative_link_names_a_file_that_exists() {
    let link = regex::Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = read(&page);
        for found in link.captures_iter(&prose(&text)) {
            let target = &found[1];
            if ["http://", "https://", "mailto:"]
                .iter()
                .any(|scheme| target.starts_with(scheme))
            {
                continue;
            }
            checked += 1;
            let (file, fragment) = target.split_once('#').unwrap_or((target, ""));
            let path = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            if !path.exists() {
                broken.push(format!("{}: {target} (no such file)", page.display()));
            } else if !fragment.is_empty()
                && path.extension().is_some_and(|e| e == "md")
                && !anchors_of(&path).contains(fragment)
            {
                broken.push(format!("{}: {target} (no such heading)", page.display()));
            }
        }
    }
    eprintln!("{checked} relative links checked");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

// ─── The commands the pages show ───────────────────────────────────────────────────────────

/// `runway <path> --help`, cached.
fn help(cache: &mut HashMap<Vec<String>, String>, path: &[String]) -> String {
    cache
        .entry(path.to_vec())
        .or_insert_with(|| {
            let mut command = Command::new(RUNWAY);
            command.args(path).arg("--help");
            let ran = run(command, None, Duration::from_secs(30));
            assert!(ran.ok(), "runway {} --help: {}", path.join(" "), ran.all());
            ran.stdout
        })
        .clone()
}

/// The subcommands a help text lists.
fn subcommands(help: &str) -> BTreeSet<String> {
    help.lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| line.starts_with(' '))
        .filter_map(|line| {
            line.strip_prefix("  ")
                .filter(|l| !l.starts_with(' '))
                .and_then(|l| l.split_whitespace().next())
                .map(str::to_owned)
        })
        .collect()
}

#[test]
fn every_runway_command_shown_exists_with_its_flags() {
    let mut cache = HashMap::new();
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (page, line) in sh_lines() {
        let (command, _) = split_comment(&line);
        for words in simple_commands(command) {
            // Variables set for the command go before it.
            let words: Vec<String> = words
                .into_iter()
                .skip_while(|w| w.contains('=') && !w.starts_with('-'))
                .collect();
            if words.first().map(String::as_str) != Some("runway") {
                continue;
            }
            checked += 1;
            let mut path: Vec<String> = Vec::new();
            let mut rest = words[1..].iter().peekable();
            while let Some(word) = rest.peek() {
                if subcommands(&help(&mut cache, &path)).contains(word.as_str()) {
                    path.push((*word).clone());
                    rest.next();
                } else {
                    break;
                }
            }
            let text = help(&mut cache, &path);
            for word in rest {
                if word == "--" || word == ">" {
                    break;
                }
                let flag = word.split('=').next().unwrap();
                let known = if let Some(long) = flag.strip_prefix("--") {
                    regex::Regex::new(&format!(r"--{}\b", regex::escape(long)))
                        .unwrap()
                        .is_match(&text)
                } else if flag.len() == 2 && flag.starts_with('-') && flag != "-" {
                    text.contains(&format!("{flag},"))
                } else {
                    true
                };
                if !known {
                    wrong.push(format!(
                        "{}: `runway {}` has no {flag}: {command}",
                        page.display(),
                        path.join(" ")
                    ));
                }
            }
        }
    }
    eprintln!("{checked} runway commands checked");
    assert!(checked > 50, "only {checked} runway commands found");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

// ─── The server's configuration ────────────────────────────────────────────────────────────

/// Every key of a JSON value, at any depth.
fn keys(value: &Value, into: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                into.insert(key.clone());
                keys(value, into);
            }
        }
        Value::Array(items) => items.iter().for_each(|item| keys(item, into)),
        _ => {}
    }
}

/// The files the guide's `server.yml`s name under `/etc/runway/`, made under `etc`.
fn make_named_files(etc: &Path, scratch: &Path) {
    let control = etc.join("control-tls");
    std::fs::create_dir_all(&control).unwrap();
    runway_ingress::control_tls::generate(&scratch.join("ingress-tls"), &control).unwrap();
    let authority = control.join("ca.crt");
    for name in [
        "gitlab-ca.pem",
        "vault-ca.pem",
        "store-ca.pem",
        "acme-ca.pem",
        "siem-ca.pem",
    ] {
        std::fs::copy(&authority, etc.join(name)).unwrap();
    }
    std::fs::copy(control.join("tls.crt"), etc.join("example.org.pem")).unwrap();
    std::fs::copy(control.join("tls.key"), etc.join("example.org-key.pem")).unwrap();
    let key = etc.join("master.key");
    std::fs::write(&key, [7u8; 32]).unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let cells = etc.join("cells");
    std::fs::create_dir_all(&cells).unwrap();
    let fixtures = root().join("crates/runway-cells/tests/fixtures");
    for name in ["rules.json", "topology.yml"] {
        std::fs::copy(fixtures.join(name), cells.join(name)).unwrap();
    }
    std::fs::copy(&authority, etc.join("fulcio-ca.pem")).unwrap();
    let signing =
        rcgen::KeyPair::from_pem(&std::fs::read_to_string(control.join("tls.key")).unwrap())
            .unwrap();
    std::fs::write(etc.join("cosign.pub"), signing.public_key_pem()).unwrap();
    std::fs::write(etc.join("sso-client-secret"), "a-client-secret\n").unwrap();
    std::fs::write(
        etc.join("cloudflare-ranges.txt"),
        "173.245.48.0/20\n2400:cb00::/32\n",
    )
    .unwrap();
    std::fs::write(
        etc.join("kubeconfig"),
        "apiVersion: v1\nkind: Config\nclusters:\n- name: cluster\n  cluster:\n    server: \
         https://127.0.0.1:6443\n    insecure-skip-tls-verify: true\nusers:\n- name: runway\n  \
         user:\n    token: not-a-token\ncontexts:\n- name: runway\n  context:\n    cluster: \
         cluster\n    user: runway\ncurrent-context: runway\n",
    )
    .unwrap();
}

#[test]
fn every_server_yml_shown_is_accepted_and_the_complete_one_names_every_key() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let scratch = tempfile::tempdir().unwrap();
    let etc = scratch.path().join("etc");
    make_named_files(&etc, scratch.path());
    let mut samples: BTreeMap<String, String> = BTreeMap::new();
    let mut complete = None;
    for page in pages() {
        let text = read(&page);
        let name = page.file_name().unwrap().to_string_lossy().into_owned();
        for marker in [
            "<!-- server.yml -->",
            "<!-- every key -->",
            "<!-- walkthrough: server.yml -->",
        ] {
            for (n, block) in marked_blocks(&text, marker).into_iter().enumerate() {
                if marker == "<!-- every key -->" {
                    assert!(complete.is_none(), "two complete samples");
                    complete = Some(block.clone());
                }
                samples.insert(format!("{name} {marker} #{}", n + 1), block);
            }
        }
    }
    let complete =
        complete.expect("docs/server-configuration.md has a `<!-- every key -->` sample");
    assert!(
        samples.len() >= 8,
        "only {} server.yml samples",
        samples.len()
    );
    let mut every_key = BTreeSet::new();
    for (n, (name, yaml)) in samples.iter().enumerate() {
        let file = scratch.path().join(format!("server-{n}.yml"));
        std::fs::write(
            &file,
            yaml.replace("/etc/runway/", &format!("{}/", etc.display())),
        )
        .unwrap();
        let mut command = Command::new(RUNWAY);
        command
            .args(["server", "check-config", "--config"])
            .arg(&file)
            .arg("--data-dir")
            .arg(scratch.path().join(format!("data-{n}")))
            .env_remove("RUNWAY_DATA_DIR")
            .env_remove("KUBECONFIG");
        let ran = run(command, None, Duration::from_secs(30));
        assert!(
            ran.ok(),
            "runway server check-config refuses the server.yml of {name}:\n{yaml}\n{}",
            ran.all()
        );
        keys(&ran.json(), &mut every_key);
    }
    let missing: Vec<&String> = every_key
        .iter()
        .filter(|key| {
            !regex::Regex::new(&format!(r"\b{}:", regex::escape(key)))
                .unwrap()
                .is_match(&complete)
        })
        .collect();
    assert!(
        missing.is_empty(),
        "the complete server.yml of docs/server-configuration.md does not name {missing:?}"
    );
}
