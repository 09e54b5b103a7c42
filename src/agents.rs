//! Configured agents (SPEC section 12): `[agent]` is `main`, `[agents.ID]` adds others (their
//! unset keys take `[agent]`'s values), and `[[bindings]]` route inbound messages to them.
//!
//! Owns the resolved [`AgentProfile`]s and the routing rule (the most specific binding wins:
//! thread over chat over channel; no match → `main`). The agent id lives in the session key
//! (`agent:<id>:...`), so a session keeps its agent across restarts and processes. Knows the
//! config and routes; not the engine, tools or storage (`config::load` validates ids, models,
//! links and bindings before this is built).

use crate::config::{Binding, Config};
use crate::providers::ModelRef;
use ferroclaw_channel_core::ChatRoute;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The default agent: today's `[agent]` section.
pub const MAIN: &str = crate::config::MAIN_AGENT;

/// One agent as a turn runs it.
#[derive(Debug)]
pub struct AgentProfile {
    pub id: String,
    /// Shared with every persona of the agent.
    pub system_prompt: Arc<str>,
    pub model: ModelRef,
    pub fallbacks: Vec<ModelRef>,
    /// Root of its sessions' workspace folders; `skills/` in it holds its own skills.
    pub workspace: String,
    /// Tool allowlist (None: every tool).
    pub tools: Option<Vec<String>>,
    /// Skill filter by name (None: every skill).
    pub skills: Option<Vec<String>>,
    /// Agents it may spawn or delegate to (never itself: that is always allowed).
    pub may_delegate: Vec<String>,
    /// MCP servers whose tools it is offered (None: every server).
    pub mcp: Option<Vec<String>>,
}

impl AgentProfile {
    /// Whether a tool is in its allowlist.
    pub fn allows_tool(&self, name: &str) -> bool {
        self.tools
            .as_ref()
            .is_none_or(|list| list.iter().any(|t| t == name))
    }

    /// Whether it is offered the tools of MCP server `server`.
    pub fn uses_mcp(&self, server: &str) -> bool {
        self.mcp
            .as_ref()
            .is_none_or(|list| list.iter().any(|s| s == server))
    }

    /// Whether it may run `target` as a child (itself, or along a `may_delegate` link).
    pub fn may_run(&self, target: &str) -> bool {
        target == self.id || self.may_delegate.iter().any(|a| a == target)
    }
}

/// Every configured agent and the bindings.
#[derive(Debug)]
pub struct Agents {
    profiles: BTreeMap<String, Arc<AgentProfile>>,
    bindings: Vec<Binding>,
}

impl Agents {
    /// Resolve the validated config (models parse; unknown ids were refused at load).
    pub fn from_config(config: &Config) -> Self {
        let base = &config.agent;
        let models = |list: &[String]| -> Vec<ModelRef> {
            list.iter().filter_map(|m| ModelRef::parse(m)).collect()
        };
        let mut profiles = BTreeMap::new();
        let main_def = config.agents.get(MAIN).cloned().unwrap_or_default();
        let mut defs: Vec<(String, crate::config::AgentDef)> = vec![(MAIN.to_string(), main_def)];
        defs.extend(
            config
                .agents
                .iter()
                .filter(|(id, _)| *id != MAIN)
                .map(|(id, def)| (id.clone(), def.clone())),
        );
        for (id, def) in defs {
            let model = def.model.as_deref().unwrap_or(&base.model);
            let profile = AgentProfile {
                system_prompt: def
                    .system_prompt
                    .unwrap_or_else(|| base.system_prompt.clone())
                    .into(),
                model: ModelRef::parse(model).unwrap_or_else(|| ModelRef {
                    provider: "openai".into(),
                    model: model.to_string(),
                }),
                fallbacks: models(def.fallbacks.as_deref().unwrap_or(&base.fallbacks)),
                workspace: def.workspace.unwrap_or_else(|| base.workspace.clone()),
                tools: def.tools,
                skills: def.skills,
                mcp: def.mcp.or_else(|| base.mcp.clone()),
                may_delegate: def.may_delegate.into_iter().filter(|a| *a != id).collect(),
                id: id.clone(),
            };
            profiles.insert(id, Arc::new(profile));
        }
        Agents {
            profiles,
            bindings: config.bindings.clone(),
        }
    }

