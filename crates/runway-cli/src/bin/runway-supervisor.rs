//! `runway-supervisor STATE_DIR`: supervises one instance, reading its spec as JSON from stdin.
//!
//! The same as the hidden `runway supervise`, in a binary of its own: a supervisor runs for as
//! long as its instance does, one per instance, so it carries only the runtime's code and stays
//! small in memory (the `runway` binary's relocated data alone is several MiB per process).

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let (Some(state_dir), None) = (args.next(), args.next()) else {
        eprintln!("usage: runway-supervisor STATE_DIR   (the instance spec is read from stdin)");
        return ExitCode::from(2);
    };
    match runway_runtime::supervisor::main(std::path::Path::new(&state_dir)) {
        0 => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    }
}
