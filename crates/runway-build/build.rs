//! Puts the commit and the date a binary is built from into `RUNWAY_BUILD_LINE` (see the
//! crate's documentation): `scripts/release` sets `RUNWAY_BUILD_COMMIT` and
//! `RUNWAY_BUILD_DATE`; a GitLab CI job has `CI_COMMIT_SHA`; a developer's build has neither.

fn main() {
    for name in ["RUNWAY_BUILD_COMMIT", "RUNWAY_BUILD_DATE", "CI_COMMIT_SHA"] {
        println!("cargo:rerun-if-env-changed={name}");
    }
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let commit = var("RUNWAY_BUILD_COMMIT").or_else(|| var("CI_COMMIT_SHA"));
    let date = var("RUNWAY_BUILD_DATE");
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let line = match (&commit, &date) {
        (Some(commit), Some(date)) => format!("{version}, commit {commit}, {date}"),
        (Some(commit), None) => format!("{version}, commit {commit}"),
        (None, _) => format!("{version}, commit unknown (not a release build)"),
    };
    println!("cargo:rustc-env=RUNWAY_BUILD_LINE={line}");
    println!(
        "cargo:rustc-env=RUNWAY_BUILD_COMMIT_OR_EMPTY={}",
        commit.unwrap_or_default()
    );
    println!(
        "cargo:rustc-env=RUNWAY_BUILD_DATE_OR_EMPTY={}",
        date.unwrap_or_default()
    );
}
