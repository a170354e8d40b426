//! `runway init`.

use std::fs;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use runway_manifest::{ServiceFiles, SourceFile, load};

use crate::repo::display;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Repository root to create `.runway/runway.yml` in.
    #[arg(default_value = ".")]
    dir: PathBuf,
    /// Service name, a DNS label. Default: the directory's name.
    #[arg(long)]
    name: Option<String>,
    /// Port the service listens on.
    #[arg(long)]
    port: Option<u16>,
    /// Container image; may be left out and given at deploy time. Without it, an app `init`
    /// recognizes (a Procfile's `web` process, Node's `npm start`, a Python `main.py`,
    /// `app.py` or `server.py`, a built binary) is run as a plain process of the code
    /// `runway deploy` uploads.
    #[arg(long)]
    image: Option<String>,
    /// Replace an existing `.runway/runway.yml`.
    #[arg(long)]
    force: bool,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let path = args.dir.join(".runway").join("runway.yml");
    if path.exists() && !args.force {
        bail!(
            "{} already exists; pass --force to replace it",
            display(&path)
        );
    }
    let interactive = std::io::stdin().is_terminal();
    let default_name = default_name(&args.dir);
    let name = match &args.name {
        Some(name) => name.clone(),
        None if interactive => ask("Service name", &default_name)?,
        None => default_name,
    };
    let port = match args.port {
        Some(port) => port,
        None if interactive => {
            let answer = ask("Port", "8080")?;
            answer
                .parse()
                .with_context(|| format!("`{answer}` is not a port number (1-65535)"))?
        }
        None => 8080,
    };
    let image = match &args.image {
        Some(image) => Some(image.clone()),
        None if interactive => {
            Some(ask("Image (empty to give it at deploy time)", "")?).filter(|i| !i.is_empty())
        }
        None => None,
    };

    // What to run: the image asked for, else the app found here, run as a process.
    let found = if image.is_none() {
        detect(&args.dir)
    } else {
        Found::Nothing
    };
    let process = match &found {
        Found::App(app) => Some(app),
        _ => None,
    };
    let text = template(&name, port, image.as_deref(), process);
    // Check what we are about to write, so that a bad --name is refused with the usual message.
    let files = ServiceFiles {
        base: Some(SourceFile::new(display(&path), text.clone())),
        ..ServiceFiles::default()
    };
    let loaded = load(&files);
    if let Some(error) = loaded.diagnostics.iter().find(|d| d.is_error()) {
        bail!("{}", error.headline());
    }
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).with_context(|| format!("cannot create {}", display(parent)))?;
    }
    fs::write(&path, text).with_context(|| format!("cannot write {}", display(&path)))?;
    eprintln!("created {}", display(&path));
    let here = args.dir == Path::new(".");
    let deploy = if here {
        "runway deploy --wait".to_owned()
    } else {
        format!("cd {} && runway deploy --wait", display(&args.dir))
    };
    match (&found, &image) {
        (Found::App(app), _) => {
            eprintln!(
                "it runs {} as a plain process: `{}`, listening on $PORT",
                app.what,
                app.command.join(" ")
            );
            if let Some(note) = &app.note {
                eprintln!("note: {note}");
            }
            eprintln!(
                "note: a server runs processes only where its operator allows them \
                 (runtime.allow_processes, or `runway services update {name} \
                 --allow-processes true`); give an image (`spec.image`) for a cluster"
            );
        }
        (Found::Build(hint), None) => eprintln!("note: {hint}"),
        (Found::Nothing, None) => eprintln!(
            "note: no image and no app found here to run as a process: give the image at \
             deploy (`runway deploy --image REF`) or in spec.image, or set \
             spec.workload.process.command"
        ),
        _ => {}
    }
    eprintln!(
        "next: `runway services create {name}` (once, with a server's login), then `{deploy}`"
    );
    Ok(ExitCode::SUCCESS)
}

/// What `init` found to run in a directory.
#[derive(Debug)]
enum Found {
    /// An app it can run as a process.
    App(App),
    /// Source that needs a build first: what to do.
    Build(String),
    Nothing,
}

/// An app run as a plain process.
#[derive(Debug)]
struct App {
    command: Vec<String>,
    /// What it is, for people: "the Procfile's web process".
    what: String,
    /// What to know before deploying it.
    note: Option<String>,
}

