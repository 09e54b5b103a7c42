//! The Docker sandbox (bollard): one container per owner, created on first use and reused,
//! with the owner's workspace bind-mounted read-write at `/workspace` and nothing else of the
//! host; no network by default; memory (no swap), CPU and pids limits; read-only root with a
//! writable `/tmp`; every capability dropped; no-new-privileges; a non-root user. Commands
//! run with `docker exec`; a timeout removes the container (the only sure way to kill what
//! the command started) and the next command gets a fresh one.
//!
//! Connects on [`Sandbox::prepare`] (start-up, when the sandbox is enabled) or on first use:
//! API version negotiated, a ping with a short timeout, this deployment's leftover containers
//! (by label) removed, the image pulled when missing. Without an engine it stays unavailable.

use super::{Availability, Capture, ExecOutcome, ExecRequest, OutputSink, Sandbox, SandboxError};
use async_trait::async_trait;
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CreateImageOptionsBuilder, ListContainersOptionsBuilder, RemoveContainerOptionsBuilder,
};
use futures::{StreamExt, TryStreamExt};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

/// Label on every sandbox container; its value names the deployment (see [`instance_of`]).
pub const LABEL: &str = "ferroclaw.sandbox";
/// How long connecting (version negotiation, ping) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Keeps the container alive between commands; exits at once on `docker stop`.
const KEEPALIVE: &str = "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done";

/// The `[sandbox]` section resolved for use.
#[derive(Debug, Clone)]
pub struct Settings {
    pub image: String,
    pub network: String,
    pub memory_bytes: i64,
    pub nano_cpus: i64,
    pub pids_limit: i64,
    /// Empty: the local default socket.
    pub docker_host: String,
    /// Label value of this deployment's containers.
    pub instance: String,
}

impl Settings {
    pub fn from_config(config: &crate::config::Config) -> Settings {
        let sandbox = &config.sandbox;
        Settings {
            image: sandbox.image.clone(),
            network: sandbox.network.clone(),
            memory_bytes: (sandbox.memory_mb * 1024 * 1024) as i64,
            nano_cpus: (sandbox.cpus * 1e9) as i64,
            pids_limit: sandbox.pids_limit,
            docker_host: sandbox.docker_host.clone(),
            instance: instance_of(
                &config.agent.workspace,
                &config.storage.url,
                &config.server.listen,
            ),
        }
    }
}

/// A process's label value: its workspace, database, listen address and host, hashed. Two
/// deployments on one engine, and two processes of one deployment (they listen on different
/// addresses or hosts), never remove each other's containers; a restarted process (same
/// settings, same host) finds and removes its own leftovers.
pub fn instance_of(workspace: &str, database: &str, listen: &str) -> String {
    // Absolute but not canonical: the folder may not exist yet at the first start.
    let workspace = std::path::absolute(workspace)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| workspace.to_string());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let digest =
        Sha256::digest(format!("{workspace}\n{database}\n{listen}\n{}", host.trim()).as_bytes());
    hex::encode(&digest[..8])
}

pub struct DockerSandbox {
    settings: Settings,
    docker: tokio::sync::OnceCell<Result<Docker, String>>,
    /// Owner → container id.
    containers: tokio::sync::Mutex<HashMap<String, String>>,
    state: std::sync::Mutex<Availability>,
}

fn failed(e: bollard::errors::Error) -> SandboxError {
    SandboxError::Failed(e.to_string())
}

/// The container is gone or stopped: make a new one.
fn container_lost(e: &bollard::errors::Error) -> bool {
    matches!(
        e,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404 | 409,
            ..
        }
    )
}

