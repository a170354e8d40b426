//! Real parts for tests (feature `test-support`): a Debian `docker-registry` on loopback,
//! busybox images built with `umoci` and pushed with `skopeo`, hand-made images pushed over the
//! registry's HTTP API, and a bounded `runc`/`crun` run.
//!
//! Tools: `apt-get install -y runc crun skopeo umoci busybox-static docker-registry`. A test
//! calls [`require_tools`] first: when one is missing it prints why and skips, except with
//! `CI=true`, where it panics so the run fails.

#![allow(
    clippy::print_stderr,
    reason = "test support: a skip is told to whoever runs the tests"
)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::digest::Digest;

/// How long a registry may take to answer `/v2/` after it starts.
const REGISTRY_START: Duration = Duration::from_secs(20);
/// The bound on one fixture command (umoci, skopeo).
const TOOL_TIMEOUT: Duration = Duration::from_secs(120);
/// The bound on one HTTP exchange with the test registry.
const HTTP_TIMEOUT: Duration = Duration::from_secs(20);

/// Whether `tool` is an executable on `PATH` (or in `/usr/sbin`, `/sbin`).
pub fn tool_available(tool: &str) -> bool {
    find_tool(tool).is_some()
}

fn find_tool(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|dir| dir.join(tool))
        .find(|p| p.is_file())
}

/// Whether the test may go on: `true` when every tool is there. Otherwise prints which are
/// missing and returns `false`, or panics when `CI=true` (a missing tool fails CI).
pub fn require_tools(test: &str, tools: &[&str]) -> bool {
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| !tool_available(t))
        .collect();
    if missing.is_empty() {
        return true;
    }
    let message = format!(
        "{test}: missing {} (apt-get install -y runc crun skopeo umoci busybox-static docker-registry)",
        missing.join(", ")
    );
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{message}");
    }
    eprintln!("skipping {message}");
    false
}

