//! Records, for `deployer version`, the target triple and the commit given at build time.

fn main() {
    println!("cargo:rerun-if-env-changed=DEPLOYER_COMMIT");
    println!("cargo:rerun-if-env-changed=CI_COMMIT_SHA");
    let commit = std::env::var("DEPLOYER_COMMIT")
        .or_else(|_| std::env::var("CI_COMMIT_SHA"))
        .unwrap_or_default();
    println!("cargo:rustc-env=DEPLOYER_BUILD_COMMIT={commit}");
    let target = std::env::var("TARGET").unwrap_or_default();
    println!("cargo:rustc-env=DEPLOYER_BUILD_TARGET={target}");
}
