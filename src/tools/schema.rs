//! What a tool declares: its name, a description written for a model, and its parameters,
//! from which come both the JSON Schema `tools/list` shows and the schema layer of argument
//! validation (docs/tools.md#validation), so the two cannot drift. Once the schema layer
//! has passed, the arguments are read into the tool's own typed `Args` (`parse`).

use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::{Arguments, ToolError};

pub enum Kind {
    String,
    Integer,
    /// One of a domain type's names (`MemoryType::NAMES` and the like).
    OneOf(&'static [&'static str]),
    Strings,
}

pub struct Param {
    pub name: &'static str,
    pub kind: Kind,
    pub required: bool,
    pub description: &'static str,
}

pub struct Definition {
    pub name: &'static str,
    /// What a person reads in a client's list (`title`, and the annotations' for 2025-03-26).
    pub title: &'static str,
    pub description: &'static str,
    pub params: &'static [Param],
    pub effect: Effect,
    /// Whether it reaches past this server's memories (the documentation library).
    pub open_world: bool,
    /// The MCP Apps resource (`ui://…`) a host shows this tool's result in, for clients that
    /// declare the extension (docs/tools.md#the-memory-browser).
    pub app: Option<&'static str>,
    /// The JSON Schema of the tool's `structuredContent`.
    pub output: fn() -> Value,
}

/// What a tool does to memories: what its annotations tell a client (to skip confirming a
/// read, to warn before a deletion), and what a credential needs (docs/protocol.md#scopes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    Reads,
    /// Writes a memory; with `replaces` it removes the one it corrects, so it may destroy
    /// (MCP's `destructiveHint`: "may perform destructive updates"; docs/tools.md#annotations).
    Adds,
    /// Deletes a memory: destructive, and the same again changes nothing (idempotent).
    Deletes,
}

impl Definition {
    /// Whether it changes memories: what a credential needs write access for.
    pub fn writes(&self) -> bool {
        self.effect != Effect::Reads
    }

    /// MCP's tool annotations (hints, never guarantees, to a client).
    fn annotations(&self) -> Value {
        let mut hints = json!({"title": self.title, "readOnlyHint": self.effect == Effect::Reads});
        if self.effect != Effect::Reads {
            hints["destructiveHint"] = json!(true);
            hints["idempotentHint"] = json!(self.effect == Effect::Deletes);
        }
        hints["openWorldHint"] = json!(self.open_world);
        hints
    }
}

impl Definition {
    /// The tool as `tools/list` shows it; `structured` adds its `outputSchema` (protocol
    /// versions from 2025-06-18), `apps` the resource of its app (for hosts of MCP Apps).
    pub fn to_json(&self, structured: bool, apps: bool) -> Value {
        let mut properties = Map::new();
        for p in self.params {
            let mut schema = match p.kind {
                Kind::String => json!({"type": "string"}),
                Kind::Integer => json!({"type": "integer"}),
                Kind::OneOf(values) => json!({"type": "string", "enum": values}),
                Kind::Strings => json!({"type": "array", "items": {"type": "string"}}),
            };
            schema["description"] = json!(p.description);
            properties.insert(p.name.into(), schema);
        }
        let mut input_schema = json!({"type": "object", "properties": properties});
        let required: Vec<&str> = self
            .params
            .iter()
            .filter(|p| p.required)
            .map(|p| p.name)
            .collect();
        if !required.is_empty() {
            input_schema["required"] = json!(required);
        }
        let mut tool = json!({
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": input_schema,
            "annotations": self.annotations(),
        });
        if structured {
            tool["outputSchema"] = (self.output)();
        }
        if let Some(uri) = self.app.filter(|_| apps) {
            // Both spellings: the flat key is what hosts older than the stable extension read.
            tool["_meta"] = json!({"ui": {"resourceUri": uri}, "ui/resourceUri": uri});
        }
        tool
    }

    /// The schema layer: types, enums and required properties. `null` counts as absent,
    /// since models often send it for optional fields; unknown properties are ignored.
    pub fn check(&self, args: &Arguments) -> Result<(), String> {
        for p in self.params {
            let value = args.get(p.name).filter(|v| !v.is_null());
            let Some(value) = value else {
                if p.required {
                    return Err(format!("`{}` is required", p.name));
                }
                continue;
            };
            let fits = match p.kind {
                Kind::String => value.is_string(),
                Kind::Integer => is_integer(value),
                Kind::OneOf(values) => value.as_str().is_some_and(|s| values.contains(&s)),
                Kind::Strings => value
                    .as_array()
                    .is_some_and(|items| items.iter().all(Value::is_string)),
            };
            if !fits {
                return Err(match p.kind {
                    Kind::String => format!("`{}` must be a string", p.name),
                    Kind::Integer => format!("`{}` must be an integer", p.name),
                    Kind::OneOf(values) => {
                        format!("`{}` must be one of: {}", p.name, values.join(", "))
                    }
                    Kind::Strings => format!("`{}` must be an array of strings", p.name),
                });
            }
        }
        Ok(())
    }
}

