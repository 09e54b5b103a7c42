//! Running shell commands for the `exec` tool (SPEC sections 2, 7, 8): in a Docker container
//! per session or sandboxed subagent run ([`docker`]), or on the host when the operator allows
//! it ([`host`]). Both capture output with a cap ([`output`]), stop a command at its timeout
//! and say so in the result.
//!
//! Owns containers and processes, the `exec` tool and its component. The contract it
//! implements is `crate::exec` (the persona decides who may exec where and hands an owner
//! key: a session key or a run id). Must not know the engine, channels or storage.

mod component;
pub mod docker;
mod exec_tool;
pub mod host;
mod output;

pub use crate::exec::{
    Availability, ExecOutcome, ExecPlace, ExecRequest, OUTPUT_CAP, OutputSink, Sandbox,
    SandboxError,
};
pub use component::SandboxComponent;
pub use docker::DockerSandbox;
pub use exec_tool::ExecTool;
pub use output::Capture;
