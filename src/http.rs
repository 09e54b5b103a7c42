//! The outbound HTTP clients, each built on first use and shared (a reqwest client carries
//! its own connection pool; one TLS configuration, roots and session cache, serves them
//! all): one speaking HTTP/1.1 (webhook callbacks,
//! alerts, providers over plain `http` or with `http2 = false`), and the multiplexed ones
//! for model calls over HTTP/2, spread over a few connections, another opened when the open
//! ones carry [`STREAMS_PER_CONNECTION`] calls each (one connection would cap concurrent
//! calls at the server's stream limit, commonly 100–250). A provider's [`Transport`] says
//! which: over `https` HTTP/2 where the server offers it by ALPN (learned from its answers),
//! as every hosted provider does. A model call holds a [`Lease`] for as long as its answer
//! streams, so the pool knows what each connection carries.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
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

/// The settings every service client shares, with its TLS speaking `alpn`.
fn service_client(alpn: Alpn) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        // Idle connections are closed after 5 s (the official OpenAI Python client's httpx
        // does the same; a turn's model calls follow each other sooner and reuse them):
        // what a burst's connections held (buffers, TLS state, HTTP/2 stream tables) is
        // freed within 10 s and `heap` hands it back. Measured 25 s after 3,000 calls: 28 MB
        // of heap with the connections still open (20 s), 17 MB with them closed.
        .pool_idle_timeout(Duration::from_secs(5))
        .pool_max_idle_per_host(IDLE_PER_HOST)
        .use_preconfigured_tls(tls(alpn))
}

/// A service client as `configure` sets it up.
fn build(
    alpn: Alpn,
    configure: fn(reqwest::ClientBuilder) -> reqwest::ClientBuilder,
) -> reqwest::Client {
    configure(service_client(alpn))
        .build()
        .expect("the HTTP client builds with static settings")
}

/// What a client offers by ALPN (over `https`).
#[derive(Clone, Copy)]
enum Alpn {
    Http1,
    Http2,
    Both,
}

/// The TLS configuration of a client offering `alpn`. Every client shares one verifier
/// with its roots and one session cache: the roots alone are about 90 KB a copy, and each
/// HTTP/2 shard is a client of its own.
fn tls(alpn: Alpn) -> rustls::ClientConfig {
    static BASE: OnceLock<rustls::ClientConfig> = OnceLock::new();
    let mut config = BASE.get_or_init(base_tls).clone();
    config.alpn_protocols = match alpn {
        Alpn::Http1 => vec![b"http/1.1".to_vec()],
        Alpn::Http2 => vec![b"h2".to_vec()],
        Alpn::Both => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
    };
    config
}

/// The bundled roots (webpki-roots, as reqwest's own), and the certificates `SSL_CERT_FILE`
/// or `SSL_CERT_DIR` name (an internal authority, a stand-in): reading the whole system store
/// costs start-up time. Certificates there that cannot be read are logged and left out.
fn base_tls() -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let named = ["SSL_CERT_FILE", "SSL_CERT_DIR"]
        .iter()
        .any(|var| std::env::var_os(var).is_some());
    if named {
        let found = rustls_native_certs::load_native_certs();
        for error in &found.errors {
            tracing::warn!(%error, "certificates named by SSL_CERT_FILE/SSL_CERT_DIR not read");
        }
        let (_, unusable) = roots.add_parsable_certificates(found.certs);
        if unusable > 0 {
            tracing::warn!(
                unusable,
                "certificates named by SSL_CERT_FILE/SSL_CERT_DIR left out"
            );
        }
    }
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("ring offers TLS 1.2 and 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth()
}

pub fn shared() -> reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT
        .get_or_init(|| build(Alpn::Http1, |b| b.http1_only()))
        .clone()
}

/// A client for one call, and its place on an HTTP/2 connection while it is held.
pub struct Lease {
    client: reqwest::Client,
    /// The calls its connection carries (HTTP/2 only), one less when this is dropped.
    carried: Option<Arc<AtomicUsize>>,
    /// Where the provider's protocol is learned (`Transport::Auto`), from this call's answer.
    learns: Option<Arc<AtomicU8>>,
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

impl Lease {
    /// The protocol the provider answered in: under `Transport::Auto`, a provider that
    /// answered over HTTP/1.1 is called over the shared HTTP/1.1 client from then on.
    pub fn heard(&self, version: reqwest::Version) {
        if let Some(learns) = &self.learns {
            let spoken = if version == reqwest::Version::HTTP_2 {
                SPEAKS_H2
            } else {
                SPEAKS_H1
            };
            learns.store(spoken, Ordering::Release);
        }
    }

