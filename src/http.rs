//! The outbound HTTP clients: one shared (providers, webhook callbacks), built on first use and
//! shared: each reqwest client carries its own TLS roots and connection pool. The shared one
//! speaks HTTP/1.1 only; providers with `http2 = true` use the multiplexed ones: HTTP/2 calls
//! spread over a few connections, another opened when the open ones carry
//! [`STREAMS_PER_CONNECTION`] calls each (one connection would cap concurrent calls at the
//! server's stream limit, commonly 100–250). A model call holds a [`Lease`] for as long as
//! its answer streams, so the pool knows what each connection carries.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Calls one HTTP/2 connection is given before another is opened: within what servers
/// allow (hyper and Go: 200 and 250 streams; nginx: 128; some proxies: 100).
pub const STREAMS_PER_CONNECTION: usize = 100;
/// HTTP/2 connections per process at most; beyond, calls share the least loaded.
const MAX_CONNECTIONS: usize = 128;

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

/// A client for one call, and its place on an HTTP/2 connection while it is held.
pub struct Lease {
    client: reqwest::Client,
    /// The calls its connection carries (HTTP/2 only), one less when this is dropped.
    carried: Option<Arc<AtomicUsize>>,
}

impl std::ops::Deref for Lease {
    type Target = reqwest::Client;
    fn deref(&self) -> &reqwest::Client {
        &self.client
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(carried) = &self.carried {
            carried.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// The shared HTTP/1.1 client as a lease (nothing to count: a call is a connection).
pub fn shared_lease() -> Lease {
    Lease {
        client: shared(),
        carried: None,
    }
}

/// One HTTP/2 client (its own pool: its own connection per host) and the calls it carries.
struct Shard {
    client: reqwest::Client,
    carried: Arc<AtomicUsize>,
}

fn h2_client() -> reqwest::Client {
    service_client()
        .http2_prior_knowledge()
        // Pings keep a quiet connection (a long model pause) known to be alive.
        .http2_keep_alive_interval(Duration::from_secs(30))
        .build()
        .expect("the HTTP client builds with static settings")
}

/// HTTP/2 only (h2c on plain `http`), for providers with `http2 = true`: a call goes on the
/// first connection carrying fewer than [`STREAMS_PER_CONNECTION`] calls, or a new one, so
/// thousands of concurrent calls share a few connections (where HTTP/1.1 holds a connection
/// per call with its buffers: about 24 KB each, measured) without queueing behind one
/// connection's stream limit. Built when such a provider is first called.
pub fn multiplexed() -> Lease {
    static SHARDS: Mutex<Vec<Shard>> = Mutex::new(Vec::new());
    let mut shards = SHARDS.lock().expect("shards lock");
    let load = |s: &Shard| s.carried.load(Ordering::Acquire);
    let pick = match shards.iter().position(|s| load(s) < STREAMS_PER_CONNECTION) {
        Some(i) => i,
        None if shards.len() < MAX_CONNECTIONS => {
            shards.push(Shard {
                client: h2_client(),
                carried: Arc::new(AtomicUsize::new(0)),
            });
            shards.len() - 1
        }
        None => (0..shards.len())
            .min_by_key(|i| load(&shards[*i]))
            .expect("at least one shard"),
    };
    let shard = &shards[pick];
    shard.carried.fetch_add(1, Ordering::AcqRel);
    Lease {
        client: shard.client.clone(),
        carried: Some(shard.carried.clone()),
    }
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
