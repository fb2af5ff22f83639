//! The tool layer of argument validation (BEHAVIOR.md §3.2): the rules the schema admits
//! but a tool must still refuse, such as blank strings and out-of-range limits. It runs
//! whoever calls the tool, so it re-checks types too.

use serde_json::Value;

use super::catalogue::is_integer;
use super::{Arguments, ToolError};
use crate::context::trim;
use crate::memory::{MemoryType, Scope};
use crate::ranking::RecallMode;

pub const MAX_LIMIT: u64 = 50;

fn present<'a>(args: &'a Arguments, name: &str) -> Option<&'a Value> {
    args.get(name).filter(|v| !v.is_null())
}

fn invalid(message: String) -> ToolError {
    ToolError::Invalid(message)
}

/// A string whose trim is non-empty; the untrimmed value is what the tool uses.
pub fn required_string<'a>(args: &'a Arguments, name: &str) -> Result<&'a str, ToolError> {
    present(args, name)
        .and_then(Value::as_str)
        .filter(|s| !trim(s).is_empty())
        .ok_or_else(|| {
            invalid(format!(
                "`{name}` is required and must be a non-empty string."
            ))
        })
}

/// `limit`: absent → `default`; otherwise an integer in 1..=50.
pub fn limit(args: &Arguments, default: usize) -> Result<usize, ToolError> {
    let Some(value) = present(args, "limit") else {
        return Ok(default);
    };
    value
        .as_f64()
        .filter(|_| is_integer(value))
        .filter(|n| (1.0..=MAX_LIMIT as f64).contains(n))
        .map(|n| n as usize)
        .ok_or_else(|| {
            invalid(format!(
                "`limit` must be an integer between 1 and {MAX_LIMIT}."
            ))
        })
}

pub fn mode(args: &Arguments) -> Result<RecallMode, ToolError> {
    let Some(value) = present(args, "mode") else {
        return Ok(RecallMode::Balanced);
    };
    value
        .as_str()
        .and_then(RecallMode::parse)
        .ok_or_else(|| invalid("`mode` must be one of: precision, balanced or exploratory.".into()))
}

pub fn memory_type(args: &Arguments) -> Result<Option<MemoryType>, ToolError> {
    let Some(value) = present(args, "type") else {
        return Ok(None);
    };
    value
        .as_str()
        .and_then(MemoryType::parse)
        .map(Some)
        .ok_or_else(|| {
            invalid("`type` must be one of: project, pattern, reference, conversation.".into())
        })
}

pub fn scope(args: &Arguments) -> Result<Scope, ToolError> {
    let Some(value) = present(args, "scope") else {
        return Ok(Scope::Project);
    };
    value
        .as_str()
        .and_then(Scope::parse)
        .ok_or_else(|| invalid("`scope` must be one of: project, conversation.".into()))
}

/// An optional string, as given (untrimmed).
pub fn optional_string<'a>(args: &'a Arguments, name: &str) -> Result<Option<&'a str>, ToolError> {
    match present(args, name) {
        None => Ok(None),
        Some(v) => v
            .as_str()
            .map(Some)
            .ok_or_else(|| invalid(format!("`{name}` must be a string."))),
    }
}

/// Tags as given: absent → none; each trimmed, blanks dropped. Limits are the caller's.
pub fn tags(args: &Arguments) -> Result<Vec<String>, ToolError> {
    let Some(value) = present(args, "tags") else {
        return Ok(Vec::new());
    };
    let items = value
        .as_array()
        .ok_or_else(|| invalid("`tags` must be an array of strings.".into()))?;
    let mut tags = Vec::with_capacity(items.len());
    for item in items {
        let tag = item
            .as_str()
            .ok_or_else(|| invalid("`tags` must be an array of strings.".into()))?;
        let tag = trim(tag);
        if !tag.is_empty() {
            tags.push(tag.to_owned());
        }
    }
    Ok(tags)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(v: Value) -> Arguments {
        v.as_object().unwrap().clone()
    }

    fn message(e: ToolError) -> String {
        match e {
            ToolError::Invalid(m) => m,
            other => panic!("not an argument error: {other:?}"),
        }
    }

    #[test]
    fn limits_at_and_over_the_boundaries() {
        assert_eq!(limit(&args(json!({})), 7).unwrap(), 7);
        assert_eq!(limit(&args(json!({"limit": null})), 7).unwrap(), 7);
        assert_eq!(limit(&args(json!({"limit": 1})), 7).unwrap(), 1);
        assert_eq!(limit(&args(json!({"limit": 50})), 7).unwrap(), 50);
        assert_eq!(limit(&args(json!({"limit": 3.0})), 7).unwrap(), 3);
        for bad in [json!(0), json!(-1), json!(51), json!(1.5), json!("3")] {
            let err = message(limit(&args(json!({ "limit": bad })), 7).unwrap_err());
            assert_eq!(err, "`limit` must be an integer between 1 and 50.");
        }
    }

    #[test]
    fn required_strings_refuse_blank_but_keep_the_untrimmed_value() {
        assert_eq!(
            required_string(&args(json!({"query": " q "})), "query").unwrap(),
            " q "
        );
        for bad in [
            json!({}),
            json!({"query": ""}),
            json!({"query": "   "}),
            json!({"query": 42}),
            json!({"query": "\u{feff}"}),
        ] {
            let err = message(required_string(&args(bad), "query").unwrap_err());
            assert_eq!(err, "`query` is required and must be a non-empty string.");
        }
    }

    #[test]
    fn enums_default_and_refuse() {
        assert_eq!(mode(&args(json!({}))).unwrap(), RecallMode::Balanced);
        assert!(
            message(mode(&args(json!({"mode": "aggressive"}))).unwrap_err())
                .contains("precision, balanced or exploratory")
        );
        assert_eq!(memory_type(&args(json!({"type": null}))).unwrap(), None);
        assert_eq!(
            message(memory_type(&args(json!({"type": "fact"}))).unwrap_err()),
            "`type` must be one of: project, pattern, reference, conversation."
        );
        assert_eq!(scope(&args(json!({}))).unwrap(), Scope::Project);
        assert!(
            message(scope(&args(json!({"scope": "thread"}))).unwrap_err())
                .contains("`scope` must be one of")
        );
    }

    #[test]
    fn tags_are_trimmed_and_blanks_dropped() {
        assert_eq!(
            tags(&args(json!({"tags": [" a ", "", "  ", "배포"]}))).unwrap(),
            ["a", "배포"]
        );
        assert!(tags(&args(json!({}))).unwrap().is_empty());
        assert_eq!(
            message(tags(&args(json!({"tags": "a"}))).unwrap_err()),
            "`tags` must be an array of strings."
        );
    }
}
