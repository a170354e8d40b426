//! The system calls a tenant's code may not make: the seccomp profile every container Runway
//! runs (an image, an isolated process) gets in its bundle's `linux.seccomp`, applied by the OCI
//! runtime (runc, crun) just before it starts the tenant's program.
//!
//! A denylist on a default of "allow": what container runtimes refuse by default (Docker's and
//! containerd's profiles, for a container with no capabilities), written the other way round,
//! so a program they run runs here too, and one that calls something new to the kernel is not
//! refused for it. Each refusal is `EPERM`, what the kernel itself answers a process without
//! the capability, which programs already handle; `clone3` alone says `ENOSYS`, so that the C
//! library falls back to `clone`, whose flags a filter can read.
//!
//! What it is for: an instance has no capabilities, but a user namespace of its own would give
//! it all of them there (then mounts, iptables, every filesystem and netfilter code path the
//! kernel keeps behind `CAP_SYS_ADMIN` or `CAP_NET_ADMIN`), and some calls reach large parts of
//! the kernel without any capability (`bpf`, `io_uring`, `userfaultfd`, keyrings). The rest
//! need a capability the instance does not have and are refused anyway; listing them keeps
//! that true should a capability ever be granted, and costs nothing.
//!
//! An operator lifts it for named services ([`SeccompPolicy`], `runtime.seccomp_unconfined` in
//! the server's configuration), never a manifest's author.

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;

use serde::{Deserialize, Serialize};

/// `linux.seccomp` of an OCI runtime spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Seccomp {
    /// What a system call no rule names gets.
    pub default_action: Action,
    /// The system call tables the filter covers. A process of another (x32, 32-bit ARM) is
    /// killed by libseccomp's bad-architecture action, never let through unfiltered.
    pub architectures: Vec<Arch>,
    /// The rules, any of which may match.
    pub syscalls: Vec<Rule>,
}

/// A rule's action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    #[serde(rename = "SCMP_ACT_ALLOW")]
    Allow,
    /// Fails the call with [`Rule::errno_ret`].
    #[serde(rename = "SCMP_ACT_ERRNO")]
    Errno,
}

/// A system call table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Arch {
    #[serde(rename = "SCMP_ARCH_X86_64")]
    X86_64,
    /// 32-bit x86 programs on an x86-64 kernel.
    #[serde(rename = "SCMP_ARCH_X86")]
    X86,
    #[serde(rename = "SCMP_ARCH_AARCH64")]
    Aarch64,
}

/// One rule: these calls, when every argument condition holds, get this action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    pub names: Vec<String>,
    pub action: Action,
    /// The error number an [`Action::Errno`] fails the call with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno_ret: Option<u32>,
    /// Conditions on the call's arguments, all of which must hold; at most one per argument
    /// (runc turns several on one argument into alternatives, crun does not).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<Arg>,
}

/// A condition on one argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Arg {
    /// Which argument, from 0.
    pub index: u32,
    /// [`Op::Eq`]: the value; [`Op::MaskedEq`]: the mask.
    pub value: u64,
    /// [`Op::MaskedEq`]: what the masked argument must equal.
    #[serde(default)]
    pub value_two: u64,
    pub op: Op,
}

/// How an argument is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    #[serde(rename = "SCMP_CMP_EQ")]
    Eq,
    /// `argument & value == value_two`.
    #[serde(rename = "SCMP_CMP_MASKED_EQ")]
    MaskedEq,
}

const EPERM: u32 = 1;
const ENOSYS: u32 = 38;

/// The namespace flags of `clone` and `unshare` (`CLONE_NEWNS`, `CLONE_NEWCGROUP`,
/// `CLONE_NEWUTS`, `CLONE_NEWIPC`, `CLONE_NEWUSER`, `CLONE_NEWPID`, `CLONE_NEWNET`).
const CLONE_NAMESPACES: [u64; 7] = [
    0x0002_0000,
    0x0200_0000,
    0x0400_0000,
    0x0800_0000,
    0x1000_0000,
    0x2000_0000,
    0x4000_0000,
];

/// `CLONE_NEWTIME`: `unshare` only (in `clone`'s flags it is part of the exit signal).
const CLONE_NEWTIME: u64 = 0x80;

