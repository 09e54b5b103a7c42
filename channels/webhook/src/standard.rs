//! Standard Webhooks signatures (<https://www.standardwebhooks.com>), chosen per endpoint with
//! `signature = "standard"`: `webhook-id`, `webhook-timestamp` and
//! `webhook-signature: v1,<base64 HMAC-SHA256(key, "id.timestamp.body")>`, where the key is
//! the base64 part of a `whsec_` secret. Same 300 s window and constant-time check as the
//! ferroclaw scheme.

use crate::signature::{TimestampError, fresh_timestamp};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The HMAC key of a `whsec_<base64>` secret (the prefix is optional, as in the official
/// libraries); the error says what is wrong without showing the secret.
pub fn key_of(secret: &str) -> Result<Vec<u8>, &'static str> {
    let encoded = secret.strip_prefix("whsec_").unwrap_or(secret);
    match B64.decode(encoded) {
        Ok(key) if !key.is_empty() => Ok(key),
        _ => Err("a Standard Webhooks secret must be `whsec_` followed by base64"),
    }
}

fn mac(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// The `webhook-signature` value (`v1,<base64>`) for `body` sent as message `id` at
/// `timestamp`.
pub fn sign(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    format!(
        "v1,{}",
        B64.encode(mac(key, id, timestamp, body).finalize().into_bytes())
    )
}

/// Why a Standard Webhooks request was refused (answered with 401).
#[derive(Debug, PartialEq, Eq)]
pub enum StandardError {
    MissingId,
    MissingTimestamp,
    StaleTimestamp,
    MissingSignature,
    BadSignature,
}

impl StandardError {
    pub fn message(&self) -> &'static str {
        match self {
            StandardError::MissingId => "missing webhook-id header",
            StandardError::MissingTimestamp => "missing or malformed webhook-timestamp header",
            StandardError::StaleTimestamp => "webhook-timestamp is more than 300 s from now",
            StandardError::MissingSignature => "missing or malformed webhook-signature header",
            StandardError::BadSignature => "signature does not match",
        }
    }
}

/// Check the three headers against the raw body: any one `v1,` signature of the
/// space-separated list must match (senders list several while rotating secrets).
pub fn verify(
    key: &[u8],
    id: Option<&str>,
    timestamp: Option<&str>,
    signatures: Option<&str>,
    body: &[u8],
    now: i64,
) -> Result<(), StandardError> {
    let id = id
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .ok_or(StandardError::MissingId)?;
    let timestamp = fresh_timestamp(timestamp, now).map_err(|e| match e {
        TimestampError::Missing => StandardError::MissingTimestamp,
        TimestampError::Stale => StandardError::StaleTimestamp,
    })?;
    let candidates: Vec<Vec<u8>> = signatures
        .unwrap_or("")
        .split(' ')
        .filter_map(|s| s.strip_prefix("v1,"))
        .filter_map(|s| B64.decode(s).ok())
        .collect();
    if candidates.is_empty() {
        return Err(StandardError::MissingSignature);
    }
    let expected = mac(key, id, timestamp, body);
    if candidates
        .iter()
        .any(|given| expected.clone().verify_slice(given).is_ok())
    {
        Ok(())
    } else {
        Err(StandardError::BadSignature)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The example of the Standard Webhooks specification's reference test vectors.
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TS: i64 = 1614265330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const EXPECTED: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    #[test]
    fn the_reference_vector_signs_and_verifies() {
        let key = key_of(SECRET).unwrap();
        assert_eq!(sign(&key, ID, TS, BODY), EXPECTED);
        let header = format!("v1,bm90IGl0 {EXPECTED}");
        assert_eq!(
            verify(
                &key,
                Some(ID),
                Some(&TS.to_string()),
                Some(&header),
                BODY,
                TS + 10
            ),
            Ok(())
        );
    }

    #[test]
    fn tampering_staleness_and_missing_headers_are_refused() {
        let key = key_of(SECRET).unwrap();
        let ts = TS.to_string();
        let check = |id, ts: Option<&str>, sig, body, now| verify(&key, id, ts, sig, body, now);
        assert_eq!(
            check(Some(ID), Some(&ts), Some(EXPECTED), b"{}", TS),
            Err(StandardError::BadSignature)
        );
        assert_eq!(
            check(Some("msg_other"), Some(&ts), Some(EXPECTED), BODY, TS),
            Err(StandardError::BadSignature)
        );
        assert_eq!(
            check(Some(ID), Some(&ts), Some(EXPECTED), BODY, TS + 301),
            Err(StandardError::StaleTimestamp)
        );
        assert_eq!(
            check(None, Some(&ts), Some(EXPECTED), BODY, TS),
            Err(StandardError::MissingId)
        );
        assert_eq!(
            check(Some(ID), Some(&ts), Some("v2,abc"), BODY, TS),
            Err(StandardError::MissingSignature)
        );
        assert!(key_of("whsec_not base64!").is_err());
    }
}
