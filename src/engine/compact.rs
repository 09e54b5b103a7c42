//! Context management: the history window sent with each model call stays within
//! `agent.max_context_tokens`. When the window is full (more entries than a turn loads) or
//! would not fit, older entries are summarised by the model into the session summary, which
//! is stored and sent in their place.

use super::calls::ModelCall;
use super::{Engine, TurnError, context};
use crate::policy::{CallKind, CallScope};
use crate::providers::{ChatMessage, ChatRequest, Role};
use crate::storage::{SessionRow, TranscriptEntry, TranscriptRole};

/// The most of the dropped history one reading call is shown (its newest part).
const MAX_READ_CHARS: usize = 24_000;
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
    sender: Option<&str>,
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
    // Boxed (here and in `force`): compacting is rare, and unboxed its future would size
    // every turn's, held by each turn in flight (about 5 KB of a 6 KB model turn).
    Box::pin(compact(engine, session, &window, KEEP_RECENT, sender)).await
}

/// Compact as far as possible (after the provider said the context is too long).
pub(super) async fn force(
    engine: &Engine,
    session: &mut SessionRow,
    sender: Option<&str>,
) -> Result<Vec<ChatMessage>, TurnError> {
    let window = load_window(engine, session).await?;
    Box::pin(compact(engine, session, &window, 0, sender)).await
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
    sender: Option<&str>,
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
    // The features read what is dropped (memory keeps its facts) while it is summarised.
    let (summary, ()) = tokio::join!(
        summarise(engine, session, old),
        read_before_dropping(engine, session, old, sender)
    );
    match summary {
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

/// The dropped entries as one text (each cut at 2,000 characters).
fn conversation(old: &[TranscriptEntry]) -> String {
    let mut text = String::from("[Conversation]\n");
    for entry in old {
        let content: String = entry.content.chars().take(2000).collect();
        text.push_str(&format!("{}: {content}\n", entry.role));
    }
    text
}

/// Ask, in one bounded call each, the components that read what compaction drops (when a
/// person said something in it), and hand them the answers.
async fn read_before_dropping(
    engine: &Engine,
    session: &SessionRow,
    old: &[TranscriptEntry],
    sender: Option<&str>,
) {
    if !old.iter().any(|e| e.role == TranscriptRole::User) {
        return;
    }
    let Some(upto) = old.last().map(|e| e.id) else {
        return;
    };
    let scope = crate::component::CompactionScope {
        session_key: &session.key,
        route: &session.route,
        sender,
        upto,
    };
    for component in &engine.components {
        let Some(instruction) = component.before_compaction() else {
            continue;
        };
        let mut text = conversation(old);
        if text.len() > MAX_READ_CHARS {
            let cut = text.floor_char_boundary(text.len() - MAX_READ_CHARS);
            text.replace_range(..cut, "[…]\n");
        }
        if let Some(answer) = ask(engine, session, CallKind::MemoryFlush, instruction, text).await {
            component.compacted(&scope, &answer).await;
        }
    }
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
    text.push_str(&conversation(old));
    ask(engine, session, CallKind::Compaction, SUMMARY_PROMPT, text).await
}

/// One call without tools on the session's model: its answer, or None (empty or failed).
async fn ask(
    engine: &Engine,
    session: &SessionRow,
    kind: CallKind,
    instruction: &str,
    text: String,
) -> Option<String> {
    let request = ChatRequest {
        system: instruction.into(),
        messages: vec![ChatMessage::text(Role::User, text)],
        volatile: None,
        tools: std::sync::Arc::new([]),
        affinity: Some(session.key.as_str().into()),
    };
    let model = engine.session_model(session);
    let call = ModelCall {
        kind,
        scope: CallScope {
            session_key: &session.key,
            agent: &engine.agents().of_session(&session.key).id,
            sender: None,
            route: &session.route,
            origin_message: None,
            origin_fresh: false,
        },
        model: &model,
        fallbacks: None,
        // A run's history is background work's.
        background: crate::spawn::run_of_session(&session.key).is_some(),
    };
    match engine.call_model(call, &request, &|_| {}).await {
        Ok((response, _)) if !response.content.trim().is_empty() => Some(response.content),
        Ok(_) => None,
        Err(err) => {
            tracing::warn!(error = %err, kind = kind.as_str(), "call about dropped history failed");
            None
        }
    }
}
