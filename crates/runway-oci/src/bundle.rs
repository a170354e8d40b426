//! OCI runtime bundles: an image config plus the caller's settings, as a `config.json` that
//! runc (or crun) runs.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::OciError;
use crate::image::ImageConfig;
use crate::spec::{
    Capabilities, Cpu, DeviceRule, IdMapping, Linux, Memory, Mount, Namespace, Pids, Process,
    Resources, Root, Spec, User,
};
use crate::store::{DEFAULT_HOST_ID_BASE, Rootfs};

/// How many ids a user namespace maps by default: container ids `0..65536`.
pub const DEFAULT_ID_RANGE: u32 = 65_536;

/// The CFS period the CPU limit is expressed in, in microseconds.
pub const CPU_PERIOD_US: u64 = 100_000;

/// `PATH` when neither the image nor the caller sets one (Docker's default).
/// `PATH` for a container whose image and caller set none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The container's user namespace: container ids `0..size` map to host ids
/// `host_base..host_base + size`, for users and groups alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserNamespace {
    /// The host id container id 0 maps to.
    pub host_base: u32,
    /// How many ids are mapped.
    pub size: u32,
}

impl Default for UserNamespace {
    fn default() -> UserNamespace {
        UserNamespace {
            host_base: DEFAULT_HOST_ID_BASE,
            size: DEFAULT_ID_RANGE,
        }
    }
}

/// Which cgroup hierarchy the host runs, which decides how the memory limit is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    /// cgroup v1 (or hybrid, where the controllers are on v1). `swap_accounting` is whether
    /// `memory.memsw.limit_in_bytes` exists (kernel `swapaccount=1`).
    V1 {
        /// Whether memory+swap can be limited.
        swap_accounting: bool,
    },
    /// The unified hierarchy.
    V2,
}

impl CgroupVersion {
    /// Looks at `/sys/fs/cgroup`.
    pub fn detect() -> CgroupVersion {
        let root = Path::new("/sys/fs/cgroup");
        if root.join("cgroup.controllers").exists() {
            CgroupVersion::V2
        } else {
            CgroupVersion::V1 {
                swap_accounting: root.join("memory/memory.memsw.limit_in_bytes").exists(),
            }
        }
    }
}

/// The caller's settings for a bundle. `Default` gives the secure defaults described in the
/// crate docs.
#[derive(Debug, Clone)]
pub struct BundleOptions {
    /// Replaces the image's `ENTRYPOINT` (Kubernetes `command`); the image's `CMD` is then
    /// dropped unless `args` is also given.
    pub command: Option<Vec<String>>,
    /// Replaces the image's `CMD` (Kubernetes `args`).
    pub args: Option<Vec<String>>,
    /// Environment laid over the image's: a key given here replaces the image's value.
    pub env: Vec<(String, String)>,
    /// Replaces the image's `WORKDIR`.
    pub working_dir: Option<String>,
    /// Replaces the image's `USER` (`uid`, `uid:gid`, `name`, `name:group`).
    pub user: Option<String>,
    /// The container's hostname.
    pub hostname: Option<String>,
    /// Memory limit in bytes; the container is OOM-killed above it.
    pub memory_limit_bytes: Option<u64>,
    /// CPU limit in millicores (1000 = one CPU); at least 10.
    pub cpu_millis: Option<u64>,
    /// Maximum number of processes and threads.
    pub pids_limit: Option<u64>,
    /// The cgroup path, e.g. `/runway/<container-id>`.
    pub cgroups_path: Option<String>,
    /// The user namespace; `None` runs the container in the host's (the rootfs must then have
    /// been unpacked with id shift 0).
    pub user_namespace: Option<UserNamespace>,
    /// Capabilities kept (`CAP_NET_BIND_SERVICE`, ...). Default: none.
    pub capabilities: Vec<String>,
    /// Bind the host's `/etc/resolv.conf` and `/etc/hosts` read-only (the container shares the
    /// host's network).
    pub host_dns: bool,
    /// A network namespace of its own, with only its loopback: whoever runs the container
    /// joins it to a network between `create` and `start`. Default: the host's network.
    pub network_namespace: bool,
    /// The host's cgroup hierarchy.
    pub cgroup: CgroupVersion,
    /// Host directories bound read-only (and `nosuid`, `nodev`), as `(host path, path
    /// inside)`, after the standard mounts: what a sandboxed process on an empty rootfs sees of
    /// the host.
    pub read_only_binds: Vec<(PathBuf, PathBuf)>,
    /// A file bound read-only at `/etc/resolv.conf`, over the host's or the image's: the
    /// resolver of a container on a network of its own.
    pub resolv_conf: Option<PathBuf>,
}

impl Default for BundleOptions {
    fn default() -> BundleOptions {
        BundleOptions {
            command: None,
            args: None,
            env: Vec::new(),
            working_dir: None,
            user: None,
            hostname: None,
            memory_limit_bytes: None,
            cpu_millis: None,
            pids_limit: None,
            cgroups_path: None,
            user_namespace: Some(UserNamespace::default()),
            capabilities: Vec::new(),
            host_dns: true,
            network_namespace: false,
            cgroup: CgroupVersion::detect(),
            read_only_binds: Vec::new(),
            resolv_conf: None,
        }
    }
}

