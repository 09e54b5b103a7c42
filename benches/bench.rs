//! `cargo bench --bench bench`: measures the release `ferroclaw serve` binary end to end
//! against an instant OpenAI-compatible stand-in and a callback receiver on loopback.
//!
//! Reports: time to ready (fresh SQLite database), idle memory, turns per second through the
//! signed webhook path (journal → lane → model → commit → outbox → signed callback), the
//! service's own CPU time per turn, and per-turn latency early and late in a long session.
//! Numbers go to stdout; nothing here asserts on time. Each figure with a goal is measured in
//! `--runs N` runs (default 3) and closes the report as the median of them, with the range
//! and the goal beside it (`figures.rs`).
//!
//! For profiling: `FERROCLAW_BENCH_BIN` runs another build of the service (a debug build
//! with symbols, say), and every `FERROCLAW_BENCH_CHILD_<NAME>` variable is given to the
//! service as `<NAME>` (`FERROCLAW_BENCH_CHILD_LD_PRELOAD` for a heap profiler).

use axum::Router;
use axum::routing::post;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

mod figures;
mod memory_search;
/// TLS in front of the slow stand-in (shared with the integration tests).
#[path = "../tests/it/common/tls.rs"]
#[allow(dead_code)] // `Offers::Http1Only` and `TlsServer::replace` are for the tests
mod tls;

const SECRET: &str = "bench-secret";

