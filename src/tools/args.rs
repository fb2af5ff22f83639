//! The tool layer of argument validation (docs/tools.md#validation): the rules the
//! schema admits but a tool must still refuse, such as blank strings and out-of-range
//! limits. Types were checked by the schema layer and read by each tool's typed `Args`.

use super::ToolError;

pub const MAX_LIMIT: u64 = 50;

/// `value` when its trim is non-empty and it holds no NUL (`memory::non_blank`).
pub fn non_blank<'a>(value: &'a str, name: &str) -> Result<&'a str, ToolError> {
    Ok(crate::memory::non_blank(value, name)?)
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
}
