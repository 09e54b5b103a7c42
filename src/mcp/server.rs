//! One configured server: its state (what `mcp list`, the admin API and the status page
//! show), its connection while it is up, and the supervisor task that opens it, lists its
//! tools, reads the list again on `notifications/tools/list_changed`, notices it has died
//! (the connection closed, or a call timed out and a probe got no answer either) and opens
//! it again with backoff and jitter. Knows nothing of the registry or of turns.

use super::children::Children;
use super::connect::{self, Connection, Listener, ServerSecrets};
use crate::config::{McpServerConfig, McpStart};
use rmcp::model::{CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest};
use rmcp::service::{PeerRequestOptions, ServiceError};
use rmcp::{Peer, RoleClient};
use serde::Serialize;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The longest wait between two attempts to open a server.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// `start = "lazy"` and no turn has needed it yet.
    Idle,
    Starting,
    Up,
    /// It died or could not be opened; it is tried again (see `last_error`).
    Down,
}

/// What is known of a server, as shown to operators.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub id: String,
    pub transport: &'static str,
    pub state: State,
    pub tools: Vec<String>,
    pub last_error: Option<String>,
    pub restarts: u32,
}

/// A server's tool as it listed it.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Listed {
    pub name: String,
    pub description: String,
    pub schema: serde_json::Value,
    pub read_only: bool,
}

pub struct Server {
    pub id: String,
    pub config: McpServerConfig,
    secrets: ServerSecrets,
    status: Mutex<Status>,
    listed: Mutex<Vec<Listed>>,
    peer: Mutex<Option<Peer<RoleClient>>>,
    /// A lazy server is asked to start.
    wake: Notify,
    /// A call timed out: is the server still there?
    suspect: Notify,
    /// Its tools or its state changed (the registry rebuilds its snapshot).
    changed: Arc<Notify>,
    /// Where its tool list is kept between runs (offered while it starts, so a turn redone
    /// after a restart sees the tools its first attempt called).
    remembered: std::path::PathBuf,
}

/// Why a call did not give a result.
#[derive(Debug)]
pub enum CallError {
    /// The server is not up (its state and last error).
    Down(String),
    TimedOut(Duration),
    Failed(String),
}

impl Server {
    pub fn new(
        id: String,
        config: McpServerConfig,
        secrets: ServerSecrets,
        changed: Arc<Notify>,
        remembered: std::path::PathBuf,
    ) -> Self {
        let listed: Vec<Listed> = std::fs::read(&remembered)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default();
        let status = Status {
            id: id.clone(),
            transport: if config.url.is_empty() {
                "stdio"
            } else {
                "http"
            },
            state: if config.start == McpStart::Lazy {
                State::Idle
            } else {
                State::Starting
            },
            tools: listed.iter().map(|t| t.name.clone()).collect(),
            last_error: None,
            restarts: 0,
        };
        Server {
            id,
            config,
            secrets,
            status: Mutex::new(status),
            listed: Mutex::new(listed),
            remembered,
            peer: Mutex::new(None),
            wake: Notify::new(),
            suspect: Notify::new(),
            changed,
        }
    }

    pub fn status(&self) -> Status {
        self.status.lock().expect("status lock").clone()
    }

    pub fn state(&self) -> State {
        self.status.lock().expect("status lock").state
    }

    /// Its tools as last listed (kept while it is down: a call then says it is down).
    pub fn listed(&self) -> Vec<Listed> {
        self.listed.lock().expect("listed lock").clone()
    }

    /// A lazy server not started yet starts now (in the background).
    pub fn wake(&self) {
        if self.state() == State::Idle {
            self.wake.notify_one();
        }
    }

    fn set(&self, state: State, error: Option<String>) {
        let mut status = self.status.lock().expect("status lock");
        status.state = state;
        if error.is_some() {
            status.last_error = error;
        }
        drop(status);
        self.changed.notify_one();
    }

    /// Call tool `name` with `arguments`, cancelled (`notifications/cancelled`) after the
    /// server's time limit.
    pub async fn call(
        &self,
        name: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
    ) -> Result<CallToolResult, CallError> {
        let limit = Duration::from_secs(self.config.timeout_secs);
        // Starting (its remembered tools are offered meanwhile): wait for it, within its limit.
        let deadline = tokio::time::Instant::now() + limit;
        while self.state() == State::Starting && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let peer = self.peer.lock().expect("peer lock").clone();
        let Some(peer) = peer.filter(|_| self.state() == State::Up) else {
            let status = self.status();
            return Err(CallError::Down(match status.last_error {
                Some(e) => format!("{:?}: {e}", status.state).to_lowercase(),
                None => format!("{:?}", status.state).to_lowercase(),
            }));
        };
        let request = ClientRequest::CallToolRequest(CallToolRequest {
            method: Default::default(),
            params: CallToolRequestParams {
                meta: None,
                name: name.to_string().into(),
                arguments: Some(arguments),
                task: None,
            },
            extensions: Default::default(),
        });
        let options = PeerRequestOptions {
            timeout: Some(limit),
            meta: None,
        };
        let answer = match peer.send_request_with_option(request, options).await {
            Ok(handle) => handle.await_response().await,
            Err(e) => Err(e),
        };
        match answer {
            Ok(rmcp::model::ServerResult::CallToolResult(result)) => Ok(result),
            Ok(_) => Err(CallError::Failed(
                "the server answered something else".into(),
            )),
            Err(ServiceError::Timeout { timeout }) => {
                self.suspect.notify_one();
                Err(CallError::TimedOut(timeout))
            }
            Err(ServiceError::McpError(e)) => Err(CallError::Failed(e.message.to_string())),
            Err(e) => Err(CallError::Failed(e.to_string())),
        }
    }

