//! Approvals (SPEC section 17): tool calls that wait for a person's yes in the chat they
//! came from, turns that read untrusted content asking first, and the "always" choices
//! people made.
//!
//! Plugs into the engine as a policy gate ([`ApprovalGate`]: before every tool call) and a
//! component ([`ApprovalsComponent`]: `/approvals`, the turn's taint handle); decisions
//! come in through the ingress (`/approve`, `/deny`, a platform's button, the webhook's
//! signed call) to [`Approvals::decide`]. Requests, decisions and choices live in
//! `storage::ApprovalStore`. Knows the policy and the call's facts; not the tool loop, not a
//! platform's buttons (channels render `OutboundKind::Approval` themselves).

mod component;
mod gate;
mod policy;
mod prompt;
mod service;
mod taint;

pub use component::{ApprovalsComponent, COMMANDS};
pub use gate::ApprovalGate;
pub use service::Approvals;
pub use taint::Taint;