/// A bundle on disk.
#[derive(Debug, Clone)]
pub struct Bundle {
    /// The bundle directory (`runc run --bundle DIR`).
    pub dir: PathBuf,
    /// The spec written to `DIR/config.json`.
    pub spec: Spec,
}

/// Builds the spec and writes it to `dir/config.json` (creating `dir`).
pub fn build_bundle(
    dir: &Path,
    config: &ImageConfig,
    rootfs: &Rootfs,
    opts: &BundleOptions,
) -> Result<Bundle, OciError> {
    let spec = bundle_spec(config, rootfs, opts)?;
    if let Some(ns) = opts.user_namespace {
        reachable_by(&rootfs.path, ns.host_base)?;
    }
    write_bundle(dir, spec)
}

/// Symbolic links followed at most, as the kernel's `ELOOP` bound.
const MAX_LINKS: usize = 40;

/// Checks that the container's program exists in `rootfs` and can be executed there (a file
/// with an execute bit: an ELF binary for this machine, or a script whose `#!` interpreter is
/// there), as `execve` in the container would: what cannot change by trying again is refused
/// here, with the reason, instead of each start failing the same way. For an image's root: a
/// root made of bind mounts (a sandbox's) has its programs elsewhere.
pub fn check_program(rootfs: &Path, process: &crate::spec::Process) -> Result<(), OciError> {
    check_command(rootfs, &process.args, &process.env, &process.cwd)
}

/// [`check_program`] for a process's `args`, `env` (`KEY=value`) and working directory.
fn check_command(
    rootfs: &Path,
    args: &[String],
    env: &[String],
    cwd: &str,
) -> Result<(), OciError> {
    let refuse = |reason: String| OciError::InvalidBundle {
        field: "command",
        reason,
    };
    let Some(program) = args.first() else {
        return Err(refuse("no program to run".to_owned()));
    };
    let path = env
        .iter()
        .find_map(|entry| entry.strip_prefix("PATH="))
        .unwrap_or(DEFAULT_PATH);
    let found = if program.contains('/') {
        resolve_in(rootfs, &Path::new(cwd).join(program))
    } else {
        path.split(':')
            .filter(|dir| !dir.is_empty())
            .find_map(|dir| resolve_in(rootfs, &Path::new(dir).join(program)))
    };
    let Some(file) = found else {
        return Err(refuse(if program.contains('/') {
            format!("{program} is not in the image")
        } else {
            format!("{program} is not in the image's PATH ({path})")
        }));
    };
    executable(rootfs, program, &file).map_err(refuse)
}

/// Why `file` (the program `program`, found in `rootfs`) cannot be executed; Ok when it can.
fn executable(rootfs: &Path, program: &str, file: &Path) -> Result<(), String> {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(file).map_err(|e| format!("{program}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{program} is not a file"));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(format!("{program} is not executable (no x bit)"));
    }
    let mut head = [0u8; 256];
    let read = std::fs::File::open(file)
        .and_then(|mut f| f.read(&mut head))
        .map_err(|e| format!("{program}: {e}"))?;
    let head = &head[..read];
    if let Some(rest) = head.strip_prefix(b"#!") {
        let line = rest.split(|b| *b == b'\n').next().unwrap_or_default();
        let line = String::from_utf8_lossy(line);
        let interpreter = line.split_whitespace().next().unwrap_or_default();
        if interpreter.is_empty() || resolve_in(rootfs, Path::new(interpreter)).is_none() {
            return Err(format!(
                "{program} is a script for {interpreter:?}, which is not in the image"
            ));
        }
        return Ok(());
    }
    if head.starts_with(b"\x7fELF") && head.len() >= 20 {
        let machine = u16::from_le_bytes([head[18], head[19]]);
        return match host_elf_machine() {
            Some(host) if host != machine => Err(format!(
                "{program} is built for another machine (ELF machine {machine}, this one \
                 runs {host}: {})",
                std::env::consts::ARCH
            )),
            _ => Ok(()),
        };
    }
    Err(format!(
        "{program} is neither a program for this machine nor a script (exec format error)"
    ))
}

/// The ELF `e_machine` this machine runs.
fn host_elf_machine() -> Option<u16> {
    match std::env::consts::ARCH {
        "x86_64" => Some(62),
        "aarch64" => Some(183),
        "riscv64" => Some(243),
        "s390x" => Some(22),
        "powerpc64" => Some(21),
        _ => None,
    }
}

/// `path` as the container sees it (absolute, or relative to its root), found in `rootfs`
/// with its symbolic links followed inside `rootfs` (an absolute target is the container's,
/// never the host's); none when nothing is there.
fn resolve_in(rootfs: &Path, path: &Path) -> Option<PathBuf> {
    use std::path::Component;
    let mut pending: Vec<std::ffi::OsString> = path
        .components()
        .rev()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_owned()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect();
    let mut resolved = PathBuf::new();
    let mut links = 0;
    while let Some(name) = pending.pop() {
        if name == ".." {
            resolved.pop();
            continue;
        }
        let candidate = rootfs.join(&resolved).join(&name);
        let meta = std::fs::symlink_metadata(&candidate).ok()?;
        if meta.file_type().is_symlink() {
            links += 1;
            if links > MAX_LINKS {
                return None;
            }
            let target = std::fs::read_link(&candidate).ok()?;
            if target.is_absolute() {
                resolved.clear();
            }
            pending.extend(target.components().rev().filter_map(|c| match c {
                Component::Normal(name) => Some(name.to_owned()),
                Component::ParentDir => Some("..".into()),
                _ => None,
            }));
        } else {
            resolved.push(&name);
        }
    }
    Some(rootfs.join(resolved))
}