impl Definition {
    /// Arguments that passed `check`, as the tool's typed `Args`: its declared parameters
    /// only (unknown properties are ignored, as in `check`), `null` as absent. Every `Args`
    /// refuses a property it does not read (`deny_unknown_fields`), so a parameter declared
    /// and not read fails here, and in each tool's test, which sends every one
    /// (`every_parameter`); a required field the definition lacks fails there too.
    pub fn parse<T: DeserializeOwned>(&self, args: &Arguments) -> Result<T, ToolError> {
        let declared: Map<String, Value> = (args.iter())
            .filter(|(k, v)| !v.is_null() && self.params.iter().any(|p| p.name == k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        serde_json::from_value(Value::Object(declared))
            .map_err(|e| ToolError::Invalid(format!("the arguments could not be read: {e}")))
    }

    /// Every parameter, each with a value of its kind.
    #[cfg(test)]
    pub fn every_parameter(&self) -> Arguments {
        (self.params.iter())
            .map(|p| {
                let value = match p.kind {
                    Kind::String => json!("2030-01-01T00:00:00Z"),
                    Kind::Integer => json!(3),
                    Kind::OneOf(values) => json!(values[0]),
                    Kind::Strings => json!(["a"]),
                };
                (p.name.to_owned(), value)
            })
            .collect()
    }
}

/// JSON numbers with no fractional part (`3`, `3.0`) are integers.
fn is_integer(value: &Value) -> bool {
    value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
}

/// An object schema of `properties`, every one required.
pub fn object(properties: Value) -> Value {
    let required: Vec<String> = properties
        .as_object()
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    json!({"type": "object", "properties": properties, "required": required})
}

/// A memory as structured results give it (`render::data`).
pub fn memory() -> Value {
    let text_or_null = json!({"type": ["string", "null"]});
    object(json!({
        "id": {"type": "string"},
        "content": {"type": "string"},
        "type": {"type": "string", "enum": crate::memory::MemoryType::NAMES},
        "category": text_or_null,
        "tags": {"type": "array", "items": {"type": "string"}},
        "scope": {"type": "string", "enum": crate::memory::Scope::NAMES},
        "created": {"type": "string", "format": "date-time"},
        "expires": text_or_null,
        "replaces": text_or_null,
        "author": text_or_null,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(tool: &str, args: Value) -> Result<(), String> {
        let tools = crate::tools::catalogue(true, true);
        let found = tools.iter().find(|t| t.definition().name == tool).unwrap();
        found.definition().check(args.as_object().unwrap())
    }

    #[test]
    fn schema_layer() {
        assert!(check("recall", json!({"query": "q", "limit": 3.0})).is_ok());
        assert!(check("recall", json!({"query": "q", "limit": null, "mode": null})).is_ok());
        assert!(check("recall", json!({"query": "q", "tenant": "other"})).is_ok());
        for bad in [
            json!({}),
            json!({"query": 42}),
            json!({"query": "q", "limit": "3"}),
            json!({"query": "q", "limit": 1.5}),
            json!({"query": "q", "mode": "aggressive"}),
        ] {
            assert!(check("recall", bad.clone()).is_err(), "{bad}");
        }
        assert_eq!(
            check("recall", json!({"query": "q", "mode": "aggressive"})).unwrap_err(),
            "`mode` must be one of: precision, balanced, exploratory"
        );
        assert!(check("remember", json!({"content": "c", "tags": ["a", 1]})).is_err());
        assert!(check("remember", json!({"content": "c", "scope": "thread"})).is_err());
        assert!(check("forget", json!({})).is_err());
        assert!(check("search_docs", json!({"query": "q", "limit": 3})).is_ok());
        assert!(check("search_docs", json!({"limit": 3})).is_err());
    }

    #[derive(serde::Deserialize, Debug, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Args {
        query: String,
        limit: Option<f64>,
    }

    const DEFINITION: Definition = Definition {
        name: "find",
        description: "",
        params: &[
            Param {
                name: "query",
                kind: Kind::String,
                required: true,
                description: "",
            },
            Param {
                name: "limit",
                kind: Kind::Integer,
                required: false,
                description: "",
            },
        ],
        title: "Find",
        effect: Effect::Reads,
        open_world: false,
        app: None,
        output: || json!({}),
    };

    #[test]
    fn checked_arguments_read_as_typed_ones_with_null_as_absent() {
        let args = json!({"query": "q", "limit": null, "tenant": "other"});
        let read: Args = DEFINITION.parse(args.as_object().unwrap()).unwrap();
        assert_eq!(
            read,
            Args {
                query: "q".into(),
                limit: None
            }
        );
    }
}
