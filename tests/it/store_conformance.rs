//! One store conformance suite, run against SQLite and PostgreSQL.

use ferroclaw::storage::{
    BudgetHold, JournalInsert, JournalState, LaneClaim, NewMemory, NewOutbound, NewTranscriptEntry,
    NewUsage, OutboxState, PairingState, PostgresStore, RateCheck, ReachCount, RunMode, RunRow,
    RunState, SqliteStore, Store, StoreError, TranscriptRole, TurnCommit, UsageFilter, UsageGroup,
    person_scope,
};
use ferroclaw_channel_core::{ChatKind, ChatRoute, InboundMessage, OutboundKind, Sender};
use std::sync::Arc;

fn route(channel: &str, chat: &str, thread: Option<&str>) -> ChatRoute {
    ChatRoute {
        channel: channel.into(),
        kind: ChatKind::Conversation,
        chat_id: chat.into(),
        thread_id: thread.map(Into::into),
    }
}

fn inbound(route: &ChatRoute, id: &str, text: &str) -> InboundMessage {
    InboundMessage {
        route: route.clone(),
        sender: Sender {
            id: "u1".into(),
            name: "User".into(),
        },
        platform_message_id: id.into(),
        text: text.into(),
        mentioned: true,
        reply_to: None,
        internal: false,
        attachments: Vec::new(),
        mention_names: Vec::new(),
    }
}

fn out(route: &ChatRoute, text: &str) -> NewOutbound {
    NewOutbound {
        route: route.clone(),
        kind: OutboundKind::Reply,
        text: text.into(),
        in_reply_to: None,

        edit_of: None,

        file: None,
        approval: None,
    }
}

fn entry(role: &str, content: &str) -> NewTranscriptEntry {
    NewTranscriptEntry {
        role: TranscriptRole::parse(role).expect("a transcript role"),
        content: content.into(),
        tool_calls: None,
        tool_call_id: None,
        model: None,
        tokens_in: 0,
        tokens_out: 0,
    }
}

fn commit(
    journal: Option<i64>,
    key: &str,
    epoch: i64,
    entries: Vec<NewTranscriptEntry>,
    outbound: Vec<NewOutbound>,
) -> TurnCommit {
    TurnCommit {
        journal_id: journal,
        session_key: key.into(),
        epoch,
        entries,
        outbound,
        tokens_in: 10,
        tokens_out: 5,
        last_model: Some("p/m".into()),
        now_ms: 1_000,
        clear_effects: true,
        run_step: None,
    }
}

/// `message` journalled as a new entry of session `key` at `at`.
async fn journalled(
    store: &dyn Store,
    message: &InboundMessage,
    key: &str,
    at: i64,
) -> ferroclaw::storage::JournalEntry {
    match store.journal_insert(message, key, at).await.unwrap() {
        JournalInsert::New(entry) => entry,
        _ => panic!("{} was not journalled as new", message.platform_message_id),
    }
}

async fn journal_deduplicates_per_channel_and_chat(store: &dyn Store) {
    let a = route("webhook:w", "c1", None);
    let b = route("webhook:w", "c2", None);
    let first = store
        .journal_insert(&inbound(&a, "m1", "hi"), &a.session_key(), 1)
        .await
        .unwrap();
    let JournalInsert::New(first) = first else {
        panic!("first insert must be new")
    };
    assert_eq!(first.message.text, "hi");
    let again = store
        .journal_insert(&inbound(&a, "m1", "hi again"), &a.session_key(), 2)
        .await
        .unwrap();
    assert_eq!(
        again,
        JournalInsert::Duplicate {
            id: first.id,
            session_key: a.session_key()
        }
    );
    let other_chat = store
        .journal_insert(&inbound(&b, "m1", "hi"), &b.session_key(), 3)
        .await
        .unwrap();
    assert!(
        matches!(other_chat, JournalInsert::New(_)),
        "same platform id in another chat is a new message"
    );
    let pending = store.journal_pending().await.unwrap();
    assert_eq!(pending.len(), 2);
    assert!(
        pending[0].id < pending[1].id,
        "pending entries come oldest first"
    );
    assert_eq!(pending[0].message, inbound(&a, "m1", "hi"));
}

async fn a_turn_commits_atomically_and_only_once(store: &dyn Store) {
    let r = route("cli", "s1", None);
    let key = r.session_key();
    let j = journalled(store, &inbound(&r, "x1", "q"), &key, 1).await;
    let session = store.session_get_or_create(&key, &r, 1).await.unwrap();
    assert_eq!(session.epoch, 0);
    let ids = store
        .commit_turn(&commit(
            Some(j.id),
            &key,
            0,
            vec![entry("user", "q"), entry("assistant", "a")],
            vec![out(&r, "a"), out(&r, "b")],
        ))
        .await
        .unwrap();
    assert_eq!(ids.len(), 2);
    assert!(ids[0] < ids[1]);
    assert_eq!(
        store.journal_state(j.id).await.unwrap(),
        Some(JournalState::Done)
    );
    assert!(
        store
            .journal_pending()
            .await
            .unwrap()
            .iter()
            .all(|p| p.id != j.id)
    );

    let again = store
        .commit_turn(&commit(
            Some(j.id),
            &key,
            0,
            vec![entry("user", "q")],
            vec![out(&r, "dup")],
        ))
        .await;
    assert!(matches!(again, Err(StoreError::AlreadyAnswered(id)) if id == j.id));
    let pending = store.outbox_pending("cli", 100, i64::MAX).await.unwrap();
    assert_eq!(
        pending
            .iter()
            .map(|p| p.message.text.as_str())
            .collect::<Vec<_>>(),
        ["a", "b"],
        "a refused commit writes nothing"
    );
    assert_eq!(
        pending.iter().map(|p| p.message.id).collect::<Vec<_>>(),
        ids,
        "the commit returns each message's outbox id, in order"
    );
    let transcript = store.transcript_recent(&key, 0, 0, 100).await.unwrap();
    assert_eq!(transcript.len(), 2);
    let session = store.session_get(&key).await.unwrap().unwrap();
    assert_eq!((session.tokens_in, session.tokens_out), (10, 5));
    assert_eq!(session.last_model.as_deref(), Some("p/m"));

    // The refused commit left the writer outside any transaction: the next one lands, and
    // a turn with no bot message is marked answered too.
    let next = journalled(store, &inbound(&r, "x2", "q2"), &key, 2).await;
    let answer =
        |text: &'static str| commit(Some(next.id), &key, 0, vec![entry("user", text)], vec![]);
    let stored = async || {
        store
            .transcript_recent(&key, 0, 0, 100)
            .await
            .unwrap()
            .len()
    };
    let none = store.commit_turn(&answer("q2")).await.unwrap();
    assert!(none.is_empty(), "no bot message, no outbox id: {none:?}");
    assert_eq!(
        store.journal_state(next.id).await.unwrap(),
        Some(JournalState::Done)
    );
    assert_eq!(stored().await, 3);
    let refused = store.commit_turn(&answer("x")).await;
    assert!(matches!(refused, Err(StoreError::AlreadyAnswered(id)) if id == next.id));
    assert_eq!(stored().await, 3, "the refused commit wrote nothing");
}

async fn transcripts_are_windowed_and_archived_by_epoch(store: &dyn Store) {
    let r = route("cli", "s2", None);
    let key = r.session_key();
    store.session_get_or_create(&key, &r, 1).await.unwrap();
    for i in 0..10 {
        store
            .commit_turn(&commit(
                None,
                &key,
                0,
                vec![entry("user", &format!("m{i}"))],
                vec![],
            ))
            .await
            .unwrap();
    }
    let last3 = store.transcript_recent(&key, 0, 0, 3).await.unwrap();
    assert_eq!(
        last3.iter().map(|e| e.content.as_str()).collect::<Vec<_>>(),
        ["m7", "m8", "m9"]
    );
    let after = store
        .transcript_recent(&key, 0, last3[0].id, 100)
        .await
        .unwrap();
    assert_eq!(after.len(), 2, "after_id excludes summarised entries");
    store
        .session_set_summary(&key, "summary", last3[0].id)
        .await
        .unwrap();
    store.session_set_plan(&key, Some("{}")).await.unwrap();
    assert_eq!(
        store
            .session_get(&key)
            .await
            .unwrap()
            .unwrap()
            .plan
            .as_deref(),
        Some("{}")
    );
    let epoch = store.session_reset(&key, 2).await.unwrap();
    assert_eq!(epoch, 1);
    let session = store.session_get(&key).await.unwrap().unwrap();
    assert_eq!(
        (session.epoch, session.summary.clone(), session.summary_upto),
        (1, None, 0)
    );
    assert_eq!(session.plan, None, "a reset ends the plan");
    assert!(
        store
            .transcript_recent(&key, 1, 0, 100)
            .await
            .unwrap()
            .is_empty(),
        "a reset session starts empty"
    );
    assert_eq!(
        store
            .transcript_recent(&key, 0, 0, 100)
            .await
            .unwrap()
            .len(),
        10,
        "the old transcript is kept"
    );
    store
        .session_set_model(&key, Some("p/other"))
        .await
        .unwrap();
    assert_eq!(
        store
            .session_get(&key)
            .await
            .unwrap()
            .unwrap()
            .model
            .as_deref(),
        Some("p/other")
    );
    assert!(
        store
            .session_list(None, 10, 0)
            .await
            .unwrap()
            .iter()
            .any(|s| s.key == key)
    );
}

