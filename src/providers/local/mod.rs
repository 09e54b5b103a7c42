//! `kind = "local"`: a GGUF model run in-process on the CPU, so ferroclaw answers with no API
//! key and no other server.
//!
//! Two engines read the same files. The default, `candle_engine.rs`, is pure Rust (our llama
//! forward pass, `llama.rs`, over candle's quantized matrix products; `sample.rs` picks the
//! tokens): it builds with nothing but the Rust toolchain. The `llama-cpp` cargo
//! feature swaps in `llama_engine.rs` (llama.cpp through `llama-cpp-2`), which needs cmake
//! and libclang to build. This module is what both share: the model is loaded on first use
//! (start-up and idle memory stay as they are); a known model missing from the cache is
//! fetched then (see `crate::models`). One model, one generation at a time: concurrent
//! requests queue. Text streams token by token; dropping the call (a `/stop`, a timeout)
//! stops generation at the next token. Tools are not offered to the model: it answers in
//! text, and tool results already in the history are shown to it as text.

#[cfg(not(feature = "llama-cpp"))]
mod candle_engine;
#[cfg(not(feature = "llama-cpp"))]
mod gguf_check;
#[cfg(not(feature = "llama-cpp"))]
mod llama;
#[cfg(feature = "llama-cpp")]
mod llama_engine;
#[cfg(not(feature = "llama-cpp"))]
mod requantize;
#[cfg(not(feature = "llama-cpp"))]
mod sample;

#[cfg(not(feature = "llama-cpp"))]
use candle_engine as engine;
#[cfg(feature = "llama-cpp")]
use llama_engine as engine;

use super::{ChatRequest, ChatResponse, DeltaSink, ModelProvider, ProviderError, Role, Usage};
use crate::models::KnownModel;
use async_trait::async_trait;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::mpsc;

/// The most tokens one answer may have.
const MAX_NEW_TOKENS: usize = 1024;

/// Where the model file comes from.
#[derive(Debug, Clone)]
pub enum ModelSource {
    /// `model_path`: this file, whatever the model id.
    File(PathBuf),
    /// The model id names a known model, taken from (or fetched into) the cache.
    Catalog,
}

/// How one generation runs.
#[derive(Debug, Clone, Copy)]
struct Settings {
    /// llama.cpp takes its threads per generation; candle's pool is the loaded model's.
    #[cfg_attr(not(feature = "llama-cpp"), allow(dead_code))]
    threads: usize,
    context_tokens: u32,
    seed: u32,
}

pub struct LocalProvider {
    source: ModelSource,
    threads: usize,
    context_tokens: u32,
    /// A fixed sampling seed (`providers.<id>.seed`).
    seed: Option<u32>,
    /// Loaded models by file; one generation at a time (the lock is the queue).
    loaded: tokio::sync::Mutex<Option<(PathBuf, Arc<engine::Loaded>)>>,
}

impl LocalProvider {
    /// `seed`: a fixed sampling seed (the same prompt, the same answer); None draws one per
    /// answer.
    pub fn new(
        source: ModelSource,
        threads: Option<usize>,
        context_tokens: u32,
        seed: Option<u32>,
    ) -> Self {
        LocalProvider {
            source,
            threads: threads.unwrap_or_else(engine::default_threads).max(1),
            context_tokens: context_tokens.max(256),
            seed,
            loaded: tokio::sync::Mutex::new(None),
        }
    }

    /// The file for `model`: the configured one, or the known model's cached file.
    async fn file(&self, model: &str) -> Result<PathBuf, ProviderError> {
        match &self.source {
            ModelSource::File(path) => Ok(path.clone()),
            ModelSource::Catalog => {
                let known: &KnownModel =
                    crate::models::known(model).ok_or(ProviderError::ModelNotFound)?;
                let progress = crate::models::progress::for_first_use(known.name);
                crate::models::ensure(known, progress.as_ref())
                    .await
                    .map_err(|e| ProviderError::Connect(e.to_string()))
            }
        }
    }
}

