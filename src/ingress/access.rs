//! Who may talk to the bot (SPEC section 5, access): `open`, `allowlist` (only
//! `allowed_users`) and `pairing` (allowed users plus those an operator approved with
//! `ferroclaw pairing approve CODE`). Decided before a message reaches a lane, so a
//! stranger's message never reaches the model. Channels without a policy are open.

use crate::config::AccessMode;
use crate::storage::{PairingOutcome, PairingRequest, PairingState, Store, StoreResult};
use ferroclaw_channel_core::{ChatKind, InboundMessage};
use std::collections::{HashMap, HashSet};

/// Pairing codes live this long.
pub const CODE_TTL_MS: i64 = 3_600_000;
/// At most this many codes wait for approval per channel.
pub const MAX_PENDING: i64 = 3;

pub struct AccessPolicy {
    pub mode: AccessMode,
    pub allowed_users: HashSet<String>,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// Drop silently.
    Deny,
    /// Answer once with this pairing code.
    Pair(String),
}

#[derive(Default)]
pub struct Access {
    policies: HashMap<String, AccessPolicy>,
}

impl Access {
    pub fn new(policies: HashMap<String, AccessPolicy>) -> Self {
        Access { policies }
    }

    pub async fn check(&self, store: &dyn Store, message: &InboundMessage) -> StoreResult<Verdict> {
        let channel = &message.route.channel;
        let Some(policy) = self.policies.get(channel) else {
            return Ok(Verdict::Allow);
        };
        let user = &message.sender.id;
        if policy.mode == AccessMode::Open || policy.allowed_users.contains(user) {
            return Ok(Verdict::Allow);
        }
        if policy.mode == AccessMode::Allowlist {
            return Ok(Verdict::Deny);
        }
        if let Some(row) = store.pairing_get(channel, user).await?
            && row.state == PairingState::Approved
        {
            return Ok(Verdict::Allow);
        }
        // Strangers get a code only in a direct message, and only once per code.
        if message.route.kind != ChatKind::Direct {
            return Ok(Verdict::Deny);
        }
        let now = crate::clock::now_ms();
        let request = PairingRequest {
            channel: channel.clone(),
            user_id: user.clone(),
            user_name: message.sender.name.clone(),
            code: new_code(),
            now_ms: now,
            expires_at: now + CODE_TTL_MS,
        };
        Ok(match store.pairing_request(&request, MAX_PENDING).await? {
            PairingOutcome::Created(code) => Verdict::Pair(code),
            PairingOutcome::Pending => Verdict::Deny,
        })
    }
}

/// Six characters from an alphabet without look-alikes.
fn new_code() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZ23456789";
    uuid::Uuid::new_v4().as_bytes()[..6]
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

/// The one message a stranger gets.
pub fn pairing_text(code: &str) -> String {
    format!(
        "👋 I don't know you yet. Your pairing code is {code}. Ask the operator to run \
         `ferroclaw pairing approve {code}`; the code expires in an hour."
    )
}