async fn outbox_delivery_states_and_conversation_reads(store: &dyn Store) {
    let r1 = route("webhook:o", "c1", None);
    let r2 = route("webhook:o", "c2", Some("t"));
    let ids = store
        .outbox_push(&r1.session_key(), &[out(&r1, "one"), out(&r1, "two")], 5)
        .await
        .unwrap();
    let ids2 = store
        .outbox_push(&r2.session_key(), &[out(&r2, "three")], 5)
        .await
        .unwrap();
    let edit = NewOutbound {
        edit_of: Some(ids[0]),
        file: None,
        ..out(&r1, "one (edited)")
    };
    let edit_id = store
        .outbox_push(&r1.session_key(), &[edit], 6)
        .await
        .unwrap()[0];

    let pending = store
        .outbox_pending("webhook:o", 100, i64::MAX)
        .await
        .unwrap();
    assert_eq!(pending.len(), 4);
    assert!(
        pending
            .windows(2)
            .all(|w| w[0].message.id < w[1].message.id)
    );
    assert_eq!(
        pending[2].message.route, r2,
        "the route (with thread) survives the round trip"
    );
    assert!(
        store
            .outbox_pending("webhook:none", 100, i64::MAX)
            .await
            .unwrap()
            .is_empty()
    );

    store
        .outbox_mark_delivered(&[(ids[0], Some("plat-1".to_string()))], 7)
        .await
        .unwrap();
    store.outbox_mark_delivered(&[], 7).await.unwrap();
    store
        .outbox_retry_later(ids[1], 88_888, "rate limited", false)
        .await
        .unwrap();
    store
        .outbox_retry_later(ids[1], 99_999, "receiver down", true)
        .await
        .unwrap();
    store.outbox_mark_rejected(ids2[0], "bad").await.unwrap();
    let pending = store
        .outbox_pending("webhook:o", 100, i64::MAX)
        .await
        .unwrap();
    assert_eq!(
        pending.iter().map(|p| p.message.id).collect::<Vec<_>>(),
        [ids[1], edit_id]
    );
    assert_eq!(
        (pending[0].attempts, pending[0].next_attempt_at),
        (1, 99_999),
        "a rate-limited retry is not counted"
    );
    assert!(
        store
            .outbox_pending("webhook:o", 100, 50_000)
            .await
            .unwrap()
            .is_empty(),
        "a conversation whose first message waits for its retry yields nothing before then"
    );
    assert_eq!(
        store
            .outbox_next_attempt("webhook:o", 50_000)
            .await
            .unwrap(),
        Some(99_999),
        "the next retry, not the message held back behind it"
    );
    assert_eq!(pending[1].message.edit_of, Some(ids[0]));
    assert_eq!(
        pending[1].message.edit_platform_id.as_deref(),
        Some("plat-1"),
        "an edit knows the platform id it replaces"
    );

    let conv = store
        .outbox_conversation("webhook:o", "c1", 0, 100)
        .await
        .unwrap();
    assert_eq!(
        conv.iter()
            .map(|c| c.message.text.as_str())
            .collect::<Vec<_>>(),
        ["one", "two", "one (edited)"]
    );
    let later = store
        .outbox_conversation("webhook:o", "c1", ids[1], 100)
        .await
        .unwrap();
    assert_eq!(later.len(), 1);
    assert_eq!(later[0].state, OutboxState::Pending);
    assert_eq!(conv[0].state, OutboxState::Delivered);

    assert_eq!(store.outbox_last_id("webhook:o").await.unwrap(), edit_id);
    assert_eq!(store.outbox_last_id("webhook:empty").await.unwrap(), 0);
    let all = store.outbox_after("webhook:o", ids[0], 100).await.unwrap();
    assert_eq!(
        all.iter().map(|c| c.message.id).collect::<Vec<_>>(),
        [ids[1], ids2[0], edit_id],
        "every conversation, after the seq"
    );
    let replying = NewOutbound {
        in_reply_to: Some("m-9".into()),
        ..out(&r1, "answer")
    };
    let reply_id = store
        .outbox_push(&r1.session_key(), &[replying], 8)
        .await
        .unwrap()[0];
    let replies = store
        .outbox_replies("webhook:o", "c1", "m-9")
        .await
        .unwrap();
    assert_eq!(
        replies.iter().map(|c| c.message.id).collect::<Vec<_>>(),
        [reply_id]
    );
    assert!(
        store
            .outbox_replies("webhook:o", "c2", "m-9")
            .await
            .unwrap()
            .is_empty()
    );
}

async fn pairing_codes_expire_are_limited_and_approve_once(store: &dyn Store) {
    use ferroclaw::storage::{PairingOutcome, PairingRequest};
    let req = |user: &str, code: &str, now: i64| PairingRequest {
        channel: "telegram".into(),
        user_id: user.into(),
        user_name: format!("name {user}"),
        code: code.into(),
        now_ms: now,
        expires_at: now + 3_600_000,
    };
    assert_eq!(
        store
            .pairing_request(&req("1", "AAA111", 0), 3)
            .await
            .unwrap(),
        PairingOutcome::Created("AAA111".into())
    );
    assert_eq!(
        store
            .pairing_request(&req("1", "BBB222", 10), 3)
            .await
            .unwrap(),
        PairingOutcome::Pending,
        "one code per user"
    );
    store
        .pairing_request(&req("2", "CCC333", 20), 3)
        .await
        .unwrap();
    store
        .pairing_request(&req("3", "DDD444", 30), 3)
        .await
        .unwrap();
    assert_eq!(
        store
            .pairing_request(&req("4", "EEE555", 40), 3)
            .await
            .unwrap(),
        PairingOutcome::Created("EEE555".into()),
        "a fourth stranger is not blocked by three pending codes"
    );
    assert_eq!(
        store.pairing_list(50).await.unwrap().len(),
        3,
        "at most 3 pending"
    );
    assert!(
        store.pairing_get("telegram", "1").await.unwrap().is_none(),
        "the oldest pending code made room"
    );
    assert!(store.pairing_approve("AAA111", 60).await.unwrap().is_none());
    // An hour later the codes have expired: a new request gets a new code.
    assert!(
        store
            .pairing_approve("AAA111", 3_600_001)
            .await
            .unwrap()
            .is_none(),
        "an expired code cannot be approved"
    );
    assert!(store.pairing_list(3_600_100).await.unwrap().is_empty());
    assert_eq!(
        store
            .pairing_request(&req("4", "FFF666", 3_600_100), 3)
            .await
            .unwrap(),
        PairingOutcome::Created("FFF666".into())
    );
    let approved = store
        .pairing_approve("FFF666", 3_600_200)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (approved.user_id.as_str(), approved.state),
        ("4", PairingState::Approved)
    );
    assert!(
        store
            .pairing_approve("FFF666", 3_600_300)
            .await
            .unwrap()
            .is_none(),
        "a code approves once"
    );
    assert_eq!(
        store
            .pairing_get("telegram", "4")
            .await
            .unwrap()
            .unwrap()
            .state,
        PairingState::Approved
    );
    assert_eq!(
        store.pairing_list(99_999_999).await.unwrap().len(),
        1,
        "approved users do not expire"
    );
    assert_eq!(store.pairing_revoke("4").await.unwrap(), 1);
    assert!(store.pairing_get("telegram", "4").await.unwrap().is_none());
}

/// A run of the main agent spawned by `parent_session` in `origin`, on its first step with
/// task `t`.
fn run_row(id: &str, parent_session: String, origin: &ChatRoute, depth: i64) -> RunRow {
    RunRow {
        agent: "main".into(),
        id: id.into(),
        parent_session,
        origin_route: origin.clone(),
        origin_message: None,
        depth,
        label: id.into(),
        task: "t".into(),
        model: "p/m".into(),
        mode: RunMode::Run,
        state: RunState::Running,
        result: None,
        status_message: None,
        announced: false,
        created_at: 5,
        started_at: None,
        ended_at: None,
        spec: None,
        step: 1,
        step_input: Some("t".into()),
        starts: 1,
    }
}

