//! `kind = "local"`: a GGUF model run in-process on the CPU through llama.cpp (the
//! `llama-cpp-2` bindings), so ferroclaw answers with no API key and no other server.
//!
//! The model is loaded on first use (start-up and idle memory stay as they are); a known
//! model missing from the cache is fetched then (see `crate::models`). One model, one
//! generation at a time: concurrent requests queue. The tokenizer and chat template come
//! from the file's own metadata. Text streams token by token; dropping the call (a `/stop`,
//! a timeout) stops generation at the next token. Tools are not offered to the model: it
//! answers in text, and tool results already in the history are shown to it as text.

use super::{ChatRequest, ChatResponse, DeltaSink, ModelProvider, ProviderError, Role, Usage};
use crate::models::KnownModel;
use async_trait::async_trait;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaModel};
use llama_cpp_2::sampling::LlamaSampler;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
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

pub struct LocalProvider {
    source: ModelSource,
    threads: i32,
    context_tokens: u32,
    /// A fixed sampling seed (`providers.<id>.seed`).
    seed: Option<u32>,
    /// Loaded models by file; one generation at a time (the lock is the queue).
    loaded: tokio::sync::Mutex<Option<(PathBuf, Arc<LlamaModel>)>>,
}

/// llama.cpp's backend, initialised once per process.
fn backend() -> &'static LlamaBackend {
    static BACKEND: OnceLock<LlamaBackend> = OnceLock::new();
    BACKEND.get_or_init(|| {
        let mut backend = LlamaBackend::init().expect("llama.cpp initialises once");
        backend.void_logs();
        backend
    })
}

/// Threads when `threads` is not set: half the cores, at most 4 (one on a 2-core machine).
///
/// llama.cpp's worker threads spin at every barrier; when they outnumber the free cores
/// (the service's own work, another process) generation slows by orders of magnitude, not by
/// the share of CPU lost (measured: a 20-token answer took over two minutes on 2 busy cores
/// with 2 threads, a few seconds with 1). A small model gains little from more threads.
fn default_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get);
    (cores / 2).clamp(1, 4)
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
        let threads = threads.unwrap_or_else(default_threads);
        LocalProvider {
            source,
            threads: i32::try_from(threads.max(1)).unwrap_or(2),
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

/// The request as chat messages for the model's template.
fn chat(request: &ChatRequest) -> Vec<(String, String)> {
    let mut out = Vec::with_capacity(request.messages.len() + 1);
    if !request.system.is_empty() {
        out.push(("system".to_string(), request.system.clone()));
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

/// Run one generation on this thread, sending text pieces as they are decoded.
fn generate(
    model: &LlamaModel,
    messages: Vec<(String, String)>,
    threads: i32,
    context_tokens: u32,
    seed: u32,
    stop: &AtomicBool,
    pieces: &mpsc::UnboundedSender<String>,
) -> Result<Generated, String> {
    let template = model
        .chat_template(None)
        .map_err(|e| format!("the model file has no chat template: {e}"))?;
    let budget = context_tokens as usize;
    // Drop the oldest turns (never the system prompt or the last message) until the prompt
    // leaves room for an answer.
    let mut messages = messages;
    let tokens = loop {
        let chat: Vec<LlamaChatMessage> = messages
            .iter()
            .map(|(role, content)| LlamaChatMessage::new(role.clone(), content.replace('\0', "")))
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        let prompt = model
            .apply_chat_template(&template, &chat, true)
            .map_err(|e| e.to_string())?;
        let tokens = model.vocab().tokenize(prompt.as_bytes(), false, true);
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
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(context_tokens))
        .with_n_batch(context_tokens)
        .with_n_threads(threads)
        .with_n_threads_batch(threads);
    let mut ctx = model
        .new_context(backend(), params)
        .map_err(|e| e.to_string())?;
    let mut batch = LlamaBatch::new(tokens.len().max(1), 1);
    let last = tokens.len() - 1;
    for (i, token) in tokens.iter().enumerate() {
        batch
            .add(*token, i as i32, &[0], i == last)
            .map_err(|e| e.to_string())?;
    }
    ctx.decode(&mut batch).map_err(|e| e.to_string())?;
    let mut sampler = LlamaSampler::chain_simple([
        LlamaSampler::top_k(40),
        LlamaSampler::top_p(0.9, 1),
        LlamaSampler::temp(0.7),
        LlamaSampler::dist(seed),
    ]);
    let mut position = tokens.len() as i32;
    let mut pending: Vec<u8> = Vec::new();
    let mut new_tokens = 0;
    let room = (budget - tokens.len()).min(MAX_NEW_TOKENS);
    while new_tokens < room && !stop.load(Ordering::Relaxed) {
        let token = sampler.sample(&ctx, batch.n_tokens() - 1);
        sampler.accept(token);
        if model.vocab().is_eog(token) {
            break;
        }
        new_tokens += 1;
        pending.extend(model.vocab().token_to_piece(token, false, None));
        // Send whole characters only: a token may end inside a multi-byte one.
        let valid = match std::str::from_utf8(&pending) {
            Ok(text) => text.len(),
            Err(e) => e.valid_up_to(),
        };
        if valid > 0 {
            let text = String::from_utf8_lossy(&pending[..valid]).into_owned();
            pending.drain(..valid);
            if pieces.send(text).is_err() {
                break;
            }
        }
        batch.clear();
        batch
            .add(token, position, &[0], true)
            .map_err(|e| e.to_string())?;
        position += 1;
        ctx.decode(&mut batch).map_err(|e| e.to_string())?;
    }
    if !pending.is_empty() {
        let _ = pieces.send(String::from_utf8_lossy(&pending).into_owned());
    }
    Ok(Generated {
        prompt_tokens: tokens.len(),
        new_tokens,
    })
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
                let model = tokio::task::spawn_blocking(move || {
                    LlamaModel::load_from_file(backend(), &path, &LlamaModelParams::default())
                })
                .await
                .map_err(|e| ProviderError::Protocol(e.to_string()))?
                .map_err(|e| {
                    ProviderError::Connect(format!("cannot load {}: {e}", file.display()))
                })?;
                tracing::info!(model = %file.display(), took_ms = started.elapsed().as_millis() as u64, "local model loaded");
                let model = Arc::new(model);
                *loaded = Some((file.clone(), model.clone()));
                model
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        let _stop_on_drop = StopOnDrop(stop.clone());
        let (tx, mut rx) = mpsc::unbounded_channel();
        let (messages, threads, context) = (chat(request), self.threads, self.context_tokens);
        let seed = self.seed.unwrap_or_else(rand_seed);
        let generation = tokio::task::spawn_blocking(move || {
            generate(&model, messages, threads, context, seed, &stop, &tx)
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
            },
        })
    }
}