#[tokio::main]
async fn main() {
    // Cargo builds the service binary (with the bench profile, i.e. release) for benches.
    let bin = std::env::var_os("FERROCLAW_BENCH_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_ferroclaw").into());
    let turns: usize = arg("--turns").unwrap_or(5000);
    let conversations: usize = arg("--conversations").unwrap_or(100);
    let history: usize = arg("--history").unwrap_or(1000);

    // Thousands of connections in flight (stand-ins and the service alike).
    ferroclaw::server::raise_file_limit();
    // `--local-only`: only the local model (section 5b).
    if flag("--local-only") {
        local_model(&bin).await;
        return;
    }
    // `--redact-only`: only the leak scan's cost per outbound message (section 0).
    if flag("--redact-only") {
        redact_cost();
        return;
    }
    // `--memory-only`: memory search latency at a million memories (not in the full run:
    // it writes a million rows first).
    if flag("--memory-only") {
        memory_search::run().await;
        return;
    }
    // `--inflight-only N`: only the load that grows (section 4), for quick iterations.
    if let Some(n) = arg("--inflight-only") {
        let link = if flag("--http1") {
            Link::Http1
        } else if flag("--h2c") {
            Link::H2c
        } else {
            Link::Https
        };
        in_flight(&bin, n, link).await;
        return;
    }
    let llm = start_llm().await;
    // `--pg-only`: only PostgreSQL (section 6).
    if flag("--pg-only") {
        postgres(&bin, &llm, turns, conversations).await;
        return;
    }
    let receiver = Receiver::start().await;
    // Every figure the issues set a goal for is measured in `--runs` runs (default 3) and
    // summed up at the end as the median of them.
    let runs = arg("--runs").unwrap_or(3).max(1);
    let mut figures = figures::Figures::default();
    let size_mb = std::fs::metadata(&bin).map_or(f64::NAN, |m| m.len() as f64 / 1e6);
    println!("binary: {size_mb:.1} MB ({})", bin.display());
    figures.add("binary", "MB", "<= 12", size_mb);

    // 1. Start-up: ten starts per run, the run's median.
    for _ in 0..runs {
        let mut ready = Vec::new();
        for _ in 0..10 {
            let dir = tempfile::tempdir().unwrap();
            let started = Instant::now();
            let (child, base) = spawn(&bin, dir.path(), &llm, &receiver.url, "").await;
            wait_ready(&base).await;
            ready.push(started.elapsed());
            stop(child);
        }
        ready.sort();
        println!(
            "start-up to /readyz 200 (fresh SQLite): median {:.1} ms, best {:.1} ms",
            ms(ready[5]),
            ms(ready[0])
        );
        figures.add(
            "ready, fresh SQLite (median of 10 starts)",
            "ms",
            "<= 8",
            ms(ready[5]),
        );
    }

    // `--startup-only`: ready and idle RSS only (an A/B of a start-up change, two builds
    // given by FERROCLAW_BENCH_BIN in turn).
    if flag("--startup-only") {
        for _ in 0..runs {
            let dir = tempfile::tempdir().unwrap();
            let (child, _) =
                spawn_idle(&bin, dir.path(), &llm, &receiver.url, "", &mut figures).await;
            stop(child);
        }
        figures.print();
        return;
    }

    // 2. Idle memory, load, memory after load. `--budgets`: with prices and caps set, so
    // every model call also reserves and settles (cost control's price per turn).
    let cost_tables = if flag("--budgets") {
        println!("with prices and caps: every call reserves and settles");
        "\n[prices.\"bench/m\"]\ninput_per_mtok = 1.0\noutput_per_mtok = 2.0\n\
         [budgets]\nuser_daily_usd = 1000000.0\nchat_daily_usd = 1000000.0\ntotal_daily_usd = 1000000.0\n"
    } else if flag("--memory-off") {
        // What recall costs a turn: the same run without memory.
        println!("with memory off: no recall before turns");
        "\n[memory]\nenabled = false\n"
    } else {
        ""
    };
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()
        .unwrap();
    // The last run's database is kept for section 3.
    let mut kept = None;
    for run in 0..runs {
        let dir = tempfile::tempdir().unwrap();
        let (child, base) = spawn_idle(
            &bin,
            dir.path(),
            &llm,
            &receiver.url,
            cost_tables,
            &mut figures,
        )
        .await;

        let cpu_before = cpu_secs(child.id());
        let started = Instant::now();
        let before = receiver.count();
        send_spread(
            &client,
            std::slice::from_ref(&base),
            64,
            turns,
            "m",
            move |i, worker| format!("c{}", (i + worker) % conversations),
        )
        .await;
        receiver.wait_for(before + turns).await;
        let elapsed = started.elapsed();
        let cpu = cpu_secs(child.id()) - cpu_before;
        let rate = turns as f64 / elapsed.as_secs_f64();
        let per_turn = cpu * 1000.0 / turns as f64;
        println!(
            "throughput: {turns} turns over {conversations} conversations in {:.2} s = {rate:.0} turns/s",
            elapsed.as_secs_f64(),
        );
        println!("service CPU per turn (user+sys, all threads): {per_turn:.3} ms");
        figures.add(
            "turns/s, 100 conversations, SQLite",
            "turns/s",
            ">= 1500",
            rate,
        );
        figures.add("service CPU per turn", "ms", "<= 1", per_turn);
        let peak = rss_mb(child.id(), "VmHWM");
        println!("peak RSS under load: {peak:.1} MB");
        figures.add("peak RSS under load", "MB", "", peak);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let after = rss_mb(child.id(), "VmRSS");
        println!("RSS after load, idle again: {after:.1} MB");
        figures.add("RSS 2 s after the load", "MB", "", after);
        if run + 1 < runs {
            stop(child);
        } else {
            kept = Some((child, dir, base));
        }
    }
    let (child, dir, base) = kept.expect("at least one run");
    // `--throughput-only`: start-up, idle and turns/s only (an A/B of a per-turn change).
    if flag("--throughput-only") {
        stop(child);
        drop(dir);
        figures.print();
        return;
    }

    // 3. Cost as history grows: one session, sequential turns.
    let mut latencies = Vec::with_capacity(history);
    for i in 0..history {
        let before = receiver.count();
        let t = Instant::now();
        send(&client, &base, "long", &format!("h{i}"), "tell me more").await;
        receiver.wait_for(before + 1).await;
        latencies.push(t.elapsed());
    }
    let avg = |s: &[Duration]| s.iter().map(|d| ms(*d)).sum::<f64>() / s.len() as f64;
    let tenth = (history / 10).max(1);
    println!(
        "one session, {history} sequential turns: first {tenth} avg {:.2} ms, last {tenth} avg {:.2} ms (end-to-end incl. HTTP)",
        avg(&latencies[..tenth]),
        avg(&latencies[history - tenth..])
    );
    stop(child);

    // 3b. The same database with 1,000,000 more transcript rows (other sessions): a turn's
    // cost must not grow with the table. Measured on a freshly started process before and
    // after seeding, so both include the same warm-up.
    let fresh_turns = |label: String| {
        let (bin, dir, llm, receiver, client) = (&bin, dir.path(), &llm, &receiver, &client);
        async move {
            let (child, base) = spawn(bin, dir, llm, &receiver.url, "").await;
            wait_ready(&base).await;
            let cpu_before = cpu_secs(child.id());
            // 300 turns: CPU time is counted in 10 ms ticks (0.03 ms per turn).
            let mut took = Vec::with_capacity(300);
            for i in 0..300 {
                let before = receiver.count();
                let t = Instant::now();
                send(client, &base, &label, &format!("{label}-{i}"), "and now?").await;
                receiver.wait_for(before + 1).await;
                took.push(t.elapsed());
            }
            let cpu = (cpu_secs(child.id()) - cpu_before) * 1000.0 / 300.0;
            stop(child);
            (took, cpu)
        }
    };
    let mut seeded = figures::Figures::default();
    for stage in ["before", "after"] {
        if stage == "after" {
            seed_transcript(dir.path(), 1_000_000).await;
        }
        for run in 0..runs {
            let (took, cpu) = fresh_turns(format!("{stage}-seed-{run}")).await;
            println!(
                "300 sequential turns on a fresh process, {stage} 1,000,000 more transcript rows: \
                 {:.2} ms avg, {cpu:.3} ms CPU per turn",
                avg(&took)
            );
            seeded.add(stage, "ms", "", cpu);
        }
    }
    let (fresh, grown) = (
        seeded.median_of("before").unwrap_or(f64::NAN),
        seeded.median_of("after").unwrap_or(f64::NAN),
    );
    figures.add(
        "CPU per sequential turn with 1,000,000 more rows, over fresh",
        "%",
        "<= +10",
        (grown / fresh - 1.0) * 100.0,
    );

    // 4. Load that grows: many conversations in flight at once, each answer streamed over
    // 3 s by the model. On the default transport against an https provider offering
    // HTTP/2 and HTTP/1.1 by ALPN (as the hosted ones do) in every run; once against a
    // plain-http provider (HTTP/1.1: a connection per call) and once with `http2 = true`
    // over plain http (h2c).
    let n = arg("--inflight").unwrap_or(10_000);
    for run in 0..runs {
        let burst = in_flight(&bin, n, Link::Https).await;
        figures.add(
            "in flight, default transport (https, h2 offered): peak RSS",
            "MB",
            "<= 200",
            burst.peak_mb,
        );
        figures.add(
            "in flight, default transport: RSS 30 s after, over idle",
            "x",
            "<= 2",
            burst.after_30s_mb / burst.idle_mb,
        );
        figures.add(
            "in flight, default transport: all answered in",
            "s",
            "",
            burst.answered_s,
        );
        if run == 0 {
            in_flight(&bin, n, Link::Http1).await;
            in_flight(&bin, n, Link::H2c).await;
        }
    }

    // 5. The sandbox: `exec` call to first output, on a cold and on a warm container.
    sandbox_first_output().await;

    // 5b. The embedded local model through the OpenAI-compatible endpoint (the model file
    // from `FERROCLAW_BENCH_HOME`, default the test cache).
    local_model(&bin).await;

    // 6. PostgreSQL, one process and two (when FERROCLAW_BENCH_PG_URL names a server).
    for _ in 0..runs {
        if let Some(scale) = postgres(&bin, &llm, turns, conversations).await {
            figures.add(
                "PostgreSQL, 2 processes over 1, each at half a core",
                "x",
                ">= 1.8",
                scale,
            );
        }
    }
    figures.print();
}