/// The app in `dir`, looked for in this order: a Procfile's `web` process, a Node app
/// (`npm start`, else its main file), a Python entry file, a single executable file (a
/// built Go or Rust binary); else Go or Rust source, which must be built first.
fn detect(dir: &Path) -> Found {
    let app = |command: &[&str], what: String, note: Option<String>| {
        Found::App(App {
            command: command.iter().map(|part| (*part).to_owned()).collect(),
            what,
            note,
        })
    };
    let file = |name: &str| dir.join(name).is_file();
    if let Ok(procfile) = fs::read_to_string(dir.join("Procfile"))
        && let Some(web) = procfile.lines().find_map(|line| {
            let (kind, command) = line.split_once(':')?;
            (kind.trim() == "web" && !command.trim().is_empty()).then(|| command.trim())
        })
    {
        return app(
            &["sh", "-c", web],
            "the Procfile's web process".to_owned(),
            None,
        );
    }
    if let Ok(text) = fs::read_to_string(dir.join("package.json")) {
        let package: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        let dependencies =
            file("node_modules/.package-lock.json") || dir.join("node_modules").is_dir();
        let note = (!dependencies).then(|| {
            "node_modules/ is not here: run `npm install` before deploying (the server installs \
             nothing)"
                .to_owned()
        });
        if package["scripts"]["start"].is_string() {
            return app(
                &["npm", "start"],
                "the Node app's start script".to_owned(),
                note,
            );
        }
        let main = package["main"]
            .as_str()
            .filter(|main| file(main))
            .map(str::to_owned)
            .or_else(|| {
                ["server.js", "index.js", "app.js"]
                    .into_iter()
                    .find(|name| file(name))
                    .map(str::to_owned)
            });
        if let Some(main) = main {
            return app(&["node", &main], format!("the Node app {main}"), note);
        }
    }
    if let Some(main) = ["main.py", "app.py", "server.py"]
        .into_iter()
        .find(|name| file(name))
    {
        let note = ["requirements.txt", "pyproject.toml"]
            .into_iter()
            .find(|name| file(name))
            .map(|deps| {
                format!(
                    "the server runs it with its own python3 and installs nothing from {deps}: \
                     an app with dependencies needs an image"
                )
            });
        return app(&["python3", main], format!("the Python app {main}"), note);
    }
    if let Some(binary) = single_executable(dir) {
        return app(
            &[&format!("./{binary}")],
            format!("the program {binary}"),
            None,
        );
    }
    if file("go.mod") {
        return Found::Build(
            "Go source: build a binary into this directory (`CGO_ENABLED=0 go build -o app .`) \
             and run `runway init --force` again to run it as a process, or give an image"
                .to_owned(),
        );
    }
    if file("Cargo.toml") {
        return Found::Build(
            "Rust source: copy a release build into this directory (`cargo build --release`, \
             then `cp target/release/NAME .`; target/ is not uploaded) and run `runway init \
             --force` again to run it as a process, or give an image"
                .to_owned(),
        );
    }
    Found::Nothing
}

/// The one executable file at the top of `dir`, if there is exactly one (scripts started by
/// `#!` included).
fn single_executable(dir: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mut found = None;
    for entry in fs::read_dir(dir).ok()?.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        let name = entry.file_name().to_string_lossy().into_owned();
        if meta.is_file() && meta.permissions().mode() & 0o111 != 0 && !name.starts_with('.') {
            if found.is_some() {
                return None;
            }
            found = Some(name);
        }
    }
    found
}

fn ask(question: &str, default: &str) -> anyhow::Result<String> {
    let mut stderr = std::io::stderr();
    if default.is_empty() {
        write!(stderr, "{question}: ")?;
    } else {
        write!(stderr, "{question} [{default}]: ")?;
    }
    stderr.flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let answer = line.trim();
    Ok(if answer.is_empty() {
        default.to_owned()
    } else {
        answer.to_owned()
    })
}

/// The directory's name as a DNS label: lower-case, other characters as `-`.
fn default_name(dir: &Path) -> String {
    let dir = fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let raw = dir
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    let mut name: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    name = name.trim_matches('-').to_owned();
    name.truncate(63);
    let name = name.trim_end_matches('-');
    if name.starts_with(|c: char| c.is_ascii_lowercase()) {
        name.to_owned()
    } else {
        format!("service-{name}").trim_end_matches('-').to_owned()
    }
}