/// The request as chat messages (role, content) for the model's template.
fn chat(request: &ChatRequest) -> Vec<(String, String)> {
    let mut out = Vec::with_capacity(request.messages.len() + 1);
    // No prompt cache here: what changes per call joins the system prompt.
    let system = match &request.volatile {
        Some(volatile) if request.system.is_empty() => volatile.clone(),
        Some(volatile) => format!("{}\n\n{volatile}", request.system),
        None => request.system.clone(),
    };
    if !system.is_empty() {
        out.push(("system".to_string(), system));
    }
    for message in &request.messages {
        match message.role {
            Role::User => out.push(("user".into(), message.content.clone())),
            Role::Assistant if !message.content.is_empty() => {
                out.push(("assistant".into(), message.content.clone()));
            }
            Role::Assistant => {}
            Role::Tool => out.push(("user".into(), format!("Tool result: {}", message.content))),
        }
    }
    out
}

/// Sets the flag when dropped: the generation thread stops at its next token.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// What a generation produced.
struct Generated {
    prompt_tokens: usize,
    new_tokens: usize,
}

/// Sends whole characters of the bytes decoded so far (a token may end inside a multi-byte
/// one); false when the receiver is gone.
fn send_text(pending: &mut Vec<u8>, pieces: &mpsc::UnboundedSender<String>) -> bool {
    let valid = match std::str::from_utf8(pending) {
        Ok(text) => text.len(),
        Err(e) => e.valid_up_to(),
    };
    if valid == 0 {
        return true;
    }
    let text = String::from_utf8_lossy(&pending[..valid]).into_owned();
    pending.drain(..valid);
    pieces.send(text).is_ok()
}

/// Drops the oldest turns (never the system prompt or the last message) until `count` says
/// the prompt leaves room for an answer; returns the prompt's tokens.
fn fit_prompt<T>(
    mut messages: Vec<(String, String)>,
    budget: usize,
    mut tokens_of: impl FnMut(&[(String, String)]) -> Result<Vec<T>, String>,
) -> Result<Vec<T>, String> {
    let tokens = loop {
        let tokens = tokens_of(&messages)?;
        let first_dropable = usize::from(messages.first().is_some_and(|m| m.0 == "system"));
        if tokens.len() + 256 <= budget || messages.len() <= first_dropable + 1 {
            break tokens;
        }
        messages.remove(first_dropable);
    };
    if tokens.len() + 16 > budget {
        return Err(format!(
            "the prompt ({} tokens) does not fit in context_tokens = {budget}",
            tokens.len()
        ));
    }
    Ok(tokens)
}

fn rand_seed() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    nanos ^ std::process::id()
}

#[async_trait]
impl ModelProvider for LocalProvider {
    async fn complete(
        &self,
        model: &str,
        request: &ChatRequest,
        on_delta: DeltaSink<'_>,
    ) -> Result<ChatResponse, ProviderError> {
        let file = self.file(model).await?;
        // The queue: one generation at a time on the one loaded model.
        let mut loaded = self.loaded.lock().await;
        let model = match &*loaded {
            Some((path, model)) if *path == file => model.clone(),
            _ => {
                let started = std::time::Instant::now();
                let path = file.clone();
                let threads = self.threads;
                let model = tokio::task::spawn_blocking(move || engine::load(&path, threads))
                    .await
                    .map_err(|e| ProviderError::Protocol(e.to_string()))?
                    .map_err(|e| {
                        ProviderError::Connect(format!("cannot load {}: {e}", file.display()))
                    })?;
                tracing::info!(model = %file.display(), engine = engine::NAME, took_ms = started.elapsed().as_millis() as u64, "local model loaded");
                let model = Arc::new(model);
                *loaded = Some((file.clone(), model.clone()));
                model
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        let _stop_on_drop = StopOnDrop(stop.clone());
        let (tx, mut rx) = mpsc::unbounded_channel();
        let messages = chat(request);
        let settings = Settings {
            threads: self.threads,
            context_tokens: self.context_tokens,
            seed: self.seed.unwrap_or_else(rand_seed),
        };
        let generation = tokio::task::spawn_blocking(move || {
            engine::generate(&model, messages, settings, &stop, &tx)
        });
        let mut content = String::new();
        while let Some(piece) = rx.recv().await {
            on_delta(&piece);
            content.push_str(&piece);
        }
        let generated = generation
            .await
            .map_err(|e| ProviderError::Protocol(e.to_string()))?
            .map_err(|e| ProviderError::InvalidRequest(format!("local model: {e}")))?;
        drop(loaded);
        Ok(ChatResponse {
            content,
            tool_calls: Vec::new(),
            usage: Usage {
                input_tokens: generated.prompt_tokens as i64,
                output_tokens: generated.new_tokens as i64,
                ..Usage::default()
            },
        })
    }
}