/// Checks that host id `id` (the container's root, in a user namespace) can search every
/// directory down to `path`: the OCI runtime mounts the rootfs from inside the namespace, where
/// the host's root has no power over a directory like a private `0700` state directory. Without
/// this, `runc create` fails later with a bare "permission denied".
pub fn reachable_by(path: &Path, id: u32) -> Result<(), OciError> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    for dir in path.ancestors() {
        let meta = std::fs::metadata(dir).map_err(|e| OciError::io("inspect", dir, e))?;
        let bit = if meta.uid() == id {
            0o100
        } else if meta.gid() == id {
            0o010
        } else {
            0o001
        };
        let mode = meta.permissions().mode() & 0o7777;
        if mode & bit == 0 {
            return Err(OciError::InvalidBundle {
                field: "rootfs",
                reason: format!(
                    "the container's root (host id {id}) cannot reach {}: {} has mode {mode:04o} and \
                     owner {}:{}, so it cannot search it; let it (chmod o+x {}, or chgrp {id} and \
                     chmod g+x) or keep the state directory elsewhere",
                    path.display(),
                    dir.display(),
                    meta.uid(),
                    meta.gid(),
                    dir.display()
                ),
            });
        }
    }
    Ok(())
}

/// Writes `spec` to `dir/config.json` atomically (creating `dir`).
pub fn write_bundle(dir: &Path, spec: Spec) -> Result<Bundle, OciError> {
    std::fs::create_dir_all(dir).map_err(|e| OciError::io("create", dir, e))?;
    let json = serde_json::to_vec_pretty(&spec).map_err(|e| OciError::InvalidBundle {
        field: "spec",
        reason: e.to_string(),
    })?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .map_err(|e| OciError::io("create a file in", dir, e))?;
    std::io::Write::write_all(&mut tmp, &json).map_err(|e| OciError::io("write", tmp.path(), e))?;
    let path = dir.join("config.json");
    tmp.persist(&path)
        .map_err(|e| OciError::io("rename into", &path, e.error))?;
    Ok(Bundle {
        dir: dir.to_path_buf(),
        spec,
    })
}

/// The runtime spec for `config` on `rootfs` with the caller's settings. Reads only the
/// rootfs's `/etc/passwd` and `/etc/group` (to resolve user names).
pub fn bundle_spec(
    config: &ImageConfig,
    rootfs: &Rootfs,
    opts: &BundleOptions,
) -> Result<Spec, OciError> {
    let want_shift = opts.user_namespace.map_or(0, |ns| ns.host_base);
    if rootfs.id_shift != want_shift {
        return Err(OciError::InvalidBundle {
            field: "user_namespace",
            reason: format!(
                "the rootfs is owned with id shift {}, but the bundle maps container id 0 to host id {want_shift}; pull with id_shift {want_shift}",
                rootfs.id_shift
            ),
        });
    }
    if !rootfs.path.is_absolute() {
        return Err(OciError::InvalidBundle {
            field: "rootfs",
            reason: format!("{} is not absolute", rootfs.path.display()),
        });
    }

    let args = command_line(config, opts)?;
    let user_spec = opts.user.as_deref().unwrap_or(&config.user);
    let (user, home) = resolve_user(&rootfs.path, user_spec)?;
    if let Some(ns) = opts.user_namespace {
        let top = std::iter::once(user.uid)
            .chain(std::iter::once(user.gid))
            .chain(user.additional_gids.iter().copied())
            .max()
            .unwrap_or(0);
        if top >= ns.size {
            return Err(OciError::InvalidBundle {
                field: "user",
                reason: format!(
                    "{user_spec:?} resolves to id {top}, outside the user namespace's {} ids",
                    ns.size
                ),
            });
        }
    }
    let env = merge_env(&config.env, &opts.env, home.as_deref())?;
    let cwd = opts
        .working_dir
        .clone()
        .filter(|w| !w.is_empty())
        .or_else(|| Some(config.working_dir.clone()).filter(|w| !w.is_empty()))
        .unwrap_or_else(|| "/".to_string());
    if !cwd.starts_with('/') {
        return Err(OciError::InvalidBundle {
            field: "working_dir",
            reason: format!("{cwd:?} is not absolute"),
        });
    }

    let caps: Vec<String> = opts.capabilities.clone();
    for cap in &caps {
        if !cap.starts_with("CAP_")
            || !cap
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b == b'_' || b.is_ascii_digit())
        {
            return Err(OciError::InvalidBundle {
                field: "capabilities",
                reason: format!("{cap:?} is not a capability name like CAP_NET_BIND_SERVICE"),
            });
        }
    }

    let own_network = opts.network_namespace.then_some("network");
    let mut namespaces: Vec<Namespace> = ["pid", "ipc", "uts", "mount"]
        .into_iter()
        .chain(own_network)
        .map(|kind| Namespace {
            kind: kind.to_string(),
        })
        .collect();
    let (uid_mappings, gid_mappings) = match opts.user_namespace {
        Some(ns) => {
            if ns.size == 0 || ns.host_base.checked_add(ns.size).is_none() {
                return Err(OciError::InvalidBundle {
                    field: "user_namespace",
                    reason: format!("host ids {} + {} overflow", ns.host_base, ns.size),
                });
            }
            namespaces.push(Namespace {
                kind: "user".to_string(),
            });
            let map = IdMapping {
                container_id: 0,
                host_id: ns.host_base,
                size: ns.size,
            };
            (vec![map], vec![map])
        }
        None => (Vec::new(), Vec::new()),
    };

    Ok(Spec {
        oci_version: "1.0.2".to_string(),
        process: Process {
            terminal: false,
            user,
            args,
            env,
            cwd,
            capabilities: Capabilities {
                bounding: caps.clone(),
                effective: caps.clone(),
                permitted: caps,
                inheritable: Vec::new(),
                ambient: Vec::new(),
            },
            no_new_privileges: true,
        },
        root: Root {
            path: rootfs.path.to_string_lossy().into_owned(),
            readonly: true,
        },
        hostname: opts.hostname.clone(),
        mounts: mounts(opts),
        linux: Linux {
            uid_mappings,
            gid_mappings,
            namespaces,
            cgroups_path: opts.cgroups_path.clone(),
            resources: resources(opts)?,
            masked_paths: [
                "/proc/acpi",
                "/proc/asound",
                "/proc/kcore",
                "/proc/keys",
                "/proc/latency_stats",
                "/proc/timer_list",
                "/proc/timer_stats",
                "/proc/sched_debug",
                "/proc/scsi",
                "/sys/firmware",
            ]
            .map(str::to_string)
            .to_vec(),
            readonly_paths: [
                "/proc/bus",
                "/proc/fs",
                "/proc/irq",
                "/proc/sys",
                "/proc/sysrq-trigger",
            ]
            .map(str::to_string)
            .to_vec(),
        },
    })
}

