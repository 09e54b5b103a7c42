//! The `llama-cpp` feature's engine: llama.cpp through the `llama-cpp-2` bindings (needs
//! cmake and libclang to build). The tokenizer and chat template come from the file's own
//! metadata.

use super::{Generated, MAX_NEW_TOKENS, Settings, fit_prompt, send_text};
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaModel};
use llama_cpp_2::sampling::LlamaSampler;
use std::num::NonZeroU32;
use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::mpsc;

pub(super) const NAME: &str = "llama.cpp";

pub(super) type Loaded = LlamaModel;

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
pub(super) fn default_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get);
    (cores / 2).clamp(1, 4)
}

pub(super) fn load(path: &Path, _threads: usize) -> Result<Loaded, String> {
    LlamaModel::load_from_file(backend(), path, &LlamaModelParams::default())
        .map_err(|e| e.to_string())
}

/// Run one generation on this thread, sending text pieces as they are decoded.
pub(super) fn generate(
    model: &LlamaModel,
    messages: Vec<(String, String)>,
    settings: Settings,
    stop: &AtomicBool,
    pieces: &mpsc::UnboundedSender<String>,
) -> Result<Generated, String> {
    let template = model
        .chat_template(None)
        .map_err(|e| format!("the model file has no chat template: {e}"))?;
    let budget = settings.context_tokens as usize;
    let tokens = fit_prompt(messages, budget, |messages| {
        let chat: Vec<LlamaChatMessage> = messages
            .iter()
            .map(|(role, content)| LlamaChatMessage::new(role.clone(), content.replace('\0', "")))
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        let prompt = model
            .apply_chat_template(&template, &chat, true)
            .map_err(|e| e.to_string())?;
        Ok(model.vocab().tokenize(prompt.as_bytes(), false, true))
    })?;
    let threads = i32::try_from(settings.threads).unwrap_or(2);
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(settings.context_tokens))
        .with_n_batch(settings.context_tokens)
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
        LlamaSampler::dist(settings.seed),
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
        if !send_text(&mut pending, pieces) {
            break;
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
