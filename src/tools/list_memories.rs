//! `list_memories`: the newest visible memories, without searching, a page at a time.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use serde_json::{Value, json};

use super::schema::{self, Definition, Effect};
use super::{Answer, Tool, ToolError, ToolService, args, cursor, render};
use crate::context::RequestContext;
use crate::memory::MemoryType;
use crate::store::After;

const DEFAULT_LIMIT: usize = 20;

const DEFINITION: Definition = Definition {
    name: "list_memories",
    title: "List memories",
    description: "List this project's memories, newest first, without searching; use recall to search. \
        Includes this conversation's own memories and excludes other conversations'. When more \
        exist, the answer ends with `next cursor: <token>`: pass it as `cursor` for the next page.",
    effect: Effect::Reads,
    open_world: false,
    app: Some(crate::ui::APP_URI),
    output,
};

fn output() -> Value {
    schema::object(json!({
        "memories": {"type": "array", "items": schema::memory()},
        "nextCursor": {"type": ["string", "null"]},
    }))
}

#[derive(Deserialize, JsonSchema)]
pub(super) struct Args {
    /// Only memories of this type.
    #[serde(rename = "type")]
    memory_type: Option<MemoryType>,
    /// How many to list (1-50). Default 20.
    #[schemars(with = "Option<i64>")]
    limit: Option<f64>,
    /// The `next cursor` of the page before, with the same type filter.
    cursor: Option<String>,
}

pub(super) struct ListMemories;

#[async_trait]
impl Tool for ListMemories {
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
        let memory_type = args.memory_type;
        let limit = args::limit(args.limit, DEFAULT_LIMIT)?;
        let after = match args.cursor.as_deref() {
            Some(token) => Some(cursor::decode(ctx, memory_type, token)?),
            None => None,
        };
        let visibility = ctx.visibility();
        // One more than shown says whether another page exists.
        let mut found = service
            .store
            .list(
                &ctx.tenant,
                &visibility,
                memory_type,
                after.as_ref(),
                limit + 1,
            )
            .await?;
        found.retain(|m| visibility.can_see(m));
        let fit = render::fitting(found.iter().take(limit));
        let more = found.len() > fit;
        let cut_short = fit < limit.min(found.len());
        found.truncate(fit);
        let next = (found.last().filter(|_| more))
            .map(|last| cursor::encode(ctx, memory_type, &After::memory(last)));
        let data = json!({
            "memories": found.iter().map(render::data).collect::<Vec<_>>(),
            "nextCursor": next,
        });
        if found.is_empty() {
            let text = match (memory_type, &after) {
                (_, Some(_)) => "[MEMORY] No more memories after this cursor.".into(),
                (None, None) => "[MEMORY] This project has no memories yet.".into(),
                (Some(t), None) => {
                    format!("[MEMORY] This project has no memories of type \"{t}\" yet.")
                }
            };
            return Ok(Answer::new(text, data));
        }
        let n = found.len() as u64;
        let mut out = format!("[MEMORY] {n} {}, newest first.\n\n", render::memories(n));
        render::list(&mut out, found.iter().map(|m| (m, None)));
        if let Some(next) = &next {
            if cut_short {
                out.push_str(&format!(
                    "\n\nThis page holds {n}, fewer than asked: one answer carries at most {} \
                     bytes of memories. The next page goes on from here.",
                    super::MAX_ANSWER_BYTES
                ));
            }
            out.push_str(&format!("\n\nnext cursor: {next}"));
        }
        Ok(Answer::new(out, data))
    }
}