/// Turns/s of one and of two processes on PostgreSQL: as they come (every process, the
/// database and the load share this machine's cores), then with each process held to
/// `--pg-cap-percent` of one core (default 50) as if each ran on a machine of its own, so
/// that what a second process adds shows when the processes, not the cores, are the limit.
///
/// Returns the capped two processes' turns/s over the capped one's, when measured.
async fn postgres(
    bin: &std::path::Path,
    llm: &str,
    turns: usize,
    conversations: usize,
) -> Option<f64> {
    let Ok(admin) = std::env::var("FERROCLAW_BENCH_PG_URL") else {
        println!("PostgreSQL: skipped (set FERROCLAW_BENCH_PG_URL)");
        return None;
    };
    let cap = arg("--pg-cap-percent").unwrap_or(50) as f64 / 100.0;
    let mut capped = Vec::new();
    for cap in [None, Some(cap)] {
        for processes in [1, 2] {
            let rate = pg_throughput(bin, &admin, llm, processes, turns, conversations, cap).await;
            if cap.is_some() {
                capped.push(rate?);
            }
        }
    }
    Some(capped[1] / capped[0])
}

/// A CPU budget for one process: a cgroup it is moved into (v2 `cpu.max`, v1
/// `cpu.cfs_quota_us`), removed on drop (after the process ended).
struct CpuCap {
    dir: std::path::PathBuf,
}

