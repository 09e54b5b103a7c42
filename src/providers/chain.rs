//! The model fallback chain (SPEC section 9), a wrapper around providers.
//!
//! Order: the session's model (or `agent.model`), then `agent.fallbacks`. Retryable errors
//! are retried on the same model up to `retries_per_model` times, honouring Retry-After;
//! after that the next one is tried. Only failures that say the model is unavailable for
//! everyone (rate limits, overload, auth/billing, model-not-found, repeated server errors:
//! `ProviderError::cools_model`) cool it down; a bad answer or a cut stream is that request's
//! error alone. When every model of a chain is cooling down, the one whose cooldown ends
//! first is tried anyway rather than refusing. Invalid requests and context-length errors
//! never move on. Once text has streamed to the user the chain never switches model.

use super::{ChatRequest, ChatResponse, DeltaSink, KeyRing, ModelProvider, ProviderError};
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `<provider>/<model id>`, split at the first `/`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ModelRef {
    pub provider: String,
    pub model: String,
}

impl ModelRef {
    pub fn parse(s: &str) -> Option<Self> {
        let (provider, model) = s.split_once('/')?;
        (!provider.is_empty() && !model.is_empty()).then(|| ModelRef {
            provider: provider.into(),
            model: model.into(),
        })
    }
}

impl std::fmt::Display for ModelRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.provider, self.model)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    /// No model in the chain has a usable provider; the text says what to configure.
    #[error("{0}")]
    NoUsableModel(String),
    /// A policy refused the call before any model was asked (`crate::policy::Gate`); the
    /// text says why.
    #[error("{0}")]
    Refused(String),
    /// A model refused the request in a way no other model would fix.
    #[error("{model} refused the request: {error}")]
    Final { model: String, error: ProviderError },
    /// The stream broke after the user had seen part of the reply.
    #[error("{model} failed mid-reply: {error}")]
    AfterStreaming { model: String, error: ProviderError },
    /// Every model failed or was cooling down.
    #[error("every model failed ({0})")]
    Exhausted(String),
}

pub struct FallbackChain {
    providers: HashMap<String, Arc<dyn ModelProvider>>,
    /// Provider name → why it cannot be used (e.g. key variable unset).
    unusable: HashMap<String, String>,
    fallbacks: Vec<ModelRef>,
    retries_per_model: u32,
    cooldown: Duration,
    request_timeout: Duration,
    cooling: Mutex<HashMap<ModelRef, Instant>>,
    /// Model calls in flight at once, all providers together (`fallback.max_concurrent_requests`).
    in_flight: Option<Arc<tokio::sync::Semaphore>>,
    /// Providers with several API keys, for `/status`.
    rings: HashMap<String, Arc<KeyRing>>,
}

impl FallbackChain {
    pub fn new(
        providers: HashMap<String, Arc<dyn ModelProvider>>,
        unusable: HashMap<String, String>,
        fallbacks: Vec<ModelRef>,
        retries_per_model: u32,
        cooldown: Duration,
        request_timeout: Duration,
    ) -> Self {
        FallbackChain {
            providers,
            unusable,
            fallbacks,
            retries_per_model,
            cooldown,
            request_timeout,
            cooling: Mutex::new(HashMap::new()),
            in_flight: None,
            rings: HashMap::new(),
        }
    }

    /// At most `n` model calls in flight at once; more wait for a slot (0: no limit).
    pub fn with_max_concurrent(mut self, n: usize) -> Self {
        self.in_flight = (n > 0).then(|| Arc::new(tokio::sync::Semaphore::new(n)));
        self
    }

    /// Providers reached with several API keys (auth profiles).
    pub fn with_key_rings(mut self, rings: HashMap<String, Arc<KeyRing>>) -> Self {
        self.rings = rings;
        self
    }

    /// The key profile (1-based) and the number of keys `session` uses at `provider`, when
    /// that provider has several keys and the session has used one.
    pub fn key_profile(&self, provider: &str, session: &str) -> Option<(usize, usize)> {
        let ring = self.rings.get(provider)?;
        ring.profile_of(session).map(|i| (i + 1, ring.len()))
    }

    /// True when `model` names a configured provider (usable or not).
    pub fn knows(&self, model: &ModelRef) -> bool {
        self.providers.contains_key(&model.provider) || self.unusable.contains_key(&model.provider)
    }

    pub fn fallbacks(&self) -> &[ModelRef] {
        &self.fallbacks
    }

