//! What a Runway binary says of its build, the same in each (`runway --version`,
//! `runway-ingress --version`, `runway-supervisor --version`, `deployer version`): the
//! workspace's version, the commit and the date. `scripts/release` gives the commit and the
//! commit's date (`RUNWAY_BUILD_COMMIT`, `RUNWAY_BUILD_DATE`), so two release builds of one
//! commit say the same; a GitLab CI job's `CI_COMMIT_SHA` is taken when the release's is not
//! given; a developer's build says its commit is unknown. Nothing here reads the clock or
//! git: a build is a function of its source and these variables.

/// `0.1.0, commit 5fb8d67…, 2026-11-29`, as `--version` prints it after the program's name.
pub const LINE: &str = env!("RUNWAY_BUILD_LINE");

/// The commit it was built from, or `None` for a developer's build.
pub fn commit() -> Option<&'static str> {
    Some(env!("RUNWAY_BUILD_COMMIT_OR_EMPTY")).filter(|c| !c.is_empty())
}

/// The date of the commit it was built from (`YYYY-MM-DD`), when the release gave it.
pub fn date() -> Option<&'static str> {
    Some(env!("RUNWAY_BUILD_DATE_OR_EMPTY")).filter(|d| !d.is_empty())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_line_starts_with_the_version_and_names_the_commit() {
        assert!(super::LINE.starts_with(env!("CARGO_PKG_VERSION")));
        assert!(super::LINE.contains(", commit "));
        assert_eq!(
            super::commit().is_some(),
            !super::LINE.contains("commit unknown")
        );
    }
}