impl CpuCap {
    /// None when this machine's cgroups cannot be written (not root, no cpu controller).
    fn new(pid: u32, cores: f64) -> Option<Self> {
        let v2 = std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
        let root = if v2 {
            "/sys/fs/cgroup"
        } else {
            "/sys/fs/cgroup/cpu"
        };
        let cap = CpuCap {
            dir: std::path::Path::new(root).join(format!("ferroclaw-bench-{pid}")),
        };
        std::fs::create_dir(&cap.dir).ok()?;
        let quota = (cores * 100_000.0) as u64;
        let limited = if v2 {
            std::fs::write(cap.dir.join("cpu.max"), format!("{quota} 100000"))
        } else {
            std::fs::write(cap.dir.join("cpu.cfs_period_us"), "100000")
                .and_then(|()| std::fs::write(cap.dir.join("cpu.cfs_quota_us"), quota.to_string()))
        };
        limited.ok()?;
        std::fs::write(cap.dir.join("cgroup.procs"), pid.to_string()).ok()?;
        Some(cap)
    }
}

impl Drop for CpuCap {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Turns/s with `processes` serve processes on one fresh PostgreSQL database, senders spread
/// over them; with `cap`, each process may use that share of one core. None when the cap
/// cannot be set here.
async fn pg_throughput(
    bin: &std::path::Path,
    admin: &str,
    llm: &str,
    processes: usize,
    turns: usize,
    conversations: usize,
    cap: Option<f64>,
) -> Option<f64> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(admin)
        .await
        .expect("PostgreSQL");
    let name = format!("ferroclaw_bench_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .unwrap();
    let url = format!("{}/{name}", admin.rsplit_once('/').unwrap().0);
    let receiver = Receiver::start().await;
    let mut children = Vec::new();
    let mut bases = Vec::new();
    let mut dirs = Vec::new();
    let mut caps = Vec::new();
    for _ in 0..processes {
        let dir = tempfile::tempdir().unwrap();
        let (child, base) = spawn(
            bin,
            dir.path(),
            llm,
            &receiver.url,
            &format!("[storage]\nurl = \"{url}\"\n"),
        )
        .await;
        wait_ready(&base).await;
        if let Some(cores) = cap {
            match CpuCap::new(child.id(), cores) {
                Some(cap) => caps.push(cap),
                None => {
                    println!(
                        "PostgreSQL, {processes} process(es) held to {:.0} % of a core: skipped (cgroups cannot be written here)",
                        cores * 100.0
                    );
                    stop(child);
                    return None;
                }
            }
        }
        children.push(child);
        bases.push(base);
        dirs.push(dir);
    }
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()
        .unwrap();
    let cpu_before: f64 = children.iter().map(|c| cpu_secs(c.id())).sum();
    let started = Instant::now();
    send_spread(&client, &bases, 64, turns, "p", move |i, worker| {
        format!("c{}", (i + worker) % conversations)
    })
    .await;
    receiver.wait_for(turns).await;
    let elapsed = started.elapsed();
    let cpu: f64 = children.iter().map(|c| cpu_secs(c.id())).sum::<f64>() - cpu_before;
    let held = cap.map_or_else(String::new, |c| {
        format!(", each held to {:.0} % of a core", c * 100.0)
    });
    let rate = turns as f64 / elapsed.as_secs_f64();
    println!(
        "PostgreSQL, {processes} process(es){held}: {turns} turns in {:.2} s = {rate:.0} turns/s, service CPU per turn {:.3} ms (all processes)",
        elapsed.as_secs_f64(),
        cpu * 1000.0 / turns as f64
    );
    for child in children {
        stop(child);
    }
    drop(caps);
    Some(rate)
}

/// What one burst of conversations in flight measured.
struct Burst {
    idle_mb: f64,
    peak_mb: f64,
    after_30s_mb: f64,
    answered_s: f64,
}

/// How the service reaches the slow stand-in.
#[derive(Clone, Copy, PartialEq)]
enum Link {
    /// `https`, offering HTTP/2 and HTTP/1.1 by ALPN, `http2` unset: the default transport
    /// against a hosted provider.
    Https,
    /// Plain `http`, `http2` unset: HTTP/1.1, a connection per call.
    Http1,
    /// Plain `http` with `http2 = true`: HTTP/2 taken directly (h2c).
    H2c,
}

impl Link {
    fn name(self) -> &'static str {
        match self {
            Link::Https => "https (h2 offered by ALPN, the default transport)",
            Link::Http1 => "plain HTTP/1.1",
            Link::H2c => "h2c (`http2 = true`)",
        }
    }
}