/// A free TCP port on loopback (bound, then released).
pub fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("bind 127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// The one user of [`Registry::start_with_login`]: name, password, and the password's bcrypt
/// hash (its htpasswd line's; made once with Python's `bcrypt`, cost 5).
pub const REGISTRY_LOGIN: (&str, &str, &str) = (
    "mirror",
    "mirror-s3cret",
    "$2b$05$2CiVvLnSMYUXsoj8HBx20.bxge.bAfmM3k4GSeFKMhN6H.R7O4RqO",
);

/// A `docker-registry` (distribution 2.8) on `127.0.0.1:<free port>`, plain HTTP, filesystem
/// storage in a temporary directory. Killed on drop.
#[derive(Debug)]
pub struct Registry {
    child: Option<Child>,
    port: u16,
    storage: PathBuf,
    dir: tempfile::TempDir,
}

impl Registry {
    /// Starts a registry and waits until `/v2/` answers.
    pub fn start() -> anyhow::Result<Registry> {
        Registry::launch(None, None, false)
    }

    /// Starts a registry that serves only [`REGISTRY_LOGIN`] (htpasswd, over plain HTTP), as a
    /// GitLab or Harbor registry serves only its users, and waits until `/v2/` asks for it.
    pub fn start_with_login() -> anyhow::Result<Registry> {
        Registry::launch(None, None, true)
    }

    /// Starts a second registry serving `storage` (another one's [`Registry::storage_dir`])
    /// over HTTPS with a PEM certificate chain and key, and waits until it accepts
    /// connections. Content is pushed through the plain-HTTP one: [`Registry::request`] and
    /// the pushes speak plain HTTP only.
    pub fn start_tls(
        storage: &Path,
        certificate_pem: &[u8],
        key_pem: &[u8],
    ) -> anyhow::Result<Registry> {
        Registry::launch(Some(storage), Some((certificate_pem, key_pem)), false)
    }

    fn launch(
        storage: Option<&Path>,
        tls: Option<(&[u8], &[u8])>,
        login: bool,
    ) -> anyhow::Result<Registry> {
        let dir = tempfile::tempdir().context("registry tempdir")?;
        let port = free_port()?;
        let storage = storage.map_or_else(|| dir.path().join("storage"), Path::to_path_buf);
        let config = dir.path().join("config.yml");
        let mut yaml = format!(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n",
            storage.display()
        );
        if let Some((certificate, key)) = tls {
            let (cert_path, key_path) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
            std::fs::write(&cert_path, certificate)?;
            std::fs::write(&key_path, key)?;
            yaml.push_str(&format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                cert_path.display(),
                key_path.display()
            ));
        }
        if login {
            let htpasswd = dir.path().join("htpasswd");
            let (user, _, hash) = REGISTRY_LOGIN;
            std::fs::write(&htpasswd, format!("{user}:{hash}\n"))?;
            yaml.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: runway-tests\n    path: {}\n",
                htpasswd.display()
            ));
        }
        std::fs::write(&config, yaml)?;
        let log = std::fs::File::create(dir.path().join("registry.log"))?;
        let child =
            Command::new(find_tool("docker-registry").unwrap_or_else(|| "docker-registry".into()))
                .arg("serve")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()
                .context("spawn docker-registry")?;
        let mut registry = Registry {
            child: Some(child),
            port,
            storage,
            dir,
        };
        let deadline = Instant::now() + REGISTRY_START;
        loop {
            let up = if tls.is_some() {
                TcpStream::connect(("127.0.0.1", port)).is_ok()
            } else {
                let wanted = if login { 401 } else { 200 };
                registry
                    .request("GET", "/v2/", &[], &[])
                    .is_ok_and(|r| r.status == wanted)
            };
            if up {
                return Ok(registry);
            }
            let exited = registry
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() > deadline {
                let log = std::fs::read_to_string(registry.dir.path().join("registry.log"))
                    .unwrap_or_default();
                bail!("docker-registry did not come up on port {port} ({exited:?}): {log}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `127.0.0.1:<port>`: the registry part of references.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The registry's storage directory.
    pub fn storage_dir(&self) -> PathBuf {
        self.storage.clone()
    }

    /// Where the registry keeps a blob's bytes (to corrupt it in tests).
    pub fn blob_data_path(&self, digest: &Digest) -> PathBuf {
        let hex = digest.hex();
        self.storage_dir()
            .join("docker/registry/v2/blobs/sha256")
            .join(hex.get(..2).unwrap_or("00"))
            .join(hex)
            .join("data")
    }

    /// Stops the registry now (a later pull gets connection refused).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Deletes manifest `digest` from `repo` and runs the registry's garbage collector
    /// (`docker-registry garbage-collect --delete-untagged`), which removes every blob and
    /// manifest no tag refers to any more: the image is gone, as from a registry that
    /// collected it.
    pub fn delete_and_collect(&self, repo: &str, digest: &Digest) -> anyhow::Result<()> {
        let HttpResponse { status, body, .. } = self.request(
            "DELETE",
            &format!("/v2/{repo}/manifests/{digest}"),
            &[],
            &[],
        )?;
        if status != 202 {
            bail!(
                "delete manifest {digest}: http {status}: {}",
                String::from_utf8_lossy(&body)
            );
        }
        let program = find_tool("docker-registry").unwrap_or_else(|| "docker-registry".into());
        let output = Command::new(program)
            .args(["garbage-collect", "--delete-untagged"])
            .arg(self.dir.path().join("config.yml"))
            .stdin(Stdio::null())
            .output()
            .context("run docker-registry garbage-collect")?;
        if !output.status.success() {
            bail!(
                "docker-registry garbage-collect: {}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(())
    }

    /// Uploads a blob to `repo` and returns its digest.
    pub fn put_blob(&self, repo: &str, bytes: &[u8]) -> anyhow::Result<Digest> {
        let digest = Digest::of(bytes);
        let HttpResponse {
            status,
            headers,
            body,
        } = self.request("POST", &format!("/v2/{repo}/blobs/uploads/"), &[], &[])?;
        if status != 202 {
            bail!(
                "start upload: http {status}: {}",
                String::from_utf8_lossy(&body)
            );
        }
        let location = header(&headers, "location").context("upload without Location")?;
        let path = location
            .strip_prefix(&format!("http://{}", self.host()))
            .unwrap_or(&location)
            .to_string();
        let sep = if path.contains('?') { '&' } else { '?' };
        let HttpResponse { status, body, .. } = self.request(
            "PUT",
            &format!("{path}{sep}digest={digest}"),
            &[("Content-Type", "application/octet-stream")],
            bytes,
        )?;
        if status != 201 {
            bail!(
                "finish upload: http {status}: {}",
                String::from_utf8_lossy(&body)
            );
        }
        Ok(digest)
    }

    /// Puts a manifest (or index) under `reference` (a tag or digest) and returns its digest.
    pub fn put_manifest(
        &self,
        repo: &str,
        reference: &str,
        media_type: &str,
        bytes: &[u8],
    ) -> anyhow::Result<Digest> {
        let HttpResponse { status, body, .. } = self.request(
            "PUT",
            &format!("/v2/{repo}/manifests/{reference}"),
            &[("Content-Type", media_type)],
            bytes,
        )?;
        if status != 201 {
            bail!(
                "put manifest: http {status}: {}",
                String::from_utf8_lossy(&body)
            );
        }
        Ok(Digest::of(bytes))
    }

    /// One plain HTTP/1.1 exchange with the registry: status, headers, body.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> anyhow::Result<HttpResponse> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(HTTP_TIMEOUT))?;
        stream.set_write_timeout(Some(HTTP_TIMEOUT))?;
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
            self.host(),
            body.len()
        );
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes())?;
        stream.write_all(body)?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response)?;
        let split = response
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .context("no end of headers")?;
        let head = String::from_utf8_lossy(response.get(..split).unwrap_or_default()).into_owned();
        let body = response.get(split + 4..).unwrap_or_default().to_vec();
        let mut lines = head.lines();
        let status = lines
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|s| s.parse().ok())
            .context("no status line")?;
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        Ok(HttpResponse {
            status,
            headers,
            body,
        })
    }
}

