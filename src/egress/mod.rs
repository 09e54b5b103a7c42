//! Every fetch a message or the model can cause — `web_fetch`, a webhook attachment's `url`
//! — goes through one policy (SPEC section 18):
//!
//! - **Addresses** (`addresses.rs`): loopback, private, link-local, metadata, the host's own
//!   and every other special-use address are refused in every mode unless
//!   `tools.web_fetch_allow_private`. Literal addresses are checked up front and host names
//!   through a resolver that drops such addresses (so a name cannot rebind to one between
//!   check and connect), on every redirect.
//! - **Hosts** (`rules.rs`, `[egress]`): `deny` is never reached; in allowlist mode a host
//!   `allow` does not list needs a person's yes. For a tool call the approvals gate asks
//!   before the call runs (the tool's risk carries the reason, see
//!   [`Guarded::unlisted_reason`]); an attachment, which no one is asked about, is refused.
//!   A redirect may not leave for a denied host, nor (allowlist mode) for an unlisted one
//!   other than the first.
//! - **Secrets**: the URL passes the leak scan before it is requested.
//!
//! The system proxy variables are never used (a proxy would resolve and connect for us, past
//! the filter); `tools.web_fetch_proxy` names one explicitly.
//!
//! Owns the policy and the client built with it; knows nothing of tools, approvals or media.

mod addresses;
mod rules;

pub use addresses::{is_private, url_names_private_ip};
pub use rules::{EgressRules, Reach};

use crate::redact::{Redactor, Sink};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

const MAX_REDIRECTS: usize = 5;

/// Who causes a fetch: what an unlisted first host means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// A tool call: the approvals gate has asked about an unlisted host already.
    Tool,
    /// A file that came with a message: no one was asked, so only listed hosts.
    Attachment,
}

/// The policy and its client, built on first use (idle services never pay for it). One per
/// service, shared by every fetch it governs; each request sets its own time limit.
pub struct Guarded {
    client: OnceLock<Result<reqwest::Client, String>>,
    allow_private: bool,
    /// `tools.web_fetch_proxy` (empty: no proxy, whatever the environment says).
    proxy: String,
    rules: Arc<EgressRules>,
    redactor: Arc<Redactor>,
}

impl Guarded {
    /// Addresses only: every public host, nothing redacted (tests, `config check`).
    pub fn new(allow_private: bool, proxy: &str) -> Self {
        Guarded {
            client: OnceLock::new(),
            allow_private,
            proxy: proxy.trim().to_string(),
            rules: Arc::new(EgressRules::default()),
            redactor: Arc::new(Redactor::none()),
        }
    }

    /// The policy `[tools]` and `[egress]` set, URLs scanned by `redactor`.
    pub fn from_config(config: &crate::config::Config, redactor: Arc<Redactor>) -> Self {
        Guarded {
            rules: Arc::new(EgressRules::from_config(&config.egress)),
            redactor,
            ..Self::new(
                config.tools.web_fetch_allow_private,
                &config.tools.web_fetch_proxy,
            )
        }
    }

    /// What the host rules say of `host`.
    pub fn judge(&self, host: &str) -> Reach {
        self.rules.judge(host)
    }

    /// Why a tool's call to `host` must ask a person first (allowlist mode, not listed);
    /// None when it may run (listed, open mode, or denied — the call then refuses itself).
    pub fn unlisted_reason(&self, host: &str) -> Option<String> {
        (self.rules.judge(host) == Reach::Unlisted)
            .then(|| format!("`{host}` is not on the egress allowlist (egress.allow)"))
    }