/// Kubernetes semantics: `command` replaces `ENTRYPOINT`, `args` replaces `CMD`, and a
/// `command` without `args` drops the image's `CMD`.
fn command_line(config: &ImageConfig, opts: &BundleOptions) -> Result<Vec<String>, OciError> {
    let args = match (&opts.command, &opts.args) {
        (Some(command), Some(args)) => [command.as_slice(), args.as_slice()].concat(),
        (Some(command), None) => command.clone(),
        (None, Some(args)) => [config.entrypoint.as_slice(), args.as_slice()].concat(),
        (None, None) => [config.entrypoint.as_slice(), config.cmd.as_slice()].concat(),
    };
    if args.first().is_none_or(|a| a.is_empty()) {
        return Err(OciError::InvalidBundle {
            field: "command",
            reason: "the image has no entrypoint or cmd and none was given".to_string(),
        });
    }
    if args.iter().any(|a| a.contains('\0')) {
        return Err(OciError::InvalidBundle {
            field: "command",
            reason: "an argument contains a NUL byte".to_string(),
        });
    }
    Ok(args)
}

/// The image's environment with the caller's laid over it (same key: caller wins, in place;
/// new keys appended), plus `PATH` and `HOME` when neither set them.
fn merge_env(
    image: &[String],
    extra: &[(String, String)],
    home: Option<&str>,
) -> Result<Vec<String>, OciError> {
    let key_of = |entry: &str| entry.split_once('=').map_or(entry, |(k, _)| k).to_string();
    let mut env: Vec<(String, String)> = Vec::new();
    let mut set = |key: String, value: String| {
        match env.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => env.push((key, value)),
        };
    };
    for entry in image {
        let key = key_of(entry);
        let value = entry.split_once('=').map_or("", |(_, v)| v).to_string();
        set(key, value);
    }
    for (key, value) in extra {
        if key.is_empty() || key.contains('=') || key.contains('\0') || value.contains('\0') {
            return Err(OciError::InvalidBundle {
                field: "env",
                reason: format!("{key:?} is not a valid variable name"),
            });
        }
        set(key.clone(), value.clone());
    }
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.push(("PATH".to_string(), DEFAULT_PATH.to_string()));
    }
    if !env.iter().any(|(k, _)| k == "HOME") {
        env.push(("HOME".to_string(), home.unwrap_or("/").to_string()));
    }
    Ok(env.into_iter().map(|(k, v)| format!("{k}={v}")).collect())
}

fn resources(opts: &BundleOptions) -> Result<Resources, OciError> {
    let memory = match opts.memory_limit_bytes {
        None => None,
        Some(bytes) => {
            let limit = i64::try_from(bytes)
                .ok()
                .filter(|b| *b >= 4 << 20)
                .ok_or_else(|| OciError::InvalidBundle {
                    field: "memory_limit_bytes",
                    reason: format!("{bytes} is below 4 MiB or too large"),
                })?;
            // memory+swap equal to memory: no swap, so going over the limit is an OOM kill
            // rather than a slow swap. Only where the kernel can account swap: on cgroup v1
            // without swapaccount the file does not exist and runc would fail to write it.
            let swap = match opts.cgroup {
                CgroupVersion::V2
                | CgroupVersion::V1 {
                    swap_accounting: true,
                } => Some(limit),
                CgroupVersion::V1 {
                    swap_accounting: false,
                } => None,
            };
            Some(Memory { limit, swap })
        }
    };
    let cpu = match opts.cpu_millis {
        None => None,
        Some(millis) => {
            let quota = millis
                .checked_mul(CPU_PERIOD_US / 1000)
                .and_then(|q| i64::try_from(q).ok())
                .filter(|_| millis >= 10)
                .ok_or_else(|| OciError::InvalidBundle {
                    field: "cpu_millis",
                    reason: format!(
                        "{millis} is below 10 (the kernel's 1 ms minimum quota) or too large"
                    ),
                })?;
            Some(Cpu {
                quota,
                period: CPU_PERIOD_US,
            })
        }
    };
    let pids = match opts.pids_limit {
        None => None,
        Some(limit) => Some(Pids {
            limit: i64::try_from(limit)
                .ok()
                .filter(|l| *l > 0)
                .ok_or_else(|| OciError::InvalidBundle {
                    field: "pids_limit",
                    reason: format!("{limit} is out of range"),
                })?,
        }),
    };
    Ok(Resources {
        // Deny every device; runc adds back the standard ones (null, zero, tty, ...).
        devices: vec![DeviceRule {
            allow: false,
            access: "rwm".to_string(),
        }],
        memory,
        cpu,
        pids,
    })
}

