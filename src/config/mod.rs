//! The one typed configuration tree (SPEC section 2).
//!
//! Owns loading (TOML file, then the `FERROCLAW__SECTION__KEY` environment overlay, layered
//! by `figment`, read into the typed tree through `serde_json`), validation into typed
//! values, secret resolution (`*_env` keys name the variable holding the secret; values are
//! wrapped in [`secrecy::SecretString`]) and the redacted rendering printed by `config
//! check`. It does not start anything.

mod alerts;
mod approvals;
mod bounds;
mod cost;
mod egress;
mod load;
mod mcp;
mod memory;
mod render;
mod schema;

pub use alerts::AlertsConfig;
pub use approvals::{ApprovalsConfig, ApprovalsOverride};
pub use cost::{BudgetsConfig, LimitsConfig, PriceConfig};
pub use egress::{EgressConfig, EgressMode, host_pattern};
pub use load::{ConfigError, Known, LoadedConfig, Problem, Secrets, check_agent_tools, load};
pub use mcp::{McpConfig, McpServerConfig, McpStart};
pub use memory::MemoryConfig;
pub use render::render_redacted;
pub use schema::*;
