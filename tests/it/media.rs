//! Files that come with messages, through the signed webhook (URL and base64 attachments)
//! and the real service: an image reaching a model that sees as an image part, a text-only
//! model given a vision model's description, a PDF's text excerpt, a 50 MB file refused with
//! a clear reply, a voice note transcribed by the transcription stand-in and answered, and a
//! failed transcription answered clearly without a model call.

use crate::common::files::{FileHost, PNG};
use crate::common::hook::Hook;
use crate::common::llm::{Behaviour, LlmStandIn, Recorded, last_user};
use crate::common::service::{Service, Workdir, config_with_llm};
use base64::Engine as _;
use serde_json::{Value, json};

const SECRET: &str = "media-secret";
/// The file host is on 127.0.0.1, which attachment fetches refuse unless private addresses
/// are allowed (`tools.web_fetch_allow_private`, the policy of every fetch a message causes).
const WEBHOOK: &str =
    "[tools]\nweb_fetch_allow_private = true\n[channels.webhook.main]\nsecret_env = \"FC_HOOK\"\n";

async fn send(hook: &Hook, conversation: &str, id: &str, text: &str, attachments: Value) -> Value {
    let body = json!({"conversation_id": conversation, "message_id": id, "text": text,
        "sender": {"id": "u-1", "name": "Ann"}, "attachments": attachments});
    hook.post_message(&body).await
}

