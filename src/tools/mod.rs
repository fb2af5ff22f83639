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

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value};

use crate::context::{Identity, RequestContext};
use crate::embed::{EmbedError, Embedder};
use crate::log;
use crate::store::{MemoryStore, StoreError};

pub use catalogue::tool_list;

/// What the tools work with: the store, the embedder and the similarity floor.
pub struct Memories {
    pub store: Arc<dyn MemoryStore>,
    pub embedder: Arc<dyn Embedder>,
    pub min_similarity: f64,
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
}

impl From<StoreError> for ToolError {
    fn from(e: StoreError) -> Self {
        let message = e.to_string();
        ToolError::Dependency {
            shown: message.clone(),
            logged: message,
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
    let Some(spec) = catalogue::find(name) else {
        return ToolResult::error(format!("Error: unknown tool \"{name}\"."));
    };
    let empty = Map::new();
    let args = match arguments {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(map)) => map,
        Some(_) => {
            return ToolResult::error(format!(
                "Input validation error: Invalid arguments for tool {name}: arguments must be an object"
            ));
        }
    };
    if let Err(detail) = spec.check(args) {
        return ToolResult::error(format!(
            "Input validation error: Invalid arguments for tool {name}: {detail}"
        ));
    }
    let ctx = match identity {
        Ok(ctx) => ctx,
        Err(refusal) => return ToolResult::error(refusal.clone()),
    };

    let started = Instant::now();
    let outcome = run(memories, name, ctx, args).await;
    let fields = log::Fields {
        tenant: Some(ctx.tenant.as_str()),
        tool: Some(name),
        ..Default::default()
    };
    let result = match outcome {
        Ok(text) => ToolResult::ok(text),
        Err(ToolError::Invalid(message)) => ToolResult::error(format!("Error: {message}")),
        Err(ToolError::Dependency { shown, logged }) => {
            log::error("tool_failed", &logged, &fields);
            ToolResult::error(format!(
                "Error: the memory store could not complete this request — {shown}"
            ))
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
    result
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
        other => Err(ToolError::Invalid(format!("unknown tool \"{other}\"."))),
    }
}
