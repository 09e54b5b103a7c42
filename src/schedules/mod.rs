//! Scheduled jobs: one-shot reminders ("at 9:00", "in 20 minutes") and cron jobs, with a
//! timezone (`[schedules] timezone`, per-user `user_timezones`), stored with the chat and
//! thread they came from (`storage::JobStore`).
//!
//! Owns parsing a schedule (`croner` for cron, with optional seconds; `jiff` for zones, from
//! the system's database or its bundled copy; `humantime` for "in 20 minutes"), the next run, the job turn's text and its silence
//! sentinel, and the handle tools use to wake the scheduler (`worker.rs` fires due jobs). A
//! job's turn is an internal journal entry in the job's own session (or the origin session),
//! answered into the origin chat and thread through the outbox like any turn. Knows the
//! store; not the engine or channels.

mod component;
mod tool;
mod worker;

pub use component::{COMMANDS, SchedulesComponent};
pub use tool::ScheduleTool;
pub use worker::Scheduler;

use crate::config::SchedulesConfig;
use crate::storage::{Job, JobKind};
use ferroclaw_channel_core::InboundMessage;
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, civil};
use std::sync::Arc;
use tokio::sync::Notify;

/// A job turn whose whole answer is this is not delivered (a heartbeat with nothing to say).
pub const SILENT: &str = "NOTHING_TO_REPORT";

/// What the tools and commands need of scheduling: the limits, the default zone, and a way
/// to wake the scheduler when a job is added.
#[derive(Clone)]
pub struct ScheduleHandle {
    pub config: Arc<SchedulesConfig>,
    wake: Arc<Notify>,
}

impl ScheduleHandle {
    pub fn new(config: SchedulesConfig) -> Self {
        ScheduleHandle {
            config: Arc::new(config),
            wake: Arc::new(Notify::new()),
        }
    }

    /// A job was added or changed: the scheduler looks again.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    pub(crate) async fn woken(&self) {
        self.wake.notified().await;
    }

    /// The zone for a user (`channel:user id` in `user_timezones`), else the default.
    pub fn zone_for(&self, channel: &str, user: &str) -> String {
        self.config
            .user_timezones
            .get(&format!("{channel}:{user}"))
            .cloned()
            .unwrap_or_else(|| self.config.timezone.clone())
    }
}

/// An IANA zone by name (the system's time zone database, else the bundled one). UTC, the
/// default, is answered without the database: jiff's first lookup lists the whole of
/// `/usr/share/zoneinfo` (about 60 directories), which cost start-up time when the config
/// check did it for the default zone.
pub fn zone(name: &str) -> Result<TimeZone, String> {
    if name == "UTC" {
        return Ok(TimeZone::UTC);
    }
    TimeZone::get(name)
        .map_err(|_| format!("`{name}` is not a time zone (an IANA name like Europe/Berlin)"))
}

/// A cron expression (5 fields, or 6 with seconds first).
pub fn cron(expr: &str) -> Result<croner::Cron, String> {
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Optional)
        .build()
        .parse(expr.trim())
        .map_err(|e| format!("`{expr}` is not a cron expression: {e}"))
}

/// When a new job first runs (ms): `at` (RFC 3339, `YYYY-MM-DD HH:MM[:SS]` or `HH:MM` in
/// `tz`, the next such time), `in` ("20 minutes", "1h 30m") or `cron`. Exactly one is given.
pub fn first_run(
    at: Option<&str>,
    within: Option<&str>,
    cron_expr: Option<&str>,
    tz: &TimeZone,
    now: Timestamp,
) -> Result<(JobKind, String, i64), String> {
    match (at, within, cron_expr) {
        (Some(at), None, None) => {
            let when = parse_at(at.trim(), tz, now)?;
            if when <= now {
                return Err(format!("field `at`: {at} is in the past"));
            }
            Ok((JobKind::Once, at.trim().to_string(), when.as_millisecond()))
        }
        (None, Some(within), None) => {
            let text = within.trim().trim_start_matches("in ");
            let span = humantime::parse_duration(text).map_err(|e| {
                format!("field `in`: `{within}` is not a duration like \"20 minutes\": {e}")
            })?;
            let span = SignedDuration::try_from(span).map_err(|e| format!("field `in`: {e}"))?;
            let when = now
                .checked_add(span)
                .map_err(|e| format!("field `in`: {e}"))?;
            Ok((JobKind::Once, format!("in {text}"), when.as_millisecond()))
        }
        (None, None, Some(expr)) => {
            let next = next_cron(&cron(expr)?, tz, now.as_millisecond())
                .ok_or_else(|| format!("field `cron`: `{expr}` never runs"))?;
            Ok((JobKind::Cron, expr.trim().to_string(), next))
        }
        _ => Err("give exactly one of `at`, `in` and `cron`".into()),
    }
}

