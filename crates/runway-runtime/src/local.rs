//! The local driver of [`Runtime`]: instances on this machine, one supervisor process each,
//! found again through their state directories (`<root>/instances/<id>/`).

use std::ffi::OsString;
use std::fs;
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use runway_oci::{BundleOptions, PullOptions, Store, UserNamespace, build_bundle};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::watch;

use crate::logs::{self, LogLine};
use crate::network::AddressPool;
use crate::runtime::{Runtime, RuntimeError};
use crate::sandbox::CODE_MOUNT;
use crate::seccomp::SeccompPolicy;
use crate::spec::{Artifact, InstanceSpec};
use crate::status::{InstanceStatus, Phase};
use crate::supervisor::{Request, SOCKET, SPEC_FILE, STATUS_FILE};

/// How to start a supervisor: the program and the arguments before the state directory
/// (for the `runway` binary: itself and `supervise`).
#[derive(Debug, Clone)]
pub struct SupervisorCommand {
    pub program: PathBuf,
    pub args: Vec<OsString>,
}

#[derive(Debug, Clone)]
pub struct LocalConfig {
    /// Where instances' state directories live (`instances/`) and the image cache (`images/`).
    pub root: PathBuf,
    pub supervisor: SupervisorCommand,
    /// How images are pulled: credentials, insecure registries, timeouts.
    pub pull: PullOptions,
    /// The OCI runtime that runs containers: `runc` (default) or `crun`, a name on `PATH` or a
    /// path.
    pub oci_runtime: PathBuf,
    /// Run containers in a user namespace (container root is host uid 100000). On by default.
    pub user_namespace: bool,
    /// How long a new supervisor may take to answer on its socket.
    pub supervisor_start_timeout: Duration,
    /// Extra time, past an instance's grace period, that a stop may take.
    pub stop_margin: Duration,
    /// Directories no sandboxed process may see, besides `root` (a server's data directory).
    pub private_dirs: Vec<PathBuf>,
    /// Where the platform unpacks code snapshots (`<dir>/<service id>/<hex>`): code
    /// directories although they lie in a private directory.
    pub code_snapshots: Option<PathBuf>,
    /// Give every container (an image, an isolated process) a network of its own from this
    /// pool ([`crate::network`]); `None` runs them in the host's network.
    pub instance_network: Option<AddressPool>,
    /// The system calls containers may not make ([`crate::seccomp`]): Runway's default
    /// profile for every service but those the operator names.
    pub seccomp: SeccompPolicy,
}

impl LocalConfig {
    pub fn new(root: impl Into<PathBuf>, supervisor: SupervisorCommand) -> Self {
        Self {
            root: root.into(),
            supervisor,
            pull: PullOptions::default(),
            oci_runtime: PathBuf::from("runc"),
            user_namespace: true,
            supervisor_start_timeout: Duration::from_secs(10),
            stop_margin: Duration::from_secs(10),
            private_dirs: Vec::new(),
            code_snapshots: None,
            instance_network: None,
            seccomp: SeccompPolicy::default(),
        }
    }
}

/// Instances on this machine.
#[derive(Debug, Clone)]
pub struct LocalRuntime {
    config: LocalConfig,
}

impl LocalRuntime {
    pub fn new(config: LocalConfig) -> Self {
        Self { config }
    }

    /// The same runtime with this seccomp policy: the operator's services that run
    /// unconfined.
    pub fn with_seccomp(mut self, policy: SeccompPolicy) -> Self {
        self.config.seccomp = policy;
        self
    }

    /// An instance's state directory.
    pub fn instance_dir(&self, id: &str) -> PathBuf {
        self.config.root.join("instances").join(id)
    }

    /// Renews instance `id`'s identity token, if it was given one when it started: the new
    /// token replaces the old at once. `false` when the instance has none (or is gone).
    pub fn renew_identity(&self, id: &str, token: &str) -> Result<bool, RuntimeError> {
        check_id(id)?;
        let dir = self.instance_dir(id).join(IDENTITY_DIR);
        if !dir.is_dir() {
            return Ok(false);
        }
        write_identity(&dir, token)?;
        Ok(true)
    }

