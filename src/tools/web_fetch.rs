//! `web_fetch`: HTTP(S) GET with size and time limits. Loopback, private, link-local and
//! other non-public addresses are refused unless `tools.web_fetch_allow_private`: literal
//! addresses are checked up front and host names through a resolver that drops such
//! addresses (so a name cannot rebind to one between check and connect), on every redirect.

use super::{Tool, ToolContext, ToolError};
use async_trait::async_trait;
use futures::StreamExt;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use serde_json::{Value, json};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

const MAX_BYTES: usize = 512 * 1024;
const TIMEOUT: Duration = Duration::from_secs(20);
const MAX_REDIRECTS: usize = 5;

pub struct WebFetch {
    /// Built on first use (its own resolver and redirect policy; idle services never pay).
    client: OnceLock<reqwest::Client>,
    allow_private: bool,
}

impl WebFetch {
    pub fn new(allow_private: bool) -> Self {
        WebFetch {
            client: OnceLock::new(),
            allow_private,
        }
    }

    fn client(&self) -> &reqwest::Client {
        self.client
            .get_or_init(|| Self::build_client(self.allow_private))
    }

    fn build_client(allow_private: bool) -> reqwest::Client {
        let mut builder = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .connect_timeout(Duration::from_secs(10))
            .user_agent("ferroclaw-web-fetch")
            .redirect(reqwest::redirect::Policy::custom(move |attempt| {
                if attempt.previous().len() >= MAX_REDIRECTS {
                    attempt.error("too many redirects")
                } else if !allow_private && url_names_private_ip(attempt.url()) {
                    attempt.error("redirect to a private or loopback address refused")
                } else {
                    attempt.follow()
                }
            }));
        if !allow_private {
            builder = builder.dns_resolver(Arc::new(PublicOnly));
        }
        builder.build().expect("web_fetch HTTP client")
    }
}

/// True for addresses a fetch must not reach by default.
pub fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => private_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return private_v4(v4);
            }
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || (first & 0xfe00) == 0xfc00 // unique local
                || (first & 0xffc0) == 0xfe80 // link local
                || v6 == Ipv6Addr::UNSPECIFIED
        }
    }
}

fn private_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // carrier-grade NAT
        || a >= 224 // multicast and reserved
}

fn url_names_private_ip(url: &reqwest::Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => private_v4(ip),
        Some(url::Host::Ipv6(ip)) => is_private(IpAddr::V6(ip)),
        Some(url::Host::Domain(d)) => {
            d.eq_ignore_ascii_case("localhost") || d.ends_with(".localhost")
        }
        None => true,
    }
}

/// A resolver that returns only public addresses.
struct PublicOnly;

impl Resolve for PublicOnly {
    fn resolve(&self, name: Name) -> Resolving {
        Box::pin(async move {
            let host = name.as_str().to_string();
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let public: Vec<SocketAddr> =
                addrs.into_iter().filter(|a| !is_private(a.ip())).collect();
            if public.is_empty() {
                return Err(
                    format!("{host} resolves only to private or loopback addresses").into(),
                );
            }
            let iter: Addrs = Box::new(public.into_iter());
            Ok(iter)
        })
    }
}

#[async_trait]
impl Tool for WebFetch {
    fn name(&self) -> &'static str {
        "web_fetch"
    }
    fn description(&self) -> &'static str {
        "Fetch a web page or API response over http(s) with GET; returns the status and up to 512 KB of the body."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "properties": {"url": {"type": "string", "description": "http:// or https:// URL"}},
               "required": ["url"], "additionalProperties": false})
    }
    fn read_only(&self) -> bool {
        true
    }
    async fn run(&self, args: Value, _cx: &ToolContext) -> Result<String, ToolError> {
        let raw = args["url"].as_str().unwrap_or_default();
        let url = reqwest::Url::parse(raw)
            .map_err(|e| ToolError(format!("field `url`: not a URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ToolError::new(
                "field `url`: only http and https are allowed",
            ));
        }
        if !self.allow_private && url_names_private_ip(&url) {
            return Err(ToolError::new(
                "refused: the address is loopback or private (set tools.web_fetch_allow_private to allow)",
            ));
        }
        let response = self.client().get(url).send().await.map_err(|e| {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                text = format!("{text}: {s}");
                source = s.source();
            }
            ToolError(format!("fetch failed: {text}"))
        })?;
        let status = response.status();
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let mut body = Vec::new();
        let mut truncated = false;
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| ToolError(format!("reading the body failed: {e}")))?;
            let room = MAX_BYTES - body.len();
            if chunk.len() > room {
                body.extend_from_slice(&chunk[..room]);
                truncated = true;
                break;
            }
            body.extend_from_slice(&chunk);
        }
        let text = String::from_utf8_lossy(&body);
        Ok(format!(
            "HTTP {} ({content_type}){}\n\n{text}",
            status.as_u16(),
            if truncated {
                ", truncated at 512 KB"
            } else {
                ""
            }
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_ranges_are_recognised() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(is_private(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["8.8.8.8", "1.1.1.1", "2606:4700::1111"] {
            assert!(!is_private(ip.parse().unwrap()), "{ip}");
        }
    }
}