    /// Keep the server open until `cancel`: open, list, watch; after a failure wait (1 s
    /// doubling to a minute, with jitter) and open again.
    pub(super) async fn supervise(
        self: Arc<Self>,
        children: Arc<Children>,
        cancel: CancellationToken,
    ) {
        if self.state() == State::Idle {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = self.wake.notified() => {}
            }
        }
        let mut failures: u32 = 0;
        loop {
            // Restarting after a failure it stays down (its tools withdrawn) until it is up.
            if failures == 0 {
                self.set(State::Starting, None);
            }
            let tools_changed = Arc::new(Notify::new());
            let listener = Listener {
                tools_changed: tools_changed.clone(),
            };
            let opened = tokio::select! {
                _ = cancel.cancelled() => return,
                opened = connect::open(&self.id, &self.config, &self.secrets, listener, &children) => opened,
            };
            let error = match opened {
                Ok(connection) => {
                    let outcome = self.serve(connection, &tools_changed, &cancel).await;
                    if cancel.is_cancelled() {
                        return;
                    }
                    failures = if outcome.ran_well { 0 } else { failures };
                    outcome.error
                }
                Err(error) => error,
            };
            *self.peer.lock().expect("peer lock") = None;
            tracing::warn!(server = %self.id, error = %error, "MCP server down; its tools are withdrawn");
            crate::metrics::mcp_server_down(&self.id);
            self.set(State::Down, Some(error));
            failures = failures.saturating_add(1);
            let wait = backoff(failures);
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
            self.status.lock().expect("status lock").restarts += 1;
        }
    }

    /// While a connection is open: list the tools, list again when told they changed, probe
    /// after a timed-out call. Returns why it ended.
    async fn serve(
        &self,
        connection: Connection,
        tools_changed: &Notify,
        cancel: &CancellationToken,
    ) -> Served {
        let peer = connection.peer().clone();
        let stop = connection.cancellation_token();
        let limit = Duration::from_secs(self.config.timeout_secs);
        if let Err(error) = self.list(&peer, limit).await {
            stop.cancel();
            let _ = connection.waiting().await;
            return Served {
                error,
                ran_well: false,
            };
        }
        *self.peer.lock().expect("peer lock") = Some(peer.clone());
        self.set(State::Up, None);
        tracing::info!(server = %self.id, tools = self.listed().len(), "MCP server up");
        let closed = connection.waiting();
        tokio::pin!(closed);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => {
                    stop.cancel();
                    let _ = closed.await;
                    return Served { error: "stopped".into(), ran_well: true };
                }
                _ = &mut closed => {
                    return Served { error: "the connection closed (the server exited?)".into(), ran_well: true };
                }
                _ = tools_changed.notified() => {
                    if let Err(error) = self.list(&peer, limit).await {
                        stop.cancel();
                        let _ = closed.await;
                        return Served { error, ran_well: true };
                    }
                    self.changed.notify_one();
                }
                _ = self.suspect.notified() => {
                    if let Err(error) = self.list(&peer, limit).await {
                        stop.cancel();
                        let _ = closed.await;
                        return Served { error: format!("stopped answering ({error})"), ran_well: true };
                    }
                }
            }
        }
    }

    /// Read the server's tool list into `listed` (only those `tools` allows).
    async fn list(&self, peer: &Peer<RoleClient>, limit: Duration) -> Result<(), String> {
        let tools = tokio::time::timeout(limit, peer.list_all_tools())
            .await
            .map_err(|_| format!("tools/list got no answer within {} s", limit.as_secs()))?
            .map_err(|e| format!("tools/list failed: {e}"))?;
        let allow = &self.config.tools;
        let listed: Vec<Listed> = tools
            .into_iter()
            .filter(|t| allow.is_empty() || allow.iter().any(|a| *a == t.name))
            .map(|t| Listed {
                name: t.name.to_string(),
                description: t.description.map(|d| d.to_string()).unwrap_or_default(),
                schema: serde_json::Value::Object((*t.input_schema).clone()),
                read_only: t
                    .annotations
                    .as_ref()
                    .and_then(|a| a.read_only_hint)
                    .unwrap_or(false),
            })
            .collect();
        self.status.lock().expect("status lock").tools =
            listed.iter().map(|t| t.name.clone()).collect();
        if let Ok(bytes) = serde_json::to_vec(&listed) {
            let saved = self
                .remembered
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| std::fs::write(&self.remembered, bytes));
            if let Err(e) = saved {
                tracing::warn!(server = %self.id, error = %e, "cannot keep the MCP server's tool list");
            }
        }
        *self.listed.lock().expect("listed lock") = listed;
        Ok(())
    }
}

/// How a connection's time ended.
struct Served {
    error: String,
    /// It was up and answered (the next attempt starts from the shortest wait).
    ran_well: bool,
}

/// The wait before attempt `failures + 1`: 1 s doubling to a minute, ± a quarter.
fn backoff(failures: u32) -> Duration {
    let base = Duration::from_secs(1u64 << failures.saturating_sub(1).min(6)).min(MAX_BACKOFF);
    let jitter = (uuid::Uuid::new_v4().as_u128() % 500) as u64;
    base.mul_f64(0.75) + Duration::from_millis(jitter * base.as_millis() as u64 / 1000)
}

#[cfg(test)]
mod tests {
    #[test]
    fn backoff_grows_to_a_minute_with_jitter() {
        let first = super::backoff(1);
        assert!(first >= std::time::Duration::from_millis(750), "{first:?}");
        assert!(first <= std::time::Duration::from_millis(1250), "{first:?}");
        let late = super::backoff(30);
        assert!(late <= std::time::Duration::from_secs(75), "{late:?}");
        assert!(late >= std::time::Duration::from_secs(45), "{late:?}");
    }
}
