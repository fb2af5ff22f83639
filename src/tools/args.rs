//! The tool layer of argument validation (docs/behavior.md#validation): the rules the
//! schema admits but a tool must still refuse, such as blank strings and out-of-range
//! limits. Types were checked by the schema layer and read by each tool's typed `Args`.

use super::ToolError;
use crate::context::trim;

pub const MAX_LIMIT: u64 = 50;

/// `value` when its trim is non-empty and it holds no NUL; the untrimmed value is what the
/// tool uses. NUL is refused on every store alike: PostgreSQL cannot hold it in text, and a
/// memory must read the same wherever it is kept.
pub fn non_blank<'a>(value: &'a str, name: &str) -> Result<&'a str, ToolError> {
    if trim(value).is_empty() {
        return Err(ToolError::Invalid(format!(
            "`{name}` is required and must be a non-empty string."
        )));
    }
    if value.contains('\0') {
        return Err(ToolError::Invalid(format!(
            "`{name}` may not hold a NUL character (U+0000)."
        )));
    }
    Ok(value)
}

/// `limit`: absent → `default`; otherwise an integer in 1..=50 (the schema layer has
/// checked that it is an integer, `3.0` included).
pub fn limit(value: Option<f64>, default: usize) -> Result<usize, ToolError> {
    let Some(n) = value else {
        return Ok(default);
    };
    if n.fract() == 0.0 && (1.0..=MAX_LIMIT as f64).contains(&n) {
        Ok(n as usize)
    } else {
        Err(ToolError::Invalid(format!(
            "`limit` must be an integer between 1 and {MAX_LIMIT}."
        )))
    }
}

/// Tags as given: absent → none; each trimmed, blanks dropped. Limits are the caller's.
pub fn tags(value: Option<Vec<String>>) -> Vec<String> {
    (value.into_iter().flatten())
        .map(|tag| trim(&tag).to_owned())
        .filter(|tag| !tag.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(e: ToolError) -> String {
        match e {
            ToolError::Invalid(m) => m,
            other => panic!("not an argument error: {other:?}"),
        }
    }

    #[test]
    fn limits_at_and_over_the_boundaries() {
        assert_eq!(limit(None, 7).unwrap(), 7);
        assert_eq!(limit(Some(1.0), 7).unwrap(), 1);
        assert_eq!(limit(Some(50.0), 7).unwrap(), 50);
        for bad in [0.0, -1.0, 51.0, 1.5, 1e20] {
            let err = message(limit(Some(bad), 7).unwrap_err());
            assert_eq!(err, "`limit` must be an integer between 1 and 50.");
        }
    }

    #[test]
    fn blank_strings_are_refused_but_the_untrimmed_value_is_kept() {
        assert_eq!(non_blank(" q ", "query").unwrap(), " q ");
        for bad in ["", "   ", "\u{feff}"] {
            let err = message(non_blank(bad, "query").unwrap_err());
            assert_eq!(err, "`query` is required and must be a non-empty string.");
        }
        let err = message(non_blank("a\0b", "content").unwrap_err());
        assert_eq!(err, "`content` may not hold a NUL character (U+0000).");
    }

    #[test]
    fn tags_are_trimmed_and_blanks_dropped() {
        let given = [" a ", "", "  ", "배포"].map(String::from).to_vec();
        assert_eq!(tags(Some(given)), ["a", "배포"]);
        assert!(tags(None).is_empty());
    }
}
