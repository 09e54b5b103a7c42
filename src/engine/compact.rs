//! Context management: the history window sent with each model call stays within
//! `agent.max_context_tokens`. When the window is full (more entries than a turn loads) or
//! would not fit, older entries are summarised by the model into the session summary, which
//! is stored and sent in their place.

use super::calls::ModelCall;
use super::{Engine, TurnError, context};
use crate::policy::{CallKind, CallScope};
use crate::providers::{ChatMessage, ChatRequest, Role};
use crate::storage::{SessionRow, TranscriptEntry, TranscriptRole};

/// Entries kept verbatim after a compaction (moved back to the nearest user message).
const KEEP_RECENT: usize = 8;
/// System prompt of summarisation calls (tests recognise them by it).
pub const SUMMARY_PROMPT: &str = "You summarise conversations for an assistant's long-term memory. \
Write a concise summary of the conversation below: facts, the user's preferences, decisions, open \
tasks and tool results that still matter. Reply with the summary only.";

/// A rough token estimate (4 characters a token, plus per-message overhead).
pub fn estimate_tokens(system: &str, messages: &[ChatMessage]) -> usize {
    let chars: usize = system.len()
        + messages
            .iter()
            .map(|m| {
                m.content.len()
                    + m.tool_calls
                        .iter()
                        .map(|c| c.arguments.len() + c.name.len())
                        .sum::<usize>()
            })
            .sum::<usize>();
    chars / 4 + 4 * messages.len() + 8
}

/// The history for a new turn, compacting first when needed.
pub(super) async fn prepare(
    engine: &Engine,
    session: &mut SessionRow,
    turn: &[ChatMessage],
) -> Result<Vec<ChatMessage>, TurnError> {
    let window = load_window(engine, session).await?;
    let history = context::history_messages(session.summary.as_deref(), &window);
    let mut all = history.clone();
    all.extend(turn.iter().cloned());
    let tokens = estimate_tokens(&engine.config.agent.system_prompt, &all) + engine.tool_tokens();
    let full = window.len() as i64 >= context::HISTORY_ENTRIES;
    if !full && tokens <= budget(engine) {
        return Ok(history);
    }
    tracing::info!(tokens, entries = window.len(), "compacting session history");
    compact(engine, session, &window, KEEP_RECENT).await
}

/// Compact as far as possible (after the provider said the context is too long).
pub(super) async fn force(
    engine: &Engine,
    session: &mut SessionRow,
) -> Result<Vec<ChatMessage>, TurnError> {
    let window = load_window(engine, session).await?;
    compact(engine, session, &window, 0).await
}

fn budget(engine: &Engine) -> usize {
    engine.config.agent.max_context_tokens as usize * 3 / 4
}

async fn load_window(
    engine: &Engine,
    session: &SessionRow,
) -> Result<Vec<TranscriptEntry>, TurnError> {
    Ok(engine
        .store
        .transcript_recent(
            &session.key,
            session.epoch,
            session.summary_upto,
            context::HISTORY_ENTRIES,
        )
        .await?)
}

async fn compact(
    engine: &Engine,
    session: &mut SessionRow,
    window: &[TranscriptEntry],
    keep: usize,
) -> Result<Vec<ChatMessage>, TurnError> {
    // Keep at most `keep` recent entries, and no more than half the budget of them; start the
    // kept part at a user message so no tool exchange is cut in two.
    let half = budget(engine) / 2;
    let mut kept_tokens = 0;
    let mut split = window.len();
    while split > 0 && window.len() - split < keep {
        kept_tokens += window[split - 1].content.len() / 4 + 4;
        if kept_tokens > half {
            break;
        }
        split -= 1;
    }
    while split < window.len() && window[split].role != TranscriptRole::User {
        split += 1;
    }
    if split == 0 {
        return Ok(context::history_messages(
            session.summary.as_deref(),
            window,
        ));
    }
    let (old, recent) = window.split_at(split);
    match summarise(engine, session, old).await {
        Some(summary) => {
            let upto = old.last().expect("split > 0").id;
            engine
                .store
                .session_set_summary(&session.key, &summary, upto)
                .await?;
            session.summary = Some(summary);
            session.summary_upto = upto;
        }
        None => tracing::warn!("summarisation failed; older history is left out of this call"),
    }
    Ok(context::history_messages(
        session.summary.as_deref(),
        recent,
    ))
}

async fn summarise(
    engine: &Engine,
    session: &SessionRow,
    old: &[TranscriptEntry],
) -> Option<String> {
    let mut text = String::new();
    if let Some(previous) = &session.summary {
        text.push_str("[Earlier summary]\n");
        text.push_str(previous);
        text.push_str("\n\n");
    }
    text.push_str("[Conversation]\n");
    for entry in old {
        let content: String = entry.content.chars().take(2000).collect();
        text.push_str(&format!("{}: {content}\n", entry.role));
    }
    let request = ChatRequest {
        system: SUMMARY_PROMPT.into(),
        messages: vec![ChatMessage::text(Role::User, text)],
        volatile: None,
        tools: std::sync::Arc::new([]),
        affinity: Some(session.key.as_str().into()),
    };
    let model = engine.session_model(session);
    let call = ModelCall {
        kind: CallKind::Compaction,
        scope: CallScope {
            session_key: &session.key,
            agent: &engine.agents().of_session(&session.key).id,
            sender: None,
            route: &session.route,
            origin_message: None,
        },
        model: &model,
        fallbacks: None,
    };
    match engine.call_model(call, &request, &|_| {}).await {
        Ok((response, _)) if !response.content.trim().is_empty() => Some(response.content),
        Ok(_) => None,
        Err(err) => {
            tracing::warn!(error = %err, "summarisation call failed");
            None
        }
    }
}
