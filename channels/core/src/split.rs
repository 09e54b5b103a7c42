//! Long texts cut into pieces a platform accepts (Telegram 4096, Discord 2000 characters):
//! on paragraph or line boundaries, never inside a code block; and which pieces of a bot
//! message were already sent when sending the rest failed.

use std::collections::HashMap;
use std::sync::Mutex;

/// Pieces already sent of multi-piece bot messages (outbox id → platform ids), so a retry
/// after a partial failure does not send the first pieces again.
pub struct SentPieces<Id> {
    sent: Mutex<HashMap<i64, Vec<Id>>>,
}

impl<Id> Default for SentPieces<Id> {
    fn default() -> Self {
        SentPieces {
            sent: Mutex::new(HashMap::new()),
        }
    }
}

impl<Id> SentPieces<Id> {
    /// What an earlier attempt at outbox message `outbox_id` sent (empty when nothing).
    pub fn take(&self, outbox_id: i64) -> Vec<Id> {
        self.sent
            .lock()
            .expect("sent pieces lock")
            .remove(&outbox_id)
            .unwrap_or_default()
    }

    /// Remember what this attempt sent before it failed.
    pub fn keep(&self, outbox_id: i64, sent: Vec<Id>) {
        if !sent.is_empty() {
            self.sent
                .lock()
                .expect("sent pieces lock")
                .insert(outbox_id, sent);
        }
    }
}

fn is_fence(line: &str) -> bool {
    line.trim_start().starts_with("```")
}

/// Pieces of at most `limit` characters whose concatenation is `text` (up to the whitespace
/// at the cut points). Cuts prefer paragraph breaks, then line breaks; a code block is never
/// cut unless it alone exceeds the limit, in which case each piece is a complete fenced block.
pub fn split(text: &str, limit: usize) -> Vec<String> {
    if text.chars().count() <= limit {
        return vec![text.to_string()];
    }
    // Atoms: a whole fenced code block, or one line (with its newline).
    let mut atoms: Vec<String> = Vec::new();
    let mut block: Option<String> = None;
    for line in text.split_inclusive('\n') {
        match block.as_mut() {
            Some(b) => {
                b.push_str(line);
                if is_fence(line) {
                    atoms.push(block.take().unwrap_or_default());
                }
            }
            None if is_fence(line) => block = Some(line.to_string()),
            None => atoms.push(line.to_string()),
        }
    }
    if let Some(unclosed) = block {
        atoms.push(unclosed);
    }
    let mut pieces: Vec<String> = Vec::new();
    let mut current: Vec<String> = Vec::new();
    let len = |atoms: &[String]| atoms.iter().map(|a| a.chars().count()).sum::<usize>();
    for atom in atoms.into_iter().flat_map(|a| shrink(a, limit)) {
        if !current.is_empty() && len(&current) + atom.chars().count() > limit {
            // Prefer to cut after the last blank line, if that keeps at least half a piece.
            let cut = current
                .iter()
                .rposition(|a| a.trim().is_empty())
                .filter(|&i| len(&current[..=i]) >= limit / 2)
                .map(|i| i + 1)
                .unwrap_or(current.len());
            let rest = current.split_off(cut);
            pieces.push(current.concat());
            current = rest;
            if len(&current) + atom.chars().count() > limit {
                pieces.push(std::mem::take(&mut current).concat());
            }
        }
        current.push(atom);
    }
    if !current.is_empty() {
        pieces.push(current.concat());
    }
    pieces.retain(|p| !p.trim().is_empty());
    pieces
}

/// Break an atom longer than `limit`: code blocks into complete fenced blocks, other lines at
/// whitespace (or hard, when a word alone is too long).
fn shrink(atom: String, limit: usize) -> Vec<String> {
    if atom.chars().count() <= limit {
        return vec![atom];
    }
    if is_fence(&atom) {
        let mut lines = atom.split_inclusive('\n');
        let open = lines.next().unwrap_or("```\n").to_string();
        let body: Vec<&str> = lines.filter(|l| !is_fence(l)).collect();
        let room = limit.saturating_sub(open.chars().count() + 4).max(1);
        let mut out = Vec::new();
        let mut chunk = String::new();
        for line in body.iter().flat_map(|l| hard_wrap(l, room)) {
            if !chunk.is_empty() && chunk.chars().count() + line.chars().count() > room {
                out.push(format!("{open}{chunk}```\n"));
                chunk.clear();
            }
            chunk.push_str(&line);
        }
        if !chunk.is_empty() {
            out.push(format!("{open}{chunk}```\n"));
        }
        return out;
    }
    hard_wrap(&atom, limit)
}

fn hard_wrap(line: &str, limit: usize) -> Vec<String> {
    let chars: Vec<char> = line.chars().collect();
    if chars.len() <= limit {
        return vec![line.to_string()];
    }
    let mut out = Vec::new();
    let mut start = 0;
    while start < chars.len() {
        let mut end = (start + limit).min(chars.len());
        if end < chars.len()
            && let Some(space) = chars[start..end].iter().rposition(|c| c.is_whitespace())
            && space > 0
        {
            end = start + space + 1;
        }
        out.push(chars[start..end].iter().collect());
        start = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn squash(s: &str) -> String {
        s.chars().filter(|c| !c.is_whitespace()).collect()
    }

    #[test]
    fn long_texts_split_on_boundaries_and_never_inside_code() {
        let para = "word ".repeat(180); // 900 chars
        let code = format!("```\n{}```\n", "let x = 1;\n".repeat(100)); // ~1100 chars
        let text = format!("{para}\n\n{para}\n\n{code}\n{para}\n\n{para}\n\n{para}\n\n{code}");
        let pieces = split(&text, 4096);
        assert!(pieces.len() >= 2);
        for p in &pieces {
            assert!(p.chars().count() <= 4096);
            assert_eq!(
                p.matches("```").count() % 2,
                0,
                "a piece never cuts a code block: {p}"
            );
        }
        assert_eq!(squash(&pieces.concat()), squash(&text));
    }

    #[test]
    fn oversized_code_blocks_and_lines_are_still_split_validly() {
        let code = format!("```py\n{}```\n", "print('hello world')\n".repeat(400)); // ~8400 chars
        let pieces = split(&code, 4096);
        assert!(pieces.len() >= 3);
        for p in &pieces {
            assert!(p.chars().count() <= 4096);
            assert!(
                p.starts_with("```py\n") && p.trim_end().ends_with("```"),
                "{p}"
            );
        }
        let line = "x".repeat(10_000);
        let pieces = split(&line, 4096);
        assert_eq!(pieces.concat(), line);
        assert!(pieces.iter().all(|p| p.chars().count() <= 4096));
    }

    #[test]
    fn sent_pieces_are_kept_once_and_nothing_is_kept_for_nothing_sent() {
        let sent = SentPieces::default();
        sent.keep(1, vec!["a", "b"]);
        sent.keep(2, Vec::new());
        assert_eq!(sent.take(1), ["a", "b"]);
        assert!(sent.take(1).is_empty(), "taken once");
        assert!(sent.take(2).is_empty());
    }
}
