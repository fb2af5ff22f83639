//! Structured events, one JSON object per line (docs/behavior.md#logging): `info` to stdout,
//! `error` to stderr. The context fields are a closed set so that memory content, queries,
//! tags and conversation ids cannot be logged by accident.

use std::io::Write;

use serde_json::{Map, Value, json};

/// The only context a log line may carry.
#[derive(Debug, Default, Clone)]
pub struct Fields<'a> {
    pub tenant: Option<&'a str>,
    pub tool: Option<&'a str>,
    pub ms: Option<u128>,
    pub ok: Option<bool>,
    pub in_conversation: Option<bool>,
}

impl Fields<'_> {
    fn write_into(&self, line: &mut Map<String, Value>) {
        if let Some(v) = self.tenant {
            line.insert("tenant".into(), json!(v));
        }
        if let Some(v) = self.tool {
            line.insert("tool".into(), json!(v));
        }
        if let Some(v) = self.ms {
            line.insert("ms".into(), json!(v));
        }
        if let Some(v) = self.ok {
            line.insert("ok".into(), json!(v));
        }
        if let Some(v) = self.in_conversation {
            line.insert("inConversation".into(), json!(v));
        }
    }
}

pub fn info(event: &str, fields: &Fields) {
    let mut line = Map::new();
    line.insert("level".into(), json!("info"));
    line.insert("event".into(), json!(event));
    fields.write_into(&mut line);
    emit(&mut std::io::stdout().lock(), line);
}

/// `message` must not carry user data; callers pass error messages of dependencies, which
/// describe the failure (status codes, endpoints), never the request's content.
pub fn error(event: &str, message: &str, fields: &Fields) {
    let mut line = Map::new();
    line.insert("level".into(), json!("error"));
    line.insert("event".into(), json!(event));
    line.insert("message".into(), json!(message));
    fields.write_into(&mut line);
    emit(&mut std::io::stderr().lock(), line);
}

fn emit(out: &mut impl Write, line: Map<String, Value>) {
    // A closed stdout must not take the server down; the line is simply lost.
    let _ = writeln!(out, "{}", Value::Object(line));
}
