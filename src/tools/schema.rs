//! What a tool declares: its name, a description written for a model, and its arguments'
//! type (the tool's `Args`), from which come the JSON Schema `tools/list` shows (`input`), the
//! schema layer of argument validation (`check`; docs/tools.md#validation) and the typed
//! arguments the tool runs with (`parse`), so the three cannot drift.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::{Arguments, ToolError};

pub struct Definition {
    pub name: &'static str,
    /// What a person reads in a client's list (`title`, and the annotations' for 2025-03-26).
    pub title: &'static str,
    pub description: &'static str,
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

    /// The tool as `tools/list` shows it, with `input` its arguments' schema (`input`);
    /// `structured` adds its `outputSchema` (protocol versions from 2025-06-18), `apps` the
    /// resource of its app (for hosts of MCP Apps).
    pub fn to_json(&self, input: &Value, structured: bool, apps: bool) -> Value {
        let mut tool = json!({
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": input,
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
}

/// The input schema of a tool whose arguments are `T`: an object with a property for each
/// field, described by the field's doc comment (its lines joined by spaces), required unless
/// it is an `Option`. Kept plain for every client's model to read, as a hand-written one would
/// be: no `$schema`, titles, number formats or defaults, and no `null` among the types,
/// though `null` is taken as absent (`check`).
pub fn input<T: JsonSchema>() -> Value {
    let settings = SchemaSettings::draft2020_12().with(|s| {
        s.inline_subschemas = true;
        s.meta_schema = None;
    });
    let mut schema = settings
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value();
    if let Some(object) = schema.as_object_mut() {
        object.remove("title");
        object.remove("description");
        let properties = object.entry("properties").or_insert_with(|| json!({}));
        for property in properties
            .as_object_mut()
            .into_iter()
            .flat_map(|p| p.values_mut())
        {
            plain(property);
        }
    }
    schema
}

/// One property's schema without what `input` leaves out. An `Option<T>`'s schema is `T`'s
/// with `null` allowed: `null` added to its types and values, or `anyOf` `T` and `null`.
fn plain(property: &mut Value) {
    let Some(object) = property.as_object_mut() else {
        return;
    };
    if let Some(Value::Array(alternatives)) = object.remove("anyOf") {
        let kept = alternatives.into_iter().find(|a| a["type"] != "null");
        for (key, value) in kept
            .and_then(|k| k.as_object().cloned())
            .unwrap_or_default()
        {
            object.entry(key).or_insert(value);
        }
    }
    if let Some(Value::Array(types)) = object.get_mut("type") {
        types.retain(|t| t != "null");
        if let [only] = &types[..] {
            let only = only.clone();
            object.insert("type".into(), only);
        }
    }
    if let Some(Value::Array(values)) = object.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    for noise in ["title", "format", "default"] {
        object.remove(noise);
    }
    if let Some(Value::String(description)) = object.get_mut("description") {
        *description = description.replace('\n', " ");
    }
}

/// What the schema layer checks of one property: what its schema says, in the few shapes
/// tools use (the tests hold every tool to them).
enum Kind<'a> {
    String,
    Integer,
    /// One of a domain type's names (`MemoryType::NAMES` and the like).
    OneOf(Vec<&'a str>),
    Strings,
}

impl<'a> Kind<'a> {
    fn of(schema: &'a Value) -> Option<Kind<'a>> {
        if let Some(values) = schema["enum"].as_array() {
            return values
                .iter()
                .map(Value::as_str)
                .collect::<Option<_>>()
                .map(Kind::OneOf);
        }
        match (schema["type"].as_str()?, schema["items"]["type"].as_str()) {
            ("string", _) => Some(Kind::String),
            ("integer", _) => Some(Kind::Integer),
            ("array", Some("string")) => Some(Kind::Strings),
            _ => None,
        }
    }

    fn fits(&self, value: &Value) -> bool {
        match self {
            Kind::String => value.is_string(),
            Kind::Integer => is_integer(value),
            Kind::OneOf(values) => value.as_str().is_some_and(|s| values.contains(&s)),
            Kind::Strings => {
                (value.as_array()).is_some_and(|items| items.iter().all(Value::is_string))
            }
        }
    }

    fn refusal(&self, name: &str) -> String {
        match self {
            Kind::String => format!("`{name}` must be a string"),
            Kind::Integer => format!("`{name}` must be an integer"),
            Kind::OneOf(values) => format!("`{name}` must be one of: {}", values.join(", ")),
            Kind::Strings => format!("`{name}` must be an array of strings"),
        }
    }
}

/// The schema layer over `input` (a tool's input schema): types, enums and required
/// properties, property by property in the order of their names. `null` counts as absent,
/// since models often send it for optional fields; unknown properties are ignored.
pub fn check(input: &Value, args: &Arguments) -> Result<(), String> {
    let required = input["required"].as_array().map_or(&[][..], Vec::as_slice);
    let properties = input["properties"].as_object().into_iter().flatten();
    for (name, schema) in properties {
        let Some(value) = args.get(name).filter(|v| !v.is_null()) else {
            if required.iter().any(|r| r == name.as_str()) {
                return Err(format!("`{name}` is required"));
            }
            continue;
        };
        // Every shape a tool declares is one `Kind` knows (`every_property_has_a_kind`).
        if let Some(kind) = Kind::of(schema)
            && !kind.fits(value)
        {
            return Err(kind.refusal(name));
        }
    }
    Ok(())
}

/// Arguments that passed `check`, as the tool's typed `Args`, `null` as absent; what `Args`
/// does not read is ignored, as in `check`.
pub fn parse<T: DeserializeOwned>(args: &Arguments) -> Result<T, ToolError> {
    let given: Map<String, Value> = (args.iter())
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    serde_json::from_value(Value::Object(given))
        .map_err(|e| ToolError::Invalid(format!("the arguments could not be read: {e}")))
}

/// The arguments of a tool that takes none.
#[derive(Deserialize, JsonSchema)]
pub struct NoArguments {}

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
        super::check(&found.input, args.as_object().unwrap())
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

    #[test]
    fn every_property_has_a_kind_and_a_description() {
        for tool in crate::tools::catalogue(true, true) {
            let properties = tool.input["properties"].as_object().unwrap();
            for (name, property) in properties {
                let at = format!("{}.{name}: {property}", tool.definition().name);
                assert!(Kind::of(property).is_some(), "{at}");
                let description = property["description"].as_str().unwrap_or_default();
                assert!(
                    !description.is_empty() && !description.contains('\n'),
                    "{at}"
                );
            }
        }
    }

    #[derive(Deserialize, JsonSchema, Debug, PartialEq)]
    struct Args {
        /// What to find,
        /// in words.
        query: String,
        /// How many.
        #[schemars(with = "Option<i64>")]
        limit: Option<f64>,
        /// Which labels.
        tags: Option<Vec<String>>,
        /// How close.
        mode: Option<crate::ranking::RecallMode>,
    }

    #[test]
    fn the_input_schema_is_the_arguments_type_plainly() {
        assert_eq!(
            input::<Args>(),
            json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to find, in words."},
                    "limit": {"type": "integer", "description": "How many."},
                    "tags": {"type": "array", "items": {"type": "string"},
                             "description": "Which labels."},
                    "mode": {"type": "string", "enum": ["precision", "balanced", "exploratory"],
                             "description": "How close."},
                },
                "required": ["query"],
            })
        );
        assert_eq!(
            input::<NoArguments>(),
            json!({"type": "object", "properties": {}})
        );
    }

    #[test]
    fn checked_arguments_read_as_typed_ones_with_null_as_absent() {
        let args = json!({"query": "q", "limit": null, "mode": "precision", "tenant": "other"});
        let read: Args = parse(args.as_object().unwrap()).unwrap();
        assert_eq!(
            read,
            Args {
                query: "q".into(),
                limit: None,
                tags: None,
                mode: Some(crate::ranking::RecallMode::Precision),
            }
        );
    }
}
