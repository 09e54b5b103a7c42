//! Markdown, as models write it, into Slack's mrkdwn: `**bold**` → `*bold*`, `*italic*` →
//! `_italic_`, `~~strike~~` → `~strike~`, `[text](url)` → `<url|text>`, headings as bold
//! lines, `&`, `<` and `>` escaped; code (fenced or inline) is kept as written.

/// Slack's advised length of one message's text (longer ones are split).
pub const LIMIT: usize = 3_900;

/// `markdown` as mrkdwn.
pub fn mrkdwn(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len() + 16);
    let mut in_fence = false;
    for (i, line) in markdown.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            in_fence = !in_fence;
            // Slack shows no language tag: keep the fence alone.
            out.push_str("```");
            continue;
        }
        if in_fence {
            out.push_str(&escape(line));
            continue;
        }
        let heading = trimmed.trim_start_matches('#');
        if trimmed.starts_with('#') && heading.starts_with(' ') {
            out.push('*');
            out.push_str(&inline(heading.trim()));
            out.push('*');
            continue;
        }
        out.push_str(&inline(line));
    }
    out
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// One line outside code fences: inline code kept, the rest converted.
fn inline(line: &str) -> String {
    let mut out = String::new();
    for (i, part) in line.split('`').enumerate() {
        if i > 0 {
            out.push('`');
        }
        if i % 2 == 1 {
            out.push_str(&escape(part));
        } else {
            out.push_str(&emphasis(&links(part)));
        }
    }
    out
}

/// `[text](url)` → `<url|text>`, the rest escaped.
fn links(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let Some(close) = after.find("](") else {
            break;
        };
        let target = &after[close + 2..];
        let Some(end) = target.find(')') else {
            break;
        };
        let (label, url) = (&after[..close], &target[..end]);
        if url.contains(' ') || url.is_empty() {
            out.push_str(&escape(&rest[..open + 1]));
            rest = after;
            continue;
        }
        out.push_str(&escape(&rest[..open]));
        out.push_str(&format!("<{}|{}>", url, escape(label).replace('|', "¦")));
        rest = &target[end + 1..];
    }
    out.push_str(&escape(rest));
    out
}

/// `**b**`/`__b__` → `*b*`, `*i*` → `_i_`, `~~s~~` → `~s~` (links already converted are
/// left alone: their URL holds no spaces and they sit inside `<…>`).
fn emphasis(text: &str) -> String {
    // Bold first, through a placeholder, so its stars are not read as italics.
    const BOLD: char = '\u{1}';
    let text = text
        .replace("**", &BOLD.to_string())
        .replace("__", &BOLD.to_string())
        .replace("~~", "~");
    let mut out = String::with_capacity(text.len());
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        // A single star that opens an emphasis (followed by a non-space) and is closed later.
        if c == '*'
            && chars.get(i + 1).is_some_and(|n| !n.is_whitespace())
            && let Some(end) = chars[i + 1..].iter().position(|&n| n == '*')
        {
            out.push('_');
            out.extend(&chars[i + 1..i + 1 + end]);
            out.push('_');
            i += end + 2;
            continue;
        }
        out.push(if c == BOLD { '*' } else { c });
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::mrkdwn;

    #[test]
    fn markdown_becomes_mrkdwn_and_code_is_kept() {
        assert_eq!(
            mrkdwn("# Plan\n**Bold** and *it* and ~~gone~~, see [docs](https://x.io/a?b=1)"),
            "*Plan*\n*Bold* and _it_ and ~gone~, see <https://x.io/a?b=1|docs>"
        );
        assert_eq!(
            mrkdwn("a < b & c\n```rust\nlet x = a**b < c;\n```\n`**x**`"),
            "a &lt; b &amp; c\n```\nlet x = a**b &lt; c;\n```\n`**x**`"
        );
        assert_eq!(mrkdwn("2 * 3 = 6"), "2 * 3 = 6");
    }
}
