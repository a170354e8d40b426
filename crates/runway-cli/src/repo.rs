//! Finding a repository's services: `.runway/runway.yml` with its `runway-<env>.yml` and
//! `env-<env>.yml` siblings, and `.runway/<service-id>/` for each further service.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use runway_manifest::{Service, ServiceFiles, SourceFile};

/// A repository's services as found on disk, with each file's text kept for error snippets.
#[derive(Debug, Default)]
pub(crate) struct Repository {
    /// The `.runway` directory.
    pub(crate) runway_dir: PathBuf,
    /// Services in order of id (the root service, id "", first).
    pub(crate) services: Vec<ServiceFiles>,
    /// File texts by display name.
    pub(crate) texts: BTreeMap<String, String>,
    /// Files that look meant for Runway but are not read, with the reason.
    pub(crate) ignored: Vec<(String, String)>,
}

/// Finds the services under `path`: a repository root holding `.runway/`, the `.runway`
/// directory itself, a service directory inside it, or one manifest file.
pub(crate) fn discover(path: &Path) -> anyhow::Result<Repository> {
    let meta = fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    if meta.is_file() {
        return single_file(path);
    }
    let runway_dir = if path.file_name().is_some_and(|n| n == ".runway") {
        path.to_path_buf()
    } else if path.join(".runway").is_dir() {
        path.join(".runway")
    } else if path
        .parent()
        .and_then(Path::file_name)
        .is_some_and(|n| n == ".runway")
    {
        // A service directory, `.runway/<service-id>`.
        let mut repo = Repository {
            runway_dir: path.to_path_buf(),
            ..Repository::default()
        };
        if let Some(service) = read_service_dir(path, dir_name(path), &mut repo)? {
            repo.services.push(service);
        }
        return non_empty(repo, path);
    } else {
        bail!(
            "no .runway directory in {}: run `runway init` there to create .runway/runway.yml, or name the repository root",
            display(path)
        );
    };

    let mut repo = Repository {
        runway_dir: runway_dir.clone(),
        ..Repository::default()
    };
    if let Some(root) = read_service_dir(&runway_dir, String::new(), &mut repo)? {
        repo.services.push(root);
    }
    for dir in sorted_entries(&runway_dir, Path::is_dir)? {
        if let Some(service) = read_service_dir(&dir, dir_name(&dir), &mut repo)? {
            repo.services.push(service);
        }
    }
    non_empty(repo, &runway_dir)
}

fn non_empty(repo: Repository, dir: &Path) -> anyhow::Result<Repository> {
    if repo.services.is_empty() {
        if let Some((file, hint)) = repo.ignored.first() {
            bail!("no runway.yml in {}, only {file}: {hint}", display(dir));
        }
        bail!(
            "no runway.yml in {}: run `runway init` to create one",
            display(dir)
        );
    }
    Ok(repo)
}

fn single_file(path: &Path) -> anyhow::Result<Repository> {
    let name = display(path);
    let text = read(path)?;
    let mut repo = Repository {
        runway_dir: path.parent().unwrap_or(Path::new(".")).to_path_buf(),
        ..Repository::default()
    };
    repo.texts.insert(name.clone(), text.clone());
    repo.services.push(ServiceFiles {
        base: Some(SourceFile::new(name, text)),
        ..ServiceFiles::default()
    });
    Ok(repo)
}

/// Reads one directory's `runway.yml`, `runway-<env>.yml` and `env-<env>.yml`. `None` when it
/// holds none of them.
fn read_service_dir(
    dir: &Path,
    id: String,
    repo: &mut Repository,
) -> anyhow::Result<Option<ServiceFiles>> {
    let mut service = ServiceFiles {
        id,
        ..ServiceFiles::default()
    };
    let mut yaml_base = None;
    for path in sorted_entries(dir, Path::is_file)? {
        let Some(file_name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let (stem, extension) = file_name.rsplit_once('.').unwrap_or((file_name, ""));
        let known_stem =
            stem == "runway" || stem.starts_with("runway-") || stem.starts_with("env-");
        if extension == "yaml" && known_stem {
            if stem == "runway" {
                yaml_base = Some(display(&path));
            }
            repo.ignored.push((
                display(&path),
                format!("Runway reads `.yml` files: rename it to {stem}.yml"),
            ));
            continue;
        }
        if extension != "yml" || !known_stem {
            continue;
        }
        let name = display(&path);
        let mut source = || -> anyhow::Result<SourceFile> {
            let text = read(&path)?;
            repo.texts.insert(name.clone(), text.clone());
            Ok(SourceFile::new(name.clone(), text))
        };
        if stem == "runway" {
            service.base = Some(source()?);
        } else if let Some(env) = stem.strip_prefix("runway-") {
            service.overrides.insert(env.to_owned(), source()?);
        } else if let Some(env) = stem.strip_prefix("env-") {
            service.env_files.insert(env.to_owned(), source()?);
        }
    }
    let empty =
        service.base.is_none() && service.overrides.is_empty() && service.env_files.is_empty();
    // Overrides beside a `runway.yaml`: one error naming the file to rename, not one per
    // override about the fields a base would have given it.
    if let (None, Some(yaml), false) = (&service.base, yaml_base, empty) {
        bail!(
            "{yaml} is not read: Runway reads `.yml` files: rename it to runway.yml (the \
             runway-<env>.yml and env-<env>.yml beside it override it)"
        );
    }
    Ok((!empty).then_some(service))
}

/// The entries of `dir` that `keep` accepts, sorted, so that discovery order is stable.
fn sorted_entries(dir: &Path, keep: fn(&Path) -> bool) -> anyhow::Result<Vec<PathBuf>> {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", display(dir)))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| keep(p))
        .collect();
    entries.sort();
    Ok(entries)
}

/// A directory's own name: a service's id.
fn dir_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn read(path: &Path) -> anyhow::Result<String> {
    let bytes = fs::read(path).with_context(|| format!("cannot read {}", display(path)))?;
    String::from_utf8(bytes).with_context(|| format!("{} is not UTF-8 text", display(path)))
}

/// Every service of the repository, loaded and valid, keeping those `wanted` accepts; `None`
/// when a manifest is invalid, after printing its errors and where to learn more.
pub(crate) fn valid_services(
    repo: &Repository,
    path: &Path,
    wanted: impl Fn(&Service) -> bool,
) -> Option<Vec<Service>> {
    let mut services = Vec::new();
    for files in &repo.services {
        let loaded = runway_manifest::load(files);
        let Some(service) = loaded.service else {
            for d in loaded.diagnostics.iter().filter(|d| d.is_error()) {
                eprintln!("{d}");
            }
            eprintln!(
                "error: the manifest is invalid; `runway validate {}` explains",
                display(path)
            );
            return None;
        };
        if wanted(&service) {
            services.push(service);
        }
    }
    Some(services)
}

/// Whether `service` is the one named by `--service` (by name or id); any when none is named.
pub(crate) fn is_named(service: &Service, name: Option<&str>) -> bool {
    name.is_none_or(|name| name == service.name() || name == service.id)
}

/// A path as shown to the user: without a leading `./`.
pub(crate) fn display(path: &Path) -> String {
    let text = path.display().to_string();
    text.strip_prefix("./").map(str::to_owned).unwrap_or(text)
}
