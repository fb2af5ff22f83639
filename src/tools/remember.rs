//! `remember`: store a durable fact, unless a visible memory already says it; or correct
//! one, putting the new memory in its place (`replaces`).

use async_trait::async_trait;
use serde::Deserialize;

use serde_json::{Value, json};

use super::schema::{self, Definition, Kind, Param};
use super::{Answer, Arguments, Tool, ToolError, ToolService, args, render};
use crate::context::RequestContext;
use crate::memory::{MemoryType, NewMemory, Scope, new_id, now_ms};
use crate::store::Remembered;

pub const MAX_CONTENT_BYTES: usize = 32_000;
pub const MAX_CATEGORY_BYTES: usize = 128;
pub const MAX_TAGS: usize = 20;
pub const MAX_TAG_BYTES: usize = 64;
/// Ids are 26 characters; this only bounds what is looked up.
pub const MAX_ID_BYTES: usize = 128;
/// How much of an over-long tag the refusal quotes.
const TAG_QUOTE_CHARS: usize = 30;

const DEFINITION: Definition = Definition {
    name: "remember",
    description: "Store a durable fact for later runs: a decision and its reason, a convention, a command \
        that worked. Near-identical content is not written twice: you are told which memory already \
        says it, and the tags and category you passed are discarded. By default the memory belongs to \
        the whole project (every conversation); scope 'conversation' keeps it for this thread only. \
        When a stored fact has changed or a convention was reversed, pass the old memory's id as \
        `replaces`: the new memory takes its place, so the stale one stops being recalled.",
    params: &[
        Param {
            name: "content",
            kind: Kind::String,
            required: true,
            description: "The fact, written so it makes sense months from now without this conversation.",
        },
        Param {
            name: "scope",
            kind: Kind::OneOf(&Scope::NAMES),
            required: false,
            description: "project (default): visible to every conversation. conversation: only this \
                thread; needs a conversation on the request (chats, Slack threads, A2A calls).",
        },
        Param {
            name: "type",
            kind: Kind::OneOf(&MemoryType::NAMES),
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
        Param {
            name: "replaces",
            kind: Kind::String,
            required: false,
            description: "The id of a memory this one corrects (from recall or list_memories). \
                It is removed as this one is stored; this memory takes the scope, type, category \
                and tags given here.",
        },
    ],
    output,
};

fn output() -> Value {
    schema::object(json!({
        "outcome": {"type": "string", "enum": ["stored", "replaced", "already_known"]},
        "id": {"type": "string"},
        "memory": schema::memory(),
    }))
}

#[derive(Deserialize)]
struct Args {
    content: String,
    scope: Option<Scope>,
    #[serde(rename = "type")]
    memory_type: Option<MemoryType>,
    category: Option<String>,
    tags: Option<Vec<String>>,
    replaces: Option<String>,
}

pub(super) struct Remember;

#[async_trait]
impl Tool for Remember {
    fn definition(&self) -> &'static Definition {
        &DEFINITION
    }

    async fn run(
        &self,
        service: &ToolService,
        ctx: &RequestContext,
        args: &Arguments,
    ) -> Result<Answer, ToolError> {
        let memory = validate(ctx, schema::parse(args)?)?;
        remember(service, ctx, memory).await
    }
}

async fn remember(
    service: &ToolService,
    ctx: &RequestContext,
    memory: NewMemory,
) -> Result<Answer, ToolError> {
    let vector = service.embedder.embed(&memory.content).await?;
    let outcome = service
        .store
        .remember(&ctx.tenant, &ctx.visibility(), memory, &vector)
        .await?;
    let (mut out, outcome, memory) = match outcome {
        Remembered::Stored(m) => match &m.replaces {
            Some(old) => (
                format!("[MEMORY] Stored as {}, replacing {old}.\n\n", m.id),
                "replaced",
                m,
            ),
            None => (format!("[MEMORY] Stored as {}.\n\n", m.id), "stored", m),
        },
        Remembered::AlreadyKnown(existing) => {
            (service.count_uses(ctx, "remember", &[&existing], now_ms())).await;
            let said = "[MEMORY] Already known — an existing memory already says this, so \
                        nothing new was written.\n\n";
            (said.to_owned(), "already_known", existing)
        }
    };
    render::memory(&mut out, 1, &memory, None);
    let data = json!({"outcome": outcome, "id": memory.id, "memory": render::data(&memory)});
    Ok(Answer::new(out, data))
}

/// docs/behavior.md#remember, first failure wins.
fn validate(ctx: &RequestContext, args: Args) -> Result<NewMemory, ToolError> {
    let content = args::non_blank(&args.content, "content")?;
    if content.len() > MAX_CONTENT_BYTES {
        return Err(ToolError::Invalid(format!(
            "`content` is {} bytes; the maximum is {MAX_CONTENT_BYTES}. Store the essential fact \
             rather than the whole document.",
            content.len()
        )));
    }
    let category = args.category.as_deref();
    if category.is_some_and(|c| c.chars().any(char::is_control)) {
        return Err(ToolError::Invalid(
            "`category` may not hold control characters (newlines, tabs, NUL); it is a \
             one-line label."
                .into(),
        ));
    }
    if category.is_some_and(|c| c.len() > MAX_CATEGORY_BYTES) {
        return Err(ToolError::Invalid(format!(
            "`category` may be at most {MAX_CATEGORY_BYTES} bytes; it is a sub-label, so put the \
             detail in content."
        )));
    }
    let scope = args.scope.unwrap_or(Scope::Project);
    if scope == Scope::Conversation && ctx.conversation.is_none() {
        return Err(ToolError::Invalid(
            "scope 'conversation' needs a conversation, but this request carries no \
             X-Conversation-Id header. Store it for the project instead, or leave scope unset."
                .into(),
        ));
    }
    let memory_type = args.memory_type.unwrap_or(MemoryType::Project);
    // Every tag given counts towards the limit, blank ones too, before blanks are dropped.
    let given = args.tags.as_ref().map_or(0, Vec::len);
    if args
        .tags
        .iter()
        .flatten()
        .any(|t| t.chars().any(char::is_control))
    {
        return Err(ToolError::Invalid(
            "`tags` may not hold control characters (newlines, tabs, NUL); each tag is a \
             one-line label."
                .into(),
        ));
    }
    let tags = args::tags(args.tags);
    if given > MAX_TAGS {
        return Err(ToolError::Invalid(format!(
            "`tags` may hold at most {MAX_TAGS} entries."
        )));
    }
    if let Some(long) = tags.iter().find(|t| t.len() > MAX_TAG_BYTES) {
        let quote: String = long.chars().take(TAG_QUOTE_CHARS).collect();
        return Err(ToolError::Invalid(format!(
            "each tag may be at most {MAX_TAG_BYTES} bytes; \"{quote}…\" is longer."
        )));
    }
    let replaces = match args.replaces.as_deref() {
        Some(id) => {
            let id = crate::context::trim(args::non_blank(id, "replaces")?);
            if id.len() > MAX_ID_BYTES {
                return Err(ToolError::Invalid(format!(
                    "`replaces` may be at most {MAX_ID_BYTES} bytes: it is a memory's id."
                )));
            }
            Some(id.to_owned())
        }
        None => None,
    };
    let now = now_ms();
    Ok(NewMemory {
        id: new_id(now),
        content: content.to_owned(),
        memory_type,
        category: category
            .map(crate::context::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_owned),
        tags,
        created_at: now,
        scope,
        conversation: ctx.conversation.clone(),
        replaces,
    })
}
