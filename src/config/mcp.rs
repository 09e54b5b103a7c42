//! The MCP keys (SPEC section 19): `[mcp.servers.ID]`, a stdio server (`command`, `args`,
//! `env`, `secret_env`, `cwd`) or a streamable-HTTP one (`url`, `headers_env`), and what is
//! taken from it (`tools`, `timeout_secs`, `max_result_bytes`, `start`). Secrets are named by
//! the variables that hold them, never written here.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `[mcp]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpConfig {
    pub servers: BTreeMap<String, McpServerConfig>,
}

/// When a server's connection is opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum McpStart {
    /// At start (in the background: start-up never waits for it).
    #[default]
    Eager,
    /// On the first turn that is offered tools (its tools appear once it has answered).
    Lazy,
}

/// `[mcp.servers.ID]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpServerConfig {
    /// A stdio server: the program run (with `args`, `env`, `cwd`).
    pub command: String,
    pub args: Vec<String>,
    /// Plain environment values for the program.
    pub env: BTreeMap<String, String>,
    /// `NAME = "HOST_ENV_VAR"`: the program's `NAME` set from the service's `HOST_ENV_VAR`.
    pub secret_env: BTreeMap<String, String>,
    pub cwd: String,
    /// A streamable-HTTP server's endpoint.
    pub url: String,
    /// `Header = "HOST_ENV_VAR"`: the variable holds the whole header value.
    pub headers_env: BTreeMap<String, String>,
    /// The server's tools offered (empty: all).
    pub tools: Vec<String>,
    pub timeout_secs: u64,
    /// A longer result is cut, saying so.
    pub max_result_bytes: usize,
    pub start: McpStart,
}

impl Default for McpServerConfig {
    fn default() -> Self {
        McpServerConfig {
            command: String::new(),
            args: Vec::new(),
            env: BTreeMap::new(),
            secret_env: BTreeMap::new(),
            cwd: String::new(),
            url: String::new(),
            headers_env: BTreeMap::new(),
            tools: Vec::new(),
            timeout_secs: 30,
            max_result_bytes: 65_536,
            start: McpStart::Eager,
        }
    }
}

impl McpConfig {
    /// What is wrong with the servers' keys: ids the tool names cannot carry, neither or both
    /// of `command` and `url`, a URL that is not http(s), zero limits.
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut found = Vec::new();
        for (id, server) in &self.servers {
            let key = |k: &str| format!("mcp.servers.{id}.{k}");
            if id.is_empty()
                || id.contains("__")
                || !id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                found.push((
                    format!("mcp.servers.{id}"),
                    "server ids may hold only letters, digits, '-' and '_' (not `__`)".into(),
                ));
            }
            match (server.command.is_empty(), server.url.is_empty()) {
                (true, true) => found.push((
                    format!("mcp.servers.{id}"),
                    "set `command` (a stdio server) or `url` (a streamable-HTTP server)".into(),
                )),
                (false, false) => found.push((
                    key("url"),
                    "a server has either `command` or `url`, not both".into(),
                )),
                (true, false) => {
                    let scheme = url::Url::parse(&server.url).map(|u| u.scheme().to_string());
                    if !matches!(scheme.as_deref(), Ok("http" | "https")) {
                        found.push((
                            key("url"),
                            format!("`{}` is not an http(s) URL", server.url),
                        ));
                    }
                }
                (false, true) => {}
            }
            if server.timeout_secs == 0 {
                found.push((key("timeout_secs"), "must be at least 1".into()));
            }
            if server.max_result_bytes == 0 {
                found.push((key("max_result_bytes"), "must be greater than 0".into()));
            }
        }
        found
    }

    /// The variables every configured server's secrets come from, with the key naming each.
    pub fn secret_vars(&self) -> Vec<(String, String)> {
        let mut vars = Vec::new();
        for (id, server) in &self.servers {
            for (name, var) in &server.secret_env {
                vars.push((format!("mcp.servers.{id}.secret_env.{name}"), var.clone()));
            }
            for (header, var) in &server.headers_env {
                vars.push((
                    format!("mcp.servers.{id}.headers_env.{header}"),
                    var.clone(),
                ));
            }
        }
        vars
    }
}