fn mount(destination: &str, kind: &str, source: &str, options: &[&str]) -> Mount {
    Mount {
        destination: destination.to_string(),
        kind: kind.to_string(),
        source: source.to_string(),
        options: options.iter().map(|o| o.to_string()).collect(),
    }
}

fn mounts(opts: &BundleOptions) -> Vec<Mount> {
    // With a network namespace of its own the container gets a sysfs of its own, read-only,
    // showing its own network devices and not the host's. Without one, sysfs cannot be mounted
    // in a user namespace (which does not own the network namespace), so /sys is the host's,
    // read-only. Inside a user namespace it must be a recursive bind (its submounts are locked
    // to it); without one, a plain bind leaves the host's cgroup file systems out, and the
    // cgroup mount below shows the container's own.
    let sys_bind = if opts.user_namespace.is_some() {
        "rbind"
    } else {
        "bind"
    };
    let sys = if opts.network_namespace {
        mount(
            "/sys",
            "sysfs",
            "sysfs",
            &["nosuid", "noexec", "nodev", "ro"],
        )
    } else {
        mount(
            "/sys",
            "none",
            "/sys",
            &[sys_bind, "nosuid", "noexec", "nodev", "ro"],
        )
    };
    let mut mounts = vec![
        mount("/proc", "proc", "proc", &["nosuid", "noexec", "nodev"]),
        mount(
            "/dev",
            "tmpfs",
            "tmpfs",
            &["nosuid", "strictatime", "mode=755", "size=65536k"],
        ),
        mount(
            "/dev/pts",
            "devpts",
            "devpts",
            &[
                "nosuid",
                "noexec",
                "newinstance",
                "ptmxmode=0666",
                "mode=0620",
                "gid=5",
            ],
        ),
        mount(
            "/dev/shm",
            "tmpfs",
            "shm",
            &["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
        ),
        mount(
            "/dev/mqueue",
            "mqueue",
            "mqueue",
            &["nosuid", "noexec", "nodev"],
        ),
        sys,
        mount(
            "/sys/fs/cgroup",
            "cgroup",
            "cgroup",
            &["nosuid", "noexec", "nodev", "relatime", "ro"],
        ),
        mount("/tmp", "tmpfs", "tmpfs", &["nosuid", "nodev", "mode=1777"]),
        mount("/run", "tmpfs", "tmpfs", &["nosuid", "nodev", "mode=755"]),
    ];
    for (source, destination) in &opts.read_only_binds {
        mounts.push(mount(
            &destination.to_string_lossy(),
            "none",
            &source.to_string_lossy(),
            &["bind", "nosuid", "nodev", "ro"],
        ));
    }
    if let Some(resolv_conf) = &opts.resolv_conf {
        mounts.push(mount(
            "/etc/resolv.conf",
            "none",
            &resolv_conf.to_string_lossy(),
            &["bind", "nosuid", "noexec", "nodev", "ro"],
        ));
    }
    if opts.host_dns {
        for file in ["/etc/resolv.conf", "/etc/hosts"] {
            if file == "/etc/resolv.conf" && opts.resolv_conf.is_some() {
                continue;
            }
            if Path::new(file).is_file() {
                mounts.push(mount(
                    file,
                    "none",
                    file,
                    &["bind", "nosuid", "noexec", "nodev", "ro"],
                ));
            }
        }
    }
    mounts
}

/// Resolves `user` (`""`, `uid`, `uid:gid`, `name`, `name:group`) against the rootfs's
/// `/etc/passwd` and `/etc/group`. Returns the user and its home directory, if known.
fn resolve_user(rootfs: &Path, user: &str) -> Result<(User, Option<String>), OciError> {
    let bad = |reason: String| OciError::User {
        user: user.to_string(),
        reason,
    };
    if user.is_empty() {
        let passwd = read_etc(rootfs, "passwd")?;
        let home = passwd.as_deref().and_then(|p| {
            passwd_entries(p)
                .find(|e| e.uid == 0)
                .map(|e| e.home.to_string())
        });
        return Ok((
            User {
                uid: 0,
                gid: 0,
                additional_gids: Vec::new(),
            },
            home,
        ));
    }
    let (user_part, group_part) = match user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    if user_part.is_empty() || group_part.is_some_and(str::is_empty) {
        return Err(bad("expected uid, uid:gid, name or name:group".to_string()));
    }
    let passwd = read_etc(rootfs, "passwd")?;
    let group = read_etc(rootfs, "group")?;
    let entry = passwd.as_deref().and_then(|p| {
        passwd_entries(p).find(|e| match user_part.parse::<u32>() {
            Ok(uid) => e.uid == uid,
            Err(_) => e.name == user_part,
        })
    });
    let (uid, name) = match (user_part.parse::<u32>(), &entry) {
        (Ok(uid), _) => (uid, entry.as_ref().map(|e| e.name)),
        (Err(_), Some(e)) => (e.uid, Some(e.name)),
        (Err(_), None) => {
            return Err(bad(if passwd.is_some() {
                "no such user in the image's /etc/passwd".to_string()
            } else {
                "the image has no /etc/passwd to look the name up in".to_string()
            }));
        }
    };
    let gid = match group_part {
        Some(g) => match g.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => group
                .as_deref()
                .and_then(|text| group_entries(text).find(|e| e.name == g).map(|e| e.gid))
                .ok_or_else(|| bad(format!("no group {g:?} in the image's /etc/group")))?,
        },
        None => entry.as_ref().map_or(0, |e| e.gid),
    };
    let mut additional_gids: Vec<u32> = match (group_part, name, group.as_deref()) {
        (None, Some(name), Some(text)) => group_entries(text)
            .filter(|e| e.members.contains(&name) && e.gid != gid)
            .map(|e| e.gid)
            .collect(),
        _ => Vec::new(),
    };
    additional_gids.sort_unstable();
    additional_gids.dedup();
    let home = entry.map(|e| e.home.to_string());
    Ok((
        User {
            uid,
            gid,
            additional_gids,
        },
        home,
    ))
}

