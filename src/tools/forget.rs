//! `forget`: delete one memory by id. Another tenant's id, or another conversation's
//! note, is simply not there (DESIGN.md Q13).

use super::{Arguments, Memories, ToolError, args};
use crate::context::RequestContext;

pub(super) async fn run(
    memories: &Memories,
    ctx: &RequestContext,
    args: &Arguments,
) -> Result<String, ToolError> {
    let id = args::required_string(args, "id")?;
    let deleted = memories
        .store
        .delete(&ctx.tenant, &ctx.visibility(), id)
        .await?;
    Ok(if deleted {
        format!("[MEMORY] Deleted {id}.")
    } else {
        format!("[MEMORY] No memory with id {id} exists for this project. Nothing was deleted.")
    })
}
