//! The tool catalogue: names, descriptions written for a model, and input schemas. It is
//! fixed when the process starts (which tools exist depends only on configuration), and the
//! schema layer of validation reads the same definitions, so the two cannot drift.

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

/// The tools every deployment offers, bar `memory_stats`, whose wording depends on the store.
const MEMORY_TOOLS: &[ToolSpec] = &[
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
];

const MEMORY_STATS_EXACT: ToolSpec = ToolSpec {
    name: "memory_stats",
    description: "How many memories this project has, by type, counting the same set recall and \
        list_memories can show: the project's memories plus this conversation's own, never another \
        conversation's.",
    params: &[],
};

const MEMORY_STATS_BOUNDED: ToolSpec = ToolSpec {
    name: "memory_stats",
    description: "How many memories this project has, by type, counting the same set recall and \
        list_memories can show: the project's memories plus this conversation's own, never another \
        conversation's. Very large projects are counted up to a cap, and the answer then says its \
        figures are lower bounds.",
    params: &[],
};

const SEARCH_DOCS: ToolSpec = ToolSpec {
    name: "search_docs",
    description: "Search the shared documentation library (product and engineering documents, the \
        same for every project) for passages that answer a question. Use recall for what this \
        project learned; use this for what is written down. Returns excerpts with their sources.",
    params: &[
        Param {
            name: "query",
            kind: Kind::String,
            required: true,
            description: "The one thing you want to know, in natural language (max 1000 characters).",
        },
        Param {
            name: "limit",
            kind: Kind::Integer,
            required: false,
            description: "How many excerpts to return (1-50). Default 5.",
        },
    ],
};

/// The tools this process offers, in the order `tools/list` shows them.
pub(super) struct Catalogue {
    tools: Vec<&'static ToolSpec>,
    list: Value,
}

impl Catalogue {
    /// `exact_counts`: whether the store always counts exactly; `docs`: whether a
    /// documentation library is configured (`search_docs` exists only then).
    pub fn new(exact_counts: bool, docs: bool) -> Self {
        let mut tools: Vec<&'static ToolSpec> = MEMORY_TOOLS.iter().collect();
        tools.push(if exact_counts {
            &MEMORY_STATS_EXACT
        } else {
            &MEMORY_STATS_BOUNDED
        });
        if docs {
            tools.push(&SEARCH_DOCS);
        }
        let list = Value::Array(tools.iter().map(|t| t.to_json()).collect());
        Catalogue { tools, list }
    }

    /// A tool that is not offered is not callable either.
    pub fn find(&self, name: &str) -> Option<&'static ToolSpec> {
        self.tools.iter().copied().find(|t| t.name == name)
    }

    pub fn list(&self) -> &Value {
        &self.list
    }
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
        Catalogue::new(true, true)
            .find(tool)
            .unwrap()
            .check(args.as_object().unwrap())
    }

    fn names(catalogue: &Catalogue) -> Vec<&str> {
        catalogue
            .list()
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn the_five_tools_in_order_with_no_tenant_property() {
        let catalogue = Catalogue::new(true, false);
        let tool_list = || catalogue.list();
        let names = names(&catalogue);
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
        assert!(catalogue.find("search_docs").is_none());
    }

    #[test]
    fn search_docs_and_the_stats_wording_follow_the_configuration() {
        let aws = Catalogue::new(false, true);
        assert_eq!(
            names(&aws),
            [
                "recall",
                "remember",
                "list_memories",
                "forget",
                "memory_stats",
                "search_docs"
            ]
        );
        assert!(
            aws.list()[4]["description"]
                .as_str()
                .unwrap()
                .contains("lower bounds")
        );
        assert!(
            !Catalogue::new(true, false).list()[4]["description"]
                .as_str()
                .unwrap()
                .contains("lower bounds")
        );
        assert_eq!(aws.list()[5]["inputSchema"]["required"], json!(["query"]));
        assert!(check("search_docs", json!({"query": "q", "limit": 3})).is_ok());
        assert!(check("search_docs", json!({"limit": 3})).is_err());
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
