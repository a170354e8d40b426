//! OCI images for the Runway local runtime: pull an image by digest into a content-addressed
//! cache, unpack its layers safely, and build an OCI runtime bundle that `runc` runs.
//!
//! ```no_run
//! # async fn example() -> Result<(), runway_oci::OciError> {
//! use runway_oci::{BundleOptions, PullOptions, Store, build_bundle};
//!
//! let store = Store::open("/var/lib/runway/images")?;
//! let image = store.pull("registry.example/team/app:1.4", &PullOptions::default()).await?;
//! // Record `image.pinned` (`registry.example/team/app@sha256:...`), not the tag.
//! let opts = BundleOptions {
//!     env: vec![("PORT".into(), "8080".into())],
//!     memory_limit_bytes: Some(256 << 20),
//!     cpu_millis: Some(500),
//!     cgroups_path: Some("/runway/app-1".into()),
//!     ..BundleOptions::default()
//! };
//! let bundle = build_bundle("/run/runway/app-1".as_ref(), &image.config, &image.rootfs, &opts)?;
//! // runc run --bundle /run/runway/app-1 app-1
//! # let _ = bundle; Ok(()) }
//! ```
//!
//! # Pulling
//!
//! [`Store::pull`] speaks the OCI distribution API through `oci-client` (rustls with the `ring`
//! provider). It resolves a tag to a manifest digest once and returns it in [`Image::pinned`];
//! a reference by digest (`name@sha256:...`) is what the runtime should record and pull again.
//! OCI image manifests, Docker v2 schema 2 manifests, OCI indexes and Docker manifest lists are
//! understood; from an index the first manifest for [`PullOptions::platform`] (the host's by
//! default) is taken. Registries are HTTPS only, except those listed in
//! [`PullOptions::insecure_registries`]. HTTPS trusts the system's roots and the PEM
//! certificates in [`PullOptions::extra_roots`] (such as the CA of Runway's own registry); a
//! certificate signed by neither is an [`OciError::Unreachable`] that says so, and roots that
//! are not certificates an [`OciError::ExtraRoots`], before any request. Credentials are explicit ([`Credentials::Basic`]) or
//! come from a docker-style `config.json` (`auths.<registry>.auth`, base64 `user:password`;
//! credential helpers are not run). Every pull is bounded by [`PullOptions::timeout`].
//!
//! [`Store::fetch`] fetches an image's content into the cache without unpacking it, for copying
//! it into another registry (Runway's own, so that a revision outlives the upstream image): the
//! index and every manifest it lists ([`Platforms::All`]), or only the image manifest
//! [`PullOptions::platform`] picks ([`Platforms::Selected`], pinned to that manifest, as a
//! registry refuses an index whose other manifests it lacks). [`Fetched`] names the pinned
//! reference, every manifest with its media type and bytes (an index after the manifests it
//! lists) and every config and layer as a verified file under `blobs/`, each once. It goes
//! through the same verified downloads as a pull; cached blobs are re-hashed instead of
//! fetched, so a reference by digest already fetched makes no request. Configs and layers are
//! fetched whatever their media types: content to copy need not be content this crate runs.
//!
//! Every blob is verified before it becomes visible: manifests and configs against the digest
//! they were asked for, layers against their digest and size while they download, and the
//! uncompressed layers against the config's `rootfs.diff_ids` while they unpack. Content that
//! fails is an [`OciError::DigestMismatch`] and is not kept.
//!
//! # The cache
//!
//! A [`Store`] is a directory, shared by every instance on the machine:
//!
//! ```text
//! <root>/blobs/sha256/<hex>                             verified manifests, configs, layers
//! <root>/rootfs/idshift-<n>/sha256/<manifest hex>/      an image's unpacked filesystem
//! <root>/tmp/                                           work in progress
//! ```
//!
//! Blobs are downloaded to `tmp/` and renamed into place after verification; a rootfs is
//! unpacked into a directory under `tmp/` and renamed into place when complete. So nothing
//! half-written is ever visible, a failed pull leaves nothing behind, and two pulls of the same
//! image racing (tasks or processes) both succeed: the first rename wins and the loser discards
//! its copy. A pull by digest whose rootfs exists makes no network request and unpacks nothing
//! ([`Image::cache_hit`], [`Store::stats`]); a pull by tag costs one manifest request. Cached
//! manifests and configs are re-hashed when read, and layers when unpacked, so a corrupted
//! cache is detected and refetched rather than trusted. Leftovers in `tmp/` older than a day are
//! removed when a store opens.
//!
//! `idshift-<n>`: when the process is root, file ownership in the rootfs is the archive's plus
//! `n`, the host id that container id 0 maps to in the user namespace (100000 by default), so
//! files keep their owners inside the container. A bundle without a user namespace needs a
//! rootfs pulled with `id_shift: 0`; [`bundle_spec`] refuses a mismatch.
//!
//! Modes: `blobs/` and `tmp/` are the store's user's alone (`0700`). The root and `rootfs/` are
//! `0711`, `idshift-<n>/` is `0710` with group `n` and its `sha256/` `0711`, because the OCI
//! runtime mounts a rootfs from inside the user namespace, as host id `n`, which must be able to
//! search every directory on the way, and no other user may list or read an unpacked image
//! (`0700` for both without a shift). [`build_bundle`] checks that the way is open
//! ([`reachable_by`]) and names the directory that stops it, such as a private `0700` state
//! directory above the store.
//!
//! # Unpacking rules
//!
//! Layers may be `tar`, `tar+gzip` or `tar+zstd` (Docker's and OCI's media types, including
//! non-distributable ones).
//!
//! - Entry paths are relative to the root (a leading `/` or `./` is dropped); any `..`
//!   component is refused.
//! - No symlink already in the rootfs is ever followed while writing: a parent directory that is
//!   a symlink is refused (the classic `evil -> /etc`, then `evil/passwd`), an entry replaces
//!   whatever is at its path instead of opening it, and files are created with `O_EXCL`.
//! - Symlinks themselves may point anywhere (absolute targets are normal in images): they are
//!   stored, never followed here, and resolve inside the container's root. Hard-link targets
//!   follow the entry-path rules, must exist, and must not be reached through a symlink.
//! - Character and block devices are refused with [`OciError::UnsafeEntry`]; FIFOs and other
//!   special types are skipped.
//! - Whiteouts: `.wh.NAME` deletes `NAME` from lower layers, `.wh..wh..opq` empties its
//!   directory of lower layers' content; the markers are not written.
//! - Modes (with setuid/setgid/sticky) and mtimes are kept; ownership is kept as described
//!   above when running as root; extended attributes (file capabilities) are dropped.
//! - Mount points the bundle needs (`/proc`, `/sys`, `/dev`, `/tmp`, `/run`, and empty
//!   `/etc/hosts`, `/etc/resolv.conf`, `/etc/hostname` when missing) are created at unpack
//!   time, so the runtime never writes into the shared rootfs.
//!
//! # Bundles
//!
//! [`build_bundle`] writes `config.json` for an image and a [`BundleOptions`]. `root.path` is the
//! cached rootfs itself, mounted read-only, so every instance shares it. Defaults:
//!
//! - command: `command` replaces `ENTRYPOINT` and `args` replaces `CMD` (Kubernetes semantics);
//!   env: the image's with the caller's laid over it (caller wins), plus `PATH` and `HOME` if
//!   unset; working dir and user from the image unless given (`uid`, `uid:gid`, `name`,
//!   `name:group`, names resolved from the rootfs's `/etc/passwd` and `/etc/group`);
//! - namespaces: user (container ids 0..65536 → host 100000.., [`BundleOptions::user_namespace`]
//!   turns it off), mount, pid, ipc, uts. No network namespace: the instance uses the host's
//!   network and listens on the port it is given (in `PORT`); the host's `/etc/resolv.conf` and
//!   `/etc/hosts` are bound read-only;
//! - capabilities: none (all five sets empty). [`BundleOptions::capabilities`] adds some, for
//!   uid 0 only; note that `CAP_NET_BIND_SERVICE` is useless inside a user namespace when the
//!   network namespace is the host's; `noNewPrivileges` is set;
//! - mounts: `/proc`; `/dev` (tmpfs, runc adds the standard device nodes), `/dev/pts`,
//!   `/dev/shm`, `/dev/mqueue`; `/sys` bound read-only from the host (sysfs cannot be mounted in
//!   a user namespace without a network namespace); the container's cgroup at `/sys/fs/cgroup`,
//!   read-only; tmpfs at `/tmp` and `/run`; runc's default masked and read-only `/proc` paths;
//! - resources: `memory.limit` from [`BundleOptions::memory_limit_bytes`], and memory+swap equal
//!   to it (no swap, so exceeding the limit is an OOM kill) on cgroup v2 and on v1 with swap
//!   accounting; on v1 without it (no `memory.memsw.*` files) swap is left unset, or runc would
//!   fail. CPU: quota `millis * 100` µs per 100 000 µs period. All devices denied but runc's
//!   defaults. The cgroups path is the caller's.
//!
//! The same bundle runs under `crun` too, except that crun (1.8) refuses hybrid cgroup hosts
//! ("cgroups in hybrid mode not supported") while the v2 hierarchy is mounted at
//! `/sys/fs/cgroup/unified`; running it in a mount namespace where that is unmounted works
//! (`unshare -m sh -c 'umount /sys/fs/cgroup/unified; crun run ...'`).
//!
//! # Files
//!
//! OCI images, no processes:
//!
//! - `store.rs`: pulls through `oci-client` into a content-addressed cache (blobs by digest, one
//!   unpacked rootfs per image manifest, everything renamed into place only when verified and
//!   complete); `fetch`, the same downloads without unpacking, for mirroring; `registry_allowed`,
//!   the registry allow-list checked before any connection; `extra_roots`, the PEM roots
//!   handed to the client.
//! - `unpack.rs`: applies layers (tar, gzip, zstd, whiteouts), refusing `..`, writes through
//!   symlinks and device nodes.
//! - `build.rs`: images built from a directory on a base image, without Docker (`build`),
//!   pushed with `Store::push`.
//! - `source.rs`: code snapshots (`pack`, used by the CLI; `SourceStore`, which the server takes
//!   uploads into and collects from).
//! - `image.rs`: reads manifests (with their media types), indexes and image configs.
//! - `bundle.rs` and `spec.rs`: write the OCI runtime bundle (`build_bundle`).
//! - `auth.rs`: registry credentials. `digest.rs`: sha256 digests. `error.rs`: the crate's error.
//! - `testing.rs` (feature `test-support`): starts a real registry (plain HTTP, or HTTPS over
//!   another's storage) and builds busybox images with umoci and skopeo.

// Library code logs through `tracing` (runway-log sets up where it goes); it never prints.
#![deny(clippy::print_stderr)]

mod auth;
pub mod build;
mod bundle;
mod digest;
mod error;
mod image;
pub mod source;
pub mod spec;
mod store;
mod unpack;

#[cfg(feature = "test-support")]
pub mod testing;

pub use auth::Credentials;
pub use bundle::{
    Bundle, BundleOptions, CPU_PERIOD_US, CgroupVersion, DEFAULT_ID_RANGE, DEFAULT_PATH,
    UserNamespace, build_bundle, bundle_spec, check_program, reachable_by, write_bundle,
};
pub use digest::Digest;
pub use error::{BlobKind, OciError, Result};
pub use image::{ImageConfig, Platform};
pub use store::{
    BlobSource, DEFAULT_HOST_ID_BASE, Fetched, FetchedBlob, FetchedManifest, Image, Platforms,
    PullOptions, PushBlob, Pushed, Rootfs, SignatureLayer, Signatures, Store, StoreStats,
    registry_allowed,
};
