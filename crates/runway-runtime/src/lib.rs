//! Runway's local runtime.
//!
//! [`process`] is the supervisor's core: it starts one process, signals it and records how it
//! ended. The instance supervisor and `runway wrapper` are both built on it.

pub mod process;