    /// Keeps a removed instance's output (its current file and the one before: at most two
    /// files' worth) in `previous/<id>/`, moved, not copied, for `runway logs --previous`;
    /// then forgets what is older than [`PREVIOUS_FOR`] or past the newest [`PREVIOUS_MAX`].
    /// Best effort: an instance whose output cannot be kept is removed all the same.
    fn keep_output(&self, status: &InstanceStatus, dir: &Path) {
        let Some(service) = &status.service else {
            return;
        };
        let root = self.config.root.join(PREVIOUS_DIR);
        let kept = root.join(&status.id);
        let now_ms = crate::status::to_ms(std::time::SystemTime::now());
        let _ = fs::remove_dir_all(&kept);
        // Private as `instances/` is: a tenant's output is this user's alone.
        let made = {
            use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&root)
                .and_then(|()| fs::set_permissions(&root, fs::Permissions::from_mode(0o700)))
                .and_then(|()| fs::create_dir(&kept))
        };
        let moved = made.and_then(|()| {
            let ended = Previous {
                id: status.id.clone(),
                service: service.clone(),
                ended_at_ms: now_ms,
            };
            fs::write(
                kept.join(PREVIOUS_FILE),
                serde_json::to_vec(&ended).map_err(io::Error::other)?,
            )?;
            for name in [format!("{}.1", logs::LOG_FILE), logs::LOG_FILE.to_owned()] {
                match fs::rename(dir.join(&name), kept.join(&name)) {
                    Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
                    _ => {}
                }
            }
            Ok(())
        });
        if moved.is_err() {
            let _ = fs::remove_dir_all(&kept);
        }
        let mut all = self.previous();
        all.sort_by_key(|previous| std::cmp::Reverse(previous.ended_at_ms));
        let horizon = u64::try_from(PREVIOUS_FOR.as_millis()).unwrap_or(u64::MAX);
        for (index, previous) in all.iter().enumerate() {
            if index >= PREVIOUS_MAX || now_ms.saturating_sub(previous.ended_at_ms) > horizon {
                let _ = fs::remove_dir_all(root.join(&previous.id));
            }
        }
    }

    /// The removed instances whose output is kept (see [`LocalRuntime::previous_dir`]).
    pub fn previous(&self) -> Vec<Previous> {
        let root = self.config.root.join(PREVIOUS_DIR);
        let Ok(entries) = fs::read_dir(&root) else {
            return Vec::new();
        };
        entries
            .filter_map(Result::ok)
            .filter_map(|entry| fs::read(entry.path().join(PREVIOUS_FILE)).ok())
            .filter_map(|text| serde_json::from_slice::<Previous>(&text).ok())
            .filter(|previous| check_id(&previous.id).is_ok())
            .collect()
    }

    /// Where a removed instance's output is kept (as in its state directory).
    pub fn previous_dir(&self, id: &str) -> PathBuf {
        self.config.root.join(PREVIOUS_DIR).join(id)
    }

    /// Creates the state directory's `instances/` private (`0700`, an older one made so):
    /// instances' output, specs and sockets are this user's alone. The root above it keeps its
    /// mode, which a container's root may need to search on the way to `images/`. Done on
    /// every instance start; call it first when opening up a directory above.
    pub fn create_state_dirs(&self) -> Result<(), RuntimeError> {
        use std::os::unix::fs::PermissionsExt;
        let dir = self.config.root.join("instances");
        fs::create_dir_all(&dir).map_err(|e| RuntimeError::io(&dir, e))?;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| RuntimeError::io(&dir, e))
    }

    async fn status_of(&self, id: &str) -> Result<InstanceStatus, RuntimeError> {
        let dir = self.instance_dir(id);
        if !dir.is_dir() {
            return Err(RuntimeError::NotFound(id.to_owned()));
        }
        let status = match request(&dir, Request::Status).await {
            Ok(status) => status,
            Err(_) => read_last_status(&dir, id)?,
        };
        Ok(with_spec(&dir, status))
    }

    /// Pulls an image into the cache instances start from (verified, unpacked) and returns it
    /// with its digest: `pull(reference).await?.pinned` is what a deploy records.
    pub async fn pull_image(&self, reference: &str) -> Result<runway_oci::Image, RuntimeError> {
        let image_error = |message: String| RuntimeError::Image {
            reference: reference.to_owned(),
            message,
        };
        let store = Store::open(self.config.root.join("images"))
            .map_err(|e| image_error(runway_log::chain(&e)))?;
        let user_namespace = self.config.user_namespace.then(UserNamespace::default);
        let pull = PullOptions {
            id_shift: user_namespace.map_or(0, |ns| ns.host_base),
            ..self.config.pull.clone()
        };
        store
            .pull(reference, &pull)
            .await
            .map_err(|e| image_error(pull_error(&e, pull.allowed_registries.is_some())))
    }

    /// Pulls the image (pinned to its digest) into the shared cache and writes the instance's
    /// bundle; the spec's artifact becomes that container. Secrets stay out of the bundle: the
    /// supervisor gives `create` a copy with them, in memory ([`crate::secret_bundle`]).
    async fn prepare_image(&self, spec: &mut InstanceSpec, dir: &Path) -> Result<(), RuntimeError> {
        let Artifact::Image {
            reference,
            command,
            args,
            working_dir,
        } = &spec.artifact
        else {
            return Ok(());
        };
        let image_error = |message: String| RuntimeError::Image {
            reference: reference.clone(),
            message,
        };
        let oci_runtime = self
            .oci_runtime()
            .map_err(|e| image_error(format!("no OCI runtime to run it: {e}")))?;
        let user_namespace = self.config.user_namespace.then(UserNamespace::default);
        let image = self.pull_image(reference).await?;
        let options = BundleOptions {
            command: command.clone(),
            args: args.clone(),
            working_dir: working_dir.as_ref().map(|d| d.display().to_string()),
            user_namespace,
            ..instance_bundle(spec, dir)?
        };
        let bundle = dir.join("bundle");
        // What no retry changes (no entrypoint, a program the image lacks or this machine
        // cannot run) refuses the instance for good; the rest may pass another time.
        let for_good = |error: runway_oci::OciError| match error {
            runway_oci::OciError::InvalidBundle {
                field: "command", ..
            } => RuntimeError::Artifact {
                id: spec.id.clone(),
                message: format!("image {reference}: {}", runway_log::chain(&error)),
            },
            error => image_error(runway_log::chain(&error)),
        };
        let built =
            build_bundle(&bundle, &image.config, &image.rootfs, &options).map_err(for_good)?;
        runway_oci::check_program(&image.rootfs.path, &built.spec.process).map_err(for_good)?;
        self.confine(spec, &built)?;
        spec.artifact = Artifact::Container {
            bundle,
            oci_runtime,
            image: image.pinned,
            cgroup_path: options.cgroups_path,
        };
        Ok(())
    }

    /// Gives the bundle its seccomp profile, unless the operator runs the spec's service
    /// unconfined.
    fn confine(
        &self,
        spec: &InstanceSpec,
        bundle: &runway_oci::Bundle,
    ) -> Result<(), RuntimeError> {
        match self.config.seccomp.profile_for(&spec.service) {
            Some(profile) => crate::seccomp::write_into(bundle, &profile)
                .map_err(|e| RuntimeError::io(&bundle.dir.join("config.json"), e)),
            None => Ok(()),
        }
    }

    /// The OCI runtime's binary, found on this process's own `PATH`.
    fn oci_runtime(&self) -> Result<PathBuf, String> {
        find_program(&self.config.oci_runtime, None, &own_path())
    }

    /// Writes the bundle that runs a sandboxed plain process ([`crate::sandbox`]): an empty
    /// root with the sandbox's host paths and code bound read-only, the service's user, the
    /// spec's environment and limits; the spec's artifact becomes that container.
    fn prepare_sandbox(&self, spec: &mut InstanceSpec, dir: &Path) -> Result<(), RuntimeError> {
        let (
            Some(sandbox),
            Artifact::Command {
                program,
                args,
                working_dir,
            },
        ) = (&spec.sandbox, &spec.artifact)
        else {
            return Ok(());
        };
        let refuse = |message: String| RuntimeError::Artifact {
            id: spec.id.clone(),
            message,
        };
        let protected: Vec<&Path> = std::iter::once(self.config.root.as_path())
            .chain(self.config.private_dirs.iter().map(PathBuf::as_path))
            .collect();
        let code = sandbox
            .check(&protected, self.config.code_snapshots.as_deref())
            .map_err(refuse)?;
        // Every path as the process sees it, its code at /app: what it could not see is
        // refused before it is looked for on the host, and refusals name no host path, so the
        // answer says nothing of what is there nor where the platform keeps the code.
        let working_dir = sandbox.inside(working_dir.as_deref().unwrap_or(&sandbox.code_dir));
        if !sandbox.sees(&working_dir) || !working_dir.starts_with(CODE_MOUNT) {
            return Err(refuse(format!(
                "working directory {} is outside the code directory {CODE_MOUNT}",
                working_dir.display()
            )));
        }
        if !sandbox
            .on_host(&working_dir, &code)
            .is_some_and(|dir| dir.is_dir())
        {
            return Err(refuse(format!(
                "working directory {} does not exist",
                working_dir.display()
            )));
        }
        let named = if program.components().count() > 1 || program.is_absolute() {
            Some(sandbox.inside(&working_dir.join(program)))
        } else {
            None
        };
        if let Some(named) = named.filter(|named| !sandbox.sees(named)) {
            return Err(refuse(format!(
                "command {} is outside what an isolated process sees: its code directory \
                 {CODE_MOUNT} and the host's {} (runtime.process_host_paths)",
                named.display(),
                sandbox
                    .host_paths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let program: PathBuf = find_program_in(
            &sandbox.inside(program),
            Some(&working_dir),
            &spec.search_path(),
            &|inside| sandbox.on_host(inside, &code),
        )
        .map_err(refuse)?
        .components()
        .collect();
        let oci_runtime = self
            .oci_runtime()
            .map_err(|e| refuse(format!("no OCI runtime to isolate the process with: {e}")))?;
        let bundle = dir.join("bundle");
        let rootfs = bundle.join("rootfs");
        let layout = sandbox
            .lay_out(&rootfs, &code)
            .map_err(|e| RuntimeError::io(&rootfs, e))?;
        let command: Vec<String> = std::iter::once(program.display().to_string())
            .chain(args.iter().cloned())
            .collect();
        let config = runway_oci::ImageConfig {
            entrypoint: command,
            user: format!("{0}:{0}", sandbox.user),
            working_dir: working_dir.display().to_string(),
            ..runway_oci::ImageConfig::default()
        };
        let base = instance_bundle(spec, dir)?;
        let options = BundleOptions {
            user_namespace: None,
            host_dns: !layout.has_etc,
            read_only_binds: layout
                .binds
                .into_iter()
                .chain(base.read_only_binds.clone())
                .collect(),
            pids_limit: Some(SANDBOX_PIDS_LIMIT),
            ..base
        };
        let root = runway_oci::Rootfs {
            path: rootfs,
            id_shift: 0,
        };
        let built = build_bundle(&bundle, &config, &root, &options)
            .map_err(|e| refuse(runway_log::chain(&e)))?;
        self.confine(spec, &built)?;
        spec.artifact = Artifact::Container {
            bundle,
            oci_runtime,
            image: format!("process {}", program.display()),
            cgroup_path: options.cgroups_path,
        };
        Ok(())
    }

    /// Leases a network of its own to an instance that runs as a container, when the runtime
    /// has a pool: an image, or an isolated process. A plain process shares the host's.
    async fn lease_network(&self, spec: &mut InstanceSpec, dir: &Path) -> Result<(), RuntimeError> {
        let Some(pool) = self.config.instance_network.clone() else {
            return Ok(());
        };
        if !(matches!(spec.artifact, Artifact::Image { .. }) || spec.sandbox.is_some()) {
            return Ok(());
        }
        let policy =
            match pool.firewall() {
                Some(firewall) => Some(firewall.policy(&spec.egress).map_err(|message| {
                    RuntimeError::Artifact {
                        id: spec.id.clone(),
                        message,
                    }
                })?),
                None => None,
            };
        let owner = dir.to_owned();
        let leased = tokio::task::spawn_blocking(move || pool.lease(&owner, policy.as_ref()))
            .await
            .map_err(io::Error::other)
            .flatten();
        spec.network = Some(leased.map_err(|e| RuntimeError::Supervisor {
            id: spec.id.clone(),
            message: format!("cannot lease an address for the instance: {e}"),
        })?);
        Ok(())
    }

    /// Gives back the network of the instance whose state directory is `dir`, if it had one.
    fn release_network(&self, dir: &Path) {
        if let (Some(pool), Some(network)) = (
            &self.config.instance_network,
            read_spec(dir).and_then(|spec| spec.network),
        ) {
            pool.release(&network, dir);
        }
    }

    /// Checks the instance and makes what it runs from, as [`Runtime::instance_ensure`] does
    /// before it starts a supervisor: a new state directory (an ended instance's removed), its
    /// network and port, for an image the pull and its bundle, for a sandboxed process the
    /// sandbox's bundle. Returns the spec its supervisor is given; for whoever supervises it
    /// in a process of its own making. An instance of that id still running is refused; on an
    /// error nothing is left behind.
    pub async fn prepare(&self, spec: InstanceSpec) -> Result<InstanceSpec, RuntimeError> {
        check_id(&spec.id)?;
        let dir = self.instance_dir(&spec.id);
        if let Ok(status) = request(&dir, Request::Status).await
            && !status.phase.is_final()
        {
            return Err(RuntimeError::Supervisor {
                id: spec.id,
                message: format!("it is {}", status.phase.as_str()),
            });
        }
        self.prepare_new(spec).await
    }

    /// [`LocalRuntime::prepare`] once no supervisor runs the instance.
    async fn prepare_new(&self, mut spec: InstanceSpec) -> Result<InstanceSpec, RuntimeError> {
        let dir = self.instance_dir(&spec.id);
        if dir.exists() {
            self.release_network(&dir);
            fs::remove_dir_all(&dir).map_err(|e| RuntimeError::io(&dir, e))?;
        }
        // A sandboxed process is checked against what it will see (`prepare_sandbox`).
        if let Artifact::Command {
            program,
            working_dir,
            ..
        } = &spec.artifact
            && spec.sandbox.is_none()
        {
            find_program(program, working_dir.as_deref(), &spec.search_path()).map_err(
                |message| RuntimeError::Artifact {
                    id: spec.id.clone(),
                    message,
                },
            )?;
            if let Some(dir) = working_dir.as_deref().filter(|d| !d.is_dir()) {
                return Err(RuntimeError::Artifact {
                    id: spec.id.clone(),
                    message: format!("working directory {} does not exist", dir.display()),
                });
            }
        }
        self.create_state_dirs()?;
        fs::create_dir_all(&dir).map_err(|e| RuntimeError::io(&dir, e))?;
        if let Some(token) = spec.identity_token.take() {
            let identity = dir.join(IDENTITY_DIR);
            write_identity(&identity, &token)?;
            // A process on the host reads it where it is; a container where it is bound.
            let file = match (&spec.artifact, &spec.sandbox) {
                (Artifact::Command { .. }, None) => identity.join(IDENTITY_FILE),
                _ => Path::new(IDENTITY_MOUNT).join(IDENTITY_FILE),
            };
            spec.env
                .insert(IDENTITY_ENV.to_owned(), file.display().to_string());
        }
        let prepared = async {
            self.lease_network(&mut spec, &dir).await?;
            if spec.port == Some(0) {
                let port = match (&spec.network, spec.container_port) {
                    (Some(_), Some(port)) if port != 0 => port,
                    _ => free_port().map_err(|e| RuntimeError::io(Path::new("127.0.0.1:0"), e))?,
                };
                assign_port(&mut spec, port);
            }
            if matches!(spec.artifact, Artifact::Image { .. }) {
                self.prepare_image(&mut spec, &dir).await?;
            }
            self.prepare_sandbox(&mut spec, &dir)
        };
        match prepared.await {
            Ok(()) => Ok(spec),
            Err(error) => {
                self.discard(&spec, &dir);
                Err(error)
            }
        }
    }

    /// Removes what [`LocalRuntime::prepare`] made for `spec` in `dir`: its network, its state.
    fn discard(&self, spec: &InstanceSpec, dir: &Path) {
        if let (Some(pool), Some(network)) = (&self.config.instance_network, &spec.network) {
            pool.release(network, dir);
        }
        let _ = fs::remove_dir_all(dir);
    }

    async fn spawn_supervisor(&self, dir: &Path, spec: &InstanceSpec) -> Result<(), RuntimeError> {
        let start_error = |source: io::Error| RuntimeError::Supervisor {
            id: spec.id.clone(),
            message: format!(
                "cannot start {}: {source}",
                self.config.supervisor.program.display()
            ),
        };
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("supervisor.log"))
            .map_err(start_error)?;
        let log_err = log.try_clone().map_err(start_error)?;
        let text = serde_json::to_vec(spec).map_err(|e| start_error(io::Error::other(e)))?;
        // Dropping the handle leaves the supervisor running (it detaches into a session of its
        // own); tokio reaps it if it ends while we live, init otherwise.
        let mut child = tokio::process::Command::new(&self.config.supervisor.program)
            .args(&self.config.supervisor.args)
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(log)
            .stderr(log_err)
            // Not `process_group(0)`: a group leader cannot call `setsid`, which the
            // supervisor does first to leave this process's session and group.
            .kill_on_drop(false)
            .spawn()
            .map_err(start_error)?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(&text).await.map_err(start_error)?;
        }
        Ok(())
    }

    async fn wait_for_socket(&self, dir: &Path, id: &str) -> Result<InstanceStatus, RuntimeError> {
        let deadline = tokio::time::Instant::now() + self.config.supervisor_start_timeout;
        loop {
            if let Ok(status) = request(dir, Request::Status).await {
                return Ok(status);
            }
            // An instance that ended at once may be over before we asked.
            if let Ok(status) = read_status_file(dir, id)
                && status.phase.is_final()
            {
                return Ok(status);
            }
            if tokio::time::Instant::now() >= deadline {
                let log = fs::read_to_string(dir.join("supervisor.log")).unwrap_or_default();
                return Err(RuntimeError::Supervisor {
                    id: id.to_owned(),
                    message: format!(
                        "the supervisor did not answer within {:?}{}",
                        self.config.supervisor_start_timeout,
                        if log.trim().is_empty() {
                            String::new()
                        } else {
                            format!(": {}", log.trim())
                        }
                    ),
                });
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Runtime for LocalRuntime {
    async fn instance_ensure(&self, spec: InstanceSpec) -> Result<InstanceStatus, RuntimeError> {
        check_id(&spec.id)?;
        let dir = self.instance_dir(&spec.id);
        if let Ok(status) = request(&dir, Request::Status).await
            && !status.phase.is_final()
        {
            return Ok(status);
        }
        let spec = self.prepare_new(spec).await?;
        let started = async {
            self.spawn_supervisor(&dir, &spec).await?;
            self.wait_for_socket(&dir, &spec.id).await
        };
        match started.await {
            Ok(status) => Ok(status),
            Err(error) => {
                // Nothing half-created stays behind.
                let _ = request(&dir, Request::Stop).await;
                self.discard(&spec, &dir);
                Err(error)
            }
        }
    }

    async fn instance_stop(&self, id: &str) -> Result<InstanceStatus, RuntimeError> {
        let dir = self.instance_dir(id);
        let current = self.status_of(id).await?;
        if current.phase.is_final() {
            return Ok(current);
        }
        let grace = read_spec(&dir)
            .map(|s| s.stop_grace_period)
            .unwrap_or(Duration::ZERO);
        let bound = grace + self.config.stop_margin;
        let mut status = self.watch(id).await?;
        request(&dir, Request::Stop)
            .await
            .map_err(|e| RuntimeError::Supervisor {
                id: id.to_owned(),
                message: e.to_string(),
            })?;
        let waited = tokio::time::timeout(bound, async {
            status
                .wait_for(|s| s.phase.is_final())
                .await
                .map(|s| s.clone())
        })
        .await;
        match waited {
            Ok(Ok(status)) => Ok(status),
            Ok(Err(_)) => self.status_of(id).await,
            Err(_) => Err(RuntimeError::Timeout {
                id: id.to_owned(),
                what: "stop",
                after: bound,
            }),
        }
    }

    async fn instance_remove(&self, id: &str) -> Result<(), RuntimeError> {
        check_id(id)?;
        let dir = self.instance_dir(id);
        if !dir.exists() {
            return Ok(());
        }
        let stopped = self.instance_stop(id).await?;
        // The supervisor's last act is to remove its socket, after writing its final status;
        // one that was killed leaves it behind.
        let socket = dir.join(SOCKET);
        let deadline = tokio::time::Instant::now() + self.config.stop_margin;
        while socket.exists()
            && tokio::time::Instant::now() < deadline
            && crate::process::alive(stopped.supervisor_pid)
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if let Some(InstanceSpec {
            artifact: Artifact::Container { oci_runtime, .. },
            ..
        }) = read_spec(&dir)
        {
            // A supervisor killed with its watchdog left its container running: a stray, with
            // the instance's port and secrets. The OCI runtime knows it by the instance's id.
            if !crate::process::alive(stopped.supervisor_pid) {
                crate::container::delete(&oci_runtime, id).await;
            }
            // And its bundle with secrets, if it was killed while `create` read it.
            crate::secret_bundle::remove_stale(crate::secret_bundle::memory_dir(), id);
        }
        self.release_network(&dir);
        self.keep_output(&stopped, &dir);
        fs::remove_dir_all(&dir).map_err(|e| RuntimeError::io(&dir, e))
    }

    async fn instances(&self) -> Result<Vec<InstanceStatus>, RuntimeError> {
        let root = self.config.root.join("instances");
        let entries = match fs::read_dir(&root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(RuntimeError::io(&root, e)),
        };
        let mut ids: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(|e| e.path().is_dir())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        ids.sort();
        let mut statuses = Vec::with_capacity(ids.len());
        for id in ids {
            match self.status_of(&id).await {
                Ok(status) => statuses.push(status),
                // Removed while we looked.
                Err(RuntimeError::NotFound(_)) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(statuses)
    }

    async fn watch(&self, id: &str) -> Result<watch::Receiver<InstanceStatus>, RuntimeError> {
        let dir = self.instance_dir(id);
        let connected = connect(&dir, Request::Watch).await;
        let Ok(mut lines) = connected else {
            // The supervisor is gone: its last word is all there is.
            let (_, receiver) = watch::channel(self.status_of(id).await?);
            return Ok(receiver);
        };
        let first = match next_status(&mut lines).await {
            Some(status) => status,
            None => self.status_of(id).await?,
        };
        let (sender, receiver) = watch::channel(first);
        let id = id.to_owned();
        tokio::spawn(async move {
            let mut last_final = false;
            while let Some(status) = next_status(&mut lines).await {
                last_final = status.phase.is_final();
                if sender.send(status).is_err() {
                    return;
                }
            }
            if last_final {
                return;
            }
            // The stream ended early: the supervisor is finishing (its status file is about to
            // get the final word) or died. Give it a moment to finish.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
            let last = loop {
                match read_status_file(&dir, &id) {
                    Ok(s) if s.phase.is_final() => break Ok(s),
                    last if tokio::time::Instant::now() >= deadline => {
                        break last.map(lost_if_not_final);
                    }
                    _ => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            };
            if let Ok(last) = last {
                sender.send_if_modified(|current| {
                    let changed = *current != last;
                    *current = last;
                    changed
                });
            }
        });
        Ok(receiver)
    }

    async fn logs(&self, id: &str, lines: usize) -> Result<Vec<LogLine>, RuntimeError> {
        check_id(id)?;
        let dir = self.instance_dir(id);
        if !dir.is_dir() {
            return Err(RuntimeError::NotFound(id.to_owned()));
        }
        logs::tail(&dir, lines).map_err(|e| RuntimeError::io(&dir, e))
    }
}

/// A request sent on a supervisor's socket, and the lines of its answer.
struct Connection {
    lines: tokio::io::Lines<BufReader<OwnedReadHalf>>,
    /// Kept open for the whole exchange: the supervisor ends a watch, not us.
    _write: OwnedWriteHalf,
}

async fn connect(dir: &Path, request: Request) -> io::Result<Connection> {
    let stream = UnixStream::connect(dir.join(SOCKET)).await?;
    let (read, mut write) = stream.into_split();
    let mut line = serde_json::to_vec(&request).map_err(io::Error::other)?;
    line.push(b'\n');
    write.write_all(&line).await?;
    Ok(Connection {
        lines: BufReader::new(read).lines(),
        _write: write,
    })
}

async fn request(dir: &Path, request: Request) -> io::Result<InstanceStatus> {
    let mut lines = connect(dir, request).await?;
    next_status(&mut lines)
        .await
        .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "the supervisor hung up"))
}

async fn next_status(connection: &mut Connection) -> Option<InstanceStatus> {
    let line = connection.lines.next_line().await.ok()??;
    serde_json::from_str(&line).ok()
}

/// The status a supervisor last wrote. One that is not final means the supervisor died.
fn read_last_status(dir: &Path, id: &str) -> Result<InstanceStatus, RuntimeError> {
    read_status_file(dir, id).map(lost_if_not_final)
}

fn read_status_file(dir: &Path, id: &str) -> Result<InstanceStatus, RuntimeError> {
    let path = dir.join(STATUS_FILE);
    let text = fs::read_to_string(&path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => RuntimeError::NotFound(id.to_owned()),
        _ => RuntimeError::io(&path, e),
    })?;
    serde_json::from_str(&text).map_err(|e| RuntimeError::io(&path, io::Error::other(e)))
}

/// A status that is not final, read when its supervisor no longer answers: the instance is lost.
fn lost_if_not_final(mut status: InstanceStatus) -> InstanceStatus {
    if !status.phase.is_final() {
        status.message = format!(
            "supervisor {} is gone; last seen {}: {}",
            status.supervisor_pid,
            status.phase.as_str(),
            status.message
        );
        status.phase = Phase::Failed;
        status.ready = false;
    }
    status
}

/// The status with what a supervisor older than `service`, `revision` and `managed` does not
/// report, read from its `spec.json`.
fn with_spec(dir: &Path, mut status: InstanceStatus) -> InstanceStatus {
    if (status.service.is_none() || status.revision.is_none() || status.address.is_none())
        && let Some(spec) = read_spec(dir)
    {
        status.managed |= spec.is_managed();
        status.address = status.address.or_else(|| spec.address());
        status.service.get_or_insert(spec.service);
        status.revision.get_or_insert(spec.revision);
    }
    status
}

fn read_spec(dir: &Path) -> Option<InstanceSpec> {
    serde_json::from_str(&fs::read_to_string(dir.join(SPEC_FILE)).ok()?).ok()
}

/// Ids become directory and container names.
fn check_id(id: &str) -> Result<(), RuntimeError> {
    let valid = !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(())
    } else {
        Err(RuntimeError::InvalidId(id.to_owned()))
    }
}

/// Where the program a command artifact names is, as the supervisor will find it: a path with
/// a `/` from the working directory, a bare name on `PATH`.
fn find_program(
    program: &Path,
    working_dir: Option<&Path>,
    search: &str,
) -> Result<PathBuf, String> {
    find_program_in(program, working_dir, search, &|path| Some(path.to_owned()))
}

/// [`find_program`] for a process that sees files elsewhere than the host has them: `on_host`
/// says where the file it would see at a path is (`None`: it sees none there). Candidates and
/// errors are paths as the process sees them.
fn find_program_in(
    program: &Path,
    working_dir: Option<&Path>,
    search: &str,
    on_host: &dyn Fn(&Path) -> Option<PathBuf>,
) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let metadata = |candidate: &Path| on_host(candidate).and_then(|p| fs::metadata(p).ok());
    let executable = |candidate: &Path| {
        metadata(candidate).is_some_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.as_os_str().is_empty() {
        return Err("the command is empty".to_owned());
    }
    if program.components().count() > 1 || program.is_absolute() {
        let candidate = match working_dir {
            Some(dir) if program.is_relative() => dir.join(program),
            _ => program.to_owned(),
        };
        return if executable(&candidate) {
            Ok(candidate)
        } else if metadata(&candidate).is_some() {
            Err(format!("{} is not an executable file", candidate.display()))
        } else {
            Err(format!("command {} does not exist", candidate.display()))
        };
    }
    search
        .split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| Path::new(dir).join(program))
        .find(|candidate| executable(candidate))
        .ok_or_else(|| format!("command {} not found on PATH ({search})", program.display()))
}

/// What every bundle of an instance has, image or sandboxed process: its environment (secrets
/// only in the copy `create` reads, in memory), hostname, limits and cgroup, and on a network
/// with a way out, the platform's resolver (`resolv.conf` in its state directory `dir`).
fn instance_bundle(spec: &InstanceSpec, dir: &Path) -> Result<BundleOptions, RuntimeError> {
    let resolv_conf = match spec.network.as_ref().and_then(|n| n.platform) {
        Some(platform) => {
            let path = dir.join("resolv.conf");
            fs::write(&path, format!("nameserver {platform}\noptions ndots:1\n"))
                .map_err(|e| RuntimeError::io(&path, e))?;
            Some(path)
        }
        None => None,
    };
    // The identity token's directory, when the instance has one: bound whole, so that a
    // renewed token (a new file moved over the old) shows inside.
    let identity = dir.join(IDENTITY_DIR);
    let read_only_binds = if identity.is_dir() {
        vec![(identity, PathBuf::from(IDENTITY_MOUNT))]
    } else {
        Vec::new()
    };
    Ok(BundleOptions {
        resolv_conf,
        read_only_binds,
        env: spec
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        hostname: Some(spec.id.clone()),
        memory_limit_bytes: spec.limits.memory_bytes,
        cpu_millis: spec.limits.cpu_millis,
        cgroups_path: Some(format!("/runway/{}", spec.id)),
        network_namespace: spec.network.is_some(),
        ..BundleOptions::default()
    })
}

/// An instance's identity token: the directory in its state directory that holds it, where a
/// container sees that directory, the file's name, and the variable that names the file.
const IDENTITY_DIR: &str = "identity";
/// Where a container sees its identity token's directory.
pub const IDENTITY_MOUNT: &str = "/run/runway/identity";
const IDENTITY_FILE: &str = "token";
/// The variable that names an instance's identity token file.
pub const IDENTITY_ENV: &str = "RUNWAY_IDENTITY_TOKEN_FILE";

/// Writes `token` as `dir/token`, replacing the one there at once (a reader sees the old token
/// or the new, never part of one): readable by the instance's user whoever that is (the token
/// is its own, and nothing else on the machine sees the instance's state directory).
fn write_identity(dir: &Path, token: &str) -> Result<(), RuntimeError> {
    use std::io::Write as _;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    fs::create_dir_all(dir).map_err(|e| RuntimeError::io(dir, e))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755))
        .map_err(|e| RuntimeError::io(dir, e))?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let tmp = dir.join(format!(".{IDENTITY_FILE}.{}.{nanos}", std::process::id()));
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&tmp)
        .and_then(|mut file| {
            file.write_all(token.as_bytes())?;
            file.sync_all()
        });
    let path = dir.join(IDENTITY_FILE);
    if let Err(e) = written.and_then(|()| fs::rename(&tmp, &path)) {
        let _ = fs::remove_file(&tmp);
        return Err(RuntimeError::io(&path, e));
    }
    Ok(())
}