/// A client of the Docker engine at `host` (empty: the local default) that has answered.
async fn engine(host: &str) -> Result<Docker, String> {
    let docker = match host {
        "" => Docker::connect_with_local_defaults(),
        h if h.starts_with("unix://") => {
            Docker::connect_with_socket(h, 120, bollard::API_DEFAULT_VERSION)
        }
        h => Docker::connect_with_http(h, 120, bollard::API_DEFAULT_VERSION),
    }
    .map_err(|e| format!("no Docker engine ({e})"))?;
    let docker = tokio::time::timeout(CONNECT_TIMEOUT, docker.negotiate_version())
        .await
        .map_err(|_| "no Docker engine (no answer within 3 s)".to_string())?
        .map_err(|e| format!("no Docker engine ({e})"))?;
    tokio::time::timeout(CONNECT_TIMEOUT, docker.ping())
        .await
        .map_err(|_| "no Docker engine (no answer within 3 s)".to_string())?
        .map_err(|e| format!("no Docker engine ({e})"))?;
    Ok(docker)
}

/// Whether the engine at `host` holds `image` (`doctor`); Err: no engine answers.
pub async fn image_present(host: &str, image: &str) -> Result<bool, String> {
    let docker = engine(host).await?;
    Ok(docker.inspect_image(image).await.is_ok())
}

impl DockerSandbox {
    pub fn new(settings: Settings) -> Self {
        DockerSandbox {
            settings,
            docker: tokio::sync::OnceCell::new(),
            containers: tokio::sync::Mutex::new(HashMap::new()),
            state: std::sync::Mutex::new(Availability::Unknown),
        }
    }

    async fn connect(&self) -> Result<Docker, String> {
        let docker = engine(&self.settings.docker_host).await?;
        let removed = self.remove_leftovers(&docker).await;
        if removed > 0 {
            tracing::info!(removed, "removed sandbox containers left by an earlier run");
        }
        let image = &self.settings.image;
        if docker.inspect_image(image).await.is_err() {
            tracing::info!(image = %image, "pulling the sandbox image");
            let options = CreateImageOptionsBuilder::default()
                .from_image(image)
                .build();
            docker
                .create_image(Some(options), None, None)
                .try_collect::<Vec<_>>()
                .await
                .map_err(|e| {
                    format!(
                        "the image `{image}` is not present and could not be pulled ({e}); \
                         build a local one with scripts/sandbox-image.sh and set sandbox.image"
                    )
                })?;
        }
        Ok(docker)
    }

    /// Remove this deployment's labelled containers; how many there were.
    async fn remove_leftovers(&self, docker: &Docker) -> usize {
        let filters =
            HashMap::from([("label", vec![format!("{LABEL}={}", self.settings.instance)])]);
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        let Ok(found) = docker.list_containers(Some(options)).await else {
            return 0;
        };
        let mut removed = 0;
        for id in found.into_iter().filter_map(|c| c.id) {
            if remove(docker, &id).await {
                removed += 1;
            }
        }
        removed
    }

    async fn docker(&self) -> Result<&Docker, SandboxError> {
        let connected = self
            .docker
            .get_or_init(|| async {
                let result = self.connect().await;
                let state = match &result {
                    Ok(_) => {
                        tracing::info!(image = %self.settings.image, "sandbox ready (Docker)");
                        Availability::Ready
                    }
                    Err(why) => {
                        tracing::warn!(
                            "sandbox unavailable: {why}; sandboxed tools are not offered"
                        );
                        Availability::Unavailable(why.clone())
                    }
                };
                *self.state.lock().expect("sandbox state") = state;
                result
            })
            .await;
        connected
            .as_ref()
            .map_err(|why| SandboxError::Unavailable(why.clone()))
    }

