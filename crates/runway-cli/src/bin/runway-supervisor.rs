//! `runway-supervisor STATE_DIR`: supervises one instance, reading its spec as JSON from stdin.
//!
//! The same as the hidden `runway supervise`, in a binary of its own: a supervisor runs for as
//! long as its instance does, one per instance, so it carries only the runtime's code and stays
//! small in memory (the `runway` binary's relocated data alone is several MiB per process).

use std::process::ExitCode;

fn main() -> ExitCode {
    use runway_runtime::supervisor::{WATCHDOG_ARG, main, watchdog_main};
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    let code = match args.as_slice() {
        [flag] if flag == "--version" => {
            println!("runway-supervisor {}", runway_build::LINE);
            return ExitCode::SUCCESS;
        }
        [state_dir] => main(std::path::Path::new(state_dir)),
        [flag, state_dir] if flag == WATCHDOG_ARG => watchdog_main(std::path::Path::new(state_dir)),
        _ => {
            eprintln!(
                "usage: runway-supervisor STATE_DIR   (the instance spec is read from stdin)"
            );
            return ExitCode::from(2);
        }
    };
    if code == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