async fn runs_finish_and_announce_exactly_once(store: &dyn Store) {
    use ferroclaw::storage::RunFinish;
    let origin = route("webhook:r", "conv", Some("t"));
    let run = RunRow {
        origin_message: Some("m1".into()),
        label: "alpha".into(),
        task: "do it".into(),
        state: RunState::Queued,
        spec: Some("{\"tools\":[]}".into()),
        step_input: Some("do it".into()),
        ..run_row("run1", origin.session_key(), &origin, 1)
    };
    store.run_insert(&run).await.unwrap();
    store
        .run_set_state("run1", RunState::Running, Some(6))
        .await
        .unwrap();
    store.run_set_status_message("run1", 77).await.unwrap();
    assert_eq!(store.runs_unannounced(None).await.unwrap().len(), 1);
    store
        .runs_lease(&["run1".to_string()], 1_000)
        .await
        .unwrap();
    assert!(
        store.runs_unannounced(Some(999)).await.unwrap().is_empty(),
        "leased by a live process"
    );
    assert_eq!(
        store.runs_unannounced(Some(1_001)).await.unwrap().len(),
        1,
        "its lease expired"
    );
    // Taking it over: not while its lease runs; once after it ended, however many try.
    assert_eq!(
        store
            .run_claim("run1", Some(999), Some(5_000))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .run_claim("run1", Some(1_001), Some(5_000))
            .await
            .unwrap(),
        Some(2),
        "the second start"
    );
    assert_eq!(
        store
            .run_claim("run1", Some(1_001), Some(6_000))
            .await
            .unwrap(),
        None,
        "the first claim holds it"
    );
    // A step: its input kept while it runs; its effects and input gone when it commits.
    assert!(store.run_set_step("run1", 2, "next", None).await.unwrap());
    store
        .tool_effect_put("rrun1:2", "message:1", "sent", 1)
        .await
        .unwrap();
    store
        .tool_effect_put("rrun1:3", "message:1", "sent", 1)
        .await
        .unwrap();
    store
        .tool_effect_put("rrun10:1", "message:1", "sent", 1)
        .await
        .unwrap();
    let got = store.run_get("run1").await.unwrap().unwrap();
    assert_eq!(
        (
            got.step,
            got.step_input.as_deref(),
            got.starts,
            got.spec.as_deref()
        ),
        (2, Some("next"), 2, Some("{\"tools\":[]}"))
    );
    let child = "agent:main:subagent:run1";
    store
        .session_get_or_create(child, &route("subagent", "run1", None), 1)
        .await
        .unwrap();
    store
        .commit_turn(&TurnCommit {
            run_step: Some(("run1".into(), 2)),
            clear_effects: false,
            ..commit(None, child, 0, vec![entry("assistant", "ok")], vec![])
        })
        .await
        .unwrap();
    let got = store.run_get("run1").await.unwrap().unwrap();
    assert_eq!((got.step, got.step_input), (2, None), "the step committed");
    assert_eq!(
        store.tool_effect_get("rrun1:2", "message:1").await.unwrap(),
        None
    );
    assert!(
        store
            .tool_effect_get("rrun1:3", "message:1")
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(
        (
            got.state.as_str(),
            got.started_at,
            got.status_message,
            got.origin_route.clone()
        ),
        ("running", Some(6), Some(77), origin.clone())
    );
    let parent_message = inbound(&origin, "subagent:run1", "[Subagent alpha ended]");
    let finish = RunFinish {
        run_id: "run1".into(),
        state: RunState::Done,
        result: "42".into(),
        announcement: Some(NewOutbound {
            kind: OutboundKind::Announce,
            ..out(&origin, "alpha done: 42")
        }),
        status_edit: None,
        parent_message: Some((parent_message.clone(), origin.session_key())),
        report: None,
        now_ms: 9,
    };
    let ferroclaw::storage::RunFinished::Announced {
        parent_turn: Some(journal),
    } = store.run_finish(&finish).await.unwrap()
    else {
        panic!("the first finish announces and tells the parent");
    };
    assert_eq!(journal.message, parent_message);
    assert_eq!(
        store.run_finish(&finish).await.unwrap(),
        ferroclaw::storage::RunFinished::AlreadyAnnounced,
        "a second finish writes nothing"
    );
    let announced: Vec<_> = store
        .outbox_conversation("webhook:r", "conv", 0, 100)
        .await
        .unwrap();
    assert_eq!(
        announced
            .iter()
            .filter(|m| m.message.kind == OutboundKind::Announce)
            .count(),
        1
    );
    assert!(store.runs_unannounced(None).await.unwrap().is_empty());
    assert_eq!(
        store.tool_effect_get("rrun1:3", "message:1").await.unwrap(),
        None,
        "an ended run's effects are dropped"
    );
    assert!(
        store
            .tool_effect_get("rrun10:1", "message:1")
            .await
            .unwrap()
            .is_some(),
        "not another run's"
    );
    assert_eq!(
        store.run_claim("run1", None, None).await.unwrap(),
        None,
        "an announced run is never started again"
    );
    let done = store.run_get("run1").await.unwrap().unwrap();
    assert_eq!(
        (
            done.state.as_str(),
            done.result.as_deref(),
            done.ended_at,
            done.announced
        ),
        ("done", Some("42"), Some(9), true)
    );
    assert_eq!(store.runs_of(&origin.session_key()).await.unwrap().len(), 1);
    let recent = store.runs_recent(10).await.unwrap();
    assert_eq!(recent[0].id, "run1", "the newest run first");
}

/// A run's inbox: steers and its children's outcomes (put by the child's end, in the same
/// transaction) wait in order; taking one moves it into the run's step once; an ended run's
/// inbox is emptied and takes nothing more.
async fn a_run_inbox_hands_each_item_to_one_step(store: &dyn Store) {
    use ferroclaw::storage::{MailKind, RunFinish};
    let origin = route("webhook:r", "inbox", None);
    let run =
        |id: &str, parent_session: String, depth: i64| run_row(id, parent_session, &origin, depth);
    let below = "agent:main:subagent:p1".to_string();
    for row in [
        run("p1", origin.session_key(), 1),
        run("g1", below.clone(), 2),
        run("g2", below.clone(), 2),
    ] {
        store.run_insert(&row).await.unwrap();
    }
    let end = |id: &str, report: Option<(String, String)>| RunFinish {
        run_id: id.into(),
        state: RunState::Done,
        result: "r".into(),
        announcement: None,
        status_edit: None,
        parent_message: None,
        report,
        now_ms: 9,
    };
    assert!(
        store
            .run_mail_put("p1", MailKind::Steer, "go left", 6)
            .await
            .unwrap()
    );
    assert!(
        !store
            .run_mail_put("nope", MailKind::Steer, "x", 6)
            .await
            .unwrap(),
        "no such run"
    );
    store
        .run_finish(&end("g1", Some(("p1".into(), "g1 says r".into()))))
        .await
        .unwrap();
    let first = store.run_mail_next("p1").await.unwrap().unwrap();
    assert_eq!(
        (first.kind, first.text.as_str()),
        (MailKind::Steer, "go left")
    );
    assert!(
        store
            .run_set_step("p1", 2, "[steer] go left", Some(first.id))
            .await
            .unwrap()
    );
    assert!(
        !store
            .run_set_step("p1", 3, "[steer] go left", Some(first.id))
            .await
            .unwrap(),
        "an item is taken once"
    );
    let got = store.run_get("p1").await.unwrap().unwrap();
    assert_eq!(
        (got.step, got.step_input.as_deref()),
        (2, Some("[steer] go left"))
    );
    let second = store.run_mail_next("p1").await.unwrap().unwrap();
    assert_eq!(
        (second.kind, second.text.as_str()),
        (MailKind::Report, "g1 says r"),
        "the child's end put its outcome in its parent's inbox"
    );
    store.run_finish(&end("p1", None)).await.unwrap();
    assert_eq!(
        store.run_mail_next("p1").await.unwrap(),
        None,
        "an ended run's inbox is emptied"
    );
    assert!(
        !store
            .run_mail_put("p1", MailKind::Steer, "late", 10)
            .await
            .unwrap()
    );
    store
        .run_finish(&end("g2", Some(("p1".into(), "g2 says r".into()))))
        .await
        .unwrap();
    assert_eq!(
        store.run_mail_next("p1").await.unwrap(),
        None,
        "nothing is put for a parent that has ended"
    );
}

/// The admin API's reads: sessions filtered by a key prefix and paged, the backlog.
async fn admin_reads_filter_page_and_count(store: &dyn Store) {
    for (channel, chat) in [
        ("webhook:a_b", "x"),
        ("webhook:a_b", "y"),
        ("webhook:aXb", "z"),
    ] {
        let r = route(channel, chat, None);
        store
            .session_get_or_create(&r.session_key(), &r, 50)
            .await
            .unwrap();
    }
    // `_` is not a wildcard: only the two sessions of `webhook:a_b`.
    let mine = store
        .session_list(Some("agent:main:webhook:a_b:"), 10, 0)
        .await
        .unwrap();
    assert_eq!(mine.len(), 2, "{mine:?}");
    let page2 = store
        .session_list(Some("agent:main:webhook:a_b:"), 1, 1)
        .await
        .unwrap();
    assert_eq!(page2.len(), 1);
    assert_ne!(
        page2[0].key, mine[0].key,
        "the second page is the other session"
    );
    let counts = store.outbox_backlog_counts().await.unwrap();
    let backlog = store.outbox_backlog(1000).await.unwrap();
    assert_eq!(
        counts.iter().map(|(_, n)| *n).sum::<i64>(),
        backlog.len() as i64,
        "counts and rows agree: {counts:?}"
    );
    assert!(
        backlog
            .windows(2)
            .all(|w| w[0].message.id < w[1].message.id)
    );
}

/// What the delivery worker does beside other processes: the conversation's delivery lease
/// claimed (held until `now_ms + 100,000`), then, when held, its due rows on channel
/// `deliver` read in a statement after the claim's. None: another holds it.
async fn claim_then_read(
    store: &dyn Store,
    key: &str,
    chat: &str,
    thread: Option<&str>,
    owner: &str,
    now_ms: i64,
) -> Result<Option<Vec<ferroclaw::storage::OutboxEntry>>, StoreError> {
    if !store
        .lease_claim(key, owner, now_ms, now_ms + 100_000)
        .await?
    {
        return Ok(None);
    }
    let due = store
        .outbox_pending_in("deliver", chat, thread, 10, now_ms)
        .await?;
    Ok(Some(due))
}

/// Delivery beside other processes: the conversation's lease claimed with its due rows, and
/// the rows marked delivered with the lease given up.
async fn a_conversation_s_deliveries_are_claimed_with_its_rows_and_released_with_the_mark(
    store: &dyn Store,
) {
    let r = route("deliver", "c9", Some("t"));
    let other = route("deliver", "c9", None);
    let ids = store
        .outbox_push(&r.session_key(), &[out(&r, "one"), out(&r, "two")], 5)
        .await
        .unwrap();
    store
        .outbox_push(&other.session_key(), &[out(&other, "elsewhere")], 5)
        .await
        .unwrap();
    let key = "delivery:deliver:c9:t";
    let due = claim_then_read(store, key, "c9", Some("t"), "a", 10)
        .await
        .unwrap()
        .expect("free: held");
    assert_eq!(
        due.iter().map(|e| e.message.id).collect::<Vec<_>>(),
        ids,
        "this conversation's rows only, in order"
    );
    assert_eq!(due[0].message.text, "one");
    assert_eq!(
        claim_then_read(store, key, "c9", Some("t"), "b", 20)
            .await
            .unwrap(),
        None,
        "held by a"
    );
    store
        .outbox_mark_delivered_release(&[(ids[0], Some("p1".into()))], 30, key, "b")
        .await
        .unwrap();
    assert_eq!(
        claim_then_read(store, key, "c9", Some("t"), "b", 40)
            .await
            .unwrap(),
        None,
        "b cannot give a's lease up"
    );
    store
        .outbox_mark_delivered_release(&[(ids[1], Some("p2".into()))], 50, key, "a")
        .await
        .unwrap();
    assert_eq!(
        claim_then_read(store, key, "c9", Some("t"), "b", 60)
            .await
            .unwrap(),
        Some(Vec::new()),
        "released: held by b, nothing left due"
    );
    store
        .outbox_mark_delivered_release(&[], 70, key, "b")
        .await
        .unwrap();
    assert!(
        claim_then_read(store, key, "c9", Some("t"), "a", 80)
            .await
            .unwrap()
            .is_some(),
        "nothing marked, still released"
    );
    store.lease_release(key, "a").await.unwrap();
    let left = store.outbox_pending("deliver", 10, 100).await.unwrap();
    assert_eq!(
        left.iter()
            .map(|e| e.message.text.as_str())
            .collect::<Vec<_>>(),
        ["elsewhere"],
        "both rows marked (whoever held the lease), the other conversation's left"
    );
}

/// Session leases: one holder at a time, renewed by it, free once expired or released;
/// the journal's per-session reads.
async fn leases_have_one_holder_and_expire(store: &dyn Store) {
    let key = "agent:main:webhook:l:c";
    assert!(store.lease_claim(key, "a", 100, 200).await.unwrap());
    assert!(
        !store.lease_claim(key, "b", 150, 250).await.unwrap(),
        "held by a"
    );
    assert!(
        store.lease_claim(key, "a", 150, 300).await.unwrap(),
        "a keeps it"
    );
    store
        .lease_renew(&[key.to_string()], "b", 999)
        .await
        .unwrap();
    assert!(
        !store.lease_claim(key, "b", 250, 350).await.unwrap(),
        "b cannot renew a's"
    );
    assert!(
        store.lease_claim(key, "b", 300, 400).await.unwrap(),
        "expired: b takes it"
    );
    store.lease_release(key, "a").await.unwrap();
    assert!(
        !store.lease_claim(key, "a", 350, 450).await.unwrap(),
        "a cannot release b's"
    );
    store.lease_release(key, "b").await.unwrap();
    assert!(
        store.lease_claim(key, "a", 350, 450).await.unwrap(),
        "released: free"
    );

    let r = route("webhook:l", "q", None);
    let first = match store
        .journal_insert(&inbound(&r, "1", "one"), &r.session_key(), 5)
        .await
        .unwrap()
    {
        ferroclaw::storage::JournalInsert::New(e) => e.id,
        other => panic!("{other:?}"),
    };
    store
        .journal_insert(&inbound(&r, "2", "two"), &r.session_key(), 6)
        .await
        .unwrap();
    let next = store.journal_next(&r.session_key()).await.unwrap().unwrap();
    assert_eq!(next.id, first, "the oldest pending entry");
    let unleased = store.journal_unleased(1000, 100).await.unwrap();
    assert!(unleased.contains(&r.session_key()));
    assert!(
        store
            .lease_claim(&r.session_key(), "a", 1000, 5000)
            .await
            .unwrap()
    );
    let unleased = store.journal_unleased(1000, 100).await.unwrap();
    assert!(
        !unleased.contains(&r.session_key()),
        "a live lease hides it"
    );
    let unleased = store.journal_unleased(6000, 100).await.unwrap();
    assert!(
        unleased.contains(&r.session_key()),
        "an expired one does not"
    );
}

/// A leased lane's two reads: the claim brings the oldest pending entry, and the step after a
/// turn gives the lease up only when nothing is pending, in one decision.
async fn a_lane_claims_with_its_next_entry_and_releases_only_when_idle(store: &dyn Store) {
    let r = route("webhook:lane", "q", None);
    let key = r.session_key();
    let LaneClaim::Held {
        next: None,
        fence: before,
    } = store.lease_claim_next(&key, "a", 100, 200).await.unwrap()
    else {
        panic!("nothing pending: held, no entry")
    };
    assert_eq!(
        store.lease_next_or_release(&key, "a").await.unwrap(),
        None,
        "nothing pending: given up"
    );
    assert!(
        matches!(
            store.lease_claim_next(&key, "b", 150, 250).await.unwrap(),
            LaneClaim::Held { next: None, .. }
        ),
        "given up: free for another"
    );
    assert_eq!(
        store.lease_claim_next(&key, "a", 160, 260).await.unwrap(),
        LaneClaim::NotHeld,
        "held by b"
    );
    store.lease_release(&key, "b").await.unwrap();

    let mut ids = Vec::new();
    for (id, text) in [("1", "one"), ("2", "two")] {
        match store
            .journal_insert(&inbound(&r, id, text), &key, 5)
            .await
            .unwrap()
        {
            JournalInsert::New(e) => ids.push(e.id),
            other => panic!("{other:?}"),
        }
    }
    let LaneClaim::Held {
        next: Some(first),
        fence,
    } = store.lease_claim_next(&key, "a", 300, 400).await.unwrap()
    else {
        panic!("held, with the oldest pending entry")
    };
    assert_eq!(first.id, ids[0]);
    assert!(
        before < ids[0],
        "journalled after the first claim: above its fence"
    );
    assert_eq!(fence, ids[1], "the journal's highest id at the claim");
    assert_eq!(first.message, inbound(&r, "1", "one"));
    assert_eq!(
        store
            .lease_next_or_release(&key, "a")
            .await
            .unwrap()
            .map(|e| e.id),
        Some(ids[0]),
        "unanswered: read again, the lease kept"
    );
    assert_eq!(
        store.lease_claim_next(&key, "b", 310, 410).await.unwrap(),
        LaneClaim::NotHeld,
        "a still holds it"
    );
    store.session_get_or_create(&key, &r, 5).await.unwrap();
    for (n, id) in ids.iter().enumerate() {
        store
            .commit_turn(&commit(Some(*id), &key, 0, Vec::new(), Vec::new()))
            .await
            .unwrap();
        let next = store.lease_next_or_release(&key, "a").await.unwrap();
        assert_eq!(next.map(|e| e.id), ids.get(n + 1).copied());
    }
    assert!(
        matches!(
            store.lease_claim_next(&key, "b", 320, 420).await.unwrap(),
            LaneClaim::Held { next: None, .. }
        ),
        "all answered: a gave it up"
    );
    assert_eq!(
        store.lease_next_or_release(&key, "a").await.unwrap(),
        None,
        "not a's to give up, and nothing pending"
    );
    assert_eq!(
        store.lease_claim_next(&key, "a", 330, 430).await.unwrap(),
        LaneClaim::NotHeld,
        "b's lease was left alone"
    );
    store.lease_release(&key, "b").await.unwrap();
}

async fn suite(store: Arc<dyn Store>) {
    store.migrate().await.unwrap();
    store.migrate().await.expect("migrating twice is a no-op");
    store.ping().await.unwrap();
    journal_deduplicates_per_channel_and_chat(&*store).await;
    a_turn_commits_atomically_and_only_once(&*store).await;
    transcripts_are_windowed_and_archived_by_epoch(&*store).await;
    outbox_delivery_states_and_conversation_reads(&*store).await;
    a_conversation_s_deliveries_are_claimed_with_its_rows_and_released_with_the_mark(&*store).await;
    pairing_codes_expire_are_limited_and_approve_once(&*store).await;
    runs_finish_and_announce_exactly_once(&*store).await;
    a_run_inbox_hands_each_item_to_one_step(&*store).await;
    admin_reads_filter_page_and_count(&*store).await;
    leases_have_one_holder_and_expire(&*store).await;
    a_lane_claims_with_its_next_entry_and_releases_only_when_idle(&*store).await;
    team_boards_claim_once_and_inboxes_deliver_once(&*store).await;
    effects_are_kept_once_and_forgotten(&*store).await;
    usage_is_reported_and_caps_hold_under_a_race(store.clone()).await;
    rate_windows_count_and_say_when(store.clone()).await;
    message_reach_is_taken_within_its_limit(store.clone()).await;
    approvals_open_once_decide_once_and_remember(&*store).await;
    memories_keep_scopes_apart_and_link_people(&*store).await;
    a_word_older_than_the_newest_thousand_rows_is_found(&*store).await;
    incidents_alert_once_and_resolve_once(store.clone()).await;
}

fn usage_row(day: &str, user: &str, chat: &str, model: &str, cost: f64) -> NewUsage {
    NewUsage {
        at_ms: 1,
        day: day.into(),
        session_key: format!("s-{chat}"),
        agent: "main".into(),
        channel: "webhook:w".into(),
        chat: chat.into(),
        user: (!user.is_empty()).then(|| user.to_string()),
        kind: "user_turn".into(),
        model: model.into(),
        input_tokens: 1_000,
        output_tokens: 100,
        cached_input_tokens: 400,
        cache_write_tokens: 0,
        cost_usd: cost,
        priced: cost > 0.0,
    }
}

/// Usage sums by day range, person, chat and group; a cap takes reservations only while
/// they fit, all of a call's caps or none, also when 20 race for the last dollar.
async fn usage_is_reported_and_caps_hold_under_a_race(store: Arc<dyn Store>) {
    // One row alone, then three in one statement.
    store
        .usage_record(
            &[usage_row("2026-11-30", "w:alice", "w:c1", "p/a", 0.5)],
            &[],
        )
        .await
        .unwrap();
    let rows = [
        usage_row("2026-12-01", "w:alice", "w:c1", "p/a", 0.25),
        usage_row("2026-12-01", "w:bob", "w:c2", "p/b", 1.0),
        usage_row("2026-12-02", "", "w:c2", "p/b", 0.0),
    ];
    store.usage_record(&rows, &[]).await.unwrap();
    let december = UsageFilter {
        from_day: "2026-12-01".into(),
        to_day: "2026-12-31".into(),
        user: None,
        chat: None,
    };
    let total = store.usage_report(&december, None).await.unwrap();
    assert_eq!(total.len(), 1);
    assert_eq!(total[0].calls, 3);
    assert_eq!(total[0].input_tokens, 3_000);
    assert_eq!(total[0].cached_input_tokens, 1_200);
    assert_eq!(total[0].unpriced_calls, 1);
    assert!((total[0].cost_usd - 1.25).abs() < 1e-9);
    let by_user = store
        .usage_report(&december, Some(UsageGroup::User))
        .await
        .unwrap();
    let keys: Vec<(&str, i64)> = by_user.iter().map(|r| (r.key.as_str(), r.calls)).collect();
    assert_eq!(
        keys,
        [("w:bob", 1), ("w:alice", 1), ("", 1)],
        "dearest first"
    );
    let alice_chat = UsageFilter {
        chat: Some("w:c1".into()),
        from_day: "2026-11-01".into(),
        ..december.clone()
    };
    let by_day = store
        .usage_report(&alice_chat, Some(UsageGroup::Day))
        .await
        .unwrap();
    assert_eq!(by_day.len(), 2);
    let nobody = UsageFilter {
        user: Some("w:carol".into()),
        ..december.clone()
    };
    assert_eq!(store.usage_report(&nobody, None).await.unwrap()[0].calls, 0);

    // All caps or none: the second cap is full, so the first takes nothing either.
    let hold = |budget: &str, cap: f64| BudgetHold {
        budget: budget.into(),
        period: "2026-12-03".into(),
        cap_usd: cap,
    };
    let both = [hold("user:w:alice", 10.0), hold("total", 1.0)];
    assert_eq!(store.budget_reserve(&both, 0.6).await.unwrap(), Ok(()));
    assert_eq!(store.budget_reserve(&both, 0.6).await.unwrap(), Err(1));
    assert!(
        (store
            .budget_spent("user:w:alice", "2026-12-03")
            .await
            .unwrap()
            - 0.6)
            .abs()
            < 1e-9
    );
    // Settling to the real cost gives the rest of the reservation back.
    let mut settled = usage_row("2026-12-03", "w:alice", "w:c1", "p/a", 0.1);
    settled.at_ms = 2;
    store
        .usage_record(
            std::slice::from_ref(&settled),
            &[(both.to_vec(), 0.1 - 0.6)],
        )
        .await
        .unwrap();
    assert!((store.budget_spent("total", "2026-12-03").await.unwrap() - 0.1).abs() < 1e-9);
    store.budget_settle(&both, -0.1).await.unwrap();

    // A batch's settlements land together, each cap moved by the sum of its own.
    let total_only = [hold("total", 1.0)];
    assert_eq!(store.budget_reserve(&both, 0.5).await.unwrap(), Ok(()));
    assert_eq!(
        store.budget_reserve(&total_only, 0.3).await.unwrap(),
        Ok(())
    );
    let mut first = usage_row("2026-12-03", "w:alice", "w:c1", "p/a", 0.1);
    first.at_ms = 3;
    let mut second = usage_row("2026-12-03", "w:alice", "w:c1", "p/a", 0.05);
    second.at_ms = 4;
    store
        .usage_record(
            &[first, second],
            &[
                (both.to_vec(), 0.1 - 0.5),
                (total_only.to_vec(), 0.05 - 0.3),
            ],
        )
        .await
        .unwrap();
    let alice = store
        .budget_spent("user:w:alice", "2026-12-03")
        .await
        .unwrap();
    let total = store.budget_spent("total", "2026-12-03").await.unwrap();
    assert!((alice - 0.1).abs() < 1e-9, "{alice}");
    assert!((total - 0.15).abs() < 1e-9, "{total}");
    store.budget_settle(&both, -0.1).await.unwrap();
    store.budget_settle(&total_only, -0.05).await.unwrap();

    // A batch of reservations, each all or none: three of five fit, the others name the cap.
    let batch = [hold("chat:w:batch", 1.0)];
    let five: Vec<_> = (0..5).map(|_| (batch.to_vec(), 0.3)).collect();
    let mut answers = store.budget_reserve_each(&five).await.unwrap();
    answers.sort();
    assert_eq!(answers, vec![Ok(()), Ok(()), Ok(()), Err(0), Err(0)]);
    let spent = store
        .budget_spent("chat:w:batch", "2026-12-03")
        .await
        .unwrap();
    assert!((spent - 0.9).abs() < 1e-9, "{spent}");

    // 20 reservations of $0.30 race for a $1.00 cap: exactly three fit.
    let cap = [hold("chat:w:race", 1.0)];
    let racers = (0..20).map(|_| {
        let store = store.clone();
        let cap = cap.clone();
        tokio::spawn(async move { store.budget_reserve(&cap, 0.3).await.unwrap().is_ok() })
    });
    let won = futures::future::join_all(racers)
        .await
        .into_iter()
        .filter(|r| *r.as_ref().unwrap())
        .count();
    assert_eq!(won, 3);
    let spent = store
        .budget_spent("chat:w:race", "2026-12-03")
        .await
        .unwrap();
    assert!((spent - 0.9).abs() < 1e-9, "{spent}");
}

/// The rate windows count each message once and say when the next one fits; a person's and
/// a group's windows are counted together or not at all; processes racing for a window's
/// last places take exactly what fits.
async fn rate_windows_count_and_say_when(store: Arc<dyn Store>) {
    let two = |subject, at| take(&*store, subject, 2, at);
    assert_eq!(two("w:alice", 1_000).await, None);
    assert_eq!(two("w:alice", 2_000).await, None);
    assert_eq!(
        two("w:alice", 3_000).await,
        Some((0, 61_000)),
        "full: the oldest leaves the window at 61 s"
    );
    assert_eq!(
        two("w:alice", 4_000).await,
        Some((0, 61_000)),
        "a refused message is not counted"
    );
    assert_eq!(two("w:bob", 4_000).await, None);
    assert_eq!(two("w:alice", 61_500).await, None);

    // A person with room in a full group: refused by the group (the second check), and the
    // person's own window is not charged.
    let both = |person: &'static str| {
        [
            RateCheck {
                subject: person,
                windows: &[(60_000, 5)],
            },
            RateCheck {
                subject: "chat:w:g1",
                windows: &[(60_000, 1)],
            },
        ]
    };
    assert_eq!(
        store.rate_take(&both("w:carol"), 10_000).await.unwrap(),
        None
    );
    assert_eq!(
        store.rate_take(&both("w:dave"), 11_000).await.unwrap(),
        Some((1, 70_000))
    );
    for at in [12_000, 13_000, 14_000, 15_000, 16_000] {
        assert_eq!(
            take(&*store, "w:dave", 5, at).await,
            None,
            "dave was not charged by the refused message"
        );
    }
    assert_eq!(take(&*store, "w:dave", 5, 17_000).await, Some((0, 72_000)));

    // 20 messages of one person race for a window of 5: exactly 5 are counted.
    let racers = (0..20).map(|i| {
        let store = store.clone();
        tokio::spawn(async move { take(&*store, "w:racer", 5, 100_000 + i).await.is_none() })
    });
    let admitted = futures::future::join_all(racers)
        .await
        .into_iter()
        .filter(|r| *r.as_ref().unwrap())
        .count();
    assert_eq!(admitted, 5);
}

