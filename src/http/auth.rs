//! The bearer check (docs/behavior.md#bearer-auth). Authentication decides whether a caller may use
//! the server at all; the tenant header decides whose memories it sees.

use axum::http::HeaderValue;
use subtle::ConstantTimeEq;

/// True when `authorization` is `Bearer <key>` exactly: scheme case-insensitive, leading
/// spaces before the token ignored, trailing ones not, compared in constant time.
pub fn bearer_matches(authorization: Option<&HeaderValue>, key: &str) -> bool {
    let Some(value) = authorization.map(HeaderValue::as_bytes) else {
        return false;
    };
    let Some(space) = value.iter().position(|b| *b == b' ') else {
        return false;
    };
    let (scheme, rest) = value.split_at(space);
    let token = rest.trim_ascii_start();
    // `ct_eq` on slices of different lengths is false without comparing contents.
    scheme.eq_ignore_ascii_case(b"bearer")
        && !token.is_empty()
        && bool::from(token.ct_eq(key.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(value: &str) -> bool {
        bearer_matches(Some(&HeaderValue::from_str(value).unwrap()), "s3cret")
    }

    #[test]
    fn accepted() {
        for ok in ["Bearer s3cret", "bearer s3cret", "BEARER  s3cret"] {
            assert!(check(ok), "{ok}");
        }
    }

    #[test]
    fn refused() {
        let long = format!("Bearer {}", "x".repeat(500));
        for bad in [
            "Bearer wrong",
            "Bearer s3cret ",
            "s3cret",
            "Basic s3cret",
            "Bearer ",
            "Bearer s",
            long.as_str(),
        ] {
            assert!(!check(bad), "{bad}");
        }
        assert!(!bearer_matches(None, "s3cret"));
    }
}
