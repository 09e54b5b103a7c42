//! Opening one server's connection with the official SDK (`rmcp`): a stdio child (its stderr
//! read into our log line by line, its pid kept in `children.rs` so a later start can end it
//! after a kill -9) or a streamable-HTTP endpoint (its headers from the environment), then
//! the protocol's handshake, bounded by the server's time limit. Knows nothing of tools.

use super::children::Children;
use crate::config::McpServerConfig;
use rmcp::model::{ClientInfo, Implementation};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use secrecy::{ExposeSecret, SecretString};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncBufReadExt;
use tokio::sync::Notify;

/// What a server tells us between calls: its tool list changed.
#[derive(Clone)]
pub(super) struct Listener {
    pub(super) tools_changed: Arc<Notify>,
}

impl ClientHandler for Listener {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.tools_changed.notify_one();
        std::future::ready(())
    }

    fn get_info(&self) -> ClientInfo {
        ClientInfo {
            client_info: Implementation {
                name: "ferroclaw".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                ..Implementation::default()
            },
            ..ClientInfo::default()
        }
    }
}

pub(super) type Connection = RunningService<RoleClient, Listener>;

/// Secrets this server's config names, by the key naming each variable.
pub(super) type ServerSecrets = BTreeMap<String, SecretString>;

/// Connect to server `id` and finish the handshake within its time limit.
pub(super) async fn open(
    id: &str,
    config: &McpServerConfig,
    secrets: &ServerSecrets,
    listener: Listener,
    children: &Children,
) -> Result<Connection, String> {
    let limit = Duration::from_secs(config.timeout_secs);
    let handshake = async {
        if config.url.is_empty() {
            let transport = stdio(id, config, secrets, children)?;
            listener
                .serve(transport)
                .await
                .map_err(|e| format!("the handshake failed: {e}"))
        } else {
            let transport = http(id, config, secrets)?;
            listener
                .serve(transport)
                .await
                .map_err(|e| format!("the handshake failed: {e}"))
        }
    };
    tokio::time::timeout(limit, handshake)
        .await
        .map_err(|_| format!("no answer to the handshake within {} s", limit.as_secs()))?
}

fn stdio(
    id: &str,
    config: &McpServerConfig,
    secrets: &ServerSecrets,
    children: &Children,
) -> Result<rmcp::transport::TokioChildProcess, String> {
    let mut command = tokio::process::Command::new(&config.command);
    command.args(&config.args).envs(&config.env);
    for name in config.secret_env.keys() {
        let key = format!("mcp.servers.{id}.secret_env.{name}");
        if let Some(value) = secrets.get(&key) {
            command.env(name, value.expose_secret());
        }
    }
    if !config.cwd.is_empty() {
        command.current_dir(&config.cwd);
    }
    command.kill_on_drop(true);
    let (transport, stderr) = rmcp::transport::TokioChildProcess::builder(command)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("`{}` could not be started: {e}", config.command))?;
    if let Some(pid) = transport.id() {
        children.started(pid);
    }
    if let Some(stderr) = stderr {
        let server = id.to_string();
        // Ends when the child closes its stderr (it exited or was killed).
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::info!(server = %server, "mcp stderr: {line}");
            }
        });
    }
    Ok(transport)
}

fn http(
    id: &str,
    config: &McpServerConfig,
    secrets: &ServerSecrets,
) -> Result<rmcp::transport::StreamableHttpClientTransport<reqwest::Client>, String> {
    let mut headers = reqwest::header::HeaderMap::new();
    for header in config.headers_env.keys() {
        let key = format!("mcp.servers.{id}.headers_env.{header}");
        let Some(value) = secrets.get(&key) else {
            continue;
        };
        let name = reqwest::header::HeaderName::from_bytes(header.as_bytes())
            .map_err(|_| format!("`{header}` is not a header name ({key})"))?;
        let mut value = reqwest::header::HeaderValue::from_str(value.expose_secret())
            .map_err(|_| format!("the value of {key} is not a header value"))?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    let client = reqwest::Client::builder()
        .default_headers(headers)
        .connect_timeout(Duration::from_secs(10))
        .no_proxy()
        .build()
        .map_err(|e| format!("HTTP client: {e}"))?;
    let transport_config =
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            config.url.as_str(),
        );
    Ok(rmcp::transport::StreamableHttpClientTransport::with_client(
        client,
        transport_config,
    ))
}
