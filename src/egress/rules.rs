//! `[egress]` resolved: which hosts are listed, which are denied, and what a host is under
//! them. Knows nothing of requests or approvals.

use crate::config::{EgressConfig, EgressMode, host_pattern};

/// What the rules say of one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// Reached without asking (open mode, or listed in `allow`).
    Allowed,
    /// `deny` lists it (the entry that matched): never reached.
    Denied(String),
    /// Allowlist mode and `allow` does not list it: a person must say yes first.
    Unlisted,
}

#[derive(Debug, Clone, Default)]
pub struct EgressRules {
    allowlist: bool,
    allow: Vec<String>,
    deny: Vec<String>,
}

impl EgressRules {
    pub fn from_config(config: &EgressConfig) -> Self {
        let clean = |entries: &[String]| {
            entries
                .iter()
                .filter_map(|e| host_pattern(e).ok())
                .collect()
        };
        EgressRules {
            allowlist: config.mode == EgressMode::Allowlist,
            allow: clean(&config.allow),
            deny: clean(&config.deny),
        }
    }

    /// What `host` (as a URL names it: a name, an IPv4 literal or a bracketed IPv6 one) is.
    pub fn judge(&self, host: &str) -> Reach {
        let host = normalise(host);
        if let Some(entry) = self.deny.iter().find(|p| matches(p, &host)) {
            return Reach::Denied(entry.clone());
        }
        if !self.allowlist || self.allow.iter().any(|p| matches(p, &host)) {
            Reach::Allowed
        } else {
            Reach::Unlisted
        }
    }
}

fn normalise(host: &str) -> String {
    let host = host.trim_end_matches('.');
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    host.to_ascii_lowercase()
}

/// `*.domain` matches every name under `domain` (not `domain` itself); anything else only
/// itself.
fn matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(domain) => host
            .strip_suffix(domain)
            .is_some_and(|rest| rest.len() > 1 && rest.ends_with('.')),
        None => pattern == host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(mode: EgressMode, allow: &[&str], deny: &[&str]) -> EgressRules {
        EgressRules::from_config(&EgressConfig {
            mode,
            allow: allow.iter().map(|s| s.to_string()).collect(),
            deny: deny.iter().map(|s| s.to_string()).collect(),
        })
    }

    #[test]
    fn deny_wins_then_the_allowlist_decides() {
        let open = rules(EgressMode::Open, &[], &["*.evil.example", "10.9.9.9"]);
        assert_eq!(open.judge("anything.org"), Reach::Allowed);
        assert_eq!(
            open.judge("a.b.EVIL.example."),
            Reach::Denied("*.evil.example".into())
        );
        assert_eq!(
            open.judge("evil.example"),
            Reach::Allowed,
            "only subdomains"
        );
        assert_eq!(open.judge("notevil.example"), Reach::Allowed);
        assert!(matches!(open.judge("10.9.9.9"), Reach::Denied(_)));

        let listed = rules(
            EgressMode::Allowlist,
            &["api.github.com", "*.wikipedia.org", "[2001:db8::7]"],
            &["bad.wikipedia.org"],
        );
        assert_eq!(listed.judge("api.github.com"), Reach::Allowed);
        assert_eq!(listed.judge("en.wikipedia.org"), Reach::Allowed);
        assert_eq!(listed.judge("[2001:db8::7]"), Reach::Allowed);
        assert!(matches!(
            listed.judge("bad.wikipedia.org"),
            Reach::Denied(_)
        ));
        assert_eq!(listed.judge("github.com"), Reach::Unlisted);
        assert_eq!(listed.judge("wikipedia.org"), Reach::Unlisted);
    }
}
