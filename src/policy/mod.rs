//! The one policy seam: who a turn runs as ([`Personas`], for a person's turn and a
//! subagent alike) and the [`Gate`] every tool call and every model call passes.
//!
//! Rules that limit what an agent may do (approvals, budgets, egress, the leak scan) plug in
//! here as gates built in the composition root; the engine calls them and does not know
//! which rules they hold. Knows no channel, no storage, no provider protocol.

mod gate;
mod persona;

pub use gate::{
    AllowAll, CallKind, CallScope, Gate, Gates, ModelCallFacts, ModelOutcome, RunFacts, RunKind,
    ToolCallFacts, Verdict,
};
pub use persona::{ChildChoice, Persona, PersonaParts, Personas, RunPersona, Teammates};
