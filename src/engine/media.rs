//! The media step of a turn: the files that came with a message are fetched within the
//! `[media]` limits, kept in the session's workspace (`inbox/`), and turned into what the
//! model is given — images as image parts when the model can see, else a vision model's
//! description, else a note of where the image is; documents as a text excerpt; voice notes
//! and audio as their transcript. A file too large, of a refused type, or a voice note that
//! could not be transcribed is answered with a clear line instead of a model call.

use super::calls::ModelCall;
use super::{Engine, Persona, TurnInput};
use crate::media::{self, MediaError};
use crate::policy::CallKind;
use crate::providers::{ChatMessage, ChatRequest, ImagePart, ModelRef, Role};
use crate::storage::SessionRow;
use base64::Engine as _;
use ferroclaw_channel_core::{AttachmentKind, AttachmentSource, FetchError};
use std::sync::Arc;

/// What the media step gives the turn.
pub(crate) struct Prepared {
    /// Lines put before the message text (notes, excerpts, transcripts).
    notes: Vec<String>,
    pub images: Vec<ImagePart>,
}

impl Prepared {
    /// Whether the notes (a transcript) name the bot by one of `names`.
    pub fn names_any(&self, names: &[String]) -> bool {
        let text = self.notes.join(" ").to_lowercase();
        names.iter().any(|n| text.contains(&n.to_lowercase()))
    }

    /// The text the model reads: the notes, then what the person wrote.
    pub fn text_with(&self, text: &str) -> String {
        let mut out = self.notes.join("\n");
        if !text.trim().is_empty() {
            if !out.is_empty() {
                out.push_str("\n\n");
            }
            out.push_str(text);
        }
        out
    }
}

const DESCRIBE_PROMPT: &str = "Describe this image for someone who cannot see it: what it shows, any text in it, \
and anything notable. Be factual and concise.";

impl Engine {
    /// Whether `model` sees images (its provider's `vision` flag).
    pub(super) fn sees_images(&self, model: &ModelRef) -> bool {
        self.config
            .providers
            .get(&model.provider)
            .is_some_and(|p| p.vision)
    }