/// `n` conversations sent at once against a model that streams each answer over 3 s: peak
/// memory, time until all are answered, CPU per turn.
async fn in_flight(bin: &std::path::Path, n: usize, link: Link) -> Burst {
    let (llm, open_calls, tls) = start_slow_llm(Duration::from_secs(3), n, link).await;
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let authority = tls.as_ref().map(|t| t.authority_pem.to_str().unwrap());
    // Every turn's model call in flight at once (no cap on concurrent requests).
    let (child, base) = spawn_with_env(
        bin,
        dir.path(),
        &llm,
        &receiver.url,
        &format!(
            "{}[fallback]\nmax_concurrent_requests = 0\n",
            if link == Link::H2c {
                "http2 = true\n"
            } else {
                ""
            }
        ),
        authority.map(|pem| ("SSL_CERT_FILE", pem)).as_slice(),
    )
    .await;
    wait_ready(&base).await;
    let pid = child.id();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_mb = rss_mb(pid, "VmRSS");
    let peak = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sampling = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                let kb = (rss_mb(pid, "VmRSS") * 1024.0) as u64;
                peak.fetch_max(kb, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(128)
        .build()
        .unwrap();
    let cpu_before = cpu_secs(pid);
    let started = Instant::now();
    send_spread(&client, std::slice::from_ref(&base), 128, n, "q", |i, _| {
        format!("f{i}")
    })
    .await;
    let accepted = started.elapsed();
    receiver.wait_for(n).await;
    let elapsed = started.elapsed();
    let cpu = cpu_secs(pid) - cpu_before;
    sampling.abort();
    // What the process gives back once the burst is over (the allocator's decay).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after_2s = rss_mb(pid, "VmRSS");
    tokio::time::sleep(Duration::from_secs(13)).await;
    let after_15s = rss_mb(pid, "VmRSS");
    tokio::time::sleep(Duration::from_secs(15)).await;
    let burst = Burst {
        idle_mb,
        peak_mb: peak.load(Ordering::Relaxed) as f64 / 1024.0,
        after_30s_mb: rss_mb(pid, "VmRSS"),
        answered_s: elapsed.as_secs_f64(),
    };
    println!(
        "{n} conversations over {} (answers held until all calls are open, then streamed over 3 s): \
         all accepted in {:.1} s, {} model calls open at once at most, all answered in {:.1} s, \
         peak RSS {:.0} MB ({:.1} KB per in-flight turn above idle), RSS 2 s after {:.1} MB, 15 s after {:.1} MB \
         and 30 s after {:.1} MB (idle {idle_mb:.1} MB), service CPU per turn {:.3} ms",
        link.name(),
        accepted.as_secs_f64(),
        open_calls.most.load(Ordering::SeqCst),
        burst.answered_s,
        burst.peak_mb,
        (burst.peak_mb - idle_mb) * 1024.0 / n as f64,
        after_2s,
        after_15s,
        burst.after_30s_mb,
        cpu * 1000.0 / n as f64
    );
    stop(child);
    burst
}

/// Send `n` messages (ids `{prefix}{i}`) from `workers` concurrent senders, sender `w`
/// posting to `bases[w % bases.len()]`; message `i` goes to conversation
/// `conversation(i, w)`.
async fn send_spread(
    client: &reqwest::Client,
    bases: &[String],
    workers: usize,
    n: usize,
    prefix: &'static str,
    conversation: impl Fn(usize, usize) -> String + Clone + Send + 'static,
) {
    let next = Arc::new(AtomicUsize::new(0));
    let mut senders = Vec::new();
    for worker in 0..workers {
        let (client, base, next) = (
            client.clone(),
            bases[worker % bases.len()].clone(),
            next.clone(),
        );
        let conversation = conversation.clone();
        senders.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                send(
                    &client,
                    &base,
                    &conversation(i, worker),
                    &format!("{prefix}{i}"),
                    "hello",
                )
                .await;
            }
        }));
    }
    for sender in senders {
        sender.await.unwrap();
    }
}