fn parse_at(at: &str, tz: &TimeZone, now: Timestamp) -> Result<Timestamp, String> {
    if let Ok(when) = at.parse::<Timestamp>() {
        return Ok(when);
    }
    let local = |civil: civil::DateTime| {
        tz.to_ambiguous_zoned(civil)
            .compatible()
            .map(|z| z.timestamp())
            .map_err(|e| format!("field `at`: {at}: {e}"))
    };
    if let Ok(civil) = at.parse::<civil::DateTime>() {
        return local(civil);
    }
    if let Ok(time) = at.parse::<civil::Time>() {
        // The next such time: today in `tz`, else tomorrow.
        let today = now.to_zoned(tz.clone()).date();
        let when = local(today.to_datetime(time))?;
        if when > now {
            return Ok(when);
        }
        let tomorrow = today.tomorrow().map_err(|e| e.to_string())?;
        return local(tomorrow.to_datetime(time));
    }
    Err(format!(
        "field `at`: `{at}` is not a time (2026-12-01 09:00, 09:00, or RFC 3339)"
    ))
}

/// The first run of a cron job strictly after `after_ms`, in `tz`.
fn next_cron(cron: &croner::Cron, tz: &TimeZone, after_ms: i64) -> Option<i64> {
    let after = Timestamp::from_millisecond(after_ms)
        .ok()?
        .to_zoned(tz.clone());
    cron.find_next_occurrence(&after, false)
        .ok()
        .map(|t| t.timestamp().as_millisecond())
}

/// The shortest time (ms) between two of the next `samples` runs of a cron expression
/// (a cron may run unevenly: `0,1 * * * *` is a minute apart, then 59).
pub fn shortest_gap(expr: &str, tz: &TimeZone, from_ms: i64, samples: usize) -> Option<i64> {
    let cron = cron(expr).ok()?;
    let mut at = next_cron(&cron, tz, from_ms)?;
    let mut shortest: Option<i64> = None;
    for _ in 1..samples {
        let Some(next) = next_cron(&cron, tz, at) else {
            break;
        };
        shortest = Some(shortest.map_or(next - at, |s| s.min(next - at)));
        at = next;
    }
    shortest
}

/// A job's run after `after_ms` (None: a one-shot job is done).
pub fn next_run(job: &Job, after_ms: i64) -> Option<i64> {
    match job.kind {
        JobKind::Once => None,
        JobKind::Cron => {
            let tz = zone(&job.timezone).ok()?;
            next_cron(&cron(&job.spec).ok()?, &tz, after_ms)
        }
    }
}

/// A time for people, in the job's zone.
pub fn show_time(ms: i64, zone_name: &str) -> String {
    let Ok(at) = Timestamp::from_millisecond(ms) else {
        return ms.to_string();
    };
    let tz = zone(zone_name).unwrap_or(TimeZone::UTC);
    at.to_zoned(tz).strftime("%Y-%m-%d %H:%M:%S %Z").to_string()
}

/// A job as the `schedule` tool and the admin API show it.
pub fn job_json(job: &Job) -> serde_json::Value {
    serde_json::json!({"id": job.id, "kind": job.kind.as_str(), "schedule": job.spec, "timezone": job.timezone,
        "prompt": job.prompt, "state": job.state.as_str(), "heartbeat": job.heartbeat,
        "session": if job.in_origin { "origin" } else { "own" }, "missed": job.missed.as_str(),
        "next_run": job.next_run.map(|t| show_time(t, &job.timezone)), "runs": job.runs})
}

/// The platform message id prefix of job turns.
const JOB_PREFIX: &str = "job:";

/// Whether a journalled message is a job's turn (not a person's message).
pub fn is_job_message(message: &InboundMessage) -> bool {
    job_of_message(message).is_some()
}

/// The job a journalled message is the turn of: only an internal entry (which only the
/// scheduler writes) counts; a person's message never does, whatever its id or sender.
pub fn job_of_message(message: &InboundMessage) -> Option<&str> {
    if !message.internal {
        return None;
    }
    message.sender.id.strip_prefix(JOB_PREFIX)
}