    pub fn main(&self) -> &Arc<AgentProfile> {
        &self.profiles[MAIN]
    }

    pub fn get(&self, id: &str) -> Option<&Arc<AgentProfile>> {
        self.profiles.get(id)
    }

    /// Every agent id, `main` first.
    pub fn ids(&self) -> Vec<String> {
        let mut ids = vec![MAIN.to_string()];
        ids.extend(self.profiles.keys().filter(|id| *id != MAIN).cloned());
        ids
    }

    pub fn all(&self) -> impl Iterator<Item = &Arc<AgentProfile>> {
        self.profiles.values()
    }

    /// The agent a session belongs to (its key's `agent:<id>:`); `main` for an agent no
    /// longer configured.
    pub fn of_session(&self, session_key: &str) -> &Arc<AgentProfile> {
        agent_of(session_key)
            .and_then(|id| self.profiles.get(id))
            .unwrap_or_else(|| self.main())
    }

    /// The agent that answers a message on `route`: the most specific matching binding.
    pub fn route(&self, route: &ChatRoute) -> &str {
        let mut best: Option<(u8, &str)> = None;
        for binding in &self.bindings {
            let Some(score) = specificity(binding, route) else {
                continue;
            };
            if best.is_none_or(|(top, _)| score > top) {
                best = Some((score, &binding.agent));
            }
        }
        best.map_or(MAIN, |(_, agent)| agent)
    }
}

/// How specific a binding is for `route` (None: it does not match).
fn specificity(binding: &Binding, route: &ChatRoute) -> Option<u8> {
    let mut score = 0;
    if let Some(channel) = &binding.channel {
        if *channel != route.channel {
            return None;
        }
        score += 1;
    }
    if let Some(chat) = &binding.chat {
        if *chat != route.chat_id {
            return None;
        }
        score += 2;
    }
    if let Some(thread) = &binding.thread {
        if Some(thread) != route.thread_id.as_ref() {
            return None;
        }
        score += 4;
    }
    Some(score)
}

/// The agent id in a session key (`agent:<id>:...`).
pub fn agent_of(session_key: &str) -> Option<&str> {
    session_key.strip_prefix("agent:")?.split(':').next()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroclaw_channel_core::ChatKind;

    fn route(channel: &str, chat: &str, thread: Option<&str>) -> ChatRoute {
        ChatRoute {
            channel: channel.into(),
            kind: ChatKind::Group,
            chat_id: chat.into(),
            thread_id: thread.map(Into::into),
        }
    }

    fn agents(bindings: &str) -> Agents {
        let text = format!(
            "[agents.a]\nsystem_prompt = \"A\"\n[agents.b]\nmodel = \"anthropic/x\"\n{bindings}"
        );
        let config: Config = toml::from_str(&text).unwrap();
        Agents::from_config(&config)
    }

    #[test]
    fn the_most_specific_binding_wins_and_no_match_is_main() {
        let agents = agents(
            "[[bindings]]\nagent = \"a\"\nchannel = \"telegram\"\n\
             [[bindings]]\nagent = \"b\"\nchannel = \"telegram\"\nchat = \"1\"\nthread = \"9\"\n\
             [[bindings]]\nagent = \"main\"\nchannel = \"telegram\"\nchat = \"1\"\n",
        );
        assert_eq!(agents.route(&route("telegram", "2", None)), "a");
        assert_eq!(agents.route(&route("telegram", "1", None)), "main");
        assert_eq!(agents.route(&route("telegram", "1", Some("9"))), "b");
        assert_eq!(agents.route(&route("discord", "1", Some("9"))), "main");
    }

    #[test]
    fn unset_keys_come_from_the_agent_section_and_sessions_name_their_agent() {
        let agents = agents("");
        let a = agents.get("a").unwrap();
        assert_eq!(&*a.system_prompt, "A");
        assert_eq!(a.model.to_string(), Config::default().agent.model);
        assert_eq!(agents.get("b").unwrap().model.to_string(), "anthropic/x");
        assert_eq!(agents.of_session("agent:b:cli:x").id, "b");
        assert_eq!(agents.of_session("agent:gone:cli:x").id, "main");
        assert_eq!(agents.ids(), ["main", "a", "b"]);
    }
}