/// A response from [`Registry::request`].
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// Headers, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

fn header(headers: &[(String, String)], name: &str) -> Option<String> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
}

/// The manifest format skopeo writes to the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ManifestFormat {
    /// OCI image manifest.
    #[default]
    Oci,
    /// Docker v2 schema 2.
    DockerV2,
}

/// What to put in a busybox image besides busybox.
#[derive(Debug, Clone, Default)]
pub struct BusyboxImage {
    /// `ENTRYPOINT`.
    pub entrypoint: Vec<String>,
    /// `CMD`.
    pub cmd: Vec<String>,
    /// `ENV`, `KEY=value`.
    pub env: Vec<String>,
    /// `WORKDIR`.
    pub working_dir: Option<String>,
    /// `USER`.
    pub user: Option<String>,
    /// Extra files: path in the image, content, mode. Added in a second layer.
    pub files: Vec<(String, Vec<u8>, u32)>,
    /// The manifest format pushed.
    pub format: ManifestFormat,
}

/// An image in the test registry.
#[derive(Debug, Clone)]
pub struct PushedImage {
    /// `127.0.0.1:<port>/<name>:<tag>`.
    pub reference: String,
    /// The manifest digest the registry stored.
    pub digest: Digest,
    /// `127.0.0.1:<port>/<name>@<digest>`.
    pub pinned: String,
}

/// The `/etc/passwd` of the busybox images: root, and `app` (1000:1000).
pub const BUSYBOX_PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n";
/// The `/etc/group` of the busybox images.
pub const BUSYBOX_GROUP: &str = "root:x:0:\napp:x:1000:\nstaff:x:50:app\nnogroup:x:65534:\n";

