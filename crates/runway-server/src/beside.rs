//! The programs a server starts (the ingress, instances' supervisors): the small binary
//! installed beside this one, or this binary's own subcommand doing the same job.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};

/// The small binary `name` installed beside this one, with no arguments; else this binary
/// with its `subcommand` doing the same job (the supervisor, the ingress). With `version`, the
/// one beside is taken only when its `--version` says `name version` (the same build as the
/// code linked into this binary); another is named on stderr and left alone.
pub(crate) fn beside_or_own(
    name: &str,
    subcommand: &str,
    version: Option<&str>,
) -> anyhow::Result<(PathBuf, Vec<std::ffi::OsString>)> {
    let program = std::env::current_exe().context("cannot find the runway binary")?;
    Ok(pick_beside_or_own(&program, name, subcommand, version))
}

/// [`beside_or_own`] for `program`.
fn pick_beside_or_own(
    program: &Path,
    name: &str,
    subcommand: &str,
    version: Option<&str>,
) -> (PathBuf, Vec<std::ffi::OsString>) {
    let beside = program.with_file_name(name);
    let own = (program.to_path_buf(), vec![subcommand.into()]);
    if !beside.is_file() {
        return own;
    }
    let Some(version) = version else {
        return (beside, vec![]);
    };
    let expected = format!("{name} {version}");
    match version_of(&beside) {
        Ok(said) if said == expected => (beside, vec![]),
        said => {
            let said = said.unwrap_or_else(|error| runway_log::chain(error.as_ref()));
            tracing::warn!(
                program = %beside.display(),
                says = said,
                expected,
                instead = format!("{} {subcommand}", program.display()),
                "a program beside runway is of another build: not started (install both from \
                 one build)"
            );
            own
        }
    }
}

/// What `program --version` prints, its first line; bounded by [`VERSION_TIMEOUT`].
fn version_of(program: &Path) -> anyhow::Result<String> {
    const VERSION_TIMEOUT: Duration = Duration::from_secs(5);
    let mut child = std::process::Command::new(program)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .with_context(|| format!("cannot run {} --version", program.display()))?;
    let started = std::time::Instant::now();
    while child.try_wait()?.is_none() {
        if started.elapsed() > VERSION_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            bail!("no answer to --version in {} s", VERSION_TIMEOUT.as_secs());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut out = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        std::io::Read::read_to_string(&mut stdout, &mut out)?;
    }
    Ok(out.lines().next().unwrap_or_default().trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory with `runway` (never run) and, when given, `runway-ingress` printing
    /// `version` for `--version`.
    fn installed(version: Option<&str>) -> (tempfile::TempDir, PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let runway = dir.path().join("runway");
        std::fs::write(&runway, "").unwrap();
        if let Some(version) = version {
            let beside = dir.path().join("runway-ingress");
            std::fs::write(&beside, format!("#!/bin/sh\necho '{version}'\n")).unwrap();
            std::fs::set_permissions(&beside, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        (dir, runway)
    }

    #[test]
    fn the_binary_beside_is_started_only_when_it_is_of_this_build() {
        let this = format!("runway-ingress {}", runway_ingress::version());
        let (dir, runway) = installed(Some(&this));
        let picked = pick_beside_or_own(
            &runway,
            "runway-ingress",
            "ingress",
            Some(runway_ingress::version()),
        );
        assert_eq!(picked, (dir.path().join("runway-ingress"), vec![]));

        // An older build left beside a newer runway (same version, other source), one that
        // prints nothing, none at all: this binary's own subcommand.
        for beside in [
            Some("runway-ingress 0.1.0 (source 0000000000000000)"),
            Some(""),
            None,
        ] {
            let (_dir, runway) = installed(beside);
            let picked = pick_beside_or_own(
                &runway,
                "runway-ingress",
                "ingress",
                Some(runway_ingress::version()),
            );
            assert_eq!(
                picked,
                (runway.clone(), vec!["ingress".into()]),
                "{beside:?}"
            );
        }

        // Without a version to match (the runtime's supervisor), whatever is beside.
        let (dir, runway) = installed(Some("anything"));
        let picked = pick_beside_or_own(&runway, "runway-ingress", "ingress", None);
        assert_eq!(picked, (dir.path().join("runway-ingress"), vec![]));
    }
}
