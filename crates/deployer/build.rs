//! Records, for `deployer version`, the target triple it is built for (the commit and date
//! come from `runway-build`).

fn main() {
    let target = std::env::var("TARGET").unwrap_or_default();
    println!("cargo:rustc-env=DEPLOYER_BUILD_TARGET={target}");
}