/// An OpenAI-compatible stand-in that streams a short answer in ten pieces over `over`,
/// over TLS for [`Link::Https`] (with its authority's certificate).
async fn start_slow_llm(
    over: Duration,
    hold_until: usize,
    link: Link,
) -> (String, Arc<OpenCalls>, Option<tls::TlsServer>) {
    let gap = over / 10;
    let calls = Arc::new(OpenCalls::default());
    let counted = calls.clone();
    let app = Router::new().route(
        "/v1/chat/completions",
        // The request is read whole before answering, as a provider does (an unread body
        // would sit in the client's buffers, held back by HTTP/2 flow control).
        post(move |_request: axum::body::Bytes| async move {
            let open = OpenCall::new(counted.clone());
            let calls = counted.clone();
            // The headers go at once, as a provider's do; the first piece waits until all
            // `hold_until` calls are open (or 60 s passed), so every one of them is in
            // flight at once however fast they arrived. The call counts as open until its
            // stream is dropped (with the state).
            let pieces = futures::stream::unfold((0u32, open), move |(i, open)| {
                let calls = calls.clone();
                async move {
                if i > 10 {
                    return None;
                }
                if i == 0 {
                    if calls.arrived.fetch_add(1, Ordering::SeqCst) + 1 >= hold_until {
                        calls.all_in.notify_waiters();
                    } else {
                        let all_in = calls.all_in.notified();
                        if calls.arrived.load(Ordering::SeqCst) < hold_until {
                            let _ = tokio::time::timeout(Duration::from_secs(60), all_in).await;
                        }
                    }
                }
                if i > 0 {
                    tokio::time::sleep(gap).await;
                }
                let chunk = if i < 10 {
                    format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"word{i} \"}}}}]}}\n\n")
                } else {
                    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":10}}\n\ndata: [DONE]\n\n".to_string()
                };
                Some((Ok::<_, std::convert::Infallible>(chunk), (i + 1, open)))
                }
            });
            (
                [("content-type", "text/event-stream")],
                axum::body::Body::from_stream(pieces),
            )
        }),
    );
    if link == Link::Https {
        // Hyper's 200 streams per connection: the service opens another connection per
        // 100 calls, well within.
        let server = tls::serve(app, tls::Offers::Http2AndHttp1).await;
        return (format!("https://{}/v1", server.addr), calls, Some(server));
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    // HTTP/1.1 and HTTP/2 (h2c) on one port, with no cap on concurrent streams (hyper's
    // default is 200): every call in flight at once either way.
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let service = hyper_util::service::TowerToHyperService::new(app.clone());
            tokio::spawn(async move {
                let mut builder = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                );
                builder.http2().max_concurrent_streams(None::<u32>);
                let _ = builder
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (url, calls, None)
}

/// Model calls the slow stand-in holds: how many arrived, how many are open now and at most.
#[derive(Default)]
struct OpenCalls {
    arrived: AtomicUsize,
    now: AtomicUsize,
    most: AtomicUsize,
    all_in: Notify,
}

/// One open call (counted until dropped).
struct OpenCall(Arc<OpenCalls>);

impl OpenCall {
    fn new(calls: Arc<OpenCalls>) -> Self {
        let now = calls.now.fetch_add(1, Ordering::SeqCst) + 1;
        calls.most.fetch_max(now, Ordering::SeqCst);
        OpenCall(calls)
    }
}

impl Drop for OpenCall {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Add `rows` transcript rows spread over 1,000 other sessions, straight into the database.
async fn seed_transcript(dir: &std::path::Path, rows: usize) {
    use sqlx::Connection;
    let url = format!("sqlite://{}", dir.join("ferroclaw.db").display());
    let mut conn = sqlx::SqliteConnection::connect(&url)
        .await
        .expect("the bench database");
    sqlx::query(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $1) \
         INSERT INTO transcript (session_key, epoch, role, content, tokens_in, tokens_out, created_at) \
         SELECT 'agent:main:webhook:main:seed' || (i % 1000), 0, 'user', 'seeded row ' || i, 0, 0, 0 FROM n",
    )
    .bind(rows as i64)
    .execute(&mut conn)
    .await
    .expect("seeding the transcript");
}

/// Records when the first output arrived.
struct FirstOutput(std::sync::Mutex<Option<Instant>>);

#[async_trait::async_trait]
impl ferroclaw::sandbox::OutputSink for FirstOutput {
    async fn output(&self, _chunk: &str) {
        self.0.lock().unwrap().get_or_insert_with(Instant::now);
    }
}

/// Load time, first-token latency and tokens/s of the local model, measured by a client of
/// `/v1/chat/completions` (each streamed chunk is one token's text).
async fn local_model(bin: &std::path::Path) {
    use futures::StreamExt;
    let home = std::env::var("FERROCLAW_BENCH_HOME")
        .unwrap_or_else(|_| "/var/cache/ferroclaw-home".into());
    if !std::path::Path::new(&home).join("models").is_dir() {
        println!("local model: skipped (no model cache at {home}; run `ferroclaw model fetch`)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    std::fs::write(
        dir.path().join("config.toml"),
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\n[agent]\nmodel = \"local/smollm2-135m\"\nfallbacks = []\n"
        ),
    )
    .unwrap();
    let child = Command::new(bin)
        .args(["serve", "-c", "config.toml"])
        .current_dir(dir.path())
        .env("FERROCLAW_HOME", &home)
        .env("FERROCLAW_OFFLINE", "1")
        .env("FERROCLAW_API_TOKEN", "bench")
        .env("FERROCLAW_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    wait_ready(&base).await;
    let client = reqwest::Client::new();
    for round in ["first request (loads the model)", "second request"] {
        let started = Instant::now();
        let response = client
            .post(format!("{base}/v1/chat/completions"))
            .bearer_auth("bench")
            .json(&serde_json::json!({"model": "ferroclaw", "stream": true,
                "messages": [{"role": "user", "content": "Write a short story about a cat."}]}))
            .send()
            .await
            .unwrap();
        let mut events = eventsource_stream::Eventsource::eventsource(response.bytes_stream());
        let (mut first, mut tokens) = (None, 0usize);
        while let Some(Ok(event)) = events.next().await {
            if event.data == "[DONE]" {
                break;
            }
            let chunk: serde_json::Value = serde_json::from_str(&event.data).unwrap_or_default();
            if chunk["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|t| !t.is_empty())
            {
                first.get_or_insert_with(|| started.elapsed());
                tokens += 1;
            }
        }
        let total = started.elapsed();
        let first = first.unwrap_or(total);
        println!(
            "local model, {round}: first token {:.0} ms, {tokens} tokens at {:.1} tokens/s",
            ms(first),
            tokens.saturating_sub(1) as f64 / (total - first).as_secs_f64().max(1e-9)
        );
    }
    stop(child);
}

async fn sandbox_first_output() {
    use ferroclaw::sandbox::{Availability, DockerSandbox, ExecRequest, Sandbox, docker::Settings};
    let dir = tempfile::tempdir().unwrap();
    let sandbox = DockerSandbox::new(Settings {
        image: "ferroclaw-sandbox:busybox".into(),
        network: "none".into(),
        memory_bytes: 256 << 20,
        nano_cpus: 1_000_000_000,
        pids_limit: 100,
        docker_host: String::new(),
        instance: "bench".into(),
    });
    if let Availability::Unavailable(why) = sandbox.prepare().await {
        println!("sandbox: skipped ({why}; run scripts/sandbox-image.sh)");
        return;
    }
    let request = ExecRequest {
        command: "echo ready".into(),
        workdir: None,
        timeout: Duration::from_secs(30),
    };
    let time = |owner: String| {
        let (sandbox, request, workspace) = (&sandbox, &request, dir.path().join(&owner));
        async move {
            let sink = FirstOutput(std::sync::Mutex::new(None));
            let started = Instant::now();
            sandbox
                .exec(&owner, &workspace, request, Some(&sink))
                .await
                .unwrap();
            let first = sink.0.lock().unwrap().expect("output arrived");
            first - started
        }
    };
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    for i in 0..5 {
        cold.push(time(format!("cold{i}")).await);
        warm.push(time(format!("cold{i}")).await);
    }
    cold.sort();
    warm.sort();
    println!(
        "sandbox exec to first output: cold container median {:.0} ms, warm container median {:.1} ms",
        ms(cold[2]),
        ms(warm[2])
    );
    sandbox.release_all().await;
}

/// The leak scan per outbound message: 12 secrets (each in its 11 forms), a short reply, a
/// long one, and one holding a secret; and the stream's hold-back check per piece.
fn redact_cost() {
    use ferroclaw::redact::{Redactor, Sink};
    let secrets: std::collections::BTreeMap<String, secrecy::SecretString> = (0..12)
        .map(|i| {
            (
                format!("SECRET_{i}"),
                format!("sk-bench-{i:02}-{}", "x7Kp3Tr9Lm2Nb5VQ".repeat(2)).into(),
            )
        })
        .collect();
    let redactor = Redactor::new(&secrets);
    let short = "Sure - the deployment finished and the three checks passed. ".repeat(5);
    let long = "A long answer with code, lists and links, nothing secret in it. ".repeat(64);
    let leaking = format!("{short} sk-bench-03-{}", "x7Kp3Tr9Lm2Nb5VQ".repeat(2));
    for (what, text) in [
        ("300 B", &short),
        ("4 KB", &long),
        ("300 B, one secret", &leaking),
    ] {
        let rounds = 20_000;
        let started = Instant::now();
        let mut kept = 0;
        for _ in 0..rounds {
            kept += redactor.redact(std::hint::black_box(text), Sink::Log).len();
        }
        std::hint::black_box(kept);
        let per = started.elapsed().as_secs_f64() * 1e6 / rounds as f64;
        println!("leak scan, {what} message: {per:.2} µs");
    }
    let rounds = 200_000;
    let started = Instant::now();
    for i in 0..rounds {
        std::hint::black_box(redactor.safe_end(std::hint::black_box(&short[..64 + i % 200])));
    }
    let per = started.elapsed().as_secs_f64() * 1e9 / rounds as f64;
    println!("leak scan, stream hold-back check per piece: {per:.0} ns");
}

fn arg(name: &str) -> Option<usize> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
}

/// Whether the flag `name` was given.
fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `extra`: keys of the bench provider first (`http2 = true`), then any tables.
async fn spawn(
    bin: &std::path::Path,
    dir: &std::path::Path,
    llm: &str,
    callback: &str,
    extra: &str,
) -> (Child, String) {
    spawn_with_env(bin, dir, llm, callback, extra, &[]).await
}

/// As [`spawn`], with `env` set for the service too.
async fn spawn_with_env(
    bin: &std::path::Path,
    dir: &std::path::Path,
    llm: &str,
    callback: &str,
    extra: &str,
    env: &[(&str, &str)],
) -> (Child, String) {
    let port = free_port();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\n[agent]\nmodel = \"bench/m\"\n[providers.bench]\nkind = \"openai\"\nbase_url = \"{llm}\"\n{extra}\n\
         [channels.webhook.main]\nsecret_env = \"BENCH_SECRET\"\ncallback_url = \"{callback}\"\n"
    );
    std::fs::write(dir.join("config.toml"), config).unwrap();
    let child = Command::new(bin)
        .args(["serve", "-c", "config.toml"])
        .current_dir(dir)
        .env("BENCH_SECRET", SECRET)
        .env("FERROCLAW_LOG", "warn")
        // The stand-in answers; the local model is never wanted here.
        .env("FERROCLAW_OFFLINE", "1")
        .env("FERROCLAW_HOME", dir.join("home"))
        .envs(env.iter().copied())
        .envs(std::env::vars().filter_map(|(k, v)| {
            k.strip_prefix("FERROCLAW_BENCH_CHILD_")
                .map(|name| (name.to_string(), v))
        }))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (child, format!("http://127.0.0.1:{port}"))
}

async fn wait_ready(base: &str) {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(r) = client.get(format!("{base}/readyz")).send().await
            && r.status() == 200
        {
            return;
        }
        assert!(Instant::now() < deadline, "service did not become ready");
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
}

/// A port nothing listens on right now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// [`spawn`], ready, settled for a second: its idle RSS is printed and recorded.
async fn spawn_idle(
    bin: &std::path::Path,
    dir: &std::path::Path,
    llm: &str,
    callback: &str,
    extra: &str,
    figures: &mut figures::Figures,
) -> (Child, String) {
    let (child, base) = spawn(bin, dir, llm, callback, extra).await;
    wait_ready(&base).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = rss_mb(child.id(), "VmRSS");
    println!("idle RSS: {idle:.1} MB");
    figures.add("idle RSS", "MB", "<= 6", idle);
    (child, base)
}

fn stop(mut child: Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

fn rss_mb(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    ticks / 100.0
}

async fn send(client: &reqwest::Client, base: &str, conversation: &str, id: &str, text: &str) {
    let body = serde_json::json!({"conversation_id": conversation, "message_id": id,
        "sender": {"id": "u"}, "text": text})
    .to_string();
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let sig = ferroclaw_channel_webhook::sign(SECRET.as_bytes(), ts, body.as_bytes());
    let response = client
        .post(format!("{base}/v1/webhooks/main/messages"))
        .header("x-ferroclaw-timestamp", ts.to_string())
        .header("x-ferroclaw-signature", sig)
        .body(body)
        .send()
        .await
        .expect("send");
    assert!(
        response.status().is_success(),
        "webhook answered {}",
        response.status()
    );
}

/// An instant OpenAI-compatible stand-in: a fixed short streamed reply.
async fn start_llm() -> String {
    const BODY: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok, \"}}]}\n\n\
        data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"done.\"}}]}\n\n\
        data: {\"choices\":[],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n";
    let app = Router::new().route(
        "/v1/chat/completions",
        post(|| async { ([("content-type", "text/event-stream")], BODY) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

struct Receiver {
    url: String,
    count: Arc<AtomicUsize>,
    notify: Arc<Notify>,
}

impl Receiver {
    async fn start() -> Self {
        let count = Arc::new(AtomicUsize::new(0));
        let notify = Arc::new(Notify::new());
        let (c, n) = (count.clone(), notify.clone());
        let app = Router::new().route(
            "/cb",
            post(move || {
                let (c, n) = (c.clone(), n.clone());
                async move {
                    c.fetch_add(1, Ordering::SeqCst);
                    n.notify_waiters();
                    "ok"
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/cb", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver { url, count, notify }
    }

    fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    async fn wait_for(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(600);
        while self.count() < n {
            let _ = tokio::time::timeout(Duration::from_millis(5), self.notify.notified()).await;
            assert!(
                Instant::now() < deadline,
                "only {} of {n} replies arrived",
                self.count()
            );
        }
    }
}