/// Processes and threads a sandboxed process may have at once: a fork bomb stays inside its
/// own cgroup instead of taking the machine's pids.
const SANDBOX_PIDS_LIMIT: u64 = 4096;

/// Where removed instances' output is kept, under the runtime's root.
const PREVIOUS_DIR: &str = "previous";
/// What says whose output a `previous/<id>/` holds.
const PREVIOUS_FILE: &str = "ended.json";
/// How long a removed instance's output is kept.
pub const PREVIOUS_FOR: Duration = Duration::from_secs(3600);
/// How many removed instances' output is kept at most.
pub const PREVIOUS_MAX: usize = 64;

/// A removed instance whose output is kept.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Previous {
    /// The instance.
    pub id: String,
    /// Its service.
    pub service: String,
    /// When it was removed (Unix milliseconds).
    pub ended_at_ms: u64,
}

/// What a failed pull says. Where registries are an allow-list (a server, whose image
/// references come from tenants), a registry that cannot be reached is "could not pull"
/// without the reason: refused, timed out and unresolvable must not tell a tenant which ports
/// are open. On a developer's own machine the reason helps and is shown.
fn pull_error(error: &runway_oci::OciError, guarded: bool) -> String {
    use runway_oci::OciError;
    if !guarded {
        return runway_log::chain(error);
    }
    match error {
        OciError::NotAllowed { .. }
        | OciError::NotFound { .. }
        | OciError::InvalidReference { .. }
        | OciError::InvalidDigest { .. } => error.to_string(),
        OciError::Unreachable { registry, .. } | OciError::Timeout { registry, .. } => {
            format!(
                "could not pull it: registry {registry} did not answer (one on plain HTTP must \
                 be in the server's runtime.insecure_registries)"
            )
        }
        // What a registry (or wherever it sent the client: a token realm, a redirect) said
        // stays in the server's log; the tenant learns only that the pull failed.
        other => {
            tracing::warn!(error = runway_log::chain(other), "an image pull failed");
            "could not pull it".to_owned()
        }
    }
}

