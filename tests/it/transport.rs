//! How model calls travel (`providers.<id>.http2`): over `https`, HTTP/2 where the provider
//! offers it by ALPN, HTTP/1.1 where it does not; concurrent HTTP/2 calls spread over
//! connections of 100. Through the real binary and its reqwest clients, against TLS
//! stand-ins whose authority the service trusts through `SSL_CERT_FILE`.

use crate::common::hook::Hook;
use crate::common::llm::{Behaviour, LlmStandIn, last_user};
use crate::common::service::{Service, Workdir, config_with_llm, folder_with, run};
use crate::common::tls::Offers;
use axum::http::Version;
use std::time::Duration;

fn echo(offers: Offers) -> impl std::future::Future<Output = LlmStandIn> {
    LlmStandIn::start_tls(offers, |body, _| {
        Behaviour::reply(format!("echo: {}", last_user(body)))
    })
}

/// The authority file of a TLS stand-in, for `SSL_CERT_FILE`.
fn authority(llm: &LlmStandIn) -> String {
    let tls = llm.tls.as_ref().expect("a TLS stand-in");
    tls.authority_pem.to_str().unwrap().to_string()
}

const SECRET: &str = "whsec-transport-1";

/// `serve` with a webhook channel, calling `llm` (its authority trusted), the config as
/// `edit` makes it, in its folder; and a webhook client.
async fn serve(llm: &LlmStandIn, edit: impl Fn(String) -> String) -> (Workdir, Service, Hook) {
    let config = config_with_llm(
        &llm.url,
        "[channels.webhook.main]\nsecret_env = \"FC_HOOK_SECRET\"\n",
    );
    let work = Workdir::new(&edit(config));
    let pem = authority(llm);
    let service = Service::start(
        &work,
        &[("FC_HOOK_SECRET", SECRET), ("SSL_CERT_FILE", pem.as_str())],
    )
    .await;
    let hook = Hook::new(&service, SECRET);
    (work, service, hook)
}

#[tokio::test(flavor = "multi_thread")]
async fn over_https_the_provider_is_called_over_http2_when_it_offers_it_else_http1() {
    let both = echo(Offers::Http2AndHttp1).await;
    let http1 = echo(Offers::Http1Only).await;
    let cases = [
        (&both, "", Version::HTTP_2, "unset, offered"),
        (&http1, "", Version::HTTP_11, "unset, not offered"),
        (&both, "http2 = false\n", Version::HTTP_11, "false"),
        (&both, "http2 = true\n", Version::HTTP_2, "true"),
    ];
    for (llm, key, version, case) in cases {
        let config = config_with_llm(&llm.url, "").replace(
            "kind = \"openai\"\nbase_url",
            &format!("kind = \"openai\"\n{key}base_url"),
        );
        let dir = folder_with(&config);
        let pem = authority(llm);
        let before = llm.count();
        let out = tokio::task::spawn_blocking(move || {
            run(
                dir.path(),
                &["chat"],
                "one\ntwo\n",
                &[("SSL_CERT_FILE", pem.as_str())],
            )
        })
        .await
        .unwrap();
        assert_eq!(out.code, Some(0), "{case}: {}", out.stderr);
        assert!(
            out.stdout.contains("echo: one") && out.stdout.contains("echo: two"),
            "{case}: {}",
            out.stdout
        );
        let calls = &llm.requests()[before..];
        assert_eq!(calls.len(), 2, "{case}");
        assert!(
            calls.iter().all(|c| c.version == version),
            "{case}: {:?}",
            calls.iter().map(|c| c.version).collect::<Vec<_>>()
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_untrusted_certificate_fails_the_call_and_says_so() {
    let llm = echo(Offers::Http2AndHttp1).await;
    let dir = folder_with(&config_with_llm(&llm.url, ""));
    let out = tokio::task::spawn_blocking(move || run(dir.path(), &["chat"], "one\n", &[]))
        .await
        .unwrap();
    assert!(!out.stdout.contains("echo: one"), "{}", out.stdout);
    assert!(
        format!("{}{}", out.stdout, out.stderr).contains("certificate"),
        "the failure names the certificate: {} {}",
        out.stdout,
        out.stderr
    );
    assert_eq!(llm.count(), 0, "no request reached the server");
}

/// 250 conversations' model calls open at once against an https provider offering HTTP/2
/// (a server allowing 200 streams per connection, answering only when all 250 are open):
/// spread over connections of at most 100 calls each, every call is answered over HTTP/2.
/// Three connections carry them, and a few more when first calls race to connect before
/// the provider's first answer says it speaks HTTP/2.
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_calls_over_https_share_http2_connections_of_100_calls() {
    const CALLS: usize = 250;
    let llm = LlmStandIn::start_tls(Offers::Http2AndHttp1, |_, _| Behaviour::Gate {
        text: "all open".into(),
        open: CALLS,
    })
    .await;
    let (_work, _service, hook) = serve(&llm, |config| {
        config.replace("[fallback]\n", "[fallback]\nmax_concurrent_requests = 0\n")
    })
    .await;
    let asks = (0..CALLS).map(|i| {
        let hook = Hook::for_base(&hook.base, SECRET);
        tokio::spawn(async move { hook.ask(&format!("c{i}"), &format!("m{i}"), "hi").await })
    });
    let answers = tokio::time::timeout(Duration::from_secs(60), futures::future::join_all(asks))
        .await
        .expect("every call answered (none queued behind one connection's stream limit)");
    for answer in answers {
        assert_eq!(answer.unwrap(), "all open");
    }
    let requests = llm.requests();
    assert_eq!(requests.len(), CALLS);
    assert!(requests.iter().all(|r| r.version == Version::HTTP_2));
    let mut carried = std::collections::HashMap::new();
    for request in &requests {
        *carried.entry(request.peer).or_insert(0usize) += 1;
    }
    assert!(
        carried
            .values()
            .all(|&calls| calls <= ferroclaw::http::STREAMS_PER_CONNECTION),
        "at most {} calls per connection: {carried:?}",
        ferroclaw::http::STREAMS_PER_CONNECTION
    );
    assert!(
        carried.len() <= 10,
        "calls share connections (a few more than 3 only while the first calls race): {carried:?}"
    );
}

/// A provider that stops offering HTTP/2 (a proxy put in front of it, on the same address)
/// is reached over HTTP/1.1 again: the call that cannot connect asking for HTTP/2 alone
/// makes the service ask again with both offered, and its retry goes through.
#[tokio::test(flavor = "multi_thread")]
async fn a_provider_that_stops_offering_http2_is_reached_over_http1_again() {
    let mut llm = echo(Offers::Http2AndHttp1).await;
    let (_work, service, hook) = serve(&llm, |config| {
        config.replace("retries_per_model = 0", "retries_per_model = 1")
    })
    .await;
    assert_eq!(hook.ask("c1", "m1", "one").await, "echo: one");
    // Learned: this one goes over the HTTP/2-only connections.
    assert_eq!(hook.ask("c1", "m2", "two").await, "echo: two");
    llm.replace_tls(Offers::Http1Only).await;
    assert_eq!(hook.ask("c1", "m3", "three").await, "echo: three");
    let versions: Vec<_> = llm.requests().iter().map(|r| r.version).collect();
    assert_eq!(
        versions,
        [Version::HTTP_2, Version::HTTP_2, Version::HTTP_11],
        "{}",
        service.logs()
    );
}
