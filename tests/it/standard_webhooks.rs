//! `signature = "standard"` on a webhook endpoint, checked with the official
//! `standardwebhooks` Python library: it signs inbound messages that ferroclaw accepts (the
//! signed `webhook-id` standing in for a missing `message_id`), a tampered one is refused,
//! and it verifies every callback ferroclaw sends.

use crate::common::llm::LlmStandIn;
use crate::common::python;
use crate::common::receiver::Receiver;
use crate::common::service::{Service, Workdir, config_with_llm};
use crate::common::wait_for;
use serde_json::{Value, json};
use std::time::Duration;

/// `whsec_` + base64 of 24 bytes, as Standard Webhooks providers issue them.
const SECRET: &str = "whsec_c3RhbmRhcmQtd2ViaG9va3MtdGVzdC1rZXk=";

/// Signs and posts three requests with the official library; prints their statuses as JSON.
const SEND: &str = r#"
import json, sys, urllib.request, urllib.error
from datetime import datetime, timezone
from standardwebhooks import Webhook

url, secret = sys.argv[1], sys.argv[2]
hook = Webhook(secret)

def post(msg_id, body, sent_body=None):
    now = datetime.now(tz=timezone.utc)
    headers = {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": hook.sign(msg_id, now, body),
    }
    data = (sent_body if sent_body is not None else body).encode()
    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())

first = json.dumps({"conversation_id": "sw", "sender": {"id": "u1"}, "text": "hello"})
second = json.dumps({"conversation_id": "sw", "sender": {"id": "u1"}, "text": "again"})
results = {
    "first": post("msg_in_1", first),
    "repeat": post("msg_in_1", first),
    "tampered": post("msg_in_2", second, second.replace("again", "AGAIN")),
    "second": post("msg_in_3", second),
}
print(json.dumps(results))
"#;

/// Verifies every callback (a JSON list of {headers, body}) with the official library.
const VERIFY: &str = r#"
import json, sys
from standardwebhooks import Webhook
hook = Webhook(sys.argv[1])
callbacks = json.load(open(sys.argv[2]))
for c in callbacks:
    hook.verify(c["body"], c["headers"])
tampered = dict(callbacks[0])
try:
    hook.verify(tampered["body"] + " ", tampered["headers"])
    print("tampered callback verified")
    sys.exit(1)
except Exception:
    pass
print(len(callbacks))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn the_official_library_signs_what_ferroclaw_accepts_and_verifies_what_it_sends() {
    let llm = LlmStandIn::echo().await;
    let receiver = Receiver::start(0).await;
    let work = Workdir::new(&config_with_llm(
        &llm.url,
        &format!(
            "[channels.webhook.std]\nsecret_env = \"FC_STD\"\ncallback_url = \"{}\"\n\
             signature = \"standard\"\n",
            receiver.url
        ),
    ));
    let service = Service::start(&work, &[("FC_STD", SECRET)]).await;
    let url = format!("{}/v1/webhooks/std/messages", service.base);
    let sent = python::run(SEND, &[&url, SECRET], &[]).await;
    assert!(sent.ok, "{}", sent.stderr);
    let statuses: Value = serde_json::from_str(sent.stdout.trim()).unwrap();
    assert_eq!(statuses["first"][0], 202, "{statuses}");
    assert_eq!(statuses["first"][1]["message_id"], "msg_in_1", "{statuses}");
    assert_eq!(statuses["repeat"][0], 200, "{statuses}");
    assert_eq!(statuses["repeat"][1]["status"], "duplicate", "{statuses}");
    assert_eq!(statuses["tampered"][0], 401, "{statuses}");
    assert_eq!(statuses["second"][0], 202, "{statuses}");

    wait_for("two callbacks", Duration::from_secs(15), || async {
        (receiver.received().len() >= 2).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let received = receiver.received();
    let texts: Vec<&str> = received
        .iter()
        .map(|r| r.body["text"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(texts, ["echo: hello", "echo: again"]);
    assert!(
        received.iter().all(|r| r.signature.is_empty()),
        "no ferroclaw-scheme headers on a standard endpoint"
    );
    let callbacks: Vec<Value> = received
        .iter()
        .map(|r| {
            let headers: serde_json::Map<String, Value> = r
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), json!(v)))
                .collect();
            json!({"headers": headers, "body": r.raw})
        })
        .collect();
    let file = work.path().join("callbacks.json");
    std::fs::write(&file, serde_json::to_vec(&callbacks).unwrap()).unwrap();
    let verified = python::run(VERIFY, &[SECRET, file.to_str().unwrap()], &[]).await;
    assert!(verified.ok, "{}{}", verified.stdout, verified.stderr);
    assert_eq!(verified.stdout.trim(), "2");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_standard_endpoint_with_a_secret_that_is_not_whsec_base64_is_refused_naming_the_key() {
    let llm = LlmStandIn::echo().await;
    let work = Workdir::new(&config_with_llm(
        &llm.url,
        "[channels.webhook.std]\nsecret_env = \"FC_STD\"\nsignature = \"standard\"\n",
    ));
    let finished = crate::common::service::run(
        work.path(),
        &["serve", "-c", work.config().to_str().unwrap()],
        "",
        &[("FC_STD", "whsec_not base64!")],
    );
    assert_ne!(finished.code, Some(0));
    assert!(
        finished.stderr.contains("channels.webhook.std.secret_env"),
        "{}",
        finished.stderr
    );
    assert!(
        !finished.stderr.contains("not base64!"),
        "the secret is never shown"
    );
}
