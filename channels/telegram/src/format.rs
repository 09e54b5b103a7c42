//! Text shaping for Telegram: the model's Markdown as Telegram HTML, and long texts split at
//! the 4096-character limit on paragraph or line boundaries, never inside a code block.

use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};

/// Telegram's limit for one message, in characters after entity parsing.
pub const LIMIT: usize = 4096;

fn escape(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
}

/// Markdown → the subset of HTML Telegram accepts (b, i, s, code, pre, a, blockquote).
pub fn to_html(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len() + 32);
    let mut lists: Vec<Option<u64>> = Vec::new();
    for event in Parser::new_ext(markdown, Options::ENABLE_STRIKETHROUGH) {
        match event {
            Event::Start(tag) => match tag {
                Tag::Strong => out.push_str("<b>"),
                Tag::Emphasis => out.push_str("<i>"),
                Tag::Strikethrough => out.push_str("<s>"),
                Tag::Heading { .. } => out.push_str("<b>"),
                Tag::BlockQuote(_) => out.push_str("<blockquote>"),
                Tag::CodeBlock(CodeBlockKind::Fenced(lang)) if !lang.is_empty() => {
                    out.push_str("<pre><code class=\"language-");
                    escape(lang.split_whitespace().next().unwrap_or_default(), &mut out);
                    out.push_str("\">");
                }
                Tag::CodeBlock(_) => out.push_str("<pre><code>"),
                Tag::Link { dest_url, .. } => {
                    out.push_str("<a href=\"");
                    escape(&dest_url, &mut out);
                    out.push_str("\">");
                }
                Tag::List(start) => lists.push(start),
                Tag::Item => {
                    let depth = lists.len().saturating_sub(1);
                    out.push_str(&"  ".repeat(depth));
                    match lists.last_mut() {
                        Some(Some(n)) => {
                            out.push_str(&format!("{n}. "));
                            *n += 1;
                        }
                        _ => out.push_str("• "),
                    }
                }
                _ => {}
            },
            Event::End(tag) => match tag {
                TagEnd::Strong => out.push_str("</b>"),
                TagEnd::Emphasis => out.push_str("</i>"),
                TagEnd::Strikethrough => out.push_str("</s>"),
                TagEnd::Heading(_) => out.push_str("</b>\n\n"),
                TagEnd::BlockQuote(_) => out.push_str("</blockquote>\n"),
                TagEnd::CodeBlock => out.push_str("</code></pre>\n\n"),
                TagEnd::Link => out.push_str("</a>"),
                TagEnd::Paragraph => out.push_str("\n\n"),
                TagEnd::List(_) => {
                    lists.pop();
                    if lists.is_empty() {
                        out.push('\n');
                    }
                }
                TagEnd::Item if !out.ends_with('\n') => out.push('\n'),
                _ => {}
            },
            Event::Text(text) | Event::Html(text) | Event::InlineHtml(text) => {
                escape(&text, &mut out)
            }
            Event::Code(code) => {
                out.push_str("<code>");
                escape(&code, &mut out);
                out.push_str("</code>");
            }
            Event::SoftBreak | Event::HardBreak => out.push('\n'),
            Event::Rule => out.push_str("———\n\n"),
            _ => {}
        }
    }
    out.trim_end().to_string()
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
    fn markdown_becomes_telegram_html() {
        assert_eq!(
            to_html("**bold** and *it* and `a<b`"),
            "<b>bold</b> and <i>it</i> and <code>a&lt;b</code>"
        );
        assert_eq!(
            to_html("```rust\nfn x() {}\n```"),
            "<pre><code class=\"language-rust\">fn x() {}\n</code></pre>"
        );
        assert_eq!(
            to_html("[site](https://e.x/?a=1&b=2)"),
            "<a href=\"https://e.x/?a=1&amp;b=2\">site</a>"
        );
        assert_eq!(to_html("- one\n- two"), "• one\n• two");
        assert_eq!(to_html("1 < 2 & 3 > 2"), "1 &lt; 2 &amp; 3 &gt; 2");
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
}