/// An OCI layout with tag `base`: `/bin/busybox` from busybox-static, its applets linked in
/// `/bin`, `/sbin`, `/usr/bin`, `/usr/sbin`, `/etc/passwd` and `/etc/group`, `/home/app`.
/// Built once per process; callers copy it.
pub fn busybox_layout() -> anyhow::Result<PathBuf> {
    static BASE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BASE.get_or_init(|| build_busybox_layout().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(anyhow::Error::msg)
}

/// The standard library directories a Python base leaves out: tests, tools, and what
/// building C extensions needs.
const PYTHON_LEFT_OUT: &[&str] = &[
    "test",
    "idlelib",
    "tkinter",
    "lib2to3",
    "ensurepip",
    "pydoc_data",
    "__pycache__",
    "dist-packages",
    "site-packages",
    "turtledemo",
];

/// An OCI layout with tag `python`: the busybox base ([`busybox_layout`]) and this machine's
/// Debian Python (`/usr/bin/python3`, the libraries it links and its standard library, less
/// tests and tools, about 15 MB), `PATH` set: a base image for a Python service, built here.
/// Built once per process; callers push it or copy it.
pub fn python_layout() -> anyhow::Result<PathBuf> {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PYTHON
        .get_or_init(|| build_python_layout().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(anyhow::Error::msg)
}

fn build_python_layout() -> anyhow::Result<PathBuf> {
    let base = busybox_layout()?;
    let parent = std::env::temp_dir().join("runway-oci-fixtures");
    let work = tempfile::Builder::new()
        .prefix("python-")
        .tempdir_in(&parent)?
        .keep();
    let layout = work.join("layout");
    run(Command::new("cp").arg("-a").arg(&base).arg(&layout))?;
    let bundle = work.join("unpacked");
    run(&mut unpack_cmd(&layout, "base", &bundle))?;
    let rootfs = bundle.join("rootfs");
    let python = std::fs::canonicalize("/usr/bin/python3")
        .context("/usr/bin/python3 (Debian's python3) is not installed")?;
    let version = python
        .file_name()
        .and_then(|n| n.to_str())
        .context("python3's name")?
        .to_owned();
    let copy = |from: &Path| -> anyhow::Result<()> {
        let to = rootfs.join(from.strip_prefix("/")?);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::copy(from, &to)?;
        Ok(())
    };
    copy(&python)?;
    std::os::unix::fs::symlink(&version, rootfs.join("usr/bin/python3"))?;
    let ldd = Command::new("ldd").arg(&python).output().context("ldd")?;
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        let path = line
            .split_whitespace()
            .find(|word| word.starts_with('/'))
            .map(PathBuf::from);
        if let Some(path) = path {
            copy(&path)?;
            let real = std::fs::canonicalize(&path)?;
            if real != path {
                copy(&real)?;
            }
        }
    }
    let stdlib = Path::new("/usr/lib").join(&version);
    for entry in walkdir_files(&stdlib)? {
        let rel = entry.strip_prefix(&stdlib)?;
        let left_out = rel
            .components()
            .any(|c| PYTHON_LEFT_OUT.contains(&c.as_os_str().to_str().unwrap_or_default()))
            || rel.starts_with("config-");
        if !left_out {
            copy(&entry)?;
        }
    }
    run(Command::new("umoci")
        .args(["repack", "--image"])
        .arg(image_arg(&layout, "python"))
        .arg(&bundle))?;
    run(Command::new("umoci")
        .args(["config", "--image"])
        .arg(image_arg(&layout, "python"))
        .args(["--tag", "python", "--config.env=PATH=/usr/bin:/bin"])
        .arg("--config.cmd=python3"))?;
    std::fs::remove_dir_all(&bundle)?;
    Ok(layout)
}

/// Every file (not directory; links as files) under `root`, sorted.
fn walkdir_files(root: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                dirs.push(entry.path());
            } else if kind.is_file() {
                files.push(entry.path());
            }
        }
    }
    files.sort();
    Ok(files)
}

