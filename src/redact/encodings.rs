//! The forms a secret value can take in text a model writes: the value itself, hex (both
//! cases), percent-encoded (every non-alphanumeric byte, and RFC 3986's unreserved set kept),
//! and base64 / base64url at each of the three alignments it can have inside a longer
//! encoded string. Knows nothing of names, sinks or matching.

use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// A secret shorter than this is not scanned for: it would match ordinary words.
pub const MIN_SECRET_LEN: usize = 8;

/// RFC 3986's unreserved characters stay as they are (what most URL encoders do).
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Every form of `value` to look for, each at least [`MIN_SECRET_LEN`] bytes, without repeats;
/// empty when the value is too short to scan for.
pub fn forms(value: &str) -> Vec<String> {
    if value.len() < MIN_SECRET_LEN {
        return Vec::new();
    }
    let bytes = value.as_bytes();
    let mut out = vec![
        value.to_string(),
        hex::encode(bytes),
        hex::encode_upper(bytes),
        utf8_percent_encode(value, NON_ALPHANUMERIC).to_string(),
        utf8_percent_encode(value, COMPONENT).to_string(),
    ];
    for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
        for lead in 0..3 {
            out.push(aligned_base64(engine, bytes, lead));
        }
    }
    out.retain(|f| f.len() >= MIN_SECRET_LEN);
    out.sort();
    out.dedup();
    out
}

/// The characters of `value`'s base64 that do not depend on what surrounds it when it is
/// encoded `lead` bytes into a longer input: those whose six bits all come from `value`.
fn aligned_base64(engine: &impl base64::Engine, value: &[u8], lead: usize) -> String {
    let mut input = vec![0u8; lead];
    input.extend_from_slice(value);
    let encoded = engine.encode(&input);
    let first = (8 * lead).div_ceil(6);
    let end = 8 * (lead + value.len()) / 6;
    encoded.get(first..end).unwrap_or_default().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    #[test]
    fn a_value_is_found_in_every_form_inside_longer_text() {
        let key = "sk-test+/Key=0123456789";
        let found = |text: &str| forms(key).iter().any(|f| text.contains(f.as_str()));
        assert!(found(&format!("here: {key}!")));
        assert!(found(&hex::encode(key)));
        assert!(found(&hex::encode_upper(key)));
        for lead in ["", "a", "ab", "abc"] {
            let mut input = lead.as_bytes().to_vec();
            input.extend_from_slice(key.as_bytes());
            input.extend_from_slice(b"trailing");
            for engine in [
                &base64::engine::general_purpose::STANDARD,
                &base64::engine::general_purpose::URL_SAFE,
            ] {
                let encoded = engine.encode(&input);
                assert!(found(&encoded), "{lead:?}: {encoded}");
            }
        }
        assert!(found(
            &url::form_urlencoded::byte_serialize(key.as_bytes()).collect::<String>()
        ));
        assert!(found(
            &utf8_percent_encode(key, NON_ALPHANUMERIC).to_string()
        ));
        assert!(!found("sk-test and something else entirely"));
    }

    #[test]
    fn short_values_are_not_scanned_for() {
        assert!(forms("short").is_empty());
        assert!(!forms("12345678").is_empty());
    }
}
