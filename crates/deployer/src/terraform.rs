//! Running terraform (or any terraform-compatible binary, such as `tofu`).
//!
//! `up` and `down` run `init -input=false` and then `apply` / `destroy` with `-auto-approve
//! -input=false`, as upstream runs `init` before each (it is idempotent, and a fresh checkout or
//! a changed backend needs it). Terraform's stdout and its stderr both go to the deployer's
//! stdout, as upstream has it: the deployer's stderr carries only NDJSON. Its exit code is the
//! deployer's. SIGINT and SIGTERM are passed on to terraform, which stops gracefully (see
//! `passthrough`).
//!
//! Reading the output runs `show -json` with its stdout captured (its stderr is captured too and
//! quoted in the error when it fails); `init -input=false` runs first only when the directory
//! has no `.terraform`, its output on stdout.

use std::os::fd::AsFd as _;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

use crate::log;

/// Why terraform could not be run, or did not give what was asked.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TerraformError {
    #[error("neither terraform nor tofu is on PATH: install one, or give --tf-exec-path")]
    NotFound,
    #[error("--tf-target {}: not a directory", dir.display())]
    NotADirectory { dir: PathBuf },
    #[error("cannot run {}", exec.display())]
    Spawn {
        exec: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`{} {command}` in {} failed ({status}){}", exec.display(), dir.display(), stderr_tail(stderr))]
    Failed {
        exec: PathBuf,
        command: String,
        dir: PathBuf,
        status: ExitStatus,
        stderr: String,
    },
}

fn stderr_tail(stderr: &str) -> String {
    let trimmed = stderr.trim();
    if trimmed.is_empty() {
        return String::new();
    }
    // The end of terraform's message is where the reason is; keep the error readable.
    let start = trimmed
        .char_indices()
        .rev()
        .nth(2000)
        .map_or(0, |(index, _)| index);
    format!(": {}", &trimmed[start..])
}

/// The binary: `--tf-exec-path` when given, else `terraform` on PATH, else `tofu`.
pub(crate) fn exec_path(flag: Option<&Path>) -> Result<PathBuf, TerraformError> {
    if let Some(path) = flag {
        return Ok(path.to_owned());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    ["terraform", "tofu"]
        .iter()
        .find_map(|name| {
            std::env::split_paths(&path)
                .map(|dir| dir.join(name))
                .find(|candidate| is_executable(candidate))
        })
        .ok_or(TerraformError::NotFound)
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn check_dir(dir: &Path) -> Result<(), TerraformError> {
    if dir.is_dir() {
        Ok(())
    } else {
        Err(TerraformError::NotADirectory {
            dir: dir.to_owned(),
        })
    }
}

fn command(exec: &Path, dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(exec);
    command
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        // Terraform's hints then name no commands to type: nobody is at a prompt.
        .env("TF_IN_AUTOMATION", "1");
    command
}

/// Runs `exec args` in `dir`, its stdout and stderr on our stdout; its exit code (128 + the
/// signal's number when a signal ended it).
///
/// Terraform runs in a process group of its own, and SIGINT or SIGTERM sent to the deployer is
/// passed on to it once per signal received: terraform then stops gracefully (it finishes or
/// cancels what is running and writes its state), and the deployer exits with its code. (In
/// the deployer's group, a Ctrl-C would reach terraform twice, and its second interrupt means
/// "exit now, state or not".)
fn passthrough(exec: &Path, dir: &Path, args: &[&str]) -> Result<i32, TerraformError> {
    let spawn_error = |source| TerraformError::Spawn {
        exec: exec.to_owned(),
        source,
    };
    let stdout = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .map_err(spawn_error)?;
    log::info(format!("running terraform {}", args.join(" ")))
        .field("exec", exec.display().to_string())
        .field("dir", dir.display().to_string())
        .emit();
    let mut command = command(exec, dir, args);
    command.stderr(Stdio::from(stdout)).process_group(0);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(spawn_error)?;
    let status = runtime
        .block_on(run_forwarding_signals(tokio::process::Command::from(
            command,
        )))
        .map_err(spawn_error)?;
    let code = exit_code(status);
    let event = if status.success() {
        log::info(format!("terraform {} succeeded", args[0]))
    } else {
        log::error(format!("terraform {} failed", args[0]))
    };
    event.field("exit_code", code).emit();
    Ok(code)
}

async fn run_forwarding_signals(
    mut command: tokio::process::Command,
) -> std::io::Result<ExitStatus> {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    use tokio::signal::unix::{SignalKind, signal};

    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut child = command.spawn()?;
    let pid = child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .map(Pid::from_raw);
    loop {
        let received = tokio::select! {
            status = child.wait() => return status,
            _ = interrupt.recv() => Signal::SIGINT,
            _ = terminate.recv() => Signal::SIGTERM,
        };
        log::warn(format!(
            "received {received}: passing it on to terraform, which stops gracefully"
        ))
        .emit();
        if let Some(pid) = pid {
            // Gone already: `wait` answers next.
            let _ = kill(pid, received);
        }
    }
}

fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|signal| 128 + signal))
        .unwrap_or(1)
}

/// `deployer up` (`apply`) or `deployer down` (`destroy`): init, then the command; the exit code.
pub(crate) fn apply_or_destroy(
    exec: &Path,
    dir: &Path,
    destroy: bool,
) -> Result<i32, TerraformError> {
    check_dir(dir)?;
    let code = passthrough(exec, dir, &["init", "-input=false"])?;
    if code != 0 {
        return Ok(code);
    }
    let command = if destroy { "destroy" } else { "apply" };
    passthrough(exec, dir, &[command, "-auto-approve", "-input=false"])
}

/// `terraform show -json` in `dir`: the JSON text.
pub(crate) fn show_json(exec: &Path, dir: &Path) -> Result<Vec<u8>, TerraformError> {
    check_dir(dir)?;
    if !dir.join(".terraform").exists() {
        let code = passthrough(exec, dir, &["init", "-input=false"])?;
        if code != 0 {
            return Err(TerraformError::Failed {
                exec: exec.to_owned(),
                command: "init -input=false".to_owned(),
                dir: dir.to_owned(),
                status: ExitStatus::from_raw(code << 8),
                stderr: String::new(),
            });
        }
    }
    let args = ["show", "-json", "-no-color"];
    log::debug("reading the output with terraform show -json")
        .field("exec", exec.display().to_string())
        .field("dir", dir.display().to_string())
        .emit();
    let output = command(exec, dir, &args)
        .output()
        .map_err(|source| TerraformError::Spawn {
            exec: exec.to_owned(),
            source,
        })?;
    if !output.status.success() {
        return Err(TerraformError::Failed {
            exec: exec.to_owned(),
            command: args.join(" "),
            dir: dir.to_owned(),
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    Ok(output.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_wins_and_a_missing_binary_is_named() {
        let given = Path::new("/opt/tofu/bin/tofu");
        assert_eq!(exec_path(Some(given)).unwrap(), given);
        assert!(
            TerraformError::NotFound
                .to_string()
                .contains("--tf-exec-path")
        );
    }

    #[test]
    fn long_stderr_keeps_its_end() {
        let long = format!("{}the reason", "x".repeat(5000));
        let tail = stderr_tail(&long);
        assert!(tail.ends_with("the reason"));
        assert!(tail.len() < 2100);
        assert_eq!(stderr_tail("  \n"), "");
    }
}