fn build_busybox_layout() -> anyhow::Result<PathBuf> {
    // Kept for the process's life; removed by the next process that starts (by age).
    let parent = std::env::temp_dir().join("runway-oci-fixtures");
    std::fs::create_dir_all(&parent)?;
    remove_older_than(&parent, Duration::from_secs(6 * 60 * 60));
    let work = tempfile::Builder::new()
        .prefix("busybox-")
        .tempdir_in(&parent)?
        .keep();
    let layout = work.join("layout");
    let bundle = work.join("unpacked");
    run(Command::new("umoci")
        .args(["init", "--layout"])
        .arg(&layout))?;
    run(Command::new("umoci")
        .arg("new")
        .arg("--image")
        .arg(image_arg(&layout, "base")))?;
    run(&mut unpack_cmd(&layout, "base", &bundle))?;
    let rootfs = bundle.join("rootfs");
    for dir in [
        "bin", "sbin", "usr/bin", "usr/sbin", "etc", "tmp", "home/app", "root",
    ] {
        std::fs::create_dir_all(rootfs.join(dir))?;
    }
    let busybox = find_tool("busybox").context("busybox not found")?;
    std::fs::copy(&busybox, rootfs.join("bin/busybox"))?;
    let list = Command::new(&busybox).arg("--list-full").output()?;
    for applet in String::from_utf8_lossy(&list.stdout).lines() {
        let applet = applet.trim().trim_start_matches('/');
        if applet.is_empty() || applet == "bin/busybox" || applet.contains("..") {
            continue;
        }
        let path = rootfs.join(applet);
        if path.symlink_metadata().is_err() {
            std::os::unix::fs::symlink("/bin/busybox", &path)?;
        }
    }
    std::fs::write(rootfs.join("etc/passwd"), BUSYBOX_PASSWD)?;
    std::fs::write(rootfs.join("etc/group"), BUSYBOX_GROUP)?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(rootfs.join("tmp"), std::fs::Permissions::from_mode(0o1777))?;
        std::fs::set_permissions(rootfs.join("root"), std::fs::Permissions::from_mode(0o700))?;
        std::os::unix::fs::chown(rootfs.join("home/app"), Some(1000), Some(1000)).ok();
    }
    run(Command::new("umoci")
        .args(["repack", "--image"])
        .arg(image_arg(&layout, "base"))
        .arg(&bundle))?;
    std::fs::remove_dir_all(&bundle)?;
    Ok(layout)
}

/// Builds a busybox image (see [`busybox_layout`]) with `spec`'s config and files, and pushes
/// it as `<registry>/<name>:<tag>` with skopeo.
pub fn push_busybox_image(
    registry: &Registry,
    name: &str,
    tag: &str,
    spec: &BusyboxImage,
) -> anyhow::Result<PushedImage> {
    let base = busybox_layout()?;
    let work = tempfile::tempdir()?;
    let layout = work.path().join("layout");
    run(Command::new("cp").arg("-a").arg(&base).arg(&layout))?;
    let mut from = "base";
    if !spec.files.is_empty() {
        let bundle = work.path().join("unpacked");
        run(&mut unpack_cmd(&layout, "base", &bundle))?;
        for (path, content, mode) in &spec.files {
            let dest = bundle.join("rootfs").join(path.trim_start_matches('/'));
            if let Some(parent) = dest.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&dest, content)?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(*mode))?;
        }
        run(Command::new("umoci")
            .args(["repack", "--image"])
            .arg(image_arg(&layout, "files"))
            .arg(&bundle))?;
        from = "files";
    }
    let mut config = Command::new("umoci");
    config
        .args(["config", "--image"])
        .arg(image_arg(&layout, from))
        .args(["--tag", "img"]);
    for e in &spec.entrypoint {
        config.arg(format!("--config.entrypoint={e}"));
    }
    for c in &spec.cmd {
        config.arg(format!("--config.cmd={c}"));
    }
    for e in &spec.env {
        config.arg(format!("--config.env={e}"));
    }
    if let Some(w) = &spec.working_dir {
        config.arg(format!("--config.workingdir={w}"));
    }
    if let Some(u) = &spec.user {
        config.arg(format!("--config.user={u}"));
    }
    run(&mut config)?;
    push_layout(registry, &layout, "img", name, tag, spec.format)
}

/// Pushes tag `tag_in_layout` of an OCI layout with skopeo.
pub fn push_layout(
    registry: &Registry,
    layout: &Path,
    tag_in_layout: &str,
    name: &str,
    tag: &str,
    format: ManifestFormat,
) -> anyhow::Result<PushedImage> {
    let digest_file = tempfile::NamedTempFile::new()?;
    let reference = format!("{}/{name}:{tag}", registry.host());
    let mut copy = Command::new("skopeo");
    copy.args(["copy", "--quiet", "--dest-tls-verify=false", "--digestfile"])
        .arg(digest_file.path());
    if format == ManifestFormat::DockerV2 {
        copy.args(["--format", "v2s2"]);
    }
    copy.arg(format!("oci:{}:{tag_in_layout}", layout.display()))
        .arg(format!("docker://{reference}"));
    run(&mut copy)?;
    let digest = Digest::parse(std::fs::read_to_string(digest_file.path())?.trim())?;
    Ok(PushedImage {
        pinned: format!("{}/{name}@{digest}", registry.host()),
        reference,
        digest,
    })
}

