//! The outbound leak scan (SPEC section 18): every configured secret value (each `*_env`
//! variable's) and its common encodings are known to one [`Redactor`] at start; everything
//! that leaves the service passes it first and every occurrence becomes
//! `[redacted:<VARIABLE>]`. The sinks: chat messages and their edits, captions and approval
//! prompts (the [`Redacting`] wrapper around every channel's `deliver`), streamed previews
//! (the same wrapper's `stream_delta`, holding back a tail that could be the start of a
//! secret until the next piece shows it is not), bot messages read by the webhook and OpenAI
//! endpoints (the service's message log), URLs a turn fetches (`crate::egress`), and files
//! `send_file` is asked to send (refused).
//!
//! One Aho–Corasick automaton over every form of every value, so the cost per message is one
//! pass over its text whatever the number of secrets. A redaction is logged with the
//! variable's name and the sink, never the value, and counted
//! (`ferroclaw_secret_redactions_total{name,sink}`).
//!
//! Owns the patterns and the matching; knows no channel, tool or store.

mod channel;
mod encodings;
mod stream;

pub use channel::{Redacting, redact_message};
pub use encodings::MIN_SECRET_LEN;

use aho_corasick::{AhoCorasick, MatchKind};
use secrecy::{ExposeSecret, SecretString};
use std::borrow::Cow;
use std::collections::HashSet;

/// Where redacted text was going (the metric's `sink` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sink {
    /// A bot message, an edit, a caption or an approval prompt, delivered to its platform.
    Chat,
    /// A piece of a reply streamed while it is generated.
    Stream,
    /// A bot message read by a client (webhook polling and events, OpenAI answers).
    Log,
    /// A URL the service fetches for a turn (`web_fetch`, an attachment).
    Fetch,
    /// A file `send_file` was asked to send.
    File,
    /// Arguments of a call that leaves the service (an MCP server's tool).
    Tool,
}

impl Sink {
    pub fn label(self) -> &'static str {
        match self {
            Sink::Chat => "chat",
            Sink::Stream => "stream",
            Sink::Log => "log",
            Sink::Fetch => "fetch",
            Sink::File => "file",
            Sink::Tool => "tool",
        }
    }
}

/// Every secret's forms and the automaton that finds them.
pub struct Redactor {
    /// None: no secret long enough to scan for (nothing is ever changed).
    matcher: Option<AhoCorasick>,
    /// Pattern index → index into `names`.
    owners: Vec<usize>,
    /// Variable names, the redaction marks' text.
    names: Vec<String>,
    /// Every proper prefix of every pattern: a stream's tail that is one is held back.
    prefixes: HashSet<Box<[u8]>>,
    /// The longest pattern's length.
    longest: usize,
}

