//! Long-term memories, their scopes and the links between one person's identities (SPEC
//! section 20).
//!
//! Every read names the scopes it may see (`person:<channel>:<user>`, `chat:<channel>:<chat>`):
//! there is no method that reads memories without them. Full-text search narrows to the
//! scopes inside the index (each row's `scope_token`, one word, is indexed with its text) and
//! checks the scope column again. The trait and its SQL, written once for both dialects by
//! the macro below; the full-text query is the one place they differ (SQLite FTS5 with
//! `bm25`, PostgreSQL `tsvector` with `ts_rank`). Knows rows; not who may see which scope.

use super::*;
use async_trait::async_trait;
use sha2::{Digest, Sha256};

/// A memory to save.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMemory {
    pub scope: String,
    pub text: String,
    /// Space-separated words.
    pub tags: String,
    pub created_at: i64,
    /// The session it was said in.
    pub session_key: Option<String>,
    /// The save's identity across attempts of its turn (a redone turn's save is this row).
    pub call_ref: Option<String>,
    /// Its vector and the model that made it.
    pub embedding: Option<(Vec<f32>, String)>,
}

/// A stored memory.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryRow {
    pub id: i64,
    pub scope: String,
    pub text: String,
    pub tags: String,
    pub created_at: i64,
    /// Present when read for vector search.
    pub embedding: Option<Vec<f32>>,
}

/// The one word under which a scope's rows are indexed with their text.
pub fn scope_token(scope: &str) -> String {
    let digest = Sha256::digest(scope.as_bytes());
    format!("s{}", hex::encode(&digest[..8]))
}

/// The scope of a person's memories.
pub fn person_scope(person: &str) -> String {
    format!("person:{person}")
}