    /// Checks `raw` (http or https, not naming a refused address or host; secrets redacted)
    /// and returns the client that will fetch it under the policy.
    pub fn check(
        &self,
        raw: &str,
        caller: Caller,
    ) -> Result<(&reqwest::Client, reqwest::Url), String> {
        let raw = self.redactor.redact(raw, Sink::Fetch);
        let url = reqwest::Url::parse(&raw).map_err(|e| format!("not a URL: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err("only http and https are allowed".into());
        }
        if !self.allow_private && url_names_private_ip(&url) {
            return Err(
                "refused: the address is loopback or private (set tools.web_fetch_allow_private to allow)"
                    .into(),
            );
        }
        let host = url.host_str().unwrap_or_default();
        match self.rules.judge(host) {
            Reach::Allowed => {}
            Reach::Denied(entry) => {
                return Err(format!("refused: egress.deny lists `{entry}` ({host})"));
            }
            Reach::Unlisted if caller == Caller::Tool => {}
            Reach::Unlisted => {
                return Err(format!(
                    "refused: `{host}` is not on the egress allowlist (egress.allow)"
                ));
            }
        }
        let client = self
            .client
            .get_or_init(|| build_client(self.allow_private, &self.proxy, self.rules.clone()))
            .as_ref()
            .map_err(Clone::clone)?;
        Ok((client, url))
    }
}

/// Why a redirect to `next` must not be followed (the first URL of the chain is `first`).
fn redirect_refusal(
    next: &reqwest::Url,
    first: Option<&reqwest::Url>,
    allow_private: bool,
    rules: &EgressRules,
) -> Option<String> {
    if !allow_private && url_names_private_ip(next) {
        return Some("redirect to a private or loopback address refused".into());
    }
    let host = next.host_str().unwrap_or_default();
    match rules.judge(host) {
        Reach::Allowed => None,
        Reach::Denied(entry) => Some(format!(
            "redirect to {host} refused: egress.deny lists `{entry}`"
        )),
        Reach::Unlisted if first.and_then(|f| f.host_str()) == Some(host) => None,
        Reach::Unlisted => Some(format!(
            "redirect to {host} refused: it is not on the egress allowlist (egress.allow)"
        )),
    }
}

fn build_client(
    allow_private: bool,
    proxy: &str,
    rules: Arc<EgressRules>,
) -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .user_agent("ferroclaw-fetch")
        .tls_built_in_native_certs(false)
        .redirect(reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= MAX_REDIRECTS {
                return attempt.error("too many redirects");
            }
            let refusal = redirect_refusal(
                attempt.url(),
                attempt.previous().first(),
                allow_private,
                &rules,
            );
            match refusal {
                Some(why) => attempt.error(why),
                None => attempt.follow(),
            }
        }));
    if !allow_private {
        builder = builder.dns_resolver(Arc::new(addresses::PublicOnly));
    }
    builder = if proxy.is_empty() {
        builder.no_proxy()
    } else {
        builder.proxy(
            reqwest::Proxy::all(proxy)
                .map_err(|_| "tools.web_fetch_proxy is not a proxy URL".to_string())?,
        )
    };
    builder.build().map_err(|e| format!("fetch client: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{EgressConfig, EgressMode};

    #[test]
    fn redirects_may_not_leave_for_denied_or_other_unlisted_hosts() {
        let rules = EgressRules::from_config(&EgressConfig {
            mode: EgressMode::Allowlist,
            allow: vec!["ok.example".into()],
            deny: vec!["*.bad.example".into()],
        });
        let url = |s: &str| reqwest::Url::parse(s).unwrap();
        let first = url("https://asked.example/a");
        let refused = |next: &str| redirect_refusal(&url(next), Some(&first), true, &rules);
        assert_eq!(refused("https://ok.example/x"), None);
        assert_eq!(
            refused("https://asked.example/b"),
            None,
            "the host a person allowed"
        );
        assert!(
            refused("https://x.bad.example/")
                .unwrap()
                .contains("egress.deny")
        );
        assert!(
            refused("https://other.example/")
                .unwrap()
                .contains("allowlist")
        );
        assert!(
            redirect_refusal(&url("http://127.0.0.1/"), Some(&first), false, &rules)
                .unwrap()
                .contains("private")
        );
    }
}