/// Count a message of `subject` against a window of `max` a minute.
async fn take(store: &dyn Store, subject: &str, max: u32, at: i64) -> Option<(usize, i64)> {
    store
        .rate_take(
            &[RateCheck {
                subject,
                windows: &[(60_000, max)],
            }],
            at,
        )
        .await
        .unwrap()
}

/// A message's reach: runs one at a time and calls in blocks, never past the limit, a new
/// row charged the first turn's local allowance, shared by racing processes, forgotten when old.
async fn message_reach_is_taken_within_its_limit(store: Arc<dyn Store>) {
    // Calls: a row created by a block claim starts at the seed (8), so of 20 only 12 remain.
    assert_eq!(
        store
            .reach_take("m1", ReachCount::Calls, 16, 20, 8, 1)
            .await
            .unwrap(),
        12
    );
    assert_eq!(
        store
            .reach_take("m1", ReachCount::Calls, 16, 20, 8, 2)
            .await
            .unwrap(),
        0
    );
    // Runs: the row exists, one at a time up to the limit.
    for _ in 0..3 {
        assert_eq!(
            store
                .reach_take("m2", ReachCount::Runs, 1, 3, 8, 3)
                .await
                .unwrap(),
            1
        );
    }
    assert_eq!(
        store
            .reach_take("m2", ReachCount::Runs, 1, 3, 8, 4)
            .await
            .unwrap(),
        0
    );
    // The row a run created charged the seed to the calls: 10 - 8 = 2 calls remain.
    assert_eq!(
        store
            .reach_take("m2", ReachCount::Calls, 16, 10, 8, 5)
            .await
            .unwrap(),
        2
    );
    // 20 racing runs for a limit of 7: exactly 7 are granted.
    let racers = (0..20).map(|_| {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .reach_take("m3", ReachCount::Runs, 1, 7, 8, 6)
                .await
                .unwrap()
        })
    });
    let granted: i64 = futures::future::join_all(racers)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .sum();
    assert_eq!(granted, 7);
    // Rows untouched since a time are forgotten; the message then counts afresh.
    assert_eq!(
        store.reach_forget(6).await.unwrap(),
        2,
        "m1 and m2 (m3 was touched at 6)"
    );
    assert_eq!(
        store
            .reach_take("m1", ReachCount::Calls, 16, 20, 8, 7)
            .await
            .unwrap(),
        12
    );
}

