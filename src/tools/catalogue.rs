//! The fixed tool catalogue: names, descriptions written for a model, and input schemas.
//! The schema layer of validation reads the same definitions, so the two cannot drift.

use std::sync::LazyLock;

use serde_json::{Map, Value, json};

use super::Arguments;

pub(super) enum Kind {
    String,
    Integer,
    OneOf(&'static [&'static str]),
    Strings,
}

pub(super) struct Param {
    name: &'static str,
    kind: Kind,
    required: bool,
    description: &'static str,
}

pub(super) struct ToolSpec {
    pub name: &'static str,
    description: &'static str,
    params: &'static [Param],
}

const MODES: &[&str] = &["precision", "balanced", "exploratory"];
const TYPES: &[&str] = &["project", "pattern", "reference", "conversation"];
const SCOPES: &[&str] = &["project", "conversation"];

const TOOLS: &[ToolSpec] = &[
    ToolSpec {
        name: "recall",
        description: "Search this project's remembered knowledge by meaning. Call it at the start of a task, \
            and before asking the user to explain something again: decisions, conventions and setup steps \
            from earlier sessions are only here. Returns the memories themselves, ranked, with a confidence \
            level. An empty result means nothing was stored on the subject, not that the subject has no \
            answer. Results are the project's shared memory plus this conversation's own notes, never \
            another conversation's.",
        params: &[
            Param {
                name: "query",
                kind: Kind::String,
                required: true,
                description: "What you want to know, in natural language.",
            },
            Param {
                name: "limit",
                kind: Kind::Integer,
                required: false,
                description: "Maximum number of memories to return (1-50). Default: the mode's own.",
            },
            Param {
                name: "mode",
                kind: Kind::OneOf(MODES),
                required: false,
                description: "precision: few, close matches. balanced (default). exploratory: more, looser \
                    matches; use it when balanced found nothing.",
            },
        ],
    },
    ToolSpec {
        name: "remember",
        description: "Store a durable fact for later runs: a decision and its reason, a convention, a command \
            that worked. Near-identical content is not written twice: you are told which memory already \
            says it, and the tags and category you passed are discarded. By default the memory belongs to \
            the whole project (every conversation); scope 'conversation' keeps it for this thread only.",
        params: &[
            Param {
                name: "content",
                kind: Kind::String,
                required: true,
                description: "The fact, written so it makes sense months from now without this conversation.",
            },
            Param {
                name: "scope",
                kind: Kind::OneOf(SCOPES),
                required: false,
                description: "project (default): visible to every conversation. conversation: only this \
                    thread; needs a conversation on the request (chats, Slack threads, A2A calls).",
            },
            Param {
                name: "type",
                kind: Kind::OneOf(TYPES),
                required: false,
                description: "project (default): how the project is built or decided. pattern: a reusable \
                    snippet or command. reference: an external fact or link. conversation: something the \
                    user said that should persist.",
            },
            Param {
                name: "category",
                kind: Kind::String,
                required: false,
                description: "Optional sub-label such as decision, architecture or convention (max 128 bytes).",
            },
            Param {
                name: "tags",
                kind: Kind::Strings,
                required: false,
                description: "Optional labels (max 20), each up to 64 bytes.",
            },
        ],
    },
    ToolSpec {
        name: "list_memories",
        description: "List this project's memories, newest first, without searching; use recall to search. \
            Includes this conversation's own memories and excludes other conversations'.",
        params: &[
            Param {
                name: "type",
                kind: Kind::OneOf(TYPES),
                required: false,
                description: "Only memories of this type.",
            },
            Param {
                name: "limit",
                kind: Kind::Integer,
                required: false,
                description: "How many to list (1-50). Default 20.",
            },
        ],
    },
    ToolSpec {
        name: "forget",
        description: "Delete one memory by id, permanently. Use it for facts that became wrong; when a fact is \
            merely outdated, prefer remembering the correction.",
        params: &[Param {
            name: "id",
            kind: Kind::String,
            required: true,
            description: "The memory's id, as recall or list_memories showed it.",
        }],
    },
    ToolSpec {
        name: "memory_stats",
        description: "How many memories this project has, by type, counting the same set recall and \
            list_memories can show: the project's memories plus this conversation's own, never another \
            conversation's.",
        params: &[],
    },
];

pub(super) fn find(name: &str) -> Option<&'static ToolSpec> {
    TOOLS.iter().find(|t| t.name == name)
}

/// The `tools` array of `tools/list`, built once: the catalogue never changes at runtime.
pub fn tool_list() -> &'static Value {
    static LIST: LazyLock<Value> =
        LazyLock::new(|| Value::Array(TOOLS.iter().map(ToolSpec::to_json).collect()));
    &LIST
}

impl ToolSpec {
    fn to_json(&self) -> Value {
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
        json!({"name": self.name, "description": self.description, "inputSchema": input_schema})
    }

    /// The schema layer: types, enums and required properties. `null` counts as absent,
    /// since models often send it for optional fields; unknown properties are ignored.
    pub(super) fn check(&self, args: &Arguments) -> Result<(), String> {
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

/// JSON numbers with no fractional part (`3`, `3.0`) are integers.
pub(super) fn is_integer(value: &Value) -> bool {
    value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(tool: &str, args: Value) -> Result<(), String> {
        find(tool).unwrap().check(args.as_object().unwrap())
    }

    #[test]
    fn the_five_tools_in_order_with_no_tenant_property() {
        let names: Vec<&str> = tool_list()
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "recall",
                "remember",
                "list_memories",
                "forget",
                "memory_stats"
            ]
        );
        assert!(!tool_list().to_string().contains("\"tenant\""));
        assert!(
            tool_list()[0]["description"]
                .as_str()
                .unwrap()
                .contains("at the start of a task")
        );
        assert_eq!(tool_list()[0]["inputSchema"]["required"], json!(["query"]));
        assert_eq!(
            tool_list()[4]["inputSchema"],
            json!({"type": "object", "properties": {}})
        );
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
        assert!(check("remember", json!({"content": "c", "tags": ["a", 1]})).is_err());
        assert!(check("remember", json!({"content": "c", "scope": "thread"})).is_err());
        assert!(check("forget", json!({})).is_err());
    }
}
