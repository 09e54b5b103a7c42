//! The outbound HTTP clients: one shared (providers, webhook callbacks), built on first use and
//! shared: each reqwest client carries its own TLS roots and connection pool.

use std::sync::OnceLock;
use std::time::Duration;

pub fn shared() -> reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .pool_idle_timeout(Duration::from_secs(60))
                // Bundled roots only: reading the system's certificates costs start-up time.
                .tls_built_in_native_certs(false)
                .build()
                .expect("the HTTP client builds with static settings")
        })
        .clone()
}

/// A client for downloads from package registries, trusting the system's certificate store
/// too (registries may be reached through a proxy with its own authority). Built when a
/// download starts, never at start-up.
pub fn downloads() -> reqwest::Client {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()
        .expect("the HTTP client builds with static settings")
}
