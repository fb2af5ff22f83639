//! `remember`: store a durable fact, unless a visible memory already says it.

use super::{Arguments, Memories, ToolError, args, render};
use crate::context::RequestContext;
use crate::memory::{MemoryType, NewMemory, Scope, new_id, now_ms};
use crate::store::Remembered;

pub const MAX_CONTENT_BYTES: usize = 32_000;
pub const MAX_CATEGORY_BYTES: usize = 128;
pub const MAX_TAGS: usize = 20;
pub const MAX_TAG_BYTES: usize = 64;
/// How much of an over-long tag the refusal quotes.
const TAG_QUOTE_CHARS: usize = 30;

pub(super) async fn run(
    memories: &Memories,
    ctx: &RequestContext,
    args: &Arguments,
) -> Result<String, ToolError> {
    let memory = validate(ctx, args)?;
    let vector = memories.embedder.embed(&memory.content).await?;
    let dedup_scope = ctx.visibility().for_dedup(memory.scope);
    let outcome = memories
        .store
        .remember(&ctx.tenant, memory, &vector, &dedup_scope)
        .await?;
    Ok(match outcome {
        Remembered::Stored(m) => {
            let mut out = format!("[MEMORY] Stored as {}.\n\n", m.id);
            render::memory(&mut out, 1, &m, None);
            out
        }
        Remembered::AlreadyKnown(existing) => {
            memories
                .store
                .record_access(&ctx.tenant, &ctx.visibility(), &[&existing], now_ms())
                .await?;
            let mut out = "[MEMORY] Already known — an existing memory already says this, so \
                           nothing new was written.\n\n"
                .to_owned();
            render::memory(&mut out, 1, &existing, None);
            out
        }
    })
}

/// BEHAVIOR.md §3.4, first failure wins.
fn validate(ctx: &RequestContext, args: &Arguments) -> Result<NewMemory, ToolError> {
    let content = args::required_string(args, "content")?;
    if content.len() > MAX_CONTENT_BYTES {
        return Err(ToolError::Invalid(format!(
            "`content` is {} bytes; the maximum is {MAX_CONTENT_BYTES}. Store the essential fact \
             rather than the whole document.",
            content.len()
        )));
    }
    let category = args::optional_string(args, "category")?;
    if category.is_some_and(|c| c.len() > MAX_CATEGORY_BYTES) {
        return Err(ToolError::Invalid(format!(
            "`category` may be at most {MAX_CATEGORY_BYTES} bytes; it is a sub-label, so put the \
             detail in content."
        )));
    }
    let scope = args::scope(args)?;
    if scope == Scope::Conversation && ctx.conversation.is_none() {
        return Err(ToolError::Invalid(
            "scope 'conversation' needs a conversation, but this request carries no \
             X-Conversation-Id header. Store it for the project instead, or leave scope unset."
                .into(),
        ));
    }
    let memory_type = args::memory_type(args)?.unwrap_or(MemoryType::Project);
    let tags = args::tags(args)?;
    if tags.len() > MAX_TAGS {
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
    })
}
