//! Safe by default (SPEC section 18): `serve` on a non-loopback address with no admin token
//! exits 2 naming the key, unless `server.allow_public_unauthenticated`; beyond loopback the
//! metrics need the admin token too, while on loopback they stay open.

use crate::common::llm::LlmStandIn;
use crate::common::service::{Service, Workdir, config_with_llm, run};

const ADMIN: &str = "admin-token-EXPOSURE";

fn public(llm: &str, extra: &str) -> String {
    config_with_llm(llm, extra).replacen("listen = \"127.0.0.1:0\"", "listen = \"0.0.0.0:0\"", 1)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_public_address_without_a_token_is_refused_naming_the_key() {
    let llm = LlmStandIn::echo().await;
    let work = Workdir::new(&public(&llm.url, ""));
    let dir = work.path().to_path_buf();
    let out =
        tokio::task::spawn_blocking(move || run(&dir, &["serve", "-c", "config.toml"], "", &[]))
            .await
            .unwrap();
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    let line = out.stderr.trim();
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(line.contains("server.admin_token_env"), "{line}");
    assert!(
        line.contains("server.allow_public_unauthenticated"),
        "{line}"
    );
    assert!(line.contains("0.0.0.0:0"), "{line}");

    // The operator says they mean it: it starts.
    let work = Workdir::new(&public(&llm.url, "").replacen(
        "[server]\n",
        "[server]\nallow_public_unauthenticated = true\n",
        1,
    ));
    let service = Service::start(&work, &[]).await;
    let metrics = reqwest::get(format!("{}/metrics", service.base))
        .await
        .unwrap();
    assert_eq!(metrics.status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn beyond_loopback_the_metrics_need_the_admin_token() {
    let llm = LlmStandIn::echo().await;
    let config = public(&llm.url, "").replacen(
        "[server]\n",
        "[server]\nadmin_token_env = \"FC_ADMIN\"\n",
        1,
    );
    let work = Workdir::new(&config);
    let service = Service::start(&work, &[("FC_ADMIN", ADMIN)]).await;
    let client = reqwest::Client::new();
    let url = format!("{}/metrics", service.base);
    let open = client.get(&url).send().await.unwrap();
    assert_eq!(open.status(), 401);
    let wrong = client.get(&url).bearer_auth("nope").send().await.unwrap();
    assert_eq!(wrong.status(), 401);
    let with = client.get(&url).bearer_auth(ADMIN).send().await.unwrap();
    assert_eq!(with.status(), 200);
    assert!(
        with.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    // Liveness and readiness stay open (load balancers probe them).
    let ready = client
        .get(format!("{}/readyz", service.base))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
}
