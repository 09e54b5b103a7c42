//! Text shaping for Telegram: the model's Markdown as Telegram HTML. Long texts are split at
//! the 4096-character limit by the shared [`ferroclaw_channel_core::split`].

pub use ferroclaw_channel_core::split;
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
