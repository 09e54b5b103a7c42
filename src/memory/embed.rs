//! Vectors for hybrid search: `POST {base_url}/embeddings` of an OpenAI-compatible provider
//! (`[memory] embedding_model = "<provider>/<model>"`), with that provider's first key.

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use std::time::Duration;

/// How long one embeddings call may take (recall waits for it before the turn's first call).
const TIMEOUT: Duration = Duration::from_secs(10);

pub struct Embedder {
    endpoint: String,
    /// `<provider>/<model>`, as stored with each vector.
    pub model: String,
    model_id: String,
    key: Option<SecretString>,
}

#[derive(Deserialize)]
struct Answer {
    data: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    embedding: Vec<f32>,
    #[serde(default)]
    index: Option<usize>,
}

impl Embedder {
    /// None when `model` is empty or names a provider that is not configured.
    pub fn from_config(
        config: &crate::config::Config,
        secrets: &crate::config::Secrets,
    ) -> Option<Self> {
        let model = &config.memory.embedding_model;
        let (provider, model_id) = model.split_once('/')?;
        let settings = config.providers.get(provider)?;
        Some(Embedder {
            endpoint: format!("{}/embeddings", settings.base_url().trim_end_matches('/')),
            model: model.clone(),
            model_id: model_id.to_string(),
            key: secrets
                .provider_keys
                .get(provider)
                .and_then(|keys| keys.first().cloned()),
        })
    }

    /// One vector per text, in order.
    pub async fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        let mut request = crate::http::shared()
            .post(&self.endpoint)
            .timeout(TIMEOUT)
            .json(&serde_json::json!({"model": self.model_id, "input": texts}));
        if let Some(key) = &self.key {
            request = request.bearer_auth(key.expose_secret());
        }
        let response = request
            .send()
            .await
            .map_err(|e| format!("embeddings request failed: {}", e.without_url()))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("embeddings endpoint answered {status}"));
        }
        let mut answer: Answer = response
            .json()
            .await
            .map_err(|e| format!("embeddings answer unreadable: {}", e.without_url()))?;
        if answer.data.len() != texts.len() {
            return Err(format!(
                "embeddings endpoint gave {} vectors for {} texts",
                answer.data.len(),
                texts.len()
            ));
        }
        answer.data.sort_by_key(|item| item.index.unwrap_or(0));
        Ok(answer.data.into_iter().map(|item| item.embedding).collect())
    }
}