    /// The owner's container, created and started when it has none.
    async fn container(
        &self,
        docker: &Docker,
        owner: &str,
        workspace: &Path,
    ) -> Result<String, SandboxError> {
        let mut containers = self.containers.lock().await;
        if let Some(id) = containers.get(owner) {
            return Ok(id.clone());
        }
        let host_dir = prepare_workspace(workspace)?;
        let body = ContainerCreateBody {
            image: Some(self.settings.image.clone()),
            cmd: Some(vec!["sh".into(), "-c".into(), KEEPALIVE.into()]),
            user: Some(host_dir.user.clone()),
            working_dir: Some("/workspace".into()),
            labels: Some(HashMap::from([
                (LABEL.to_string(), self.settings.instance.clone()),
                ("ferroclaw.owner".to_string(), owner.to_string()),
            ])),
            network_disabled: Some(self.settings.network == "none"),
            host_config: Some(HostConfig {
                network_mode: Some(self.settings.network.clone()),
                memory: Some(self.settings.memory_bytes),
                memory_swap: Some(self.settings.memory_bytes),
                nano_cpus: Some(self.settings.nano_cpus),
                pids_limit: Some(self.settings.pids_limit),
                readonly_rootfs: Some(true),
                tmpfs: Some(HashMap::from([(
                    "/tmp".to_string(),
                    "rw,nosuid,nodev,size=64m,mode=1777".to_string(),
                )])),
                cap_drop: Some(vec!["ALL".into()]),
                security_opt: Some(vec!["no-new-privileges".into()]),
                binds: Some(vec![format!("{}:/workspace:rw", host_dir.path.display())]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let created = docker
            .create_container(
                None::<bollard::query_parameters::CreateContainerOptions>,
                body,
            )
            .await
            .map_err(failed)?;
        if let Err(e) = docker
            .start_container(
                &created.id,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await
        {
            remove(docker, &created.id).await;
            return Err(failed(e));
        }
        containers.insert(owner.to_string(), created.id.clone());
        Ok(created.id)
    }

    async fn forget(&self, owner: &str) -> Option<String> {
        self.containers.lock().await.remove(owner)
    }

    async fn run_in(
        &self,
        docker: &Docker,
        container: &str,
        request: &ExecRequest,
        sink: Option<&dyn OutputSink>,
    ) -> Result<Result<ExecOutcome, bollard::errors::Error>, SandboxError> {
        let workdir = match &request.workdir {
            Some(sub) => format!("/workspace/{}", sub.trim_start_matches('/')),
            None => "/workspace".to_string(),
        };
        let options = CreateExecOptions {
            cmd: Some(vec!["sh", "-c", request.command.as_str()]),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            working_dir: Some(workdir.as_str()),
            ..Default::default()
        };
        let exec = match docker.create_exec(container, options).await {
            Ok(exec) => exec,
            Err(e) => return Ok(Err(e)),
        };
        let started = match docker.start_exec(&exec.id, None).await {
            Ok(started) => started,
            Err(e) => return Ok(Err(e)),
        };
        let StartExecResults::Attached { mut output, .. } = started else {
            return Err(SandboxError::Failed("the exec did not attach".into()));
        };
        let deadline = tokio::time::Instant::now() + request.timeout;
        let mut capture = Capture::default();
        let mut timed_out = false;
        loop {
            let next = match tokio::time::timeout_at(deadline, output.next()).await {
                Err(_) => {
                    timed_out = true;
                    break;
                }
                Ok(None) => break,
                Ok(Some(next)) => next,
            };
            let (is_err, bytes) = match next {
                Ok(LogOutput::StdOut { message }) => (false, message),
                Ok(LogOutput::StdErr { message }) => (true, message),
                Ok(_) => continue,
                Err(e) => return Err(failed(e)),
            };
            capture.push(is_err, &bytes);
            if let Some(sink) = sink {
                sink.output(&String::from_utf8_lossy(&bytes)).await;
            }
        }
        let exit_code = if timed_out {
            None
        } else {
            docker
                .inspect_exec(&exec.id)
                .await
                .map_err(failed)?
                .exit_code
        };
        let (stdout, stderr, truncated) = capture.into_texts();
        Ok(Ok(ExecOutcome {
            exit_code,
            stdout,
            stderr,
            timed_out,
            truncated,
        }))
    }
}

/// The host folder to mount and the user to run as: the service's own user, or `nobody`
/// (owning the folder) when the service runs as root.
struct HostDir {
    path: std::path::PathBuf,
    user: String,
}

fn prepare_workspace(workspace: &Path) -> Result<HostDir, SandboxError> {
    use std::os::unix::fs::MetadataExt;
    let io = |e: std::io::Error| SandboxError::Failed(format!("workspace folder: {e}"));
    std::fs::create_dir_all(workspace).map_err(io)?;
    let path = std::fs::canonicalize(workspace).map_err(io)?;
    let me = std::fs::metadata("/proc/self").map_err(io)?;
    let user = if me.uid() == 0 {
        const NOBODY: u32 = 65534;
        std::os::unix::fs::chown(&path, Some(NOBODY), Some(NOBODY)).map_err(io)?;
        format!("{NOBODY}:{NOBODY}")
    } else {
        format!("{}:{}", me.uid(), me.gid())
    };
    Ok(HostDir { path, user })
}

/// Remove a container whatever its state; true when it is gone.
async fn remove(docker: &Docker, id: &str) -> bool {
    let options = RemoveContainerOptionsBuilder::default().force(true).build();
    match docker.remove_container(id, Some(options)).await {
        Ok(()) => true,
        Err(e) if container_lost(&e) => true,
        Err(e) => {
            tracing::warn!(error = %e, "could not remove a sandbox container");
            false
        }
    }
}

#[async_trait]
impl Sandbox for DockerSandbox {
    async fn exec(
        &self,
        owner: &str,
        workspace: &Path,
        request: &ExecRequest,
        sink: Option<&dyn OutputSink>,
    ) -> Result<ExecOutcome, SandboxError> {
        let docker = self.docker().await?;
        if let Some(sub) = &request.workdir {
            let _ = std::fs::create_dir_all(workspace.join(sub));
        }
        // A container that died (or was removed behind our back) is replaced once.
        for attempt in 0..2 {
            let container = self.container(docker, owner, workspace).await?;
            match self.run_in(docker, &container, request, sink).await? {
                Ok(outcome) => {
                    if outcome.timed_out {
                        // Killing the container is the one sure way to stop everything the
                        // command started; the workspace survives, the next call gets a new one.
                        self.forget(owner).await;
                        remove(docker, &container).await;
                    }
                    return Ok(outcome);
                }
                Err(e) if attempt == 0 && container_lost(&e) => {
                    tracing::info!(owner, "sandbox container lost; starting a new one");
                    self.forget(owner).await;
                    remove(docker, &container).await;
                }
                Err(e) => return Err(failed(e)),
            }
        }
        Err(SandboxError::Failed(
            "the container could not be started".into(),
        ))
    }

    async fn release(&self, owner: &str) {
        let Some(id) = self.forget(owner).await else {
            return;
        };
        if let Some(Ok(docker)) = self.docker.get() {
            remove(docker, &id).await;
        }
    }

    async fn release_all(&self) {
        let ids: Vec<String> = self
            .containers
            .lock()
            .await
            .drain()
            .map(|(_, id)| id)
            .collect();
        if let Some(Ok(docker)) = self.docker.get() {
            for id in ids {
                remove(docker, &id).await;
            }
        }
    }

    async fn prepare(&self) -> Availability {
        let _ = self.docker().await;
        self.availability()
    }

    fn availability(&self) -> Availability {
        self.state.lock().expect("sandbox state").clone()
    }
}

#[cfg(test)]
mod tests {
    use super::instance_of;

    #[test]
    fn processes_of_one_deployment_label_their_containers_apart() {
        let a = instance_of("ws", "postgres://db/x", "0.0.0.0:8787");
        assert_eq!(
            a,
            instance_of("ws", "postgres://db/x", "0.0.0.0:8787"),
            "a restart"
        );
        assert_ne!(
            a,
            instance_of("ws", "postgres://db/x", "0.0.0.0:8788"),
            "a second process"
        );
        assert_ne!(
            a,
            instance_of("ws", "postgres://db/y", "0.0.0.0:8787"),
            "another deployment"
        );
    }
}