/// A vector as stored (little-endian f32s).
fn vector_bytes(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn vector_of(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[async_trait]
pub trait MemoryStore: MemoryLinkStore + Send + Sync {
    /// Save a memory; a save with a `call_ref` already saved is that row. `(id, saved now)`.
    async fn memory_save(&self, memory: &NewMemory) -> StoreResult<(i64, bool)>;
    /// For each of `terms` (plain words), at most `per_term` rows of `scopes` holding it (on
    /// SQLite the newest; on PostgreSQL the cheapest to find), as (index of the term, row): a
    /// row holding two terms may come twice. Bounded work
    /// however common a word is; ranking is the caller's.
    async fn memory_search(
        &self,
        scopes: &[String],
        terms: &[String],
        per_term: i64,
    ) -> StoreResult<Vec<(usize, MemoryRow)>>;
    /// The newest `limit` rows of `scopes` with a vector of `model`, vectors included.
    async fn memory_vectors(
        &self,
        scopes: &[String],
        model: &str,
        limit: i64,
    ) -> StoreResult<Vec<MemoryRow>>;
    /// The newest rows of `scopes`, newest first.
    async fn memory_recent(&self, scopes: &[String], limit: i64) -> StoreResult<Vec<MemoryRow>>;
    /// Forget memory `id` if it is in one of `scopes`.
    async fn memory_forget(&self, scopes: &[String], id: i64) -> StoreResult<bool>;
    /// Forget every memory of `scope`; how many there were.
    async fn memory_forget_scope(&self, scope: &str) -> StoreResult<u64>;
}

/// One person's identities across channels (`/link`, the admin API).
#[async_trait]
pub trait MemoryLinkStore: Send + Sync {
    /// The person identity `member` (`<channel>:<user id>`) belongs to: itself unless linked.
    async fn memory_person(&self, member: &str) -> StoreResult<String>;
    /// Offer `code` (valid until `expires_at`) for linking another identity to `member`'s
    /// person; replaces the member's earlier code.
    async fn memory_link_offer(&self, member: &str, code: &str, expires_at: i64)
    -> StoreResult<()>;
    /// Link `member` to the person who offered `code` (used once, before it expires): its
    /// memories and the identities linked to it join that person. The person, or None.
    async fn memory_link_claim(
        &self,
        code: &str,
        member: &str,
        now_ms: i64,
    ) -> StoreResult<Option<String>>;
    /// Link `member` to `other`'s person directly (an operator's command).
    async fn memory_link(&self, member: &str, other: &str, now_ms: i64) -> StoreResult<String>;
}

/// `scope IN (...)` over bound values.
macro_rules! push_scopes {
    ($query:expr, $column:literal, $scopes:expr) => {{
        $query.push(concat!($column, " IN ("));
        let mut list = $query.separated(", ");
        for scope in $scopes {
            list.push_bind(scope.clone());
        }
        list.push_unseparated(")");
    }};
}

macro_rules! sql {
    ($store:ty, $db:ty, $search:path, $recent_first:expr) => {
        #[async_trait::async_trait]
        impl $crate::storage::MemoryStore for $store {
            async fn memory_save(&self, m: &NewMemory) -> StoreResult<(i64, bool)> {
                let (vector, model) = match &m.embedding {
                    Some((v, model)) => (Some(vector_bytes(v)), Some(model.as_str())),
                    None => (None, None),
                };
                let saved: Option<i64> = sqlx::query_scalar(
                    "INSERT INTO memories (scope, scope_token, text, tags, created_at, session_key, call_ref, embedding, embedding_model) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (call_ref) DO NOTHING RETURNING id",
                )
                .bind(&m.scope)
                .bind(scope_token(&m.scope))
                .bind(&m.text)
                .bind(&m.tags)
                .bind(m.created_at)
                .bind(&m.session_key)
                .bind(&m.call_ref)
                .bind(vector)
                .bind(model)
                .fetch_optional(&self.write)
                .await?;
                if let Some(id) = saved {
                    return Ok((id, true));
                }
                let id: i64 = sqlx::query_scalar("SELECT id FROM memories WHERE call_ref = $1")
                    .bind(&m.call_ref)
                    .fetch_one(&self.write)
                    .await?;
                Ok((id, false))
            }

            async fn memory_search(&self, scopes: &[String], terms: &[String], per_term: i64) -> StoreResult<Vec<(usize, MemoryRow)>> {
                if scopes.is_empty() || terms.is_empty() {
                    return Ok(Vec::new());
                }
                // A word common in the scopes' newest rows is answered from them; only the
                // others are looked up in the index (see `common_in_recent`). Scopes holding
                // fewer rows than the window came back whole: every word is answered from
                // them and the index is not read at all (a new or small store).
                let (mut found, rest) = if $recent_first {
                    let recent = self.memory_recent_each(scopes, RECENT_WINDOW).await?;
                    let whole = scopes.iter().all(|scope| {
                        recent.iter().filter(|r| &r.scope == scope).count() < RECENT_WINDOW as usize
                    });
                    common_in_recent(recent, terms, per_term, whole)
                } else {
                    (Vec::new(), (0..terms.len()).collect())
                };
                if rest.is_empty() {
                    return Ok(found);
                }
                // The words in two statements run at once on two of the read connections
                // (each word's lookup is an index walk of its own; two cores share them).
                let half = rest.len().div_ceil(2);
                let part = |from: usize, to: usize| {
                    let mut query = sqlx::QueryBuilder::<$db>::new("");
                    for (n, &i) in rest[from..to].iter().enumerate() {
                        if n > 0 {
                            query.push(" UNION ALL ");
                        }
                        $search(&mut query, i, scopes, &terms[i], per_term);
                    }
                    query
                };
                let (mut first, mut second) = (part(0, half), part(half, rest.len()));
                let (a, b) = tokio::join!(
                    first.build_query_as::<(i64, i64, String, String, String, i64)>().fetch_all(&self.read),
                    async {
                        if half < rest.len() {
                            second.build_query_as::<(i64, i64, String, String, String, i64)>().fetch_all(&self.read).await
                        } else {
                            Ok(Vec::new())
                        }
                    }
                );
                let mut rows = a?;
                rows.extend(b?);
                // The scope checked again on every row (the index narrowed by its token).
                Ok(rows
                    .into_iter()
                    .filter(|(_, _, scope, ..)| scopes.contains(scope))
                    .map(|(term, id, scope, text, tags, created_at)| {
                        (term as usize, row((id, scope, text, tags, created_at)))
                    })
                    .chain(std::mem::take(&mut found))
                    .collect())
            }

            async fn memory_vectors(&self, scopes: &[String], model: &str, limit: i64) -> StoreResult<Vec<MemoryRow>> {
                if scopes.is_empty() {
                    return Ok(Vec::new());
                }
                let mut query = sqlx::QueryBuilder::<$db>::new(
                    "SELECT id, scope, text, tags, created_at, embedding FROM memories WHERE embedding_model = ",
                );
                query.push_bind(model.to_string());
                query.push(" AND ");
                push_scopes!(query, "scope", scopes);
                query.push(" ORDER BY id DESC LIMIT ");
                query.push_bind(limit);
                let rows: Vec<(i64, String, String, String, i64, Option<Vec<u8>>)> =
                    query.build_query_as().fetch_all(&self.read).await?;
                Ok(rows
                    .into_iter()
                    .map(|(id, scope, text, tags, created_at, embedding)| MemoryRow {
                        id, scope, text, tags, created_at,
                        embedding: embedding.as_deref().map(vector_of),
                    })
                    .collect())
            }

            async fn memory_recent(&self, scopes: &[String], limit: i64) -> StoreResult<Vec<MemoryRow>> {
                if scopes.is_empty() {
                    return Ok(Vec::new());
                }
                let mut query = sqlx::QueryBuilder::<$db>::new(
                    "SELECT id, scope, text, tags, created_at FROM memories WHERE ",
                );
                push_scopes!(query, "scope", scopes);
                query.push(" ORDER BY id DESC LIMIT ");
                query.push_bind(limit);
                let rows: Vec<(i64, String, String, String, i64)> =
                    query.build_query_as().fetch_all(&self.read).await?;
                Ok(rows.into_iter().map(row).collect())
            }

            async fn memory_forget(&self, scopes: &[String], id: i64) -> StoreResult<bool> {
                if scopes.is_empty() {
                    return Ok(false);
                }
                let mut query = sqlx::QueryBuilder::<$db>::new("DELETE FROM memories WHERE id = ");
                query.push_bind(id);
                query.push(" AND ");
                push_scopes!(query, "scope", scopes);
                Ok(query.build().execute(&self.write).await?.rows_affected() > 0)
            }

            async fn memory_forget_scope(&self, scope: &str) -> StoreResult<u64> {
                Ok(sqlx::query("DELETE FROM memories WHERE scope = $1")
                    .bind(scope)
                    .execute(&self.write)
                    .await?
                    .rows_affected())
            }

        }
    };
}

/// The person links of both dialects.
macro_rules! links {
    ($store:ty) => {
        #[async_trait::async_trait]
        impl $crate::storage::MemoryLinkStore for $store {
            async fn memory_person(&self, member: &str) -> StoreResult<String> {
                let person: Option<String> =
                    sqlx::query_scalar("SELECT person FROM memory_links WHERE member = $1")
                        .bind(member)
                        .fetch_optional(&self.read)
                        .await?;
                Ok(person.unwrap_or_else(|| member.to_string()))
            }

            async fn memory_link_offer(&self, member: &str, code: &str, expires_at: i64) -> StoreResult<()> {
                let mut tx = self.write.begin().await?;
                sqlx::query("DELETE FROM memory_link_codes WHERE member = $1 OR expires_at < $2")
                    .bind(member)
                    .bind($crate::clock::now_ms())
                    .execute(&mut *tx)
                    .await?;
                sqlx::query("INSERT INTO memory_link_codes (code, member, expires_at) VALUES ($1, $2, $3)")
                    .bind(code)
                    .bind(member)
                    .bind(expires_at)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(())
            }

            async fn memory_link_claim(&self, code: &str, member: &str, now_ms: i64) -> StoreResult<Option<String>> {
                let mut tx = self.write.begin().await?;
                let owner: Option<String> = sqlx::query_scalar(
                    "DELETE FROM memory_link_codes WHERE code = $1 AND expires_at > $2 RETURNING member",
                )
                .bind(code)
                .bind(now_ms)
                .fetch_optional(&mut *tx)
                .await?;
                let Some(owner) = owner else {
                    return Ok(None);
                };
                let person = join_person!(tx, &owner, member, now_ms);
                tx.commit().await?;
                Ok(Some(person))
            }

            async fn memory_link(&self, member: &str, other: &str, now_ms: i64) -> StoreResult<String> {
                let mut tx = self.write.begin().await?;
                let person = join_person!(tx, other, member, now_ms);
                tx.commit().await?;
                Ok(person)
            }
        }
    };
}

/// In transaction `$tx`: `member` (and whoever was linked to it) joins `owner`'s person,
/// memories included. Evaluates to the person.
macro_rules! join_person {
    ($tx:ident, $owner:expr, $member:expr, $now:expr) => {{
        let person_of = "SELECT person FROM memory_links WHERE member = $1";
        let person: String = sqlx::query_scalar(person_of)
            .bind($owner)
            .fetch_optional(&mut *$tx)
            .await?
            .unwrap_or_else(|| $owner.to_string());
        let old: String = sqlx::query_scalar(person_of)
            .bind($member)
            .fetch_optional(&mut *$tx)
            .await?
            .unwrap_or_else(|| $member.to_string());
        if old != person {
            sqlx::query("UPDATE memory_links SET person = $1 WHERE person = $2")
                .bind(&person)
                .bind(&old)
                .execute(&mut *$tx)
                .await?;
            for linked in [$member, old.as_str()] {
                if linked != person {
                    sqlx::query(
                        "INSERT INTO memory_links (member, person, linked_at) VALUES ($1, $2, $3) \
                         ON CONFLICT (member) DO UPDATE SET person = excluded.person, linked_at = excluded.linked_at",
                    )
                    .bind(linked)
                    .bind(&person)
                    .bind($now)
                    .execute(&mut *$tx)
                    .await?;
                }
            }
            let (from, to) = (person_scope(&old), person_scope(&person));
            sqlx::query("UPDATE memories SET scope = $1, scope_token = $2 WHERE scope = $3")
                .bind(&to)
                .bind(scope_token(&to))
                .bind(&from)
                .execute(&mut *$tx)
                .await?;
        }
        person
    }};
}

fn row((id, scope, text, tags, created_at): (i64, String, String, String, i64)) -> MemoryRow {
    MemoryRow {
        id,
        scope,
        text,
        tags,
        created_at,
        embedding: None,
    }
}

sql!(super::SqliteStore, sqlx::Sqlite, search_fts5, false);
sql!(super::PostgresStore, sqlx::Postgres, search_tsvector, true);

/// The newest rows of a scope read before the index: a word holding in `per_term` of them is
/// common, and answered from them (on PostgreSQL a common word's lookup intersects two long
/// posting lists, the word's and the scope token's: the slow part of a search).
const RECENT_WINDOW: i64 = 1_000;

impl super::PostgresStore {
    /// The newest `limit` rows of each scope (one backward walk of `memories_by_scope`
    /// each), newest first.
    async fn memory_recent_each(
        &self,
        scopes: &[String],
        limit: i64,
    ) -> StoreResult<Vec<MemoryRow>> {
        let mut query = sqlx::QueryBuilder::<sqlx::Postgres>::new("");
        for (n, scope) in scopes.iter().enumerate() {
            if n > 0 {
                query.push(" UNION ALL ");
            }
            query.push("(SELECT id, scope, text, tags, created_at FROM memories WHERE scope = ");
            query.push_bind(scope.clone());
            query.push(" ORDER BY id DESC LIMIT ");
            query.push_bind(limit);
            query.push(")");
        }
        let mut rows: Vec<(i64, String, String, String, i64)> =
            query.build_query_as().fetch_all(&self.read).await?;
        rows.sort_by_key(|r| std::cmp::Reverse(r.0));
        Ok(rows.into_iter().map(row).collect())
    }
}

impl super::SqliteStore {
    /// Not used: SQLite's full-text index reads a word's newest rows directly.
    async fn memory_recent_each(
        &self,
        _scopes: &[String],
        _limit: i64,
    ) -> StoreResult<Vec<MemoryRow>> {
        Ok(Vec::new())
    }
}

/// Every word of a row's text and tags, lower case (what a search word is matched against).
pub fn words_of(row: &MemoryRow) -> std::collections::HashSet<String> {
    row.text
        .split(|c: char| !c.is_alphanumeric())
        .chain(row.tags.split(|c: char| !c.is_alphanumeric()))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Terms found at least `per_term` times in `recent` (newest first), or any number of times
/// when `recent` is `whole` (every row of the scopes): their newest `per_term` rows; and the
/// indexes of the other terms, for the index (none when `whole`).
///
/// A word is matched against [`words_of`] a row, which splits where the index's parser may
/// keep a token whole (`3.14`, `example.com`): read from here, such a row is found by its
/// parts too.
fn common_in_recent(
    recent: Vec<MemoryRow>,
    terms: &[String],
    per_term: i64,
    whole: bool,
) -> (Vec<(usize, MemoryRow)>, Vec<usize>) {
    let words: Vec<std::collections::HashSet<String>> = recent.iter().map(words_of).collect();
    let mut found = Vec::new();
    let mut rest = Vec::new();
    for (i, term) in terms.iter().enumerate() {
        let hits: Vec<&MemoryRow> = recent
            .iter()
            .zip(&words)
            .filter(|(_, w)| w.contains(term))
            .map(|(r, _)| r)
            .take(per_term.max(0) as usize)
            .collect();
        if per_term > 0 && (whole || hits.len() as i64 >= per_term) {
            found.extend(hits.into_iter().map(|r| (i, r.clone())));
        } else {
            rest.push(i);
        }
    }
    (found, rest)
}
links!(super::SqliteStore);
links!(super::PostgresStore);

/// SQLite, one term: the FTS5 index narrowed to the scopes' tokens and read newest first
/// (FTS5 walks its doclists backwards and stops at the limit), then the rows, their scope
/// checked again.
fn search_fts5(
    query: &mut sqlx::QueryBuilder<'_, sqlx::Sqlite>,
    index: usize,
    scopes: &[String],
    term: &str,
    per_term: i64,
) {
    let tokens: Vec<String> = scopes.iter().map(|s| scope_token(s)).collect();
    let matching = format!(
        "scope_token : ({}) AND {{text tags}} : \"{term}\"",
        tokens.join(" OR ")
    );
    query.push(format!(
        "SELECT * FROM (SELECT {index}, m.id, m.scope, m.text, m.tags, m.created_at FROM memories AS m \
         WHERE m.id IN (SELECT rowid FROM memories_fts WHERE memories_fts MATCH "
    ));
    query.push_bind(matching);
    query.push(" ORDER BY rowid DESC LIMIT ");
    query.push_bind(per_term);
    query.push(") AND ");
    push_scopes!(query, "m.scope", scopes);
    query.push(" ORDER BY m.id DESC)");
}

/// PostgreSQL, one term: the word joined to each scope's token (`memory_lexemes`: one lexeme
/// per scope and word), so the GIN index reads only those scopes' posting lists for it; the
/// scope column is checked again on the rows. At most `per_term` rows in whatever order is
/// cheapest (a word common in a scope's newest rows never comes here: `common_in_recent`).
fn search_tsvector(
    query: &mut sqlx::QueryBuilder<'_, sqlx::Postgres>,
    index: usize,
    scopes: &[String],
    term: &str,
    per_term: i64,
) {
    query.push(format!(
        "(SELECT CAST({index} AS BIGINT), m.id, m.scope, m.text, m.tags, m.created_at FROM memories AS m \
         WHERE m.tsv @@ CAST("
    ));
    query.push_bind(scoped_lexemes(scopes, term));
    query.push(" AS tsquery) LIMIT ");
    query.push_bind(per_term);
    query.push(")");
}

/// `'<token><word>' | ...` for each scope: a `tsquery` of lexemes taken as they are (the
/// word is lower case and alphanumeric; quotes and backslashes are escaped all the same).
fn scoped_lexemes(scopes: &[String], term: &str) -> String {
    let term = term.replace('\\', "\\\\").replace('\'', "''");
    scopes
        .iter()
        .map(|scope| format!("'{}{term}'", scope_token(scope)))
        .collect::<Vec<_>>()
        .join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vector_survives_its_stored_form() {
        let v = vec![0.5, -1.25, 3.0e-5];
        assert_eq!(vector_of(&vector_bytes(&v)), v);
    }

    #[test]
    fn a_word_common_in_the_newest_rows_is_answered_from_them_and_others_go_to_the_index() {
        let rows: Vec<MemoryRow> = (0..10)
            .map(|i| MemoryRow {
                id: 100 - i,
                scope: "person:t:1".into(),
                text: if i % 2 == 0 {
                    format!("Coffee at {i}")
                } else {
                    format!("tea {i}")
                },
                tags: if i == 1 {
                    "Coffee".into()
                } else {
                    String::new()
                },
                created_at: 0,
                embedding: None,
            })
            .collect();
        let terms = ["coffee".to_string(), "tea".to_string(), "cocoa".to_string()];
        let (found, rest) = common_in_recent(rows.clone(), &terms, 3, false);
        // "coffee": in rows 0, 1 (by its tag), 2 ... its newest three; "tea" too; "cocoa" never.
        let ids = |t: usize| -> Vec<i64> {
            found
                .iter()
                .filter(|(i, _)| *i == t)
                .map(|(_, r)| r.id)
                .collect()
        };
        assert_eq!(ids(0), [100, 99, 98]);
        assert_eq!(ids(1), [99, 97, 95]);
        assert_eq!(rest, [2]);
        // Fewer than per_term: the index decides.
        let (found, rest) = common_in_recent(Vec::new(), &terms, 3, false);
        assert!(found.is_empty());
        assert_eq!(rest, [0, 1, 2]);
        // Unless the rows are all there are: then a word found fewer times, or never, is
        // answered from them too.
        let few: Vec<MemoryRow> = rows.into_iter().filter(|r| r.id <= 96).collect();
        let (_, rest) = common_in_recent(few.clone(), &terms, 4, false);
        assert_eq!(rest, [0, 1, 2], "three of each, fewer than per_term");
        let (found, rest) = common_in_recent(few, &terms, 4, true);
        assert_eq!(
            found.iter().map(|(i, r)| (*i, r.id)).collect::<Vec<_>>(),
            [(0, 96), (0, 94), (0, 92), (1, 95), (1, 93), (1, 91)]
        );
        assert!(rest.is_empty(), "the index is not read: {rest:?}");
        let (found, rest) = common_in_recent(Vec::new(), &terms, 3, true);
        assert!(found.is_empty() && rest.is_empty());
    }

    #[test]
    fn a_terms_lexemes_join_it_to_each_scopes_token() {
        let scopes = ["person:w:a".to_string(), "chat:w:c".to_string()];
        assert_eq!(
            scoped_lexemes(&scopes, "tea"),
            format!(
                "'{}tea' | '{}tea'",
                scope_token(&scopes[0]),
                scope_token(&scopes[1])
            )
        );
        assert_eq!(
            scoped_lexemes(&scopes[..1], "it's"),
            format!("'{}it''s'", scope_token(&scopes[0]))
        );
    }

    #[test]
    fn each_scope_has_its_own_one_word_token() {
        let a = scope_token("person:telegram:1");
        assert_ne!(a, scope_token("person:telegram:11"));
        assert_eq!(a.len(), 17);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
    }
}
