//! HMAC-SHA256 request signatures over `"<timestamp>.<raw body>"`.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Allowed distance between the signed timestamp and now.
pub const MAX_SKEW_SECS: i64 = 300;

/// `sha256=<hex>` for `body` signed at `timestamp`.
pub fn sign(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// A signed timestamp header's problem (both schemes share the window).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum TimestampError {
    Missing,
    Stale,
}

/// The unix-seconds `timestamp` header, if it is within [`MAX_SKEW_SECS`] of `now`.
pub(crate) fn fresh_timestamp(timestamp: Option<&str>, now: i64) -> Result<i64, TimestampError> {
    let timestamp: i64 = timestamp
        .and_then(|t| t.trim().parse().ok())
        .ok_or(TimestampError::Missing)?;
    if now.abs_diff(timestamp) > MAX_SKEW_SECS.unsigned_abs() {
        return Err(TimestampError::Stale);
    }
    Ok(timestamp)
}

/// Why a signature was refused (all answered with 401).
#[derive(Debug, PartialEq, Eq)]
pub enum SignatureError {
    MissingTimestamp,
    StaleTimestamp,
    MissingSignature,
    BadSignature,
}

impl SignatureError {
    pub fn message(&self) -> &'static str {
        match self {
            SignatureError::MissingTimestamp => "missing or malformed X-Ferroclaw-Timestamp header",
            SignatureError::StaleTimestamp => "X-Ferroclaw-Timestamp is more than 300 s from now",
            SignatureError::MissingSignature => "missing or malformed X-Ferroclaw-Signature header",
            SignatureError::BadSignature => "signature does not match",
        }
    }
}

/// Check headers against the raw body in constant time.
pub fn verify(
    secret: &[u8],
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now: i64,
) -> Result<(), SignatureError> {
    let timestamp = fresh_timestamp(timestamp, now).map_err(|e| match e {
        TimestampError::Missing => SignatureError::MissingTimestamp,
        TimestampError::Stale => SignatureError::StaleTimestamp,
    })?;
    let given = signature
        .and_then(|s| s.trim().strip_prefix("sha256="))
        .and_then(|h| hex::decode(h).ok())
        .ok_or(SignatureError::MissingSignature)?;
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.verify_slice(&given)
        .map_err(|_| SignatureError::BadSignature)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_only_for_its_secret_body_and_time() {
        let sig = sign(b"s3cret", 1000, b"{}");
        assert_eq!(
            verify(b"s3cret", Some("1000"), Some(&sig), b"{}", 1100),
            Ok(())
        );
        assert_eq!(
            verify(b"other", Some("1000"), Some(&sig), b"{}", 1100),
            Err(SignatureError::BadSignature)
        );
        assert_eq!(
            verify(b"s3cret", Some("1000"), Some(&sig), b"{ }", 1100),
            Err(SignatureError::BadSignature)
        );
        assert_eq!(
            verify(b"s3cret", Some("1000"), Some(&sig), b"{}", 1301),
            Err(SignatureError::StaleTimestamp)
        );
        assert_eq!(
            verify(b"s3cret", Some("x"), Some(&sig), b"{}", 1000),
            Err(SignatureError::MissingTimestamp)
        );
        assert_eq!(
            verify(b"s3cret", Some("1000"), Some("md5=00"), b"{}", 1000),
            Err(SignatureError::MissingSignature)
        );
    }

    #[test]
    fn extreme_timestamps_are_stale_not_an_overflow() {
        let now = 1_700_000_000i64;
        for ts in [
            now.wrapping_sub(1i64 << 62).wrapping_sub(1i64 << 62),
            i64::MIN,
            i64::MAX,
        ] {
            let sig = sign(b"k", ts, b"{}");
            assert_eq!(
                verify(b"k", Some(&ts.to_string()), Some(&sig), b"{}", now),
                Err(SignatureError::StaleTimestamp),
                "{ts}"
            );
        }
    }
}