/// `AF_VSOCK`.
const AF_VSOCK: u64 = 40;

/// The personality flags the kernel clears on a set-user-id exec as unsafe
/// (`PER_CLEAR_ON_SETID`): `READ_IMPLIES_EXEC` (readable memory executable), `ADDR_NO_RANDOMIZE`
/// (no address space layout randomisation), `ADDR_COMPAT_LAYOUT`, `MMAP_PAGE_ZERO`.
const UNSAFE_PERSONALITY: [u64; 4] = [0x0040_0000, 0x0004_0000, 0x0020_0000, 0x0010_0000];

impl Seccomp {
    /// Runway's default profile (see the module documentation), group by group.
    pub fn runway_default() -> Self {
        let mut syscalls = Vec::new();

        // Namespaces. A user namespace of its own gives a process every capability in it, and
        // with them mounts, iptables and the filesystems and netfilter code that only root
        // reaches otherwise: creating any namespace (`unshare`, `clone` with a `CLONE_NEW*`
        // flag) and joining one (`setns`) are refused, as Docker refuses them to a container
        // without CAP_SYS_ADMIN. Threads, forks and `unshare` of files or the filesystem
        // context still work.
        syscalls.push(deny(&["setns"]));
        for flag in CLONE_NAMESPACES {
            syscalls.push(deny_when(&["clone"], masked(0, flag, flag)));
            syscalls.push(deny_when(&["unshare"], masked(0, flag, flag)));
        }
        syscalls.push(deny_when(
            &["unshare"],
            masked(0, CLONE_NEWTIME, CLONE_NEWTIME),
        ));
        // `clone3` takes its flags in memory a filter cannot read: "not implemented", so that
        // the C library (glibc 2.34 and later, musl) falls back to `clone`, checked above.
        syscalls.push(Rule {
            errno_ret: Some(ENOSYS),
            ..deny(&["clone3"])
        });

        // Mounts and the root directory: the file system an instance sees is the one it was
        // given. Without CAP_SYS_ADMIN the kernel refuses these too; the new mount API
        // (`fsopen` and the rest) is listed with the old.
        syscalls.push(deny(&[
            "mount",
            "umount",
            "umount2",
            "pivot_root",
            "chroot",
            "fsopen",
            "fsconfig",
            "fsmount",
            "fspick",
            "move_mount",
            "open_tree",
            "mount_setattr",
        ]));

        // Kernel code reachable without any capability, and often the way into the kernel
        // (the source of many of its privilege escalations): eBPF, performance events (side
        // channels on the host's other processes), io_uring (Google disabled it on its
        // servers and Android apps for this), `userfaultfd` (stalls the kernel mid-copy, the
        // usual step in exploiting races), and the keyrings (shared by the kernel, not
        // namespaced by container). Docker refuses all of them to containers.
        syscalls.push(deny(&[
            "bpf",
            "perf_event_open",
            "io_uring_setup",
            "io_uring_enter",
            "io_uring_register",
            "userfaultfd",
            "keyctl",
            "add_key",
            "request_key",
        ]));

        // Other processes. Refused whole, where Docker allows ptrace on kernels from 4.8 on:
        // an instance's processes share its user, so any of them (a worker that parses a
        // request) could read another's memory and secrets or take over its system calls, and
        // no platform feature needs a debugger inside an instance. An admin's relaxation gives
        // it back to a service that does.
        syscalls.push(deny(&[
            "ptrace",
            "process_vm_readv",
            "process_vm_writev",
            "process_madvise",
            "pidfd_getfd",
            "kcmp",
        ]));

        // The kernel and the machine: modules, replacing the kernel, rebooting, swap, process
        // accounting, raw I/O ports, the kernel log, quotas, the host's names, the terminal.
        // All need capabilities the instance lacks; listed so that they stay refused.
        syscalls.push(deny(&[
            "init_module",
            "finit_module",
            "delete_module",
            "create_module",
            "query_module",
            "get_kernel_syms",
            "kexec_load",
            "kexec_file_load",
            "reboot",
            "swapon",
            "swapoff",
            "acct",
            "iopl",
            "ioperm",
            "syslog",
            "quotactl",
            "quotactl_fd",
            "lookup_dcookie",
            "sethostname",
            "setdomainname",
            "vhangup",
            "fanotify_init",
        ]));

        // The clock is the machine's, not the instance's. Reading it, and `adjtimex` and
        // `clock_adjtime` in their read-only form, stay allowed.
        syscalls.push(deny(&[
            "settimeofday",
            "stime",
            "clock_settime",
            "clock_settime64",
        ]));

        // File handles name a file by its inode on its file system, around the mount the
        // instance was given (the "shocker" escape from Docker in 2014).
        syscalls.push(deny(&["open_by_handle_at", "name_to_handle_at"]));

        // Obsolete calls with a history of bugs, which no current program makes.
        syscalls.push(deny(&[
            "uselib",
            "vm86",
            "vm86old",
            "nfsservctl",
            "_sysctl",
        ]));

        // Sockets to the hypervisor (`AF_VSOCK`): services of the virtual machine's host.
        syscalls.push(deny_when(&["socket"], equal(0, AF_VSOCK)));

        // Personality flags that weaken the instance's own defences (executable data, no
        // address randomisation, a mapping at address zero). A filter compares each argument
        // once, so "this flag, and not the query with every bit set" is: this flag and any one
        // bit clear, a rule per bit. Ordinary personalities (Linux, 32-bit `uname`) and the
        // query stay allowed, as Docker allows them.
        for flag in UNSAFE_PERSONALITY {
            for bit in (0..32).map(|b| 1u64 << b).filter(|&b| b != flag) {
                syscalls.push(deny_when(&["personality"], masked(0, flag | bit, flag)));
            }
        }

        Self {
            default_action: Action::Allow,
            architectures: vec![Arch::X86_64, Arch::X86, Arch::Aarch64],
            syscalls,
        }
    }
}

