//! Voice notes and audio to text through an OpenAI-compatible `/audio/transcriptions`
//! endpoint (`[transcription]`: OpenAI, Groq, a local whisper.cpp server): a multipart
//! upload of the file and the model name, answered with `{"text": ...}` (and, from models
//! billed by token, `usage: {type: "tokens", input_tokens, output_tokens}`).

use crate::config::TranscriptionConfig;
use secrecy::{ExposeSecret, SecretString};
use std::time::Duration;

/// The configured transcription service (None inside: not configured).
#[derive(Clone, Default)]
pub struct Transcriber {
    service: Option<(String, String, Option<SecretString>)>,
}

impl Transcriber {
    /// From `[transcription]`, with the key from its `api_key_env` (resolved at load).
    pub fn new(config: &TranscriptionConfig, key: Option<SecretString>) -> Self {
        if config.base_url.is_empty() {
            return Transcriber::default();
        }
        Transcriber {
            service: Some((
                config.base_url.trim_end_matches('/').to_string(),
                config.model.clone(),
                key,
            )),
        }
    }

    /// The configured model (None: no service), as `transcription/<model>`: the key its
    /// price is found under and what its calls are accounted as.
    pub fn model(&self) -> Option<crate::providers::ModelRef> {
        self.service
            .as_ref()
            .map(|(_, model, _)| crate::providers::ModelRef {
                provider: "transcription".into(),
                model: model.clone(),
            })
    }

    /// The text of an audio file and what the service says it used; Err says why not
    /// (shown to the user).
    pub async fn transcribe(
        &self,
        name: &str,
        mime: &str,
        bytes: Vec<u8>,
    ) -> Result<(String, crate::providers::Usage), String> {
        let Some((base, model, key)) = &self.service else {
            return Err("no transcription service is configured ([transcription] base_url)".into());
        };
        let part = reqwest::multipart::Part::bytes(bytes)
            .file_name(name.to_string())
            .mime_str(mime)
            .map_err(|e| e.to_string())?;
        let form = reqwest::multipart::Form::new()
            .text("model", model.clone())
            .part("file", part);
        let mut request = crate::http::shared()
            .post(format!("{base}/audio/transcriptions"))
            .timeout(Duration::from_secs(120))
            .multipart(form);
        if let Some(key) = key {
            request = request.bearer_auth(key.expose_secret());
        }
        let response = request.send().await.map_err(|e| {
            format!(
                "the transcription service did not answer: {}",
                e.without_url()
            )
        })?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!(
                "the transcription service answered HTTP {}",
                status.as_u16()
            ));
        }
        let body: serde_json::Value = response.json().await.map_err(|e| {
            format!(
                "the transcription service's answer is not JSON: {}",
                e.without_url()
            )
        })?;
        // Models billed by the second report `{"type": "duration"}`: no tokens to count.
        let tokens = |key: &str| body["usage"][key].as_i64().unwrap_or(0).max(0);
        let usage = crate::providers::Usage {
            input_tokens: tokens("input_tokens"),
            output_tokens: tokens("output_tokens"),
            ..Default::default()
        };
        match body["text"].as_str().map(str::trim) {
            Some(text) if !text.is_empty() => Ok((text.to_string(), usage)),
            _ => Err("the transcription came back empty".into()),
        }
    }
}
