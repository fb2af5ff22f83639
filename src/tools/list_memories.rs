//! `list_memories`: the newest visible memories, without searching.

use super::{Arguments, Memories, ToolError, args, render};
use crate::context::RequestContext;

const DEFAULT_LIMIT: usize = 20;

pub(super) async fn run(
    memories: &Memories,
    ctx: &RequestContext,
    args: &Arguments,
) -> Result<String, ToolError> {
    let memory_type = args::memory_type(args)?;
    let limit = args::limit(args, DEFAULT_LIMIT)?;
    let visibility = ctx.visibility();
    let mut found = memories
        .store
        .list(&ctx.tenant, &visibility, memory_type, limit)
        .await?;
    found.retain(|m| visibility.can_see(m));
    if found.is_empty() {
        return Ok(match memory_type {
            None => "[MEMORY] This project has no memories yet.".into(),
            Some(t) => format!("[MEMORY] This project has no memories of type \"{t}\" yet."),
        });
    }
    let n = found.len() as u64;
    let mut out = format!("[MEMORY] {n} {}, newest first.\n\n", render::memories(n));
    render::list(&mut out, found.iter().map(|m| (m, None)));
    Ok(out)
}
