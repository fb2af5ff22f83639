//! `memory_stats`: how many memories the caller can see, by type.

use super::{Memories, ToolError, render};
use crate::context::RequestContext;

pub(super) async fn run(memories: &Memories, ctx: &RequestContext) -> Result<String, ToolError> {
    let counts = memories
        .store
        .count_by_type(&ctx.tenant, &ctx.visibility())
        .await?;
    if counts.total == 0 {
        return Ok("[MEMORY] This project has no memories yet.".into());
    }
    let breakdown = counts
        .by_type
        .iter()
        .map(|(t, n)| format!("{t}: {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    let noun = render::memories(counts.total);
    Ok(match counts.scan_cap {
        None => format!(
            "[MEMORY] {} {noun} for this project ({breakdown}).",
            counts.total
        ),
        Some(cap) => format!(
            "[MEMORY] At least {} {noun} for this project ({breakdown}). Counting stopped at \
             {cap} keys, so every figure here is a lower bound.",
            counts.total
        ),
    })
}
