//! The data directory: made private, opened for containers once what is inside is private on
//! its own, and locked by one server at a time.

use std::path::Path;

use anyhow::{Context, bail};

/// The data directory, created private (`0700`); `runway server` opens the way through it
/// once what is inside is private on its own.
pub fn create_data_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))
}

/// Lets others search the data directory (`go+x`, not list it: `0711` from `0700`): a
/// container's root (another host id, in its user namespace) goes through it to reach its
/// image's rootfs under `runtime/images/`. What is private inside is private itself: the database, the master key
/// and the CA's key are `0600`, the runtime's `instances/` `0700`, unpacked images behind
/// `0710` with the container's group. Other bits the operator set are kept; a failure is
/// only a warning, as processes still run and only images would not start.
pub(crate) fn open_data_dir(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let opened = std::fs::metadata(dir).and_then(|meta| {
        let mode = meta.permissions().mode();
        if mode & 0o001 == 0 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o011))
        } else {
            Ok(())
        }
    });
    if let Err(e) = opened {
        tracing::warn!(
            dir = %dir.display(),
            error = %e,
            "containers cannot search the data directory; images will not start until others \
             may search it (chmod o+x)"
        );
    }
}

/// `ENOLCK` on Linux: no locks available.
const ENOLCK: i32 = 37;

/// Locks `server.lock` in the data directory (and writes this process's id in it), so a
/// second server on the same directory is refused instead of acting on the same instances.
/// The kernel releases the lock when the process ends, however it ends.
pub(crate) fn lock_data_dir(dir: &Path) -> anyhow::Result<std::fs::File> {
    use std::io::{Read, Seek, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join("server.lock");
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        // Some file systems (NFS without a lock daemon) have no locks: run, but say so.
        Err(std::fs::TryLockError::Error(e))
            if e.kind() == std::io::ErrorKind::Unsupported || e.raw_os_error() == Some(ENOLCK) =>
        {
            tracing::warn!(
                path = %path.display(),
                error = %e,
                "the data directory cannot be locked; a second server on it would not be refused"
            );
        }
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = match holder.trim() {
                "" => String::new(),
                pid => format!(" (pid {pid})"),
            };
            bail!(
                "another runway server is using the data directory {}{holder}; stop it, or give \
                 this one another --data-dir",
                dir.display()
            );
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(e).with_context(|| format!("cannot lock {}", path.display()));
        }
    }
    file.set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| writeln!(file, "{}", std::process::id()))
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(file)
}
