//! Auth profiles: one provider reached with several API keys (`api_key_envs`).
//!
//! A session sticks to the key it last used while that key is healthy; a new session takes
//! the next key in turn, which spreads load. A rate limit, an exhausted quota or a refused
//! key cools that key down (for the provider's Retry-After, else the configured cooldown)
//! and the same model is tried at once with the next key. Only when every key is cooling
//! down or refused does the call fail with [`ProviderError::KeysExhausted`], and the chain
//! moves to the next model. Keys are named by their index (`#1`, `#2`, ...), never shown.

use super::{ChatRequest, ChatResponse, DeltaSink, ModelProvider, ProviderError};
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Sessions remembered for stickiness; past this the map starts over (they pick again).
const MAX_STICKY: usize = 65_536;

pub struct KeyRing {
    name: String,
    /// One provider per key, in configured order.
    profiles: Vec<Arc<dyn ModelProvider>>,
    cooldown: Duration,
    cooling: Mutex<Vec<Option<Instant>>>,
    sticky: Mutex<HashMap<Arc<str>, usize>>,
    next: AtomicUsize,
}

impl KeyRing {
    /// `profiles`: the same provider built once per key.
    pub fn new(name: &str, profiles: Vec<Arc<dyn ModelProvider>>, cooldown: Duration) -> Self {
        let n = profiles.len();
        KeyRing {
            name: name.to_string(),
            profiles,
            cooldown,
            cooling: Mutex::new(vec![None; n]),
            sticky: Mutex::new(HashMap::new()),
            next: AtomicUsize::new(0),
        }
    }

    pub fn len(&self) -> usize {
        self.profiles.len()
    }

    pub fn is_empty(&self) -> bool {
        self.profiles.is_empty()
    }

    /// The profile (0-based) a session last used, if it has one.
    pub fn profile_of(&self, session: &str) -> Option<usize> {
        self.sticky
            .lock()
            .expect("sticky lock")
            .get(session)
            .copied()
    }

    fn healthy(&self, i: usize) -> bool {
        let mut cooling = self.cooling.lock().expect("cooling lock");
        match cooling[i] {
            Some(until) if Instant::now() < until => false,
            Some(_) => {
                cooling[i] = None;
                true
            }
            None => true,
        }
    }

    fn cool(&self, i: usize, error: &ProviderError) {
        let wait = error.retry_after().unwrap_or(self.cooldown);
        self.cooling.lock().expect("cooling lock")[i] = Some(Instant::now() + wait);
    }

    /// Keys in the order to try: the session's own first, else the next in turn.
    fn order(&self, affinity: Option<&Arc<str>>) -> Vec<usize> {
        let n = self.profiles.len();
        let start = affinity
            .and_then(|a| self.sticky.lock().expect("sticky lock").get(a).copied())
            .unwrap_or_else(|| self.next.fetch_add(1, Ordering::Relaxed) % n);
        (0..n).map(|k| (start + k) % n).collect()
    }

    fn remember(&self, affinity: Option<&Arc<str>>, i: usize) {
        if let Some(session) = affinity {
            let mut sticky = self.sticky.lock().expect("sticky lock");
            if sticky.len() >= MAX_STICKY && !sticky.contains_key(session) {
                sticky.clear();
            }
            sticky.insert(session.clone(), i);
        }
    }
}

/// Errors that are the key's, not the model's: another key may succeed.
fn key_trouble(error: &ProviderError) -> bool {
    matches!(
        error,
        ProviderError::RateLimited { .. } | ProviderError::Billing | ProviderError::Auth { .. }
    )
}

#[async_trait]
impl ModelProvider for KeyRing {
    async fn complete(
        &self,
        model: &str,
        request: &ChatRequest,
        on_delta: DeltaSink<'_>,
    ) -> Result<ChatResponse, ProviderError> {
        let affinity = request.affinity.as_ref();
        let mut tried = 0;
        for i in self.order(affinity) {
            if !self.healthy(i) {
                continue;
            }
            tried += 1;
            match self.profiles[i].complete(model, request, on_delta).await {
                Ok(response) => {
                    self.remember(affinity, i);
                    return Ok(response);
                }
                Err(error) if key_trouble(&error) => {
                    tracing::warn!(provider = %self.name, profile = i + 1, error = %error, "API key cooling down; trying the next key");
                    self.cool(i, &error);
                }
                Err(error) => return Err(error),
            }
        }
        Err(ProviderError::KeysExhausted {
            keys: self.profiles.len(),
            tried,
        })
    }
}