    /// The call could not connect: under `Transport::Auto` the provider is asked again
    /// what it speaks (both offered by ALPN), so one that stopped offering HTTP/2 (a proxy
    /// put in front of it) is reached over HTTP/1.1 from the next call on.
    pub fn unreachable(&self) {
        if let Some(learns) = &self.learns {
            learns.store(UNKNOWN, Ordering::Release);
        }
    }
}

/// The shared HTTP/1.1 client as a lease (nothing to count: a call is a connection).
fn shared_lease() -> Lease {
    Lease {
        client: shared(),
        carried: None,
        learns: None,
    }
}

/// Not yet known what the provider speaks (no answer yet).
const UNKNOWN: u8 = 0;
const SPEAKS_H1: u8 = 1;
const SPEAKS_H2: u8 = 2;

/// How one provider's calls travel (its `http2` key).
#[derive(Clone)]
pub enum Transport {
    /// HTTP/1.1, a connection per call in flight (`http2 = false`; plain `http` by default).
    Http1,
    /// HTTP/2 only, h2c over plain `http` (`http2 = true`): [`multiplexed`].
    Http2,
    /// `https` by default: HTTP/2 where the server offers it by ALPN. Until the provider
    /// first answers, calls go over clients offering both (spread like [`multiplexed`]);
    /// once it answered over HTTP/2 they go over [`multiplexed`], once over HTTP/1.1 over
    /// the shared HTTP/1.1 client. A call that cannot connect makes it ask again.
    Auto(Arc<AtomicU8>),
}

impl Transport {
    /// The transport for a provider at `base_url` with `http2` set or not.
    pub fn for_provider(base_url: &str, http2: Option<bool>) -> Transport {
        match http2 {
            Some(true) => Transport::Http2,
            Some(false) => Transport::Http1,
            None if base_url.starts_with("https:") => {
                Transport::Auto(Arc::new(AtomicU8::new(UNKNOWN)))
            }
            None => Transport::Http1,
        }
    }