/// This process's own `PATH`, where the platform's own programs (the OCI runtime) are found.
fn own_path() -> String {
    std::env::var("PATH").unwrap_or_default()
}

/// Whether `program` is a path that exists or a name found on this process's `PATH`: what a
/// server checks of the tools it runs (the OCI runtime, iproute2) before it relies on them.
pub fn on_path(program: &Path) -> bool {
    if program.components().count() > 1 {
        return program.exists();
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// A port nothing listens on now, from the kernel's ephemeral range.
fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// Gives the instance its port: in `PORT`, and so to its probes.
fn assign_port(spec: &mut InstanceSpec, port: u16) {
    spec.port = Some(port);
    spec.env.insert("PORT".to_owned(), port.to_string());
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use std::collections::BTreeMap;

    use super::*;
    use crate::process::StopSignal;
    use crate::spec::{LEGACY_MANAGED_ENV, LogLimits, Probes, RestartPolicy};

    /// Marked managed as an older control plane did, in the environment: the mark must still
    /// be read.
    fn spec(id: &str, managed: bool) -> InstanceSpec {
        let mut env = BTreeMap::from([("PORT".to_owned(), "8080".to_owned())]);
        if managed {
            env.insert(LEGACY_MANAGED_ENV.to_owned(), "1".to_owned());
        }
        InstanceSpec {
            id: id.to_owned(),
            service: "hello".to_owned(),
            revision: "hello-dev-00001".to_owned(),
            artifact: Artifact::Command {
                program: PathBuf::from("true"),
                args: Vec::new(),
                working_dir: None,
            },
            env,
            secret_env: BTreeMap::new(),
            port: Some(8080),
            container_port: None,
            probes: Probes::default(),
            stop_signal: StopSignal::TERM,
            stop_grace_period: Duration::from_secs(1),
            restart: RestartPolicy::default(),
            limits: crate::spec::Limits::default(),
            logs: LogLimits::default(),
            managed: false,
            inherit_env: false,
            sandbox: None,
            network: None,
            egress: Default::default(),
            identity_token: None,
        }
    }

    #[test]
    fn a_guarded_pull_does_not_tell_why_a_registry_did_not_answer() {
        let refused = runway_oci::OciError::Unreachable {
            registry: "registry.example.com:5000".to_owned(),
            scheme: "https",
            reason: "tcp connect error: Connection refused (os error 111)".to_owned(),
        };
        let guarded = pull_error(&refused, true);
        assert!(
            guarded.starts_with(
                "could not pull it: registry registry.example.com:5000 did not answer"
            ),
            "{guarded}"
        );
        assert!(guarded.contains("runtime.insecure_registries"), "{guarded}");
        assert!(pull_error(&refused, false).contains("Connection refused"));
        let not_allowed = runway_oci::OciError::NotAllowed {
            registry: "127.0.0.1:5000".to_owned(),
        };
        let said = pull_error(&not_allowed, true);
        assert!(
            said.contains("not allowed") && said.contains("runtime.allowed_registries"),
            "{said}"
        );
        // What a token realm answered (the metadata service's, say) is not passed on.
        let realm = runway_oci::OciError::Unauthorized {
            registry: "registry.example.com".to_owned(),
            reference: "registry.example.com/app:1".to_owned(),
            status: 401,
            message: "ami-id\ninstance-id".to_owned(),
        };
        assert_eq!(pull_error(&realm, true), "could not pull it");
        assert!(pull_error(&realm, false).contains("instance-id"));
    }

    #[tokio::test]
    async fn an_older_supervisors_status_gets_service_revision_and_mark_from_its_spec() {
        let root = tempfile::tempdir().unwrap();
        let runtime = LocalRuntime::new(LocalConfig::new(
            root.path(),
            SupervisorCommand {
                program: PathBuf::from("runway-supervisor"),
                args: Vec::new(),
            },
        ));
        for (id, managed) in [("hello-dev-00001-3f9a1c", true), ("hello-dev", false)] {
            let dir = runtime.instance_dir(id);
            fs::create_dir_all(&dir).unwrap();
            let spec = serde_json::to_string(&spec(id, managed)).unwrap();
            fs::write(dir.join(SPEC_FILE), spec).unwrap();
            // A status file as supervisors wrote it before these fields existed.
            let status = serde_json::json!({
                "id": id, "phase": "stopped", "ready": false, "pid": null, "port": 8080,
                "restarts": 0, "consecutive_failures": 0, "started_at_ms": null,
                "next_start_at_ms": null, "message": "stopped", "last_exit": null,
                "supervisor_pid": 1,
            });
            fs::write(dir.join(STATUS_FILE), status.to_string()).unwrap();
        }
        let statuses = runtime.instances().await.unwrap();
        let seen: Vec<(&str, Option<&str>, Option<&str>, bool)> = statuses
            .iter()
            .map(|s| {
                (
                    s.id.as_str(),
                    s.service.as_deref(),
                    s.revision.as_deref(),
                    s.managed,
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("hello-dev", Some("hello"), Some("hello-dev-00001"), false),
                (
                    "hello-dev-00001-3f9a1c",
                    Some("hello"),
                    Some("hello-dev-00001"),
                    true
                ),
            ]
        );
        assert_eq!(statuses[1].phase, Phase::Stopped);
    }
}
