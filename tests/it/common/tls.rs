//! TLS in front of a stand-in, as a hosted provider serves: a certificate for 127.0.0.1 from
//! a throwaway authority, whose PEM file a client trusts through `SSL_CERT_FILE`, and ALPN
//! offering HTTP/2 and HTTP/1.1 (or HTTP/1.1 only, as an old proxy would). Serves an axum
//! router with each connection's peer address (`ConnectInfo`). Shared with the bench
//! (`benches/bench.rs` includes this file).

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;

/// What the server offers by ALPN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offers {
    /// `h2` first, then `http/1.1`: what the hosted providers offer.
    Http2AndHttp1,
    /// `http/1.1` only.
    Http1Only,
}

/// A TLS server on 127.0.0.1, its authority's certificate in a PEM file. Dropped or
/// stopped, it closes its port and every connection it holds.
pub struct TlsServer {
    pub addr: SocketAddr,
    /// The authority to trust (`SSL_CERT_FILE=<this>`).
    pub authority_pem: PathBuf,
    identity: Arc<Identity>,
    accepting: tokio::task::JoinHandle<()>,
}

/// The authority's PEM file and the server's certificate chain and key.
struct Identity {
    config: rustls::ServerConfig,
    _dir: tempfile::TempDir,
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl TlsServer {
    /// Stop this server (its port and connections closed) and serve `router` on the same
    /// address with the same certificate, offering `offers`.
    pub async fn replace(&mut self, router: Router, offers: Offers) {
        self.accepting.abort();
        let _ = (&mut self.accepting).await;
        let listener = tokio::net::TcpListener::bind(self.addr).await.unwrap();
        self.accepting = accept(listener, &self.identity, router, offers);
    }
}

/// Serve `router` over TLS on a free port of 127.0.0.1, until the server is dropped.
pub async fn serve(router: Router, offers: Offers) -> TlsServer {
    let authority_key = rcgen::KeyPair::generate().unwrap();
    let mut authority = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    authority.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    authority
        .distinguished_name
        .push(rcgen::DnType::CommonName, "ferroclaw stand-in authority");
    let authority = rcgen::CertifiedIssuer::self_signed(authority, authority_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let certificate = rcgen::CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])
        .unwrap()
        .signed_by(&key, &authority)
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let authority_pem = dir.path().join("authority.pem");
    std::fs::write(&authority_pem, authority.pem()).unwrap();

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![certificate.der().clone(), authority.der().clone()],
            rustls::pki_types::PrivateKeyDer::from(key),
        )
        .unwrap();
    let identity = Arc::new(Identity { config, _dir: dir });

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepting = accept(listener, &identity, router, offers);
    TlsServer {
        addr,
        authority_pem,
        identity,
        accepting,
    }
}

/// The accept loop: each connection served in a task the loop owns (aborted with it).
fn accept(
    listener: tokio::net::TcpListener,
    identity: &Identity,
    router: Router,
    offers: Offers,
) -> tokio::task::JoinHandle<()> {
    let mut config = identity.config.clone();
    config.alpn_protocols = match offers {
        Offers::Http2AndHttp1 => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        Offers::Http1Only => vec![b"http/1.1".to_vec()],
    };
    let acceptor = TlsAcceptor::from(Arc::new(config));
    tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        loop {
            let Ok((tcp, peer)) = listener.accept().await else {
                continue;
            };
            while connections.try_join_next().is_some() {}
            let (acceptor, router) = (acceptor.clone(), router.clone());
            connections.spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = router.layer(axum::Extension(ConnectInfo(peer)));
                // Either protocol, as ALPN settled it (HTTP/2 is recognised by its preface).
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), TowerToHyperService::new(service))
                    .await;
            });
        }
    })
}
