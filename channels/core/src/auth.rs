//! The token checks every HTTP surface shares: reading `Authorization: Bearer …` and
//! comparing a given token with the expected one in constant time.

use axum::http::HeaderMap;
use subtle::ConstantTimeEq;

/// The token of `Authorization: Bearer <token>`, if the header has one.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

/// True when `given` is `expected`, compared in constant time; an empty `given` never is.
pub fn token_matches(given: &str, expected: &str) -> bool {
    !given.is_empty() && bool::from(given.as_bytes().ct_eq(expected.as_bytes()))
}