fn deny(names: &[&str]) -> Rule {
    Rule {
        names: names.iter().map(|&n| n.to_owned()).collect(),
        action: Action::Errno,
        errno_ret: Some(EPERM),
        args: Vec::new(),
    }
}

fn deny_when(names: &[&str], arg: Arg) -> Rule {
    Rule {
        args: vec![arg],
        ..deny(names)
    }
}

fn masked(index: u32, mask: u64, equals: u64) -> Arg {
    Arg {
        index,
        value: mask,
        value_two: equals,
        op: Op::MaskedEq,
    }
}

fn equal(index: u32, value: u64) -> Arg {
    Arg {
        index,
        value,
        value_two: 0,
        op: Op::Eq,
    }
}

/// Which instances run under [`Seccomp::runway_default`]: all of them, but those of the
/// services the operator names (`runtime.seccomp_unconfined`), which run with no filter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeccompPolicy {
    /// Services whose instances run unconfined.
    pub unconfined: BTreeSet<String>,
}

impl SeccompPolicy {
    /// The profile an instance of `service` gets; `None` when it runs unconfined.
    pub fn profile_for(&self, service: &str) -> Option<Seccomp> {
        (!self.unconfined.contains(service)).then(Seccomp::runway_default)
    }
}

/// Writes the bundle's `config.json` again with `profile` as its `linux.seccomp` (runway-oci
/// writes bundles without one), through a temporary file and a rename, so the OCI runtime
/// never reads half of it.
pub(crate) fn write_into(bundle: &runway_oci::Bundle, profile: &Seccomp) -> io::Result<()> {
    let mut config = serde_json::to_value(&bundle.spec).map_err(io::Error::other)?;
    let linux = config
        .get_mut("linux")
        .and_then(serde_json::Value::as_object_mut)
        .ok_or_else(|| io::Error::other("the bundle's spec has no linux section"))?;
    linux.insert(
        "seccomp".to_owned(),
        serde_json::to_value(profile).map_err(io::Error::other)?,
    );
    let text = serde_json::to_vec_pretty(&config).map_err(io::Error::other)?;
    let path = bundle.dir.join("config.json");
    let partial = bundle.dir.join(".config.json.partial");
    let _ = fs::remove_file(&partial);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&partial)?;
    file.write_all(&text)?;
    drop(file);
    fs::rename(&partial, &path)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    /// `personality(0xffffffff)` only asks for the current personality: every bit set.
    const PERSONALITY_QUERY: u64 = 0xffff_ffff;

    #[test]
    fn the_default_allows_all_but_what_it_names_as_the_oci_spec_writes_it() {
        let profile = Seccomp::runway_default();
        let json = serde_json::to_value(&profile).unwrap();
        assert_eq!(json["defaultAction"], "SCMP_ACT_ALLOW");
        assert_eq!(
            json["architectures"],
            serde_json::json!(["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_AARCH64"])
        );
        let rules = json["syscalls"].as_array().unwrap();
        let rule_for = |name: &str| {
            rules
                .iter()
                .filter(|r| r["names"].as_array().unwrap().iter().any(|n| n == name))
                .collect::<Vec<_>>()
        };
        for name in [
            "bpf",
            "io_uring_setup",
            "keyctl",
            "userfaultfd",
            "setns",
            "mount",
            "ptrace",
            "kexec_load",
            "open_by_handle_at",
        ] {
            let found = rule_for(name);
            assert_eq!(found.len(), 1, "{name}");
            assert_eq!(found[0]["action"], "SCMP_ACT_ERRNO", "{name}");
            assert_eq!(found[0]["errnoRet"], 1, "{name}");
            assert!(found[0].get("args").is_none(), "{name}: unconditional");
        }
        let clone3 = rule_for("clone3");
        assert_eq!(
            clone3[0]["errnoRet"], 38,
            "ENOSYS, for the fallback to clone"
        );
        // `unshare(CLONE_NEWUSER)` is refused, by a masked comparison of its flags.
        assert!(rule_for("unshare").iter().any(|r| r["args"]
            == serde_json::json!([{"index": 0, "value": 0x1000_0000u64,
                "valueTwo": 0x1000_0000u64, "op": "SCMP_CMP_MASKED_EQ"}])));
        // What ordinary programs call is never named.
        for name in ["read", "openat", "execve", "seccomp", "adjtimex", "mbind"] {
            assert!(rule_for(name).is_empty(), "{name}");
        }
        let back: Seccomp = serde_json::from_value(json).unwrap();
        assert_eq!(back, profile);
    }

    #[test]
    fn no_rule_compares_one_argument_twice() {
        for rule in Seccomp::runway_default().syscalls {
            let mut seen = BTreeSet::new();
            assert!(
                rule.args.iter().all(|a| seen.insert(a.index)),
                "{rule:?}: runc would make these alternatives"
            );
        }
    }

    /// The personality rules, evaluated as the kernel's filter would: a value is refused when
    /// any rule matches it.
    #[test]
    fn unsafe_personalities_are_refused_and_the_query_and_ordinary_ones_are_not() {
        let rules: Vec<Arg> = Seccomp::runway_default()
            .syscalls
            .into_iter()
            .filter(|r| r.names == ["personality"])
            .map(|r| r.args[0])
            .collect();
        let refused = |value: u64| {
            rules
                .iter()
                .any(|a| a.op == Op::MaskedEq && value & a.value == a.value_two)
        };
        // PER_LINUX, PER_LINUX32, UNAME26, both, and the query.
        for fine in [0, 0x8, 0x2_0000, 0x2_0008, PERSONALITY_QUERY] {
            assert!(!refused(fine), "{fine:#x}");
        }
        for flag in UNSAFE_PERSONALITY {
            for value in [flag, flag | 0x8, flag | 0x8000_0000, PERSONALITY_QUERY - 1] {
                assert!(refused(value | flag), "{value:#x}");
            }
            // Every bit but one set is still not the query.
            for bit in 0..32 {
                let value = PERSONALITY_QUERY & !(1 << bit);
                if value & flag == flag {
                    assert!(refused(value), "{value:#x}");
                }
            }
        }
    }

    #[test]
    fn an_operator_names_the_services_that_run_unconfined() {
        let policy = SeccompPolicy {
            unconfined: BTreeSet::from(["debugger".to_owned()]),
        };
        assert_eq!(policy.profile_for("debugger"), None);
        assert_eq!(policy.profile_for("web"), Some(Seccomp::runway_default()));
        assert!(SeccompPolicy::default().profile_for("debugger").is_some());
    }
}