/// Reads `/etc/<name>` from the rootfs, refusing to follow a symlink at `etc` or at the file
/// (it would resolve on the host, not in the image). `None` when absent.
fn read_etc(rootfs: &Path, name: &str) -> Result<Option<String>, OciError> {
    const MAX: u64 = 4 << 20;
    let etc = rootfs.join("etc");
    let path = etc.join(name);
    for p in [&etc, &path] {
        match std::fs::symlink_metadata(p) {
            Ok(m) if m.file_type().is_symlink() => return Ok(None),
            Ok(_) => {}
            Err(_) => return Ok(None),
        }
    }
    let file = std::fs::File::open(&path).map_err(|e| OciError::io("open", &path, e))?;
    let mut bytes = Vec::new();
    file.take(MAX)
        .read_to_end(&mut bytes)
        .map_err(|e| OciError::io("read", &path, e))?;
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

struct PasswdEntry<'a> {
    name: &'a str,
    uid: u32,
    gid: u32,
    home: &'a str,
}

fn passwd_entries(text: &str) -> impl Iterator<Item = PasswdEntry<'_>> {
    text.lines().filter_map(|line| {
        let mut f = line.split(':');
        let name = f.next()?;
        let _password = f.next()?;
        let uid = f.next()?.parse().ok()?;
        let gid = f.next()?.parse().ok()?;
        let _gecos = f.next();
        let home = f.next().unwrap_or("/");
        Some(PasswdEntry {
            name,
            uid,
            gid,
            home: if home.is_empty() { "/" } else { home },
        })
    })
}

struct GroupEntry<'a> {
    name: &'a str,
    gid: u32,
    members: Vec<&'a str>,
}

