//! The outbound HTTP clients: one shared (providers, webhook callbacks), built on first use and
//! shared: each reqwest client carries its own TLS roots and connection pool. The shared one
//! speaks HTTP/1.1 only; providers with `http2 = true` use the multiplexed one.

use std::sync::OnceLock;
use std::time::Duration;

/// Idle connections kept per host. A burst of 10,000 concurrent HTTP/1.1 calls opens 10,000
/// connections; kept idle (reqwest keeps them all by default) they held about 250 MB for the
/// idle timeout after the burst (measured with jemalloc: 307 MB after the burst without this
/// cap, 52 MB with it). More than this many are closed as they come back; a busy service's
/// steady state reuses fewer.
const IDLE_PER_HOST: usize = 256;

/// The settings both service clients share.
fn service_client() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        // Idle connections of a burst are closed within 20 s (then `heap` hands their
        // buffers back): memory returns to near idle within 30 s of a burst.
        .pool_idle_timeout(Duration::from_secs(20))
        .pool_max_idle_per_host(IDLE_PER_HOST)
        // Bundled roots only: reading the system's certificates costs start-up time.
        .tls_built_in_native_certs(false)
}

pub fn shared() -> reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            service_client()
                .http1_only()
                .build()
                .expect("the HTTP client builds with static settings")
        })
        .clone()
}

/// HTTP/2 only (h2c on plain `http`), for providers with `http2 = true`: thousands of
/// concurrent calls share one connection, where HTTP/1.1 holds a connection per call with
/// its buffers and channels (about 24 KB each, measured). Built when such a provider is
/// configured.
pub fn multiplexed() -> reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            service_client()
                .http2_prior_knowledge()
                // Pings keep a quiet connection (a long model pause) known to be alive.
                .http2_keep_alive_interval(Duration::from_secs(30))
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