    /// Run the request through the chain starting at `primary`. Returns the response and the
    /// model that produced it.
    pub async fn complete_from(
        &self,
        primary: &ModelRef,
        request: &ChatRequest,
        on_delta: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<(ChatResponse, ModelRef), ChainError> {
        self.complete_via(primary, &self.fallbacks, request, on_delta)
            .await
    }

    /// [`Self::complete_from`] with an agent's own fallbacks instead of `agent.fallbacks`.
    pub async fn complete_via(
        &self,
        primary: &ModelRef,
        fallbacks: &[ModelRef],
        request: &ChatRequest,
        on_delta: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<(ChatResponse, ModelRef), ChainError> {
        let mut order = vec![primary.clone()];
        order.extend(fallbacks.iter().filter(|m| *m != primary).cloned());
        let mut notes = Vec::new();
        let mut reasons = Vec::new();
        let mut tried = false;
        type Usable<'a> = (&'a ModelRef, &'a Arc<dyn ModelProvider>);
        let mut cooling: Option<(Instant, Usable)> = None;
        // The usable models in order (the others only add their reason), so the last one's
        // turn is the queue's end; when nothing was tried because every one is cooling down,
        // once more with the one whose cooldown ends first.
        let mut queue = std::collections::VecDeque::new();
        for model in &order {
            match self.providers.get(&model.provider) {
                Some(provider) => queue.push_back(((model, provider), false)),
                None => {
                    if let Some(reason) = self.unusable.get(&model.provider) {
                        reasons.push(format!("{model}: {reason}"));
                    }
                }
            }
        }
        while let Some(((model, provider), forced)) = queue.pop_front() {
            if !forced && let Some(until) = self.cooling_until(model) {
                notes.push(format!("{model}: cooling down"));
                if cooling.is_none_or(|(first, _)| until < first) {
                    cooling = Some((until, (model, provider)));
                }
                if queue.is_empty()
                    && !tried
                    && let Some((_, soonest)) = cooling.take()
                {
                    // Every usable model is cooling down: refusing would black the agent
                    // out; the one that recovers first is tried.
                    tracing::info!(model = %soonest.0, "every model is cooling down; trying the one that recovers first");
                    queue.push_back((soonest, true));
                }
                continue;
            }
            tried = true;
            let streamed = AtomicBool::new(false);
            let label = model.to_string();
            let started = std::sync::Mutex::new(std::time::Instant::now());
            let sink = |delta: &str| {
                if !streamed.swap(true, Ordering::Relaxed) {
                    let at = *started.lock().expect("start lock");
                    crate::metrics::first_token(&label, at.elapsed());
                }
                on_delta(delta);
            };
            let mut attempt = 0;
            loop {
                *started.lock().expect("start lock") = std::time::Instant::now();
                let slot = match &self.in_flight {
                    Some(slots) => Some(slots.acquire().await.expect("never closed")),
                    None => None,
                };
                let result = tokio::time::timeout(
                    self.request_timeout,
                    provider.complete(&model.model, request, &sink),
                )
                .await
                .unwrap_or(Err(ProviderError::Timeout));
                drop(slot);
                let took = started.lock().expect("start lock").elapsed();
                let error = match result {
                    Ok(response) => {
                        crate::metrics::model_call(&label, "ok", took);
                        return Ok((response, model.clone()));
                    }
                    Err(error) => error,
                };
                crate::metrics::model_call(&label, error.kind(), took);
                tracing::warn!(model = %model, attempt, error = %error, "model call failed");
                if streamed.load(Ordering::Relaxed) {
                    return Err(ChainError::AfterStreaming {
                        model: model.to_string(),
                        error,
                    });
                }
                if error.is_final() {
                    return Err(ChainError::Final {
                        model: model.to_string(),
                        error,
                    });
                }
                if error.is_retryable() && attempt < self.retries_per_model {
                    attempt += 1;
                    let wait = error
                        .retry_after()
                        .unwrap_or_else(|| Duration::from_millis(250 << attempt.min(6)))
                        .min(Duration::from_secs(60));
                    tokio::time::sleep(wait).await;
                    continue;
                }
                if error.cools_model() {
                    self.cool_down(model);
                }
                crate::metrics::fallback(&label);
                notes.push(format!("{model}: {error}"));
                break;
            }
        }
        if notes.is_empty() {
            let why = if reasons.is_empty() {
                "no model in agent.model or agent.fallbacks has a configured provider".to_string()
            } else {
                reasons.join("; ")
            };
            return Err(ChainError::NoUsableModel(format!(
                "No model is usable: {why}. Set the API key variable or point agent.model at a reachable provider."
            )));
        }
        Err(ChainError::Exhausted(notes.join("; ")))
    }

    /// When `model`'s cooldown ends, if it is cooling down now.
    fn cooling_until(&self, model: &ModelRef) -> Option<Instant> {
        let mut cooling = self.cooling.lock().unwrap_or_else(|p| p.into_inner());
        match cooling.get(model) {
            Some(until) if Instant::now() < *until => Some(*until),
            Some(_) => {
                cooling.remove(model);
                None
            }
            None => None,
        }
    }

    fn cool_down(&self, model: &ModelRef) {
        if self.cooldown.is_zero() {
            return;
        }
        // Computed before the lock is taken, and saturating: no value can panic under it.
        let now = Instant::now();
        let until = now
            .checked_add(self.cooldown)
            .unwrap_or(now + Duration::from_secs(86_400 * 365));
        self.cooling
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(model.clone(), until);
    }
}

/// The chain is itself a provider (a decorator over the ones it holds): `model` names where
/// it starts (`<provider>/<model>`), and a chain-level failure is reported in the class a
/// caller of any provider acts on.
#[async_trait]
impl ModelProvider for FallbackChain {
    async fn complete(
        &self,
        model: &str,
        request: &ChatRequest,
        on_delta: DeltaSink<'_>,
    ) -> Result<ChatResponse, ProviderError> {
        let primary = ModelRef::parse(model).ok_or(ProviderError::ModelNotFound)?;
        match self.complete_from(&primary, request, on_delta).await {
            Ok((response, _)) => Ok(response),
            Err(ChainError::Final { error, .. } | ChainError::AfterStreaming { error, .. }) => {
                Err(error)
            }
            Err(ChainError::NoUsableModel(why) | ChainError::Refused(why)) => {
                Err(ProviderError::InvalidRequest(why))
            }
            Err(ChainError::Exhausted(notes)) => Err(ProviderError::Connect(notes)),
        }
    }
}
