//! The memory tools: their catalogue, the two layers of argument validation, and dispatch
//! (BEHAVIOR.md §3). Protocol-neutral: the MCP layer hands over a tool name, arguments and
//! the caller's identity, and gets back text and an error flag.

mod args;
mod catalogue;
mod forget;
mod list_memories;
mod memory_stats;
mod recall;
mod remember;
mod render;
mod search_docs;

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value};

use crate::context::{Identity, RequestContext};
use crate::docs::Library;
use crate::embed::{EmbedError, Embedder};
use crate::log;
use crate::metrics::{Metrics, Outcome};
use crate::store::{MemoryStore, StoreError};

use catalogue::Catalogue;

/// What the tools work with: the store, the embedder, the similarity floor, and the
/// documentation library when one is configured.
pub struct Memories {
    pub store: Arc<dyn MemoryStore>,
    pub embedder: Arc<dyn Embedder>,
    pub docs: Option<Arc<dyn Library>>,
    pub min_similarity: f64,
    /// How much a query's words weigh against its meaning in recall; 0 is vector-only.
    pub keyword_weight: f64,
    pub metrics: Arc<Metrics>,
    catalogue: Catalogue,
}

impl Memories {
    pub fn new(
        store: Arc<dyn MemoryStore>,
        embedder: Arc<dyn Embedder>,
        docs: Option<Arc<dyn Library>>,
        min_similarity: f64,
        keyword_weight: f64,
        metrics: Arc<Metrics>,
    ) -> Self {
        let catalogue = Catalogue::new(store.exact_counts(), docs.is_some());
        Memories {
            store,
            embedder,
            docs,
            min_similarity,
            keyword_weight,
            metrics,
            catalogue,
        }
    }

    /// The `tools` array of `tools/list`; it never changes while the process runs.
    pub fn tool_list(&self) -> &Value {
        self.catalogue.list()
    }
}

/// A tool's answer: one text block, flagged when it reports a failure.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub text: String,
    pub is_error: bool,
}

impl ToolResult {
    fn ok(text: String) -> Self {
        ToolResult {
            text,
            is_error: false,
        }
    }

    fn error(text: String) -> Self {
        ToolResult {
            text,
            is_error: true,
        }
    }
}

/// Why a tool could not answer.
#[derive(Debug)]
pub(crate) enum ToolError {
    /// The model's mistake: shown as `Error: …`, never logged as a failure.
    Invalid(String),
    /// A dependency failed: the agent can carry on without its memory.
    Dependency { shown: String, logged: String },
    /// The documentation library failed; nothing to do with the memory store.
    Docs(String),
}

impl From<StoreError> for ToolError {
    fn from(e: StoreError) -> Self {
        match e {
            // A memory too large for the store is the caller's to shorten (BEHAVIOR.md Q12).
            StoreError::Refused(message) => ToolError::Invalid(message),
            other => {
                let message = other.to_string();
                ToolError::Dependency {
                    shown: message.clone(),
                    logged: message,
                }
            }
        }
    }
}

impl From<EmbedError> for ToolError {
    fn from(e: EmbedError) -> Self {
        ToolError::Dependency {
            shown: e.to_string(),
            logged: e.log_message(),
        }
    }
}

type Arguments = Map<String, Value>;

/// Runs the tool `name` for the caller. Never fails at the protocol level: every problem
/// is a result with `is_error` set, in the order BEHAVIOR.md §3.2 and §2.3 give.
pub async fn call(
    memories: &Memories,
    name: &str,
    arguments: Option<&Value>,
    identity: &Identity,
) -> ToolResult {
    let started = Instant::now();
    let (result, outcome) = answer(memories, name, arguments, identity).await;
    // Only catalogue names become labels: a caller cannot mint new series.
    let tool = match memories.catalogue.find(name) {
        Some(_) => name,
        None => "unknown",
    };
    let tenant = identity.as_ref().ok().map(|ctx| ctx.tenant.as_str());
    memories
        .metrics
        .tool_call(tool, tenant, outcome, started.elapsed());
    result
}

async fn answer(
    memories: &Memories,
    name: &str,
    arguments: Option<&Value>,
    identity: &Identity,
) -> (ToolResult, Outcome) {
    let refused = |text: String| (ToolResult::error(text), Outcome::Invalid);
    let Some(spec) = memories.catalogue.find(name) else {
        return refused(format!("Error: unknown tool \"{name}\"."));
    };
    let empty = Map::new();
    let args = match arguments {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(map)) => map,
        Some(_) => {
            return refused(format!(
                "Input validation error: Invalid arguments for tool {name}: arguments must be an object"
            ));
        }
    };
    if let Err(detail) = spec.check(args) {
        return refused(format!(
            "Input validation error: Invalid arguments for tool {name}: {detail}"
        ));
    }
    let ctx = match identity {
        Ok(ctx) => ctx,
        Err(refusal) => return refused(refusal.clone()),
    };

    let started = Instant::now();
    let outcome = run(memories, name, ctx, args).await;
    let fields = log::Fields {
        tenant: Some(ctx.tenant.as_str()),
        tool: Some(name),
        ..Default::default()
    };
    let (result, outcome) = match outcome {
        Ok(text) => (ToolResult::ok(text), Outcome::Ok),
        Err(ToolError::Invalid(message)) => refused(format!("Error: {message}")),
        Err(ToolError::Dependency { shown, logged }) => {
            log::error("tool_failed", &logged, &fields);
            let text = format!("Error: the memory store could not complete this request — {shown}");
            (ToolResult::error(text), Outcome::Failed)
        }
        Err(ToolError::Docs(cause)) => {
            log::error("tool_failed", &cause, &fields);
            let text = format!("Error: the documentation index could not be searched — {cause}");
            (ToolResult::error(text), Outcome::Failed)
        }
    };
    log::info(
        "tool_call",
        &log::Fields {
            ms: Some(started.elapsed().as_millis()),
            ok: Some(!result.is_error),
            in_conversation: Some(ctx.conversation.is_some()),
            ..fields
        },
    );
    (result, outcome)
}

async fn run(
    memories: &Memories,
    name: &str,
    ctx: &RequestContext,
    args: &Arguments,
) -> Result<String, ToolError> {
    match name {
        "recall" => recall::run(memories, ctx, args).await,
        "remember" => remember::run(memories, ctx, args).await,
        "list_memories" => list_memories::run(memories, ctx, args).await,
        "forget" => forget::run(memories, ctx, args).await,
        "memory_stats" => memory_stats::run(memories, ctx).await,
        "search_docs" => match &memories.docs {
            Some(library) => search_docs::run(library.as_ref(), args).await,
            None => Err(ToolError::Invalid(format!("unknown tool \"{name}\"."))),
        },
        other => Err(ToolError::Invalid(format!("unknown tool \"{other}\"."))),
    }
}
