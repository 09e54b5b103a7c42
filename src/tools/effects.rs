//! Side effects already carried out in a turn, so a turn redone after a crash does not
//! repeat them. A call of a tool that is not read-only is recorded (tool, arguments, and how
//! many times the same call came before in this turn) with its result; when the redone turn
//! makes the same call again, the stored result is returned and the tool is not run. The
//! records of a turn are deleted when the turn commits (`TurnCommit::clear_effects`, and
//! `TurnCommit::run_step` for a subagent's step, which a resumed run redoes the same way).

use crate::storage::EffectStore;
use std::sync::Arc;

tokio::task_local! {
    /// The side-effecting tool call being run: its identity (`EffectLog::call_id`) and
    /// whether its turn is being redone.
    pub(super) static CALL: (String, bool);
}

/// The identity of the tool call running in this task, when its turn records effects (the
/// same for the same call when the turn is redone, so a tool can make its effect idempotent
/// where recording its result afterwards leaves a window: a spawned subagent's run id), and
/// whether the turn is being redone (only then can an earlier attempt have acted).
pub fn current_call() -> Option<(String, bool)> {
    CALL.try_with(Clone::clone).ok()
}
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;

/// The record of one turn's side effects.
pub struct EffectLog {
    store: Arc<dyn EffectStore>,
    /// `j<journal id>` or `r<run id>:<step>`: the turn being (re)done.
    turn_key: String,
    /// The turn is being redone: look up recorded effects. A first attempt has none, and
    /// skips the lookup (so concurrent calls start in the order the model gave them).
    redo: bool,
    /// How many times each (tool, arguments) was called so far in this attempt.
    seen: Mutex<HashMap<String, u32>>,
}

impl EffectLog {
    pub fn new(store: Arc<dyn EffectStore>, turn_key: &str, redo: bool) -> Self {
        EffectLog {
            store,
            turn_key: turn_key.to_string(),
            redo,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// The key of the next call of `tool` with `arguments` in this turn.
    pub(super) fn call_key(&self, tool: &str, arguments: &serde_json::Value) -> String {
        let digest = Sha256::digest(arguments.to_string().as_bytes());
        let base = format!("{tool}:{}", hex::encode(&digest[..12]));
        let mut seen = self.seen.lock().expect("effect log lock");
        let n = seen.entry(base.clone()).or_insert(0);
        *n += 1;
        format!("{base}:{n}")
    }

    /// The result a previous attempt of this turn got for `call_key`, if it ran.
    pub(super) async fn recorded(&self, call_key: &str) -> Option<String> {
        if !self.redo {
            return None;
        }
        match self.store.tool_effect_get(&self.turn_key, call_key).await {
            Ok(found) => found,
            Err(err) => {
                tracing::warn!(error = %err, "could not read recorded tool effects");
                None
            }
        }
    }

    /// The identity of a call across attempts of its turn (the turn's key and `call_key`),
    /// and whether this attempt is a redo.
    pub(super) fn call_id(&self, call_key: &str) -> (String, bool) {
        (format!("{}/{call_key}", self.turn_key), self.redo)
    }

    pub(super) async fn record(&self, call_key: &str, result: &str) {
        let now = crate::clock::now_ms();
        if let Err(err) = self
            .store
            .tool_effect_put(&self.turn_key, call_key, result, now)
            .await
        {
            tracing::warn!(error = %err, "could not record a tool effect");
        }
    }
}