fn answer(body: &Value) -> String {
    body["replies"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The user message content of a request as the provider sent it (a string, or parts).
fn user_content(request: &Recorded) -> Value {
    request.body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .map(|m| m["content"].clone())
        .unwrap_or(Value::Null)
}

/// Answers with the user's text, so a test reads what the model was given.
fn echo() -> impl Fn(&Value, usize) -> Behaviour {
    |body, _| {
        if body["model"] == "eye" {
            return Behaviour::reply("A single red pixel on a transparent background.");
        }
        Behaviour::reply(format!("model read: {}", last_user(body)))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_image_reaches_a_model_that_sees_as_an_image_part() {
    let files = FileHost::start().await;
    let llm = LlmStandIn::start(echo()).await;
    let config = config_with_llm(&llm.url, WEBHOOK)
        .replace("kind = \"openai\"\n", "kind = \"openai\"\nvision = true\n");
    let work = Workdir::new(&config);
    let service = Service::start(&work, &[("FC_HOOK", SECRET)]).await;
    let hook = Hook::new(&service, SECRET);
    // A photo with no caption is not dropped.
    let body = send(
        &hook,
        "v",
        "m1",
        "",
        json!([{"url": format!("{}/photo.png", files.url), "kind": "image"}]),
    )
    .await;
    assert!(answer(&body).starts_with("model read:"), "{body}");
    let request = llm.requests().into_iter().last().unwrap();
    let parts = user_content(&request);
    assert!(
        parts[0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("image (attached, saved at inbox/photo.png)"),
        "{parts}"
    );
    let image = parts
        .as_array()
        .and_then(|p| p.iter().find(|p| p["type"] == "image_url"))
        .unwrap_or_else(|| panic!("an image part: {parts}"));
    let expected = format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(PNG)
    );
    assert_eq!(image["image_url"]["url"], expected);
    // Kept in the session's workspace.
    let stored: Vec<_> = walk(work.path())
        .into_iter()
        .filter(|p| p.ends_with("inbox/photo.png"))
        .collect();
    assert_eq!(stored.len(), 1, "stored once in the workspace");
    assert_eq!(std::fs::read(&stored[0]).unwrap(), PNG);
}

fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path.display().to_string());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_text_only_model_gets_a_vision_models_description() {
    let llm = LlmStandIn::start(echo()).await;
    let config = config_with_llm(
        &llm.url,
        &format!(
            "{WEBHOOK}[media]\nvision_model = \"seer/eye\"\n\
             [providers.seer]\nkind = \"openai\"\nbase_url = \"{}\"\nvision = true\n",
            llm.url
        ),
    );
    let work = Workdir::new(&config);
    let service = Service::start(&work, &[("FC_HOOK", SECRET)]).await;
    let hook = Hook::new(&service, SECRET);
    let inline = base64::engine::general_purpose::STANDARD.encode(PNG);
    let body = send(
        &hook,
        "d",
        "m1",
        "what is this?",
        json!([{"content": inline, "name": "pic.png", "mime": "image/png"}]),
    )
    .await;
    let reply = answer(&body);
    assert!(
        reply.contains("A vision model describes it:] A single red pixel"),
        "{reply}"
    );
    assert!(reply.ends_with("what is this?"), "{reply}");
    let requests = llm.requests();
    let described = requests
        .iter()
        .find(|r| r.model() == "eye")
        .expect("the vision model was asked");
    assert!(user_content(described).to_string().contains("image_url"));
    let main = requests.iter().find(|r| r.model() == "test-model").unwrap();
    assert!(
        user_content(main).is_string(),
        "the text-only model gets text only"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pdf_gives_a_text_excerpt_and_a_50_mb_file_is_refused_clearly() {
    let files = FileHost::start().await;
    let llm = LlmStandIn::start(echo()).await;
    let work = Workdir::new(&config_with_llm(&llm.url, WEBHOOK));
    let service = Service::start(&work, &[("FC_HOOK", SECRET)]).await;
    let hook = Hook::new(&service, SECRET);
    let body = send(
        &hook,
        "p",
        "m1",
        "summarise",
        json!([{"url": format!("{}/report.pdf", files.url)}]),
    )
    .await;
    let reply = answer(&body);
    assert!(
        reply.contains("saved at inbox/report.pdf (application/pdf"),
        "{reply}"
    );
    assert!(
        reply.contains("Quarterly revenue grew by twelve percent"),
        "{reply}"
    );

    let before = llm.count();
    let body = send(
        &hook,
        "p",
        "m2",
        "and this",
        json!([{"url": format!("{}/huge.bin", files.url), "name": "huge.bin"}]),
    )
    .await;
    assert_eq!(body["replies"][0]["kind"], "error", "{body}");
    assert!(
        answer(&body).contains("The file huge.bin is too large: the limit is 20 MB"),
        "{body}"
    );
    assert_eq!(llm.count(), before, "no model call for a refused file");
    // The session goes on.
    let body = send(&hook, "p", "m3", "still there?", json!([])).await;
    assert_eq!(answer(&body), "model read: still there?");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_voice_note_is_transcribed_and_answered_and_a_failed_transcription_is_said_plainly() {
    let files = FileHost::start().await;
    let llm = LlmStandIn::start(echo()).await;
    // The transcription stand-in answers a file's own bytes as its transcript.
    let voice =
        base64::engine::general_purpose::STANDARD.encode(b"please book a table for two at eight");
    for (base, conversation) in [
        (format!("{}/v1", files.url), "ok"),
        (format!("{}/broken", files.url), "bad"),
    ] {
        let work = Workdir::new(&config_with_llm(
            &llm.url,
            &format!("{WEBHOOK}[transcription]\nbase_url = \"{base}\"\nmodel = \"whisper-test\"\n"),
        ));
        let service = Service::start(&work, &[("FC_HOOK", SECRET)]).await;
        let hook = Hook::new(&service, SECRET);
        let before = llm.count();
        let body = send(
            &hook,
            conversation,
            "m1",
            "",
            json!([{"content": voice, "kind": "voice", "name": "note.ogg", "mime": "audio/ogg"}]),
        )
        .await;
        let reply = answer(&body);
        if conversation == "ok" {
            assert!(
                reply.contains("Transcript of the user's voice note")
                    && reply.contains("please book a table for two at eight"),
                "{reply}"
            );
            let seen = files.transcriptions();
            assert_eq!(seen.len(), 1);
            assert_eq!(seen[0].model, "whisper-test");
            assert_eq!(seen[0].file_name, "note.ogg");
            assert_eq!(seen[0].bytes, 36);
        } else {
            assert_eq!(body["replies"][0]["kind"], "error", "{body}");
            assert!(
                reply.starts_with("I could not transcribe your voice note: the transcription service answered HTTP 500"),
                "{reply}"
            );
            assert_eq!(
                llm.count(),
                before,
                "never sent to the model as \"[voice]\""
            );
        }
    }
}

/// Sends the stored photo back when it sees one, then says it is done.
fn send_back() -> impl Fn(&Value, usize) -> Behaviour {
    |body, _| {
        let results = crate::common::llm::fresh_results(body);
        if results.is_empty() {
            return Behaviour::tool(
                "send_file",
                json!({"path": "inbox/photo.jpg", "caption": "here it is back"}),
            );
        }
        Behaviour::reply(format!("done: {}", results[0]))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_telegram_photo_reaches_the_model_and_send_file_arrives_once_as_a_photo_with_its_caption()
{
    use crate::common::telegram::{TOKEN, TelegramStandIn};
    let llm = LlmStandIn::start(send_back()).await;
    let tg = TelegramStandIn::start().await;
    tg.add_file("ph-big", "photos/file_7.jpg", PNG);
    let config = config_with_llm(
        &llm.url,
        &format!(
            "[channels.telegram]\nenabled = true\ntoken_env = \"FC_TG_TOKEN\"\napi_url = \"{}\"\naccess = \"open\"\n",
            tg.url
        ),
    )
    .replace("kind = \"openai\"\n", "kind = \"openai\"\nvision = true\n");
    let work = Workdir::new(&config);
    let _service = Service::start(&work, &[("FC_TG_TOKEN", TOKEN)]).await;
    // A photo (two sizes) with a caption.
    tg.push_message(json!({"message_id": 5, "date": 1700000000,
        "chat": {"id": 7, "type": "private", "first_name": "U"},
        "from": {"id": 7, "is_bot": false, "first_name": "User7"},
        "caption": "what is this?",
        "photo": [
            {"file_id": "ph-small", "file_unique_id": "s", "width": 10, "height": 10, "file_size": 10},
            {"file_id": "ph-big", "file_unique_id": "b", "width": 100, "height": 100, "file_size": PNG.len()}
        ]}));
    crate::common::wait_for("the answer", std::time::Duration::from_secs(20), || async {
        tg.texts(7)
            .iter()
            .any(|t| t.starts_with("done: sent photo.jpg"))
            .then_some(())
    })
    .await;
    // The largest size was fetched through getFile and the file URL, and shown to the model.
    assert_eq!(tg.calls("getFile").len(), 1);
    assert_eq!(tg.calls("getFile")[0].params["file_id"], "ph-big");
    let first = llm.requests().into_iter().next().unwrap();
    let parts = user_content(&first);
    assert!(
        parts[0]["text"]
            .as_str()
            .unwrap()
            .ends_with("what is this?"),
        "{parts}"
    );
    assert_eq!(
        parts[1]["image_url"]["url"],
        format!(
            "data:image/jpeg;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(PNG)
        )
    );
    // Sent back once, natively, with its caption.
    let photos = tg.calls("sendPhoto");
    assert_eq!(photos.len(), 1, "{photos:?}");
    assert_eq!(photos[0].params["caption"], "here it is back");
    assert_eq!(photos[0].params["chat_id"], "7");
    assert!(tg.calls("sendDocument").is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_file_is_a_download_that_needs_the_bearer_and_a_path_outside_is_refused() {
    let llm = LlmStandIn::start(|body, _| {
        let results = crate::common::llm::fresh_results(body);
        let user = last_user(body);
        match (results.len(), user.as_str()) {
            (0, u) if u.ends_with("escape") => {
                Behaviour::tool("send_file", json!({"path": "../../etc/passwd"}))
            }
            (0, _) => Behaviour::tool(
                "send_file",
                json!({"path": "inbox/photo.png", "caption": "yours"}),
            ),
            (_, _) => Behaviour::reply(format!("tool said: {}", results[0])),
        }
    })
    .await;
    let files = FileHost::start().await;
    let work = Workdir::new(&config_with_llm(&llm.url, WEBHOOK));
    let service = Service::start(&work, &[("FC_HOOK", SECRET)]).await;
    let hook = Hook::new(&service, SECRET);
    send(
        &hook,
        "w",
        "m1",
        "keep it",
        json!([{"url": format!("{}/photo.png", files.url)}]),
    )
    .await;
    let listed = hook.list("w", 0).await;
    let with_file: Vec<&Value> = listed.iter().filter(|m| !m["file"].is_null()).collect();
    assert_eq!(with_file.len(), 1, "{listed:?}");
    let file = &with_file[0]["file"];
    assert_eq!(with_file[0]["text"], "yours");
    assert_eq!(file["name"], "photo.png");
    assert_eq!(file["mime"], "image/png");
    assert_eq!(file["size"], PNG.len());
    let listed_attachment = &with_file[0]["attachments"][0];
    assert_eq!(listed_attachment["name"], "photo.png");
    assert_eq!(listed_attachment["mime"], "image/png");
    assert_eq!(listed_attachment["url"], file["download"]);
    let url = format!("{}{}", service.base, file["download"].as_str().unwrap());
    let client = reqwest::Client::new();
    assert_eq!(client.get(&url).send().await.unwrap().status(), 401);
    assert_eq!(
        client
            .get(&url)
            .bearer_auth("wrong")
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
    let got = client.get(&url).bearer_auth(SECRET).send().await.unwrap();
    assert_eq!(got.status(), 200);
    assert_eq!(got.headers()["content-type"], "image/png");
    assert_eq!(got.bytes().await.unwrap().as_ref(), PNG);

    let body = send(&hook, "w", "m2", "escape", json!([])).await;
    assert!(answer(&body).contains("tool said: Error:"), "{body}");
    assert_eq!(
        hook.list("w", 0)
            .await
            .iter()
            .filter(|m| !m["file"].is_null())
            .count(),
        1,
        "nothing outside the workspace is sent"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_discord_attachment_reaches_the_model_and_send_file_goes_back_as_an_attachment() {
    use crate::common::discord::{DM_CHANNEL, DiscordStandIn, TOKEN};
    let files = FileHost::start().await;
    let llm = LlmStandIn::start(|body, _| {
        let results = crate::common::llm::fresh_results(body);
        if results.is_empty() {
            return Behaviour::tool(
                "send_file",
                json!({"path": "inbox/chart.png", "caption": "your chart"}),
            );
        }
        Behaviour::reply(format!("done: {}", results[0]))
    })
    .await;
    let dc = DiscordStandIn::start().await;
    let config = config_with_llm(
        &llm.url,
        &format!(
            "[tools]\nweb_fetch_allow_private = true\n\
             [channels.discord]\nenabled = true\ntoken_env = \"FC_DC_TOKEN\"\napi_url = \"{}\"\naccess = \"open\"\n",
            dc.url
        ),
    )
    .replace("kind = \"openai\"\n", "kind = \"openai\"\nvision = true\n");
    let work = Workdir::new(&config);
    let _service = Service::start(&work, &[("FC_DC_TOKEN", TOKEN)]).await;
    // A DM with an image attachment and no text.
    dc.message_with(
        DM_CHANNEL,
        None,
        42,
        900,
        "",
        json!({"attachments": [{"id": "77", "filename": "chart.png", "size": PNG.len(),
            "url": format!("{}/photo.png", files.url), "proxy_url": format!("{}/photo.png", files.url),
            "content_type": "image/png"}]}),
    );
    crate::common::wait_for("the answer", std::time::Duration::from_secs(20), || async {
        dc.texts(DM_CHANNEL)
            .iter()
            .any(|t| t.starts_with("done: sent chart.png"))
            .then_some(())
    })
    .await;
    let first = llm.requests().into_iter().next().unwrap();
    let parts = user_content(&first);
    assert_eq!(
        parts[1]["image_url"]["url"],
        format!(
            "data:image/png;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(PNG)
        ),
        "{parts}"
    );
    let uploads: Vec<_> = dc
        .calls_to("POST", &format!("channels/{DM_CHANNEL}/messages"))
        .into_iter()
        .filter(|c| !c.body["_files"].is_null())
        .collect();
    assert_eq!(uploads.len(), 1, "sent once, as an attachment");
    assert_eq!(uploads[0].body["_files"], json!(["chart.png"]));
    assert_eq!(uploads[0].body["content"], "your chart");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_group_voice_note_is_transcribed_before_mention_gating() {
    use crate::common::telegram::{TOKEN, TelegramStandIn};
    let files = FileHost::start().await;
    let llm = LlmStandIn::start(echo()).await;
    let tg = TelegramStandIn::start().await;
    // The transcription stand-in answers a file's bytes as its transcript.
    tg.add_file(
        "v-addressed",
        "voice/file_1.oga",
        b"hey Ferro, what is on today?",
    );
    tg.add_file(
        "v-chatter",
        "voice/file_2.oga",
        b"just chatting among ourselves",
    );
    let config = config_with_llm(
        &llm.url,
        &format!(
            "[channels.telegram]\nenabled = true\ntoken_env = \"FC_TG_TOKEN\"\napi_url = \"{}\"\naccess = \"open\"\n\
             [transcription]\nbase_url = \"{}/v1\"\n",
            tg.url, files.url
        ),
    );
    let work = Workdir::new(&config);
    let _service = Service::start(&work, &[("FC_TG_TOKEN", TOKEN)]).await;
    let voice = |id: i64, file: &str| {
        json!({"message_id": id, "date": 1700000000,
            "chat": {"id": -500, "type": "group", "title": "G"},
            "from": {"id": 7, "is_bot": false, "first_name": "User7"},
            "voice": {"file_id": file, "file_unique_id": file, "duration": 2, "mime_type": "audio/ogg", "file_size": 40}})
    };
    tg.push_message(voice(1, "v-chatter"));
    tg.push_message(voice(2, "v-addressed"));
    crate::common::wait_for(
        "the addressed note's answer",
        std::time::Duration::from_secs(20),
        || async {
            tg.texts(-500)
                .iter()
                .any(|t| t.contains("what is on today?"))
                .then_some(())
        },
    )
    .await;
    assert_eq!(files.transcriptions().len(), 2, "both were transcribed");
    assert_eq!(
        llm.count(),
        1,
        "only the note that names the bot reached the model"
    );
    assert_eq!(tg.texts(-500).len(), 1, "{:?}", tg.texts(-500));
    assert!(tg.texts(-500)[0].contains("Transcript of the user's voice note"));
}
