//! `forget`: delete one memory by id. Another tenant's id, or another conversation's
//! note, is simply not there (docs/tools.md#forget).

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use serde_json::{Value, json};

use super::schema::{self, Definition, Effect};
use super::{Answer, Tool, ToolError, ToolService};
use crate::context::RequestContext;

const DEFINITION: Definition = Definition {
    name: "forget",
    title: "Forget a memory",
    description: "Delete one memory by id, permanently. Use it for facts that became wrong; when a fact is \
        merely outdated, prefer remembering the correction.",
    effect: Effect::Deletes,
    open_world: false,
    app: None,
    output,
};

fn output() -> Value {
    schema::object(json!({"id": {"type": "string"}, "deleted": {"type": "boolean"}}))
}

#[derive(Deserialize, JsonSchema)]
pub(super) struct Args {
    /// The memory's id, as recall or list_memories showed it.
    id: String,
}

pub(super) struct Forget;

#[async_trait]
impl Tool for Forget {
    type Args = Args;

    fn definition(&self) -> &'static Definition {
        &DEFINITION
    }

    async fn run(
        &self,
        service: &ToolService,
        ctx: &RequestContext,
        args: Args,
    ) -> Result<Answer, ToolError> {
        let id = crate::memory::memory_id(&args.id, "id")?;
        let deleted = service
            .store
            .delete(&ctx.tenant, &ctx.visibility(), &id)
            .await?;
        let text = if deleted {
            format!("[MEMORY] Deleted {id}.")
        } else {
            format!("[MEMORY] No memory with id {id} exists for this project. Nothing was deleted.")
        };
        Ok(Answer::new(text, json!({"id": id, "deleted": deleted})))
    }
}