/// Recorded effects (tool results, streamed previews' message ids): the first record wins,
/// and a forgotten one is gone without touching the turn's others.
async fn effects_are_kept_once_and_forgotten(store: &dyn Store) {
    let turn = "preview:telegram:2:42:m1";
    assert_eq!(store.tool_effect_get(turn, "message").await.unwrap(), None);
    store
        .tool_effect_put(turn, "message", "101", 1)
        .await
        .unwrap();
    store
        .tool_effect_put(turn, "message", "102", 2)
        .await
        .unwrap();
    store.tool_effect_put(turn, "other", "x", 3).await.unwrap();
    assert_eq!(
        store
            .tool_effect_get(turn, "message")
            .await
            .unwrap()
            .as_deref(),
        Some("101"),
        "the first record wins"
    );
    store.tool_effect_forget(turn, "message").await.unwrap();
    store
        .tool_effect_forget(turn, "message")
        .await
        .expect("forgetting twice is fine");
    assert_eq!(store.tool_effect_get(turn, "message").await.unwrap(), None);
    assert_eq!(
        store
            .tool_effect_get(turn, "other")
            .await
            .unwrap()
            .as_deref(),
        Some("x")
    );
}

async fn team_boards_claim_once_and_inboxes_deliver_once(store: &dyn Store) {
    use ferroclaw::storage::{NewTeamTask, TaskComment, TaskOrigin, TeamTaskStatus};
    let origin = route("webhook:t", "conv", Some("th"));
    let new = |title: &str, blocked_by: Vec<i64>| NewTeamTask {
        team: "docs".into(),
        title: title.into(),
        description: "d".into(),
        assignee: Some("writer".into()),
        blocked_by,
        created_by: "main".into(),
        origin: Some(TaskOrigin {
            session: origin.session_key(),
            route: origin.clone(),
            message: Some("m1".into()),
        }),
    };
    let first = store
        .team_task_create(&new("one", vec![]), 1)
        .await
        .unwrap();
    let second = store
        .team_task_create(&new("two", vec![first.id]), 2)
        .await
        .unwrap();
    assert!(second.id > first.id);
    assert_eq!(second.blocked_by, vec![first.id]);
    assert_eq!(second.status, TeamTaskStatus::Open);
    store
        .team_task_create(
            &NewTeamTask {
                team: "other".into(),
                ..new("x", vec![])
            },
            3,
        )
        .await
        .unwrap();
    let board = store.team_tasks("docs").await.unwrap();
    assert_eq!(board.len(), 2, "one team's board");
    assert_eq!(board[0].origin.as_ref().unwrap().route, origin);

    // A claim is a compare-and-set on the status: only the first of two succeeds.
    let mut claimed = first.clone();
    claimed.status = TeamTaskStatus::InProgress;
    claimed.owner = Some("writer".into());
    claimed.comments.push(TaskComment {
        agent: "writer".into(),
        text: "on it".into(),
    });
    assert!(
        store
            .team_task_save(&claimed, TeamTaskStatus::Open, 4)
            .await
            .unwrap()
    );
    assert!(
        !store
            .team_task_save(&claimed, TeamTaskStatus::Open, 5)
            .await
            .unwrap()
    );
    let stored = &store.team_tasks("docs").await.unwrap()[0];
    assert_eq!(stored.status, TeamTaskStatus::InProgress);
    assert_eq!(stored.comments[0].text, "on it");
    assert_eq!(stored.updated_at, 4);

    // Each recipient gets a message once, in order.
    let to = vec!["writer".to_string(), "researcher".to_string()];
    store
        .team_message_send("docs", "main", &to, "first", 6)
        .await
        .unwrap();
    store
        .team_message_send("docs", "main", &to[..1], "second", 7)
        .await
        .unwrap();
    let inbox = store.team_inbox_take("docs", "writer", 8).await.unwrap();
    let texts: Vec<&str> = inbox.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(texts, ["first", "second"]);
    assert_eq!(inbox[0].sender, "main");
    assert!(
        store
            .team_inbox_take("docs", "writer", 9)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .team_inbox_take("docs", "researcher", 9)
            .await
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn the_sqlite_store_passes_the_conformance_suite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    suite(Arc::new(SqliteStore::connect(&url).await.unwrap())).await;
}

#[tokio::test]
async fn the_postgres_store_passes_the_conformance_suite() {
    let url = crate::common::pg::fresh_database().await;
    suite(Arc::new(PostgresStore::connect(&url).await.unwrap())).await;
}

/// PostgreSQL, read committed: a claim that had to wait for the lease row (its last holder
/// was giving it up in a transaction that also marked the work done) must read what that
/// transaction committed, not the snapshot its statement took before the wait — else rows
/// delivered or entries answered just before the release are taken up again.
#[tokio::test]
async fn a_claim_that_waited_for_the_lease_reads_what_its_last_holder_committed() {
    let url = crate::common::pg::fresh_database().await;
    let store: Arc<dyn Store> = Arc::new(PostgresStore::connect(&url).await.unwrap());
    store.migrate().await.unwrap();
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let r = route("deliver", "w1", None);
    let key = r.session_key();

    // Delivery: a's rows marked delivered and its lease given up in one transaction.
    let ids = store
        .outbox_push(&key, &[out(&r, "once")], 5)
        .await
        .unwrap();
    let lease = "delivery:deliver:w1:";
    assert!(store.lease_claim(lease, "a", 10, 100_000).await.unwrap());
    let mut last = pool.begin().await.unwrap();
    sqlx::query("UPDATE outbox SET state = 'delivered' WHERE id = $1")
        .bind(ids[0])
        .execute(&mut *last)
        .await
        .unwrap();
    sqlx::query("DELETE FROM session_leases WHERE session_key = $1")
        .bind(lease)
        .execute(&mut *last)
        .await
        .unwrap();
    let claim = {
        let store = store.clone();
        tokio::spawn(async move { claim_then_read(&*store, lease, "w1", None, "b", 20).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!claim.is_finished(), "b waits for the lease row");
    last.commit().await.unwrap();
    assert_eq!(
        claim.await.unwrap().unwrap(),
        Some(Vec::new()),
        "held by b, and the row a delivered is not read as due"
    );

    // A lane: a's entry answered and its lease given up in one transaction.
    let entry = journalled(&*store, &inbound(&r, "w1m1", "hi"), &key, 5).await;
    assert!(store.lease_claim(&key, "a", 10, 100_000).await.unwrap());
    let mut last = pool.begin().await.unwrap();
    sqlx::query("UPDATE inbound SET state = 'done' WHERE id = $1")
        .bind(entry.id)
        .execute(&mut *last)
        .await
        .unwrap();
    sqlx::query("DELETE FROM session_leases WHERE session_key = $1")
        .bind(&key)
        .execute(&mut *last)
        .await
        .unwrap();
    let claim = {
        let (store, key) = (store.clone(), key.clone());
        tokio::spawn(async move { store.lease_claim_next(&key, "b", 20, 100_000).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!claim.is_finished(), "b waits for the lease row");
    last.commit().await.unwrap();
    let LaneClaim::Held { next, fence } = claim.await.unwrap().unwrap() else {
        panic!("held by b")
    };
    assert_eq!(next, None, "the entry a answered is not read as pending");
    assert_eq!(fence, entry.id);
}

async fn approvals_open_once_decide_once_and_remember(store: &dyn Store) {
    use ferroclaw::storage::{ApprovalDecision, ApprovalState, NewApproval};
    let chat = route("webhook:main", "ap", None);
    let request = |id: &str, call_ref: &str, expires: i64| NewApproval {
        id: id.into(),
        call_ref: call_ref.into(),
        session_key: chat.session_key(),
        route: chat.clone(),
        agent: "main".into(),
        requester: Some("webhook:main:u1".into()),
        tool: "web_fetch".into(),
        target: "a.example".into(),
        arguments: "https://a.example/".into(),
        reason: "this turn read x".into(),
        deciders: vec!["webhook:main:u1".into()],
        expires_at_ms: expires,
    };
    let prompt = NewOutbound {
        kind: OutboundKind::Approval,
        ..out(&chat, "approve?")
    };
    // Opened once; the same call again (a redone turn) finds it and queues no second prompt.
    let (first, created) = store
        .approval_open(&request("ap1", "j1/web_fetch:x:1", 10_000), &prompt, 1_000)
        .await
        .unwrap();
    assert!(created);
    assert_eq!(first.state, ApprovalState::Pending);
    let prompt_id = first.prompt_id.expect("the prompt is queued with it");
    let (again, created) = store
        .approval_open(&request("ap2", "j1/web_fetch:x:1", 10_000), &prompt, 2_000)
        .await
        .unwrap();
    assert!(!created);
    assert_eq!(again.request.id, "ap1");
    assert_eq!(again.prompt_id, Some(prompt_id));
    assert!(store.approval_get("ap2").await.unwrap().is_none());
    assert_eq!(store.approvals_pending().await.unwrap().len(), 1);

    // Decided once: an approval with "always" records the choice and the prompt's edit; a
    // second decision changes nothing.
    let edit = NewOutbound {
        edit_of: Some(prompt_id),
        ..out(&chat, "approved by u1")
    };
    let decide = |state, always, now, edit: Option<NewOutbound>| ApprovalDecision {
        id: "ap1",
        state,
        always,
        by: "webhook:main:u1",
        now_ms: now,
        edit,
    };
    assert!(
        store
            .approval_decide(&decide(ApprovalState::Approved, true, 3_000, Some(edit)))
            .await
            .unwrap()
    );
    assert!(
        !store
            .approval_decide(&decide(ApprovalState::Denied, false, 3_001, None))
            .await
            .unwrap()
    );
    let row = store.approval_get("ap1").await.unwrap().unwrap();
    assert_eq!(row.state, ApprovalState::Approved);
    assert!(row.always);
    assert_eq!(row.decided_by.as_deref(), Some("webhook:main:u1"));
    assert!(store.approvals_pending().await.unwrap().is_empty());
    assert!(
        store
            .approval_rule_find("webhook:main", "ap", "web_fetch", "a.example")
            .await
            .unwrap()
    );
    assert!(
        !store
            .approval_rule_find("webhook:main", "ap", "web_fetch", "b.example")
            .await
            .unwrap()
    );

    // Past its deadline a request can only expire; before it, it cannot.
    store
        .approval_open(&request("ap3", "j2/exec:y:1", 5_000), &prompt, 4_000)
        .await
        .unwrap();
    assert!(
        !store
            .approval_decide(&ApprovalDecision {
                id: "ap3",
                ..decide(ApprovalState::Expired, false, 4_500, None)
            })
            .await
            .unwrap()
    );
    assert!(
        !store
            .approval_decide(&ApprovalDecision {
                id: "ap3",
                ..decide(ApprovalState::Approved, false, 5_000, None)
            })
            .await
            .unwrap()
    );
    assert!(
        store
            .approval_decide(&ApprovalDecision {
                id: "ap3",
                ..decide(ApprovalState::Expired, false, 5_000, None)
            })
            .await
            .unwrap()
    );

    // Remembered choices are per chat; another chat cannot revoke them.
    let rules = store
        .approval_rules(Some(("webhook:main", "ap")))
        .await
        .unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(store.approval_rules(None).await.unwrap().len(), 1);
    assert!(
        !store
            .approval_rule_revoke("webhook:main", "other", rules[0].id)
            .await
            .unwrap()
    );
    assert!(
        store
            .approval_rule_revoke("webhook:main", "ap", rules[0].id)
            .await
            .unwrap()
    );
    assert!(store.approval_rules(None).await.unwrap().is_empty());
}

fn memory(scope: &str, text: &str, call_ref: Option<&str>) -> NewMemory {
    NewMemory {
        scope: scope.into(),
        text: text.into(),
        tags: String::new(),
        created_at: 1_000,
        session_key: None,
        call_ref: call_ref.map(str::to_string),
        embedding: None,
    }
}

/// A scope of more rows than PostgreSQL's window of newest rows (1,000): a word only in older
/// rows is found through the index, a word common among the newest from them, and a small
/// scope beside it is answered whole.
async fn a_word_older_than_the_newest_thousand_rows_is_found(store: &dyn Store) {
    let big = person_scope("webhook:many");
    let small = "chat:webhook:few".to_string();
    let mut old = Vec::new();
    for n in 0..3 {
        let (id, _) = store
            .memory_save(&memory(&big, &format!("walnut harvest {n}"), None))
            .await
            .unwrap();
        old.push(id);
    }
    for n in 0..1_005 {
        store
            .memory_save(&memory(&big, &format!("filler note {n}"), None))
            .await
            .unwrap();
    }
    let (few, _) = store
        .memory_save(&memory(&small, "a walnut tree", None))
        .await
        .unwrap();
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let found = store
        .memory_search(
            &[big.clone(), small.clone()],
            &words(&["walnut", "filler"]),
            5,
        )
        .await
        .unwrap();
    let mut walnut: Vec<i64> = found
        .iter()
        .filter(|(t, _)| *t == 0)
        .map(|(_, r)| r.id)
        .collect();
    walnut.sort();
    let mut expected = old.clone();
    expected.push(few);
    expected.sort();
    assert_eq!(walnut, expected, "{found:?}");
    let filler = found.iter().filter(|(t, _)| *t == 1).count();
    assert_eq!(filler, 5, "at most per_term rows of a common word");
    assert!(
        found
            .iter()
            .all(|(_, r)| r.scope == big || r.scope == small)
    );
    assert_eq!(store.memory_forget_scope(&big).await.unwrap(), 1_008);
    assert_eq!(store.memory_forget_scope(&small).await.unwrap(), 1);
}

/// Memories are read only through the scopes asked for: search, the newest, forgetting;
/// a save with a known `call_ref` is the same row; linking moves a person's memories and
/// the identities linked to them; vectors come back as saved.
async fn memories_keep_scopes_apart_and_link_people(store: &dyn Store) {
    let ana = person_scope("telegram:7");
    let ben = person_scope("telegram:8");
    let group = "chat:telegram:-100".to_string();
    let (a, new) = store
        .memory_save(&memory(
            &ana,
            "Ana is allergic to peanuts",
            Some("j1/memory_save:x:1"),
        ))
        .await
        .unwrap();
    assert!(new);
    let again = store
        .memory_save(&memory(
            &ana,
            "Ana is allergic to peanuts",
            Some("j1/memory_save:x:1"),
        ))
        .await
        .unwrap();
    assert_eq!(again, (a, false), "a redone save is the same row");
    store
        .memory_save(&memory(&ben, "Ben also likes peanuts and tractors", None))
        .await
        .unwrap();
    let (g, _) = store
        .memory_save(&memory(&group, "The group meets on peanuts Friday", None))
        .await
        .unwrap();
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();

    let found = store
        .memory_search(std::slice::from_ref(&ana), &words(&["peanuts"]), 10)
        .await
        .unwrap();
    assert_eq!(found.len(), 1, "only Ana's scope: {found:?}");
    assert_eq!((found[0].0, found[0].1.id), (0, a));
    // Per word, newest first, at most `per_term` rows each: a row holding both comes twice.
    let both = store
        .memory_search(
            &[ana.clone(), group.clone()],
            &words(&["peanuts", "friday"]),
            10,
        )
        .await
        .unwrap();
    let mut found: Vec<(usize, i64)> = both.iter().map(|(t, r)| (*t, r.id)).collect();
    found.sort();
    let mut expected = vec![(0, g), (0, a), (1, g)];
    expected.sort();
    assert_eq!(found, expected);
    store
        .memory_save(&memory(&ana, "Ana had peanuts again", None))
        .await
        .unwrap();
    let newest = store
        .memory_search(std::slice::from_ref(&ana), &words(&["peanuts"]), 1)
        .await
        .unwrap();
    assert_eq!(newest.len(), 1, "at most per_term rows of a word");
    assert!(newest[0].1.text.contains("peanuts"));
    assert!(
        store
            .memory_search(std::slice::from_ref(&ana), &words(&["tractors"]), 10)
            .await
            .unwrap()
            .is_empty(),
        "another person's words are not found"
    );
    assert!(
        store
            .memory_search(&[], &words(&["peanuts"]), 10)
            .await
            .unwrap()
            .is_empty()
    );
    let recent = store
        .memory_recent(std::slice::from_ref(&ben), 10)
        .await
        .unwrap();
    assert_eq!(recent.len(), 1);

    // Forgetting needs the memory's own scope.
    assert!(
        !store
            .memory_forget(std::slice::from_ref(&ben), a)
            .await
            .unwrap()
    );
    assert!(
        store
            .memory_forget(&[ana.clone(), group.clone()], g)
            .await
            .unwrap()
    );

    // Linking: discord:70 claims Ana's code and shares her memories; its own move to her.
    store
        .memory_save(&memory(
            &person_scope("discord:70"),
            "Ana's discord name is ana_b",
            None,
        ))
        .await
        .unwrap();
    assert_eq!(
        store.memory_person("discord:70").await.unwrap(),
        "discord:70"
    );
    store
        .memory_link_offer("telegram:7", "12345678", 10_000)
        .await
        .unwrap();
    assert_eq!(
        store
            .memory_link_claim("12345678", "discord:70", 20_000)
            .await
            .unwrap(),
        None,
        "an expired code links nothing"
    );
    store
        .memory_link_offer("telegram:7", "12345679", i64::MAX)
        .await
        .unwrap();
    assert_eq!(
        store
            .memory_link_claim("12345679", "discord:70", 20_000)
            .await
            .unwrap(),
        Some("telegram:7".into())
    );
    assert_eq!(
        store
            .memory_link_claim("12345679", "discord:71", 20_000)
            .await
            .unwrap(),
        None,
        "a code is used once"
    );
    assert_eq!(
        store.memory_person("discord:70").await.unwrap(),
        "telegram:7"
    );
    let hers = store
        .memory_recent(std::slice::from_ref(&ana), 10)
        .await
        .unwrap();
    assert_eq!(hers.len(), 3, "{hers:?}");
    let moved = store
        .memory_search(std::slice::from_ref(&ana), &words(&["discord"]), 10)
        .await
        .unwrap();
    assert_eq!(
        moved.len(),
        1,
        "a moved memory is found under its new scope"
    );
    // An operator links a third identity to one already linked: it joins the same person.
    assert_eq!(
        store
            .memory_link("slack:U9", "discord:70", 30_000)
            .await
            .unwrap(),
        "telegram:7"
    );

    // Vectors as saved, only of the model asked for.
    let mut with_vector = memory(&ben, "Ben's car is red", None);
    with_vector.embedding = Some((vec![0.25, -0.5, 1.0], "p/embed".into()));
    store.memory_save(&with_vector).await.unwrap();
    let vectors = store
        .memory_vectors(std::slice::from_ref(&ben), "p/embed", 10)
        .await
        .unwrap();
    assert_eq!(vectors.len(), 1);
    assert_eq!(
        vectors[0].embedding.as_deref(),
        Some(&[0.25, -0.5, 1.0][..])
    );
    assert!(
        store
            .memory_vectors(std::slice::from_ref(&ben), "other/model", 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.memory_forget_scope(&ben).await.unwrap(), 2);
}

/// An incident opens once (a second open keeps the first time), its alert is claimed by one
/// of several racing callers, it is closed by one, and the leader's channel health is
/// replaced, not appended.
async fn incidents_alert_once_and_resolve_once(store: Arc<dyn Store>) {
    let first = store
        .incident_open("channel:telegram", 1_000)
        .await
        .unwrap();
    assert_eq!((first.since_ms, first.alerted_ms), (1_000, None));
    let again = store
        .incident_open("channel:telegram", 5_000)
        .await
        .unwrap();
    assert_eq!(again.since_ms, 1_000, "still the first incident");
    let claims = futures::future::join_all((0..8).map(|i| {
        let store = store.clone();
        async move {
            store
                .incident_claim_alert("channel:telegram", 6_000 + i)
                .await
                .unwrap()
        }
    }))
    .await;
    assert_eq!(claims.iter().filter(|c| **c).count(), 1, "{claims:?}");
    store.incident_open("store", 2_000).await.unwrap();
    let open = store.incidents().await.unwrap();
    assert_eq!(
        open.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
        ["channel:telegram", "store"]
    );
    assert!(open[0].1.alerted_ms.is_some());
    let closes = futures::future::join_all((0..4).map(|_| {
        let store = store.clone();
        async move { store.incident_close("channel:telegram").await.unwrap() }
    }))
    .await;
    let closed: Vec<_> = closes.into_iter().flatten().collect();
    assert_eq!(closed.len(), 1, "closed by one caller");
    assert_eq!(closed[0].since_ms, 1_000);
    assert!(closed[0].alerted_ms.is_some());
    assert!(store.incident_close("store").await.unwrap().is_some());
    assert!(store.incidents().await.unwrap().is_empty());

    let rows = |state: &str| vec![("telegram".to_string(), format!("{{\"state\":\"{state}\"}}"))];
    store.channel_health_put(&rows("up"), 10).await.unwrap();
    store.channel_health_put(&rows("down"), 20).await.unwrap();
    assert_eq!(
        store.channel_health_all().await.unwrap(),
        [(
            "telegram".to_string(),
            "{\"state\":\"down\"}".to_string(),
            20
        )]
    );
}
