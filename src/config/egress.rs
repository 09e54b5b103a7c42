//! The egress keys (SPEC section 18): which hosts a turn's fetches may reach without asking.
//! `[egress] mode = "open"` reaches every public host; `"allowlist"` reaches the `allow`
//! entries and asks a person (the approvals) for any other; `deny` is never reached in
//! either mode. Private and special-use addresses stay refused in both unless
//! `tools.web_fetch_allow_private`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EgressMode {
    #[default]
    Open,
    Allowlist,
}

/// `[egress]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EgressConfig {
    pub mode: EgressMode,
    /// Host names (`api.github.com`), every subdomain of one (`*.wikipedia.org`, which does
    /// not include `wikipedia.org` itself), or IP literals (`203.0.113.7`).
    pub allow: Vec<String>,
    /// The same forms; never reached, whatever `allow` or a person says.
    pub deny: Vec<String>,
}

impl EgressConfig {
    /// Entries that are not a host, a `*.domain` or an IP literal (a URL, a port, a path).
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut found = Vec::new();
        for (list, entries) in [("allow", &self.allow), ("deny", &self.deny)] {
            for (i, entry) in entries.iter().enumerate() {
                if let Err(why) = host_pattern(entry) {
                    found.push((format!("egress.{list}[{i}]"), format!("`{entry}` {why}")));
                }
            }
        }
        found
    }
}

/// Why `entry` is not a host pattern; Ok with it normalised (lower case, no trailing dot).
pub fn host_pattern(entry: &str) -> Result<String, &'static str> {
    let entry = entry.trim().trim_end_matches('.').to_ascii_lowercase();
    let name = entry.strip_prefix("*.").unwrap_or(&entry);
    if entry.parse::<std::net::IpAddr>().is_ok() {
        return Ok(entry);
    }
    if let Some(v6) = entry.strip_prefix('[').and_then(|e| e.strip_suffix(']'))
        && v6.parse::<std::net::Ipv6Addr>().is_ok()
    {
        return Ok(v6.to_string());
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    };
    if name.is_empty() || !name.split('.').all(label_ok) {
        return Err("is not a host name, `*.domain` or IP address (no scheme, port or path)");
    }
    Ok(entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_hosts_wildcards_or_addresses() {
        assert_eq!(host_pattern("API.GitHub.com.").unwrap(), "api.github.com");
        assert_eq!(host_pattern("*.wikipedia.org").unwrap(), "*.wikipedia.org");
        assert_eq!(host_pattern("203.0.113.7").unwrap(), "203.0.113.7");
        assert_eq!(host_pattern("[2001:db8::1]").unwrap(), "2001:db8::1");
        for bad in ["https://x.org", "x.org:443", "x.org/path", "", "*.", "a..b"] {
            assert!(host_pattern(bad).is_err(), "{bad}");
        }
        let config = EgressConfig {
            allow: vec!["ok.org".into(), "http://bad".into()],
            ..Default::default()
        };
        assert_eq!(config.problems()[0].0, "egress.allow[1]");
    }
}
