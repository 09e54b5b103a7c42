//! From a message to the memories worth showing: the words a full-text search looks for,
//! and one order for text matches, vector neighbours and age.

use crate::storage::{MemoryRow, words_of};
use std::collections::HashMap;

/// The most words one search looks for.
const MAX_TERMS: usize = 16;
/// How many rows of each word a search reads (the newest).
pub const PER_TERM: usize = 64;
/// A vector neighbour less similar than this is not a match (unrelated texts of common
/// embedding models score 0.0–0.3).
pub const MIN_SIMILARITY: f32 = 0.3;
/// A memory's age weight halves every this many days.
const HALF_LIFE_DAYS: f64 = 30.0;

/// Words that say nothing about what a memory holds.
const STOPWORDS: &[&str] = &[
    "a", "about", "after", "again", "all", "also", "am", "an", "and", "any", "are", "as", "at",
    "be", "been", "before", "but", "by", "can", "could", "did", "do", "does", "for", "from", "had",
    "has", "have", "he", "her", "hers", "him", "his", "how", "i", "if", "in", "into", "is", "it",
    "its", "just", "know", "let", "me", "mine", "my", "no", "not", "now", "of", "on", "or", "our",
    "please", "remember", "she", "so", "some", "tell", "than", "that", "the", "their", "them",
    "then", "there", "these", "they", "this", "to", "too", "up", "us", "was", "we", "were", "what",
    "when", "where", "which", "who", "whom", "why", "will", "with", "would", "you", "your",
    "yours",
];

/// The words of `text` a search looks for: lower case, letters and digits only (so no word
/// can be read as query syntax by either database), no stop words, each once.
pub fn terms(text: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        let word = word.to_lowercase();
        let long_enough = word.chars().count() >= 2 || word.chars().all(|c| c.is_ascii_digit());
        if word.is_empty() || !long_enough || STOPWORDS.contains(&word.as_str()) {
            continue;
        }
        if !found.contains(&word) {
            found.push(word);
        }
        if found.len() == MAX_TERMS {
            break;
        }
    }
    found
}

/// Text matches ranked: `hits` are (term index, row) as the store found them, at most
/// `per_term` of each term (the newest). A term's weight falls with how many rows hold it
/// (one found `per_term` times counts as common); a row scores the weights of the query's
/// words it holds, however it was found.
pub fn text_matches(
    words: &[String],
    hits: Vec<(usize, MemoryRow)>,
    per_term: usize,
) -> Vec<(MemoryRow, f64)> {
    let mut found = vec![0usize; words.len()];
    for (term, _) in &hits {
        found[*term] += 1;
    }
    let common = 4 * per_term;
    let weight: Vec<f64> = found
        .iter()
        .map(|&n| {
            let df = if n >= per_term { common } else { n.max(1) };
            (1.0 + common as f64 / df as f64).ln()
        })
        .collect();
    let mut rows: HashMap<i64, (MemoryRow, Vec<bool>)> = HashMap::new();
    for (term, row) in hits {
        rows.entry(row.id)
            .or_insert_with(|| (row, vec![false; words.len()]))
            .1[term] = true;
    }
    rows.into_values()
        .map(|(row, mut has)| {
            let own = words_of(&row);
            for (i, word) in words.iter().enumerate() {
                has[i] |= own.contains(word);
            }
            let score = has
                .iter()
                .zip(&weight)
                .filter(|(h, _)| **h)
                .map(|(_, w)| w)
                .sum();
            (row, score)
        })
        .collect()
}

/// Cosine similarity (0 when either vector is empty or they differ in length).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() || a.is_empty() {
        return 0.0;
    }
    let (mut dot, mut na, mut nb) = (0.0f32, 0.0f32, 0.0f32);
    for (x, y) in a.iter().zip(b) {
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na.sqrt() * nb.sqrt())
    }
}

/// The best `k` of the text matches (with their rank, higher better) and the vector
/// neighbours (with their similarity), one list: a text rank counts relative to the best
/// one, a similarity as it is (weighted more: it finds paraphrases a word match misses),
/// and newer memories a little more.
pub fn fuse(
    text: Vec<(MemoryRow, f64)>,
    vectors: Vec<(MemoryRow, f32)>,
    now_ms: i64,
    k: usize,
) -> Vec<MemoryRow> {
    let hybrid = !vectors.is_empty();
    let best_text = text.iter().map(|(_, r)| *r).fold(0.0f64, f64::max);
    let mut scored: HashMap<i64, (MemoryRow, f64, f64)> = HashMap::new();
    for (row, rank) in text {
        let share = if best_text > 0.0 {
            rank / best_text
        } else {
            1.0
        };
        scored.insert(row.id, (row, share, 0.0));
    }
    for (row, similarity) in vectors {
        if similarity < MIN_SIMILARITY {
            continue;
        }
        scored.entry(row.id).or_insert_with(|| (row, 0.0, 0.0)).2 = f64::from(similarity);
    }
    let mut all: Vec<(MemoryRow, f64)> = scored
        .into_values()
        .map(|(row, text, similarity)| {
            let days = (now_ms - row.created_at).max(0) as f64 / 86_400_000.0;
            let fresh = 0.5f64.powf(days / HALF_LIFE_DAYS);
            let score = if hybrid {
                0.3 * text + 0.6 * similarity + 0.1 * fresh
            } else {
                0.85 * text + 0.15 * fresh
            };
            (row, score)
        })
        .collect();
    all.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.id.cmp(&a.0.id)));
    all.into_iter().take(k).map(|(row, _)| row).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, created_at: i64) -> MemoryRow {
        MemoryRow {
            id,
            scope: "person:t:1".into(),
            text: format!("m{id}"),
            tags: String::new(),
            created_at,
            embedding: None,
        }
    }

    #[test]
    fn a_rare_word_outweighs_a_common_one() {
        let words = vec!["common".to_string(), "rare".to_string()];
        let mut hits: Vec<(usize, MemoryRow)> = (0..PER_TERM as i64)
            .map(|i| {
                (
                    0,
                    MemoryRow {
                        text: format!("common {i}"),
                        ..row(100 + i, 0)
                    },
                )
            })
            .collect();
        hits.push((
            1,
            MemoryRow {
                text: "a rare thing".into(),
                ..row(1, 0)
            },
        ));
        let ranked = fuse(text_matches(&words, hits, PER_TERM), Vec::new(), 0, 3);
        assert_eq!(ranked[0].id, 1);
    }

    #[test]
    fn terms_drop_stop_words_and_query_syntax() {
        assert_eq!(
            terms("What is MY dog's name? \"NEAR\" OR x*"),
            vec!["dog", "name", "near"]
        );
        assert_eq!(terms("Ünïcode 7 straße"), vec!["ünïcode", "7", "straße"]);
    }

    #[test]
    fn a_close_paraphrase_outranks_a_word_match_that_means_something_else() {
        let day = 86_400_000;
        let text = vec![(row(1, 0), 3.0)];
        let vectors = vec![(row(1, 0), 0.1), (row(2, 0), 0.9)];
        let ranked = fuse(text, vectors, day, 5);
        assert_eq!(ranked.iter().map(|r| r.id).collect::<Vec<_>>(), vec![2, 1]);
    }

    #[test]
    fn among_equal_matches_the_newer_wins() {
        let day = 86_400_000;
        let ranked = fuse(
            vec![(row(1, 0), 2.0), (row(2, 50 * day), 2.0)],
            Vec::new(),
            60 * day,
            1,
        );
        assert_eq!(ranked[0].id, 2);
    }
}