    /// A client for one call, held until its answer has streamed.
    pub fn lease(&self) -> Lease {
        match self {
            Transport::Http1 => shared_lease(),
            Transport::Http2 => multiplexed(),
            Transport::Auto(learned) => {
                let mut lease = match learned.load(Ordering::Acquire) {
                    SPEAKS_H1 => return shared_lease(),
                    // Known to speak HTTP/2: asked for it alone (ALPN `h2`), so each
                    // connection is opened once, however many calls arrive together.
                    SPEAKS_H2 => multiplexed(),
                    _ => spread(&ALPN_SHARDS, alpn_client),
                };
                lease.learns = Some(learned.clone());
                lease
            }
        }
    }
}

/// One HTTP/2 client (its own pool: its own connection per host) and the calls it carries.
struct Shard {
    client: reqwest::Client,
    carried: Arc<AtomicUsize>,
}

fn h2_client() -> reqwest::Client {
    build(Alpn::Http2, |b| {
        b.http2_prior_knowledge()
            // Pings keep a quiet connection (a long model pause) known to be alive.
            .http2_keep_alive_interval(Duration::from_secs(30))
    })
}

/// HTTP/2 or HTTP/1.1 as the server chooses by ALPN (`https` only), for a provider's calls
/// until it first answers. First calls racing each open a connection, and those that
/// negotiated HTTP/2 are all kept (hyper's pool takes the first and lets the others carry
/// their own call): a few connections more than needed, for that moment only.
fn alpn_client() -> reqwest::Client {
    build(Alpn::Both, |b| {
        b.http2_keep_alive_interval(Duration::from_secs(30))
    })
}

/// HTTP/2 only (h2c on plain `http`), for providers with `http2 = true`: a call goes on the
/// first connection carrying fewer than [`STREAMS_PER_CONNECTION`] calls, or a new one, so
/// thousands of concurrent calls share a few connections (where HTTP/1.1 holds a connection
/// per call with its buffers: about 24 KB each, measured) without queueing behind one
/// connection's stream limit. Built when such a provider is first called.
fn multiplexed() -> Lease {
    spread(&H2_SHARDS, h2_client)
}

/// The clients of providers not yet heard from (HTTP/2 or HTTP/1.1 by ALPN).
static ALPN_SHARDS: Mutex<Vec<Shard>> = Mutex::new(Vec::new());
/// The HTTP/2 clients.
static H2_SHARDS: Mutex<Vec<Shard>> = Mutex::new(Vec::new());

/// Let go of the clients a burst opened once they carry no call (each its pool, connection
/// state and buffers: a hundred of them after 10,000 calls, scattered over the burst's
/// heap), keeping the first of each kind for the calls to come. Run before the heap is
/// trimmed after a burst.
pub fn release_idle_clients() {
    release_idle(&ALPN_SHARDS);
    release_idle(&H2_SHARDS);
}

fn release_idle(shards: &Mutex<Vec<Shard>>) {
    let mut shards = shards.lock().expect("shards lock");
    let mut first = true;
    // A lease is only taken under this lock, so a shard carrying nothing now has none.
    shards.retain(|s| std::mem::take(&mut first) || s.carried.load(Ordering::Acquire) > 0);
    shards.shrink_to_fit();
}

/// A lease on the first of `shards` carrying fewer than [`STREAMS_PER_CONNECTION`] calls, on
/// a new one (`new_client`) while there are fewer than [`MAX_CONNECTIONS`], else on the least
/// loaded.
fn spread(shards: &Mutex<Vec<Shard>>, new_client: fn() -> reqwest::Client) -> Lease {
    let mut shards = shards.lock().expect("shards lock");
    let load = |s: &Shard| s.carried.load(Ordering::Acquire);
    let pick = match shards.iter().position(|s| load(s) < STREAMS_PER_CONNECTION) {
        Some(i) => i,
        None if shards.len() < MAX_CONNECTIONS => {
            shards.push(Shard {
                client: new_client(),
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
        learns: None,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(transport: &Transport) -> &'static str {
        match transport {
            Transport::Http1 => "http1",
            Transport::Http2 => "http2",
            Transport::Auto(_) => "auto",
        }
    }

    #[test]
    fn the_key_or_else_the_scheme_chooses_the_transport() {
        for (url, key, expected) in [
            ("https://api.openai.com/v1", None, "auto"),
            ("http://127.0.0.1:8080/v1", None, "http1"),
            ("https://api.openai.com/v1", Some(false), "http1"),
            ("https://api.openai.com/v1", Some(true), "http2"),
            ("http://127.0.0.1:8080/v1", Some(true), "http2"),
        ] {
            let transport = Transport::for_provider(url, key);
            assert_eq!(kind(&transport), expected, "{url} with http2 = {key:?}");
        }
    }

    #[test]
    fn what_a_provider_answered_in_decides_its_later_calls() {
        let h1 = Transport::for_provider("https://old.example/v1", None);
        let first = h1.lease();
        assert!(first.carried.is_some(), "unknown yet: spread like HTTP/2");
        assert!(first.learns.is_some());
        first.heard(reqwest::Version::HTTP_11);
        drop(first);
        let later = h1.lease();
        assert!(
            later.carried.is_none(),
            "answered over HTTP/1.1: the shared client"
        );

        let h2 = Transport::for_provider("https://new.example/v1", None);
        let first = h2.lease();
        first.heard(reqwest::Version::HTTP_2);
        drop(first);
        let later = h2.lease();
        assert!(later.carried.is_some(), "answered over HTTP/2: spread");
        assert_eq!(spoken(&h2), SPEAKS_H2);
        later.unreachable();
        drop(later);
        assert_eq!(spoken(&h2), UNKNOWN, "could not connect: asked again");
    }

    #[test]
    fn a_bursts_clients_go_once_they_carry_nothing_and_the_first_stays() {
        let shards = Mutex::new(Vec::new());
        let mut leases: Vec<Lease> = (0..=2 * STREAMS_PER_CONNECTION)
            .map(|_| spread(&shards, h2_client))
            .collect();
        assert_eq!(shards.lock().unwrap().len(), 3);
        let on_the_third = leases.pop().unwrap();
        drop(leases);
        release_idle(&shards);
        assert_eq!(
            shards.lock().unwrap().len(),
            2,
            "the first kept, the one carrying a call kept"
        );
        drop(on_the_third);
        release_idle(&shards);
        assert_eq!(shards.lock().unwrap().len(), 1);
        // The next call goes on the kept one, and a burst opens new ones again.
        let next: Vec<Lease> = (0..=STREAMS_PER_CONNECTION)
            .map(|_| spread(&shards, h2_client))
            .collect();
        assert_eq!(shards.lock().unwrap().len(), 2);
        drop(next);
    }

    fn spoken(transport: &Transport) -> u8 {
        match transport {
            Transport::Auto(learned) => learned.load(Ordering::Acquire),
            _ => panic!("not learned"),
        }
    }
}
