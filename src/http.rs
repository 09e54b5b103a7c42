//! The one outbound HTTP client (providers, webhook callbacks), built on first use and
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
                .build()
                .expect("the HTTP client builds with static settings")
        })
        .clone()
}