/// A new job's id: 16 hex digits of a random UUID (64 bits), not guessable.
pub fn new_job_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..16].to_string()
}

/// The session a job's turns run in.
pub fn session_of(job: &Job) -> String {
    if job.in_origin {
        job.session_key.clone()
    } else {
        format!("agent:{}:job:{}", job.agent, job.id)
    }
}

/// The internal message that starts a job's turn for its run due at `due`.
pub fn turn_message(job: &Job, due: i64) -> InboundMessage {
    let what = match job.kind {
        JobKind::Once => format!("reminder set for {}", job.spec),
        JobKind::Cron => format!("recurring job `{}` ({})", job.spec, job.timezone),
    };
    let mut text = format!(
        "[Scheduled job {} — {what} — is due now ({}). This is not a message from the user: do what it \
         asks; your answer is posted to the chat.] {}",
        job.id,
        show_time(due, &job.timezone),
        job.prompt
    );
    if job.heartbeat {
        text.push_str(&format!(
            "\nIf there is nothing worth reporting, answer exactly {SILENT} and nothing else."
        ));
    }
    InboundMessage {
        route: job.origin_route.clone(),
        sender: ferroclaw_channel_core::Sender {
            id: format!("{JOB_PREFIX}{}", job.id),
            name: "scheduler".into(),
        },
        platform_message_id: format!("{JOB_PREFIX}{}:{due}", job.id),
        text,
        mentioned: true,
        reply_to: None,
        internal: true,
        attachments: Vec::new(),
        mention_names: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2026-12-01T08:30:00Z".parse().unwrap()
    }

    fn at(text: &str) -> i64 {
        text.parse::<Timestamp>().unwrap().as_millisecond()
    }

    #[test]
    fn times_parse_in_the_users_zone() {
        let berlin = zone("Europe/Berlin").unwrap();
        // 09:00 in Berlin is 08:00 UTC: already past today, so tomorrow.
        let (kind, _, when) = first_run(Some("09:00"), None, None, &berlin, now()).unwrap();
        assert_eq!(kind, JobKind::Once);
        assert_eq!(when, at("2026-12-02T08:00:00Z"));
        let (_, _, when) = first_run(Some("2026-12-01 10:15"), None, None, &berlin, now()).unwrap();
        assert_eq!(when, at("2026-12-01T09:15:00Z"));
        let (_, spec, when) = first_run(None, Some("in 20 minutes"), None, &berlin, now()).unwrap();
        assert_eq!(spec, "in 20 minutes");
        assert_eq!(when, at("2026-12-01T08:50:00Z"));
        assert!(first_run(Some("yesterday-ish"), None, None, &berlin, now()).is_err());
        assert!(
            first_run(Some("2020-01-01 10:00"), None, None, &berlin, now())
                .unwrap_err()
                .contains("past")
        );
        assert!(first_run(None, None, None, &berlin, now()).is_err());
        assert!(
            show_time(at("2026-12-01T09:15:00Z"), "Europe/Berlin")
                .starts_with("2026-12-01 10:15:00")
        );
    }

    #[test]
    fn cron_runs_follow_the_zone() {
        let berlin = zone("Europe/Berlin").unwrap();
        // Mondays at 09:00 Berlin time; 2026-12-07 is a Monday.
        let (kind, _, first) = first_run(None, None, Some("0 9 * * 1"), &berlin, now()).unwrap();
        assert_eq!(kind, JobKind::Cron);
        assert_eq!(first, at("2026-12-07T08:00:00Z"));
        // Seconds are allowed (six fields).
        let (_, _, every) =
            first_run(None, None, Some("*/2 * * * * *"), &TimeZone::UTC, now()).unwrap();
        assert_eq!(every, now().as_millisecond() + 2_000);
        assert!(first_run(None, None, Some("not cron"), &TimeZone::UTC, now()).is_err());
        let from = now().as_millisecond();
        assert_eq!(
            shortest_gap("* * * * * *", &TimeZone::UTC, from, 20),
            Some(1_000)
        );
        assert_eq!(
            shortest_gap("0,1 * * * *", &TimeZone::UTC, from, 20),
            Some(60_000)
        );
        assert_eq!(
            // Four Mondays from December: no DST change between them (20 would reach March).
            shortest_gap("0 9 * * 1", &berlin, from, 4),
            Some(7 * 86_400_000)
        );
        assert!(zone("Mars/Olympus").is_err());
    }
}