fn template(name: &str, port: u16, image: Option<&str>, process: Option<&App>) -> String {
    let image = match (image, process) {
        (Some(image), _) => format!("  image: {image}\n"),
        (None, Some(_)) => String::new(),
        (None, None) => "  # The image is given at deploy time (`runway deploy --image REF`), or here:\n  # image: registry.example.com/team/service:1.0.0\n".to_owned(),
    };
    let workload = match process {
        Some(app) => format!(
            "  # Run as a plain process of the code `runway deploy` uploads (a server must allow\n  \
             # it: runtime.allow_processes). For a cluster, give `image` instead.\n  \
             workload:\n    process:\n      command: {}\n    \
             # env:\n    #   LOG_LEVEL: info\n    \
             # secrets: [DATABASE_PASSWORD]   # values: `runway secrets set`\n",
            serde_json::to_string(&app.command).unwrap_or_default()
        ),
        None => "  # workload:\n  #   env:\n  #     LOG_LEVEL: info\n  #   secrets: [DATABASE_PASSWORD]   # values: `runway secrets set`\n".to_owned(),
    };
    format!(
        r#"# The Runway manifest: `runway validate` checks it, `runway render` turns it into Kubernetes,
# Knative or Helm. Per-environment changes go in runway-<env>.yml beside this file, and
# environment variables in env-<env>.yml. Every field: `runway schema` prints the JSON Schema.
apiVersion: runway/v1
kind: RunwayService
metadata:
  name: {name}
  # owner_email_handle: your-team
spec:
{image}  # The port the service listens on; instances get it as $PORT.
  container_port: {port}
  regions: [us-east1]
  # Seconds a request may take before the platform answers 504.
  request_timeout: 60
  resources:
    limits:
      cpu: 1000m
      memory: 512Mi
  scalability:
    # 0 lets the service scale to zero when idle.
    min_instances: 0
    max_instances: 10
    max_instance_request_concurrency: 80
  # Checked until the service has started. Without it, a TCP connection to the port counts.
  # startup_probe:
  #   path: /healthz
  #   period_seconds: 1
  #   failure_threshold: 30
  # Failing this takes an instance out of traffic until it passes again.
  # readiness_probe:
  #   path: /healthz
  deployment:
    # legacy: rolling; regional_rollout: region by region in steps; expedited: at once.
    strategy: legacy
{workload}"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_directories() {
        assert_eq!(default_name(Path::new("/tmp/My_Service")), "my-service");
        assert_eq!(default_name(Path::new("/tmp/123")), "service-123");
        assert_eq!(default_name(Path::new("/tmp/--a--")), "a");
    }

    #[test]
    fn apps_are_found_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| fs::write(dir.path().join(name), text).unwrap();
        let command = || match detect(dir.path()) {
            Found::App(app) => app.command.join(" "),
            Found::Build(hint) => format!("build: {hint}"),
            Found::Nothing => "nothing".to_owned(),
        };
        assert_eq!(command(), "nothing");
        write("Cargo.toml", "[package]\nname = \"x\"\n");
        assert!(command().starts_with("build: Rust source"), "{}", command());
        write("go.mod", "module example.com/x\n");
        assert!(command().starts_with("build: Go source"), "{}", command());
        write("server", "#!/bin/sh\n");
        std::fs::set_permissions(
            dir.path().join("server"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        assert_eq!(command(), "./server");
        write("app.py", "");
        assert_eq!(command(), "python3 app.py");
        write("main.py", "");
        assert_eq!(command(), "python3 main.py");
        write("package.json", r#"{"main": "srv.js"}"#);
        assert_eq!(command(), "python3 main.py", "no srv.js");
        write("index.js", "");
        assert_eq!(command(), "node index.js");
        write("package.json", r#"{"scripts": {"start": "node index.js"}}"#);
        assert_eq!(command(), "npm start");
        write(
            "Procfile",
            "worker: ./w\nweb: gunicorn app:app --bind :$PORT\n",
        );
        assert_eq!(command(), "sh -c gunicorn app:app --bind :$PORT");
    }

    #[test]
    fn the_template_is_valid() {
        let app = App {
            command: vec!["python3".to_owned(), "it's \"main\".py".to_owned()],
            what: String::new(),
            note: None,
        };
        for (image, process) in [
            (None, None),
            (Some("registry.example.com/a:1"), None),
            (None, Some(&app)),
        ] {
            let text = template("svc", 9000, image, process);
            if process.is_some() {
                assert!(
                    text.contains("command: [\"python3\",\"it's \\\"main\\\".py\"]"),
                    "{text}"
                );
            }
            let files = ServiceFiles {
                base: Some(SourceFile::new("t", text)),
                ..ServiceFiles::default()
            };
            let loaded = load(&files);
            assert_eq!(loaded.diagnostics, vec![]);
        }
    }
}
