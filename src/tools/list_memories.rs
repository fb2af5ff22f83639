//! `list_memories`: the newest visible memories, without searching.

use async_trait::async_trait;
use serde::Deserialize;

use super::schema::{self, Definition, Kind, Param};
use super::{Arguments, Tool, ToolError, ToolService, args, render};
use crate::context::RequestContext;
use crate::memory::MemoryType;

const DEFAULT_LIMIT: usize = 20;

const DEFINITION: Definition = Definition {
    name: "list_memories",
    description: "List this project's memories, newest first, without searching; use recall to search. \
        Includes this conversation's own memories and excludes other conversations'.",
    params: &[
        Param {
            name: "type",
            kind: Kind::OneOf(&MemoryType::NAMES),
            required: false,
            description: "Only memories of this type.",
        },
        Param {
            name: "limit",
            kind: Kind::Integer,
            required: false,
            description: "How many to list (1-50). Default 20.",
        },
    ],
};

#[derive(Deserialize)]
struct Args {
    #[serde(rename = "type")]
    memory_type: Option<MemoryType>,
    limit: Option<f64>,
}

pub(super) struct ListMemories;

#[async_trait]
impl Tool for ListMemories {
    fn definition(&self) -> &'static Definition {
        &DEFINITION
    }

    async fn run(
        &self,
        service: &ToolService,
        ctx: &RequestContext,
        args: &Arguments,
    ) -> Result<String, ToolError> {
        let args: Args = schema::parse(args)?;
        let memory_type = args.memory_type;
        let limit = args::limit(args.limit, DEFAULT_LIMIT)?;
        let visibility = ctx.visibility();
        let mut found = service
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
}