impl Redactor {
    /// A scanner for `secrets` (variable name → value). Values shorter than
    /// [`MIN_SECRET_LEN`] are left out (they would match ordinary words).
    pub fn new<'a>(secrets: impl IntoIterator<Item = (&'a String, &'a SecretString)>) -> Self {
        let mut names = Vec::new();
        let mut patterns: Vec<String> = Vec::new();
        let mut owners = Vec::new();
        let mut seen = HashSet::new();
        for (name, value) in secrets {
            let forms = encodings::forms(value.expose_secret());
            if forms.is_empty() {
                continue;
            }
            let owner = names.len();
            names.push(name.clone());
            for form in forms {
                // The same value under two variables is reported under the first.
                if seen.insert(form.clone()) {
                    patterns.push(form);
                    owners.push(owner);
                }
            }
        }
        let longest = patterns.iter().map(String::len).max().unwrap_or(0);
        let prefixes = patterns
            .iter()
            .flat_map(|p| (1..p.len()).map(move |n| p.as_bytes()[..n].into()))
            .collect();
        let matcher = (!patterns.is_empty()).then(|| {
            AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostLongest)
                .build(&patterns)
                .expect("literal patterns of bounded size build")
        });
        Redactor {
            matcher,
            owners,
            names,
            prefixes,
            longest,
        }
    }

    /// A scanner that knows no secret.
    pub fn none() -> Self {
        Self::new(std::iter::empty())
    }

    /// How many secrets are scanned for.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// `text` with every secret form replaced by `[redacted:<VARIABLE>]` (borrowed when none
    /// was found); each one found is logged and counted under `sink`.
    pub fn redact<'t>(&self, text: &'t str, sink: Sink) -> Cow<'t, str> {
        let Some(matcher) = &self.matcher else {
            return Cow::Borrowed(text);
        };
        let mut out = String::new();
        let mut last = 0;
        for found in matcher.find_iter(text) {
            let name = &self.names[self.owners[found.pattern().as_usize()]];
            out.push_str(&text[last..found.start()]);
            out.push_str("[redacted:");
            out.push_str(name);
            out.push(']');
            last = found.end();
            self.report(name, sink);
        }
        if last == 0 {
            return Cow::Borrowed(text);
        }
        out.push_str(&text[last..]);
        Cow::Owned(out)
    }

    /// The variable whose secret (in any form) `reader` holds, read to its end in pieces
    /// (each searched with the tail of the one before, so a secret across two is found).
    pub fn find_in(&self, mut reader: impl std::io::Read) -> std::io::Result<Option<&str>> {
        let Some(matcher) = &self.matcher else {
            return Ok(None);
        };
        let overlap = self.longest.saturating_sub(1);
        let mut window: Vec<u8> = Vec::with_capacity(64 * 1024 + overlap);
        let mut piece = vec![0u8; 64 * 1024];
        loop {
            let n = reader.read(&mut piece)?;
            if n == 0 {
                return Ok(None);
            }
            window.extend_from_slice(&piece[..n]);
            if let Some(found) = matcher.find(&window[..]) {
                let name = &self.names[self.owners[found.pattern().as_usize()]];
                self.report(name, Sink::File);
                return Ok(Some(name));
            }
            let keep = overlap.min(window.len());
            window.drain(..window.len() - keep);
        }
    }

    /// Where the longest tail of `text` that could be the start of a secret begins
    /// (`text.len()` when none could): a stream sends what comes before and holds the rest.
    pub fn safe_end(&self, text: &str) -> usize {
        let bytes = text.as_bytes();
        let reach = self.longest.saturating_sub(1).min(bytes.len());
        (bytes.len() - reach..bytes.len())
            .find(|&start| text.is_char_boundary(start) && self.prefixes.contains(&bytes[start..]))
            .unwrap_or(bytes.len())
    }

    fn report(&self, name: &str, sink: Sink) {
        tracing::warn!(
            variable = name,
            sink = sink.label(),
            "a secret was about to leave the service; redacted"
        );
        crate::metrics::secret_redacted(name, sink.label());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn redactor(pairs: &[(&str, &str)]) -> Redactor {
        let map: BTreeMap<String, SecretString> = pairs
            .iter()
            .map(|(n, v)| (n.to_string(), SecretString::from(v.to_string())))
            .collect();
        Redactor::new(&map)
    }

    #[test]
    fn every_form_is_replaced_by_the_variables_name() {
        let r = redactor(&[("OPENAI_KEY", "sk-live-abcdef0123456789"), ("T", "tiny")]);
        assert_eq!(r.len(), 1, "a too-short value is not scanned for");
        let raw = "key sk-live-abcdef0123456789 end";
        assert_eq!(r.redact(raw, Sink::Chat), "key [redacted:OPENAI_KEY] end");
        let hex = format!("0x{}", hex::encode("sk-live-abcdef0123456789"));
        assert_eq!(r.redact(&hex, Sink::Chat), "0x[redacted:OPENAI_KEY]");
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode("sk-live-abcdef0123456789");
        assert_eq!(r.redact(&b64, Sink::Chat), "[redacted:OPENAI_KEY]");
        let plain = "nothing secret here, tiny";
        assert!(matches!(r.redact(plain, Sink::Chat), Cow::Borrowed(_)));
    }

    #[test]
    fn a_stream_holds_back_only_what_could_begin_a_secret() {
        let r = redactor(&[("K", "sk-live-abcdef0123456789")]);
        assert_eq!(r.safe_end("answer: sk-li"), "answer: ".len());
        assert_eq!(r.safe_end("answer: done"), "answer: done".len());
        assert_eq!(redactor(&[]).safe_end("anything"), "anything".len());
    }

    #[test]
    fn files_are_scanned_as_streams() {
        let r = redactor(&[("K", "sk-live-abcdef0123456789")]);
        let mut big = vec![b'x'; 200_000];
        big.extend_from_slice(b"sk-live-abcdef0123456789");
        assert_eq!(r.find_in(&big[..]).unwrap(), Some("K"));
        assert_eq!(r.find_in(&b"clean"[..]).unwrap(), None);
    }
}
