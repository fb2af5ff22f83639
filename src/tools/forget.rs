//! `forget`: delete one memory by id. Another tenant's id, or another conversation's
//! note, is simply not there (docs/tools.md#forget).

use async_trait::async_trait;
use serde::Deserialize;

use serde_json::{Value, json};

use super::schema::{self, Definition, Effect, Kind, Param};
use super::{Answer, Arguments, Tool, ToolError, ToolService};
use crate::context::RequestContext;

const DEFINITION: Definition = Definition {
    name: "forget",
    title: "Forget a memory",
    description: "Delete one memory by id, permanently. Use it for facts that became wrong; when a fact is \
        merely outdated, prefer remembering the correction.",
    params: &[Param {
        name: "id",
        kind: Kind::String,
        required: true,
        description: "The memory's id, as recall or list_memories showed it.",
    }],
    effect: Effect::Deletes,
    open_world: false,
    app: None,
    output,
};

fn output() -> Value {
    schema::object(json!({"id": {"type": "string"}, "deleted": {"type": "boolean"}}))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    id: String,
}

pub(super) struct Forget;

#[async_trait]
impl Tool for Forget {
    fn definition(&self) -> &'static Definition {
        &DEFINITION
    }

    async fn run(
        &self,
        service: &ToolService,
        ctx: &RequestContext,
        args: &Arguments,
    ) -> Result<Answer, ToolError> {
        let args: Args = DEFINITION.parse(args)?;
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

/// The definition and `Args` agree: every declared parameter is read.
#[cfg(test)]
#[test]
fn every_declared_parameter_is_read() {
    let read: Result<Args, _> = DEFINITION.parse(&DEFINITION.every_parameter());
    if let Err(e) = read {
        panic!("{e:?}");
    }
}