/// A layer for [`push_image`]: its media type and blob bytes, and the uncompressed tar.
#[derive(Debug, Clone)]
pub struct RawLayer {
    /// The layer's media type.
    pub media_type: String,
    /// The blob as pushed.
    pub blob: Vec<u8>,
    /// The uncompressed tar (for `rootfs.diff_ids`).
    pub tar: Vec<u8>,
}

impl RawLayer {
    /// An uncompressed tar layer.
    pub fn tar(tar: Vec<u8>) -> RawLayer {
        RawLayer {
            media_type: "application/vnd.oci.image.layer.v1.tar".to_string(),
            blob: tar.clone(),
            tar,
        }
    }

    /// A gzip layer.
    pub fn gzip(tar: Vec<u8>) -> anyhow::Result<RawLayer> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(&tar)?;
        Ok(RawLayer {
            media_type: "application/vnd.oci.image.layer.v1.tar+gzip".to_string(),
            blob: encoder.finish()?,
            tar,
        })
    }

    /// A zstd layer (ruzstd's encoder).
    pub fn zstd(tar: Vec<u8>) -> RawLayer {
        let blob = ruzstd::encoding::compress_to_vec(
            tar.as_slice(),
            ruzstd::encoding::CompressionLevel::Fastest,
        );
        RawLayer {
            media_type: "application/vnd.oci.image.layer.v1.tar+zstd".to_string(),
            blob,
            tar,
        }
    }
}

/// Pushes an OCI image made of `layers` and a config with `config` as its `config` object
/// (`{"Cmd": [...]}` and so on) straight over the registry API. Returns it as pushed.
pub fn push_image(
    registry: &Registry,
    name: &str,
    tag: &str,
    layers: &[RawLayer],
    config: serde_json::Value,
) -> anyhow::Result<PushedImage> {
    let diff_ids: Vec<String> = layers
        .iter()
        .map(|l| Digest::of(&l.tar).to_string())
        .collect();
    let config_blob = serde_json::to_vec(&serde_json::json!({
        "architecture": crate::Platform::host().architecture,
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }))?;
    let config_digest = registry.put_blob(name, &config_blob)?;
    let mut descriptors = Vec::new();
    for layer in layers {
        let digest = registry.put_blob(name, &layer.blob)?;
        descriptors.push(serde_json::json!({
            "mediaType": layer.media_type,
            "digest": digest.to_string(),
            "size": layer.blob.len(),
        }));
    }
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest.to_string(),
            "size": config_blob.len(),
        },
        "layers": descriptors,
    }))?;
    let digest = registry.put_manifest(
        name,
        tag,
        "application/vnd.oci.image.manifest.v1+json",
        &manifest,
    )?;
    Ok(PushedImage {
        reference: format!("{}/{name}:{tag}", registry.host()),
        pinned: format!("{}/{name}@{digest}", registry.host()),
        digest,
    })
}

/// A tar archive built from `(kind, path, link target, data)` entries, with the path and link
/// written raw (so `..` and absolute paths can be tested). Modes 0755 for directories, 0644
/// otherwise, owner 0:0.
pub fn raw_tar(entries: &[(tar::EntryType, &str, &str, &[u8])]) -> anyhow::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    for (kind, path, link, data) in entries {
        let mut header = tar::Header::new_old();
        header.set_entry_type(*kind);
        header.set_mode(if *kind == tar::EntryType::Directory {
            0o755
        } else {
            0o644
        });
        header.set_size(data.len() as u64);
        header.set_mtime(1_700_000_000);
        header.set_uid(0);
        header.set_gid(0);
        {
            let old = header.as_old_mut();
            if path.len() > old.name.len() || link.len() > old.linkname.len() {
                bail!("{path:?} or {link:?} is too long for a raw tar header");
            }
            old.name[..path.len()].copy_from_slice(path.as_bytes());
            old.linkname[..link.len()].copy_from_slice(link.as_bytes());
        }
        header.set_cksum();
        builder.append(&header, *data)?;
    }
    Ok(builder.into_inner()?)
}