    pub(super) async fn prepare_media(
        &self,
        input: &TurnInput<'_>,
        session: &SessionRow,
        persona: &Persona,
    ) -> Result<Prepared, String> {
        let limits = &self.config.media;
        let workspace = super::context::workspace_for(&persona.agent.workspace, &session.key);
        let mut prepared = Prepared {
            notes: Vec::new(),
            images: Vec::new(),
        };
        let mut total = 0u64;
        for attachment in input.attachments {
            let name = if attachment.name.is_empty() {
                format!("{:?}", attachment.kind).to_lowercase()
            } else {
                attachment.name.clone()
            };
            let too_large = || MediaError::FileTooLarge {
                name: name.clone(),
                limit: media::human(limits.max_file_bytes),
            };
            if attachment.size.is_some_and(|n| n > limits.max_file_bytes) {
                return Err(too_large().to_string());
            }
            let mime = media::mime_of(attachment);
            if !media::allowed(limits, &mime) {
                return Err(MediaError::TypeRefused { name, mime }.to_string());
            }
            let fetched = match &attachment.source {
                AttachmentSource::Url { url } => {
                    media::fetch_url(&self.attachment_fetch, url, limits.max_file_bytes).await
                }
                AttachmentSource::Inline { base64 } => {
                    media::decode_inline(base64, limits.max_file_bytes)
                }
                AttachmentSource::Platform { id } => {
                    self.feedback
                        .fetch_file(input.route, id, limits.max_file_bytes)
                        .await
                }
            };
            let bytes = match fetched {
                Ok(bytes) => bytes,
                Err(FetchError::TooLarge { .. }) => return Err(too_large().to_string()),
                Err(FetchError::Failed(why)) => {
                    return Err(MediaError::Fetch { name, why }.to_string());
                }
            };
            total += bytes.len() as u64;
            if total > limits.max_message_bytes {
                return Err(MediaError::MessageTooLarge {
                    limit: media::human(limits.max_message_bytes),
                }
                .to_string());
            }
            let (path, _) = media::store(&workspace, &name, &bytes).map_err(|e| {
                MediaError::Store {
                    name: name.clone(),
                    why: e.to_string(),
                }
                .to_string()
            })?;
            let size = media::human(bytes.len() as u64);
            tracing::info!(kind = ?attachment.kind, mime = %mime, bytes = bytes.len(), "attachment stored");
            if mime.starts_with("image/") {
                let note = self
                    .image(
                        input,
                        &session.key,
                        persona,
                        (&mime, bytes, &path),
                        &mut prepared.images,
                    )
                    .await;
                prepared.notes.push(note);
            } else if mime.starts_with("audio/")
                || matches!(
                    attachment.kind,
                    AttachmentKind::Voice | AttachmentKind::Audio
                )
            {
                let what = if attachment.kind == AttachmentKind::Voice {
                    "voice note"
                } else {
                    "audio"
                };
                // Not configured: the transcriber says so (no call, nothing to account).
                let transcribed = match self.transcriber.model() {
                    Some(model) => {
                        let call = ModelCall {
                            model: &model,
                            ..ModelCall::of_turn(
                                CallKind::Transcription,
                                input,
                                &session.key,
                                persona,
                            )
                        };
                        self.call_transcription(call, (&name, &mime, bytes)).await
                    }
                    None => self
                        .transcriber
                        .transcribe(&name, &mime, bytes)
                        .await
                        .map(|(text, _)| text),
                };
                match transcribed {
                    Ok(text) => prepared.notes.push(format!(
                        "[Transcript of the user's {what} (saved at {path}):] {text}"
                    )),
                    Err(why) => {
                        tracing::warn!(%why, "transcription failed");
                        return Err(format!(
                            "I could not transcribe your {what}: {why}. Please send it as text."
                        ));
                    }
                }
            } else {
                let bounds = media::PdfLimits {
                    timeout: std::time::Duration::from_secs(limits.pdf_timeout_secs.max(1)),
                    memory_bytes: limits.pdf_memory_mb.saturating_mul(1024 * 1024),
                    // Room for the excerpt after whitespace is folded.
                    max_text_bytes: limits.max_excerpt_chars.saturating_mul(16).max(64 * 1024),
                };
                let note = match media::document_text(&mime, bytes, bounds).await {
                    Ok(text) if text.trim().is_empty() => format!(
                        "[The user sent a document, saved at {path} ({mime}, {size}); it has no text to read.]"
                    ),
                    Ok(text) => format!(
                        "[The user sent a document, saved at {path} ({mime}, {size}). Its text begins:]\n{}",
                        media::excerpt(&text, limits.max_excerpt_chars)
                    ),
                    Err(why) => format!(
                        "[The user sent a file, saved at {path} ({mime}, {size}); its text was not read: {why}.]"
                    ),
                };
                prepared.notes.push(note);
            }
        }
        Ok(prepared)
    }

    /// An image: an image part for a model that sees, else a vision model's description,
    /// else a note of where it is.
    async fn image(
        &self,
        input: &TurnInput<'_>,
        session_key: &str,
        persona: &Persona,
        (mime, bytes, path): (&str, Vec<u8>, &str),
        images: &mut Vec<ImagePart>,
    ) -> String {
        let part = ImagePart {
            mime: mime.to_string(),
            base64: Arc::from(base64::engine::general_purpose::STANDARD.encode(&bytes)),
        };
        if self.sees_images(&persona.model) {
            images.push(part);
            return format!("[The user sent an image (attached, saved at {path}).]");
        }
        let vision = &self.config.media.vision_model;
        if let Some(model) = ModelRef::parse(vision) {
            let mut message = ChatMessage::text(Role::User, DESCRIBE_PROMPT);
            message.images.push(part);
            let request = ChatRequest {
                system: String::new(),
                messages: vec![message],
                volatile: None,
                tools: Arc::from([]),
                affinity: None,
            };
            let call = ModelCall {
                fallbacks: Some(&[]),
                model: &model,
                ..ModelCall::of_turn(CallKind::VisionDescription, input, session_key, persona)
            };
            match self.call_model(call, &request, &|_| {}).await {
                Ok((response, _)) if !response.content.trim().is_empty() => {
                    return format!(
                        "[The user sent an image, saved at {path}. A vision model describes it:] {}",
                        response.content.trim()
                    );
                }
                Ok(_) => tracing::warn!("the vision model gave an empty description"),
                Err(e) => {
                    tracing::warn!(error = %e, "the vision model could not describe an image")
                }
            }
        }
        format!("[The user sent an image, saved at {path}; you cannot see images.]")
    }
}
