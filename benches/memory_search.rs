//! `--memory-only`: memory search latency (SPEC section 20) with 1,000,000 memories in the
//! store, 100,000 of them in the scope searched (one person), on SQLite and, when
//! `FERROCLAW_BENCH_PG_URL` names a server, on PostgreSQL. Texts draw words from a
//! Zipf-like vocabulary so common words match many rows, as real memories do.

use ferroclaw::memory::Memory;
use ferroclaw::storage::{Store, person_scope, scope_token};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TOTAL: usize = 1_000_000;
const IN_SCOPE: usize = 100_000;
const QUERIES: usize = 400;
const VOCABULARY: usize = 20_000;

/// A small deterministic generator (xorshift).
struct Words(u64);

impl Words {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A word, rank `r` drawn roughly as 1/r (common words are common).
    fn word(&mut self) -> String {
        let u = (self.next() % 1_000_000) as f64 / 1_000_000.0;
        let rank = (VOCABULARY as f64).powf(u) as usize;
        format!("w{rank}")
    }

    fn sentence(&mut self, n: usize) -> String {
        (0..n).map(|_| self.word()).collect::<Vec<_>>().join(" ")
    }
}

pub async fn run() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("memories.db").display());
    let store = ferroclaw::storage::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    let started = Instant::now();
    fill_sqlite(&url).await;
    println!(
        "memory search, SQLite: {TOTAL} memories written in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    measure("SQLite", store).await;

    let Ok(admin) = std::env::var("FERROCLAW_BENCH_PG_URL") else {
        println!("memory search, PostgreSQL: skipped (set FERROCLAW_BENCH_PG_URL)");
        return;
    };
    let url = fresh_pg(&admin).await;
    let store = ferroclaw::storage::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    let started = Instant::now();
    fill_pg(&url).await;
    println!(
        "memory search, PostgreSQL: {TOTAL} memories written in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    measure("PostgreSQL", store).await;
}

/// Who owns the i-th memory: every tenth is the searched person's (their memories spread
/// over the store's life, as a regular's are), the rest belong to 9,000 others.
fn scope_of(i: usize) -> String {
    let every = TOTAL / IN_SCOPE;
    if i.is_multiple_of(every) {
        person_scope("telegram:1")
    } else {
        person_scope(&format!("telegram:{}", 2 + (i % 9_000)))
    }
}

/// Rows in batches of `batch`: (scope, token, text, created_at).
fn rows(batch: usize) -> impl Iterator<Item = Vec<(String, String, String, i64)>> {
    let mut words = Words(0x9E37_79B9_7F4A_7C15);
    let now = ferroclaw::clock::now_ms();
    (0..TOTAL).step_by(batch).map(move |start| {
        (start..(start + batch).min(TOTAL))
            .map(|i| {
                let scope = scope_of(i);
                let token = scope_token(&scope);
                let text = words.sentence(12);
                (scope, token, text, now - (i as i64 % 365) * 86_400_000)
            })
            .collect()
    })
}

async fn fill_sqlite(url: &str) {
    let pool = sqlx::SqlitePool::connect(url).await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    for batch in rows(500) {
        let mut insert = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
            "INSERT INTO memories (scope, scope_token, text, tags, created_at) ",
        );
        insert.push_values(batch, |mut row, (scope, token, text, at)| {
            row.push_bind(scope)
                .push_bind(token)
                .push_bind(text)
                .push_bind("")
                .push_bind(at);
        });
        insert.build().execute(&mut *tx).await.unwrap();
    }
    tx.commit().await.unwrap();
    sqlx::query("INSERT INTO memories_fts (memories_fts) VALUES ('optimize')")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("ANALYZE").execute(&pool).await.unwrap();
}

async fn fill_pg(url: &str) {
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    for batch in rows(2_000) {
        let mut insert = sqlx::QueryBuilder::<sqlx::Postgres>::new(
            "INSERT INTO memories (scope, scope_token, text, tags, created_at) ",
        );
        insert.push_values(batch, |mut row, (scope, token, text, at)| {
            row.push_bind(scope)
                .push_bind(token)
                .push_bind(text)
                .push_bind("")
                .push_bind(at);
        });
        insert.build().execute(&pool).await.unwrap();
    }
    sqlx::query("VACUUM ANALYZE memories")
        .execute(&pool)
        .await
        .unwrap();
}

async fn fresh_pg(admin: &str) -> String {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(admin).await.unwrap();
    let name = format!("ferroclaw_bench_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .unwrap();
    let (base, _) = admin.rsplit_once('/').unwrap();
    format!("{base}/{name}")
}

/// p50/p99 of searches as a turn's recall makes them: the person's scope and a chat's,
/// a message of 8 words, the best 5.
async fn measure(what: &str, store: Arc<dyn Store>) {
    let memory = Memory::new(store, Default::default(), None);
    let scopes = vec![person_scope("telegram:1"), "chat:telegram:1".to_string()];
    let mut words = Words(0xDEAD_BEEF_1234_5678);
    let mut took: Vec<Duration> = Vec::with_capacity(QUERIES);
    let mut found = 0;
    for _ in 0..QUERIES {
        let query = words.sentence(8);
        let started = Instant::now();
        found += memory.search(&scopes, &query, 5).await.unwrap().len();
        took.push(started.elapsed());
    }
    took.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "memory search, {what} (100,000 in scope, 1,000,000 stored): p50 {:.2} ms, p99 {:.2} ms, \
         {:.1} found per query",
        ms(took[QUERIES / 2]),
        ms(took[QUERIES * 99 / 100]),
        found as f64 / QUERIES as f64
    );
}