/// Which OCI runtime runs a bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    /// runc.
    Runc,
    /// crun, in a mount namespace without the cgroup v2 mount on hybrid hosts (crun 1.8
    /// refuses hybrid hierarchies otherwise).
    Crun,
}

/// What a container run produced.
#[derive(Debug, Clone)]
pub struct RunOutput {
    /// The exit code (`128 + signal` when killed, as runc reports it).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error (the runtime's and the container's).
    pub stderr: String,
}

/// Runs the bundle in `bundle` as container `id` to completion, at most `timeout`, then deletes
/// the container whatever happened.
pub fn run_bundle(
    runtime: Runtime,
    bundle: &Path,
    id: &str,
    timeout: Duration,
) -> anyhow::Result<RunOutput> {
    let out = tempfile::tempdir()?;
    let stdout = std::fs::File::create(out.path().join("stdout"))?;
    let stderr = std::fs::File::create(out.path().join("stderr"))?;
    let (program, mut cmd) = match runtime {
        Runtime::Runc => {
            let mut c = Command::new("runc");
            c.arg("run").arg("--bundle").arg(bundle).arg(id);
            ("runc", c)
        }
        Runtime::Crun => {
            let mut c = Command::new("unshare");
            c.args([
                "-m",
                "sh",
                "-c",
                "if [ -e /sys/fs/cgroup/unified ]; then umount /sys/fs/cgroup/unified || exit 99; fi; exec crun run --bundle \"$0\" \"$1\"",
            ])
            .arg(bundle)
            .arg(id);
            ("crun", c)
        }
    };
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .with_context(|| format!("spawn {program}"))?;
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = Command::new(program).args(["kill", id, "KILL"]).output();
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = Command::new(program).args(["delete", "-f", id]).output();
    let output = RunOutput {
        code: status.and_then(|s| s.code()),
        stdout: std::fs::read_to_string(out.path().join("stdout")).unwrap_or_default(),
        stderr: std::fs::read_to_string(out.path().join("stderr")).unwrap_or_default(),
    };
    if status.is_none() {
        bail!("{program} run {id} timed out after {timeout:?}: {output:?}");
    }
    Ok(output)
}

fn image_arg(layout: &Path, tag: &str) -> String {
    format!("{}:{tag}", layout.display())
}

fn unpack_cmd(layout: &Path, tag: &str, bundle: &Path) -> Command {
    let mut cmd = Command::new("umoci");
    cmd.arg("unpack");
    if !running_as_root() {
        cmd.arg("--rootless");
    }
    cmd.arg("--image").arg(image_arg(layout, tag)).arg(bundle);
    cmd
}

fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    tempfile::tempfile()
        .and_then(|f| f.metadata())
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

/// Runs a fixture command with a bound, failing with its output.
fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let shown = format!("{cmd:?}");
    let mut stdout = tempfile::tempfile()?;
    let mut stderr = tempfile::tempfile()?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(stdout.try_clone()?)
        .stderr(stderr.try_clone()?)
        .spawn()
        .with_context(|| format!("spawn {shown}"))?;
    let deadline = Instant::now() + TOOL_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{shown} timed out after {TOOL_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    if !status.success() {
        use std::io::Seek;
        let mut text = String::new();
        for file in [&mut stdout, &mut stderr] {
            file.rewind()?;
            file.read_to_string(&mut text)?;
        }
        bail!("{shown} failed ({status}): {text}");
    }
    Ok(())
}

fn remove_older_than(dir: &Path, age: Duration) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|a| a > age);
        if old {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Pull options for a test registry on loopback: anonymous, plain HTTP to `host`, bounded
/// (a minute for a pull, five seconds to connect).
pub fn insecure_pull_options(host: &str) -> crate::PullOptions {
    crate::PullOptions {
        credentials: crate::Credentials::Anonymous,
        insecure_registries: vec![host.to_owned()],
        timeout: Duration::from_secs(60),
        connect_timeout: Duration::from_secs(5),
        ..crate::PullOptions::default()
    }
}

/// Runs `f` on a runtime of its own, two worker threads.
///
/// # Panics
/// When the runtime cannot be built.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(f)
}