fn group_entries(text: &str) -> impl Iterator<Item = GroupEntry<'_>> {
    text.lines().filter_map(|line| {
        let mut f = line.split(':');
        let name = f.next()?;
        let _password = f.next()?;
        let gid = f.next()?.parse().ok()?;
        let members = f
            .next()
            .unwrap_or("")
            .split(',')
            .filter(|m| !m.is_empty())
            .collect();
        Some(GroupEntry { name, gid, members })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_the_image_cannot_run_is_refused_with_the_reason() {
        use std::os::unix::fs::{PermissionsExt, symlink};
        let root = tempfile::tempdir().expect("tempdir");
        let at = |path: &str| root.path().join(path.trim_start_matches('/'));
        let write = |path: &str, bytes: &[u8], mode: u32| {
            std::fs::create_dir_all(at(path).parent().expect("parent")).expect("dir");
            std::fs::write(at(path), bytes).expect("write");
            std::fs::set_permissions(at(path), std::fs::Permissions::from_mode(mode))
                .expect("chmod");
        };
        // An ELF header for this machine, and one for another.
        let host = host_elf_machine().expect("a known machine");
        let elf = |machine: u16| {
            let mut head = b"\x7fELF".to_vec();
            head.resize(18, 0);
            head.extend(machine.to_le_bytes());
            head
        };
        write("/bin/app", &elf(host), 0o755);
        write("/bin/arm", &elf(if host == 62 { 183 } else { 62 }), 0o755);
        write("/bin/data", b"plain text", 0o755);
        write("/bin/private", &elf(host), 0o644);
        write("/app/run.sh", b"#!/bin/sh\necho hi\n", 0o755);
        write("/app/run.py", b"#!/usr/bin/env python3\n", 0o755);
        std::fs::create_dir_all(at("/usr/bin")).expect("dir");
        // Absolute links are the container's: /bin/app in the image, not the host's.
        symlink("/bin/app", at("/usr/bin/linked")).expect("link");
        symlink("../../bin/app", at("/usr/bin/relative")).expect("link");
        symlink("/nowhere", at("/usr/bin/dangling")).expect("link");
        symlink("loop", at("/usr/bin/loop")).expect("link");
        let check = |program: &str| {
            let env = ["PATH=/usr/bin:/bin".to_owned()];
            check_command(root.path(), &[program.to_owned()], &env, "/app")
                .map_err(|e| e.to_string())
        };
        for fine in ["app", "/bin/app", "linked", "relative", "/usr/bin/linked"] {
            assert_eq!(check(fine), Ok(()), "{fine}");
        }
        let refused = |program: &str, reason: &str| {
            let said = check(program).expect_err(program);
            assert!(said.contains(reason), "{program}: {said}");
            assert!(said.starts_with("invalid bundle setting command"), "{said}");
        };
        refused(
            "missing",
            "missing is not in the image's PATH (/usr/bin:/bin)",
        );
        refused("/bin/missing", "/bin/missing is not in the image");
        refused("dangling", "not in the image's PATH");
        refused("loop", "not in the image's PATH");
        refused("arm", "is built for another machine");
        refused("data", "exec format error");
        refused("private", "not executable");
        refused(
            "./run.sh",
            "a script for \"/bin/sh\", which is not in the image",
        );
        refused("./run.py", "a script for \"/usr/bin/env\"");
        refused("/usr/bin", "not a file");
        write("/bin/sh", &elf(host), 0o755);
        assert_eq!(check("./run.sh"), Ok(()));
    }

    fn rootfs_with_etc() -> (tempfile::TempDir, Rootfs) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let etc = tmp.path().join("etc");
        std::fs::create_dir(&etc).expect("etc");
        std::fs::write(
            etc.join("passwd"),
            "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1001::/home/app:/bin/sh\n",
        )
        .expect("passwd");
        std::fs::write(
            etc.join("group"),
            "root:x:0:\napp:x:1001:\nextra:x:2000:app\n",
        )
        .expect("group");
        let rootfs = Rootfs {
            path: tmp.path().to_path_buf(),
            id_shift: DEFAULT_HOST_ID_BASE,
        };
        (tmp, rootfs)
    }

    fn image() -> ImageConfig {
        ImageConfig {
            entrypoint: vec!["/entry".into()],
            cmd: vec!["default".into()],
            env: vec!["PATH=/bin".into(), "A=image".into(), "B=image".into()],
            working_dir: "/work".into(),
            user: "app".into(),
            ..ImageConfig::default()
        }
    }

    fn opts() -> BundleOptions {
        BundleOptions {
            cgroup: CgroupVersion::V1 {
                swap_accounting: false,
            },
            host_dns: false,
            ..BundleOptions::default()
        }
    }

    #[test]
    fn kubernetes_command_semantics() {
        let cfg = image();
        let run = |command: Option<&[&str]>, args: Option<&[&str]>| {
            let o = BundleOptions {
                command: command.map(|c| c.iter().map(|s| s.to_string()).collect()),
                args: args.map(|c| c.iter().map(|s| s.to_string()).collect()),
                ..opts()
            };
            command_line(&cfg, &o).expect("command")
        };
        assert_eq!(run(None, None), ["/entry", "default"]);
        assert_eq!(run(Some(&["/cmd"]), None), ["/cmd"]);
        assert_eq!(run(None, Some(&["x"])), ["/entry", "x"]);
        assert_eq!(run(Some(&["/cmd"]), Some(&["x"])), ["/cmd", "x"]);
        assert!(command_line(&ImageConfig::default(), &opts()).is_err());
    }

    #[test]
    fn env_caller_wins_in_place() {
        let env = merge_env(
            &image().env,
            &[("B".into(), "caller".into()), ("C".into(), "new".into())],
            Some("/home/app"),
        )
        .expect("env");
        assert_eq!(
            env,
            [
                "PATH=/bin",
                "A=image",
                "B=caller",
                "C=new",
                "HOME=/home/app"
            ]
        );
        assert!(merge_env(&[], &[("A=B".into(), "x".into())], None).is_err());
        assert!(merge_env(&[], &[], None).expect("env")[0].starts_with("PATH=/usr/local/sbin"));
    }

    #[test]
    fn users_resolve_from_the_rootfs() {
        let (_tmp, rootfs) = rootfs_with_etc();
        let r =
            |u: &str| resolve_user(&rootfs.path, u).map(|(u, _)| (u.uid, u.gid, u.additional_gids));
        assert_eq!(r("").ok(), Some((0, 0, vec![])));
        assert_eq!(r("app").ok(), Some((1000, 1001, vec![2000])));
        assert_eq!(r("1000").ok(), Some((1000, 1001, vec![2000])));
        assert_eq!(r("4242").ok(), Some((4242, 0, vec![])));
        assert_eq!(r("app:extra").ok(), Some((1000, 2000, vec![])));
        assert_eq!(r("7:8").ok(), Some((7, 8, vec![])));
        assert!(matches!(r("nobody"), Err(OciError::User { .. })));
        assert!(matches!(r("app:nogroup"), Err(OciError::User { .. })));
        assert!(matches!(r(":1"), Err(OciError::User { .. })));
    }

    #[test]
    fn a_symlinked_etc_is_not_read() {
        let tmp = tempfile::tempdir().expect("tempdir");
        std::os::unix::fs::symlink("/etc", tmp.path().join("etc")).expect("symlink");
        // The host's /etc/passwd has root; through the symlink it would resolve. It must not.
        assert!(matches!(
            resolve_user(tmp.path(), "root"),
            Err(OciError::User { .. })
        ));
    }

    #[test]
    fn spec_defaults_and_limits() {
        let (_tmp, rootfs) = rootfs_with_etc();
        let o = BundleOptions {
            memory_limit_bytes: Some(64 << 20),
            cpu_millis: Some(500),
            cgroups_path: Some("/runway/x".into()),
            hostname: Some("h".into()),
            ..opts()
        };
        let spec = bundle_spec(&image(), &rootfs, &o).expect("spec");
        assert!(spec.root.readonly);
        assert_eq!(spec.process.user.uid, 1000);
        assert_eq!(spec.process.cwd, "/work");
        assert!(spec.process.no_new_privileges);
        assert!(spec.process.capabilities.bounding.is_empty());
        let ns: Vec<_> = spec
            .linux
            .namespaces
            .iter()
            .map(|n| n.kind.as_str())
            .collect();
        assert_eq!(ns, ["pid", "ipc", "uts", "mount", "user"]);
        let own = BundleOptions {
            network_namespace: true,
            ..opts()
        };
        let spec = bundle_spec(&image(), &rootfs, &own).expect("spec");
        assert!(spec.linux.namespaces.iter().any(|n| n.kind == "network"));
        // Its own sysfs, which shows its own network devices, not the host's.
        assert!(
            spec.mounts
                .iter()
                .any(|m| m.destination == "/sys" && m.kind == "sysfs")
        );
        let spec = bundle_spec(&image(), &rootfs, &o).expect("spec");
        assert_eq!(spec.linux.uid_mappings[0].host_id, DEFAULT_HOST_ID_BASE);
        assert_eq!(
            spec.linux.resources.memory,
            Some(Memory {
                limit: 64 << 20,
                swap: None
            })
        );
        assert_eq!(
            spec.linux.resources.cpu,
            Some(Cpu {
                quota: 50_000,
                period: 100_000
            })
        );
        assert!(
            spec.mounts
                .iter()
                .any(|m| m.destination == "/sys" && m.options.contains(&"rbind".to_string()))
        );
        assert!(spec.mounts.iter().all(|m| m.kind != "sysfs"));

        for cgroup in [
            CgroupVersion::V2,
            CgroupVersion::V1 {
                swap_accounting: true,
            },
        ] {
            let spec = bundle_spec(
                &image(),
                &rootfs,
                &BundleOptions {
                    cgroup,
                    ..o.clone()
                },
            )
            .expect("spec");
            assert_eq!(
                spec.linux.resources.memory.and_then(|m| m.swap),
                Some(64 << 20)
            );
        }

        // Without a user namespace the rootfs must not be shifted.
        let no_userns = BundleOptions {
            user_namespace: None,
            ..o.clone()
        };
        assert!(matches!(
            bundle_spec(&image(), &rootfs, &no_userns),
            Err(OciError::InvalidBundle {
                field: "user_namespace",
                ..
            })
        ));
        let unshifted = Rootfs {
            id_shift: 0,
            ..rootfs.clone()
        };
        let spec = bundle_spec(&image(), &unshifted, &no_userns).expect("spec");
        assert!(spec.linux.uid_mappings.is_empty());
        assert!(spec.linux.namespaces.iter().all(|n| n.kind != "user"));

        let too_little = BundleOptions {
            cpu_millis: Some(5),
            ..o.clone()
        };
        assert!(bundle_spec(&image(), &rootfs, &too_little).is_err());
        let big_uid = BundleOptions {
            user: Some("70000".into()),
            ..o
        };
        assert!(bundle_spec(&image(), &rootfs, &big_uid).is_err());
    }

    #[test]
    fn a_rootfs_the_containers_root_cannot_reach_is_refused_naming_the_directory() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().expect("tempdir");
        let private = tmp.path().join("data");
        let rootfs = private.join("images/rootfs");
        std::fs::create_dir_all(&rootfs).expect("dirs");
        let chmod = |mode| {
            std::fs::set_permissions(&private, std::fs::Permissions::from_mode(mode))
                .expect("chmod");
        };
        let id = DEFAULT_HOST_ID_BASE;
        chmod(0o700);
        let Err(OciError::InvalidBundle { field, reason }) = reachable_by(&rootfs, id) else {
            panic!("a 0700 directory on the way was not noticed");
        };
        assert_eq!(field, "rootfs");
        assert!(
            reason.contains(&format!("{} has mode 0700", private.display())),
            "{reason}"
        );
        chmod(0o711);
        reachable_by(&rootfs, id).expect("others may search");
        // The owner's bits decide for the owner, the group's for the group, even when others
        // may search.
        if owner_of(&private) == 0 {
            std::os::unix::fs::chown(&private, Some(id), None).expect("chown");
            chmod(0o611);
            assert!(reachable_by(&rootfs, id).is_err(), "owner bits ignored");
            std::os::unix::fs::chown(&private, Some(0), Some(id)).expect("chown");
            chmod(0o710);
            reachable_by(&rootfs, id).expect("the group may search");
        }
    }

    fn owner_of(path: &Path) -> u32 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).expect("stat").uid()
    }
}
