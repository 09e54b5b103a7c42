//! The token checks every HTTP surface shares: reading `Authorization: Bearer …` and
//! comparing a given token with the expected one in constant time.

use axum::http::HeaderMap;
use subtle::ConstantTimeEq;

/// The token of `Authorization: Bearer <token>`, if the header has one. The scheme is
/// case-insensitive (RFC 9110 §11.1: `bearer` and `BEARER` are the same scheme).
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_start_matches(' '))
}

/// True when `given` is `expected`, compared in constant time; an empty `given` never is.
pub fn token_matches(given: &str, expected: &str) -> bool {
    !given.is_empty() && bool::from(given.as_bytes().ct_eq(expected.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scheme_is_case_insensitive() {
        let mut headers = HeaderMap::new();
        for (value, token) in [
            ("Bearer abc", Some("abc")),
            ("bearer abc", Some("abc")),
            ("BEARER  abc", Some("abc")),
            ("Basic abc", None),
            ("Bearerabc", None),
        ] {
            headers.insert(axum::http::header::AUTHORIZATION, value.parse().unwrap());
            assert_eq!(bearer(&headers), token, "{value}");
        }
    }
}
