//! Memories as MCP resources (docs/tools.md#resources), protocol-neutral: what a client that
//! shows resources (a picker, an @-mention) lists and reads. The caller's identity and
//! visibility are exactly the tools': another tenant's or conversation's memory is not found,
//! as a missing one is. Reading a memory is not a use of it (as listing is not). The memory
//! browser's MCP App is read here too, and not listed: a picker has no use for it.

use serde_json::{Value, json};

use super::{RequestError, ToolError, ToolService, context, cursor, memory_stats, render};
use crate::context::Identity;
use crate::store::After;

/// The statistics of `memory_stats`, as a resource.
pub const STATS: &str = "memory://stats";
const SCHEME: &str = "memory://";

/// A memory as a resource: in `resources/list`, and as a `resource_link` in what `recall`
/// finds (docs/tools.md#resources).
pub fn resource(memory: &crate::memory::Memory) -> Value {
    json!({
        "uri": format!("{SCHEME}{}", memory.id),
        "name": memory.id,
        "title": render::quote(&memory.content, 79),
        "mimeType": "text/plain",
    })
}
/// Memories a page of `resources/list` holds at most (within the answer bound).
const PAGE: usize = 50;

/// The template every memory's URI follows.
pub fn templates() -> Value {
    json!([{
        "uriTemplate": "memory://{id}",
        "name": "memory",
        "title": "A memory",
        "description": "One memory of this project (or of this conversation), by its id.",
        "mimeType": "text/plain",
    }])
}

impl ToolService {
    /// A page of the caller's resources: the statistics first, then memories newest first,
    /// and the cursor of the next page (the rules of `list_memories`' cursor).
    pub async fn resources(
        &self,
        caller: &Identity,
        after: Option<&str>,
    ) -> Result<(Vec<Value>, Option<String>), RequestError> {
        let ctx = context(caller)?;
        let after = (after.map(|token| cursor::decode(ctx, None, token))).transpose()?;
        let visibility = ctx.visibility();
        let mut found = (self.store)
            .list(&ctx.tenant, &visibility, None, after.as_ref(), PAGE + 1)
            .await
            .map_err(ToolError::from)?;
        found.retain(|m| visibility.can_see(m));
        let fit = render::fitting(found.iter().take(PAGE));
        let more = found.len() > fit;
        found.truncate(fit);
        let next = (found.last().filter(|_| more))
            .map(|last| cursor::encode(ctx, None, &After::memory(last)));
        let mut resources = Vec::new();
        if after.is_none() {
            resources.push(json!({
                "uri": STATS,
                "name": "stats",
                "title": "Memory statistics",
                "description": "How many memories this project holds, by type.",
                "mimeType": "text/plain",
            }));
        }
        resources.extend(found.iter().map(resource));
        Ok((resources, next))
    }

    /// The contents of `uri` for the caller: the memory as text and as JSON, or the
    /// statistics.
    pub async fn read_resource(
        &self,
        caller: &Identity,
        uri: &str,
    ) -> Result<Vec<Value>, RequestError> {
        if uri == crate::ui::APP_URI {
            return Ok(vec![app()]);
        }
        let ctx = context(caller)?;
        let not_found = || RequestError::NotFound(uri.to_owned());
        if uri == STATS {
            let stats = self.counted("memory_stats", ctx, memory_stats::stats(self, ctx));
            let stats = stats.await?;
            return Ok(contents(uri, stats.text, &stats.data));
        }
        let id = uri.strip_prefix(SCHEME).ok_or_else(not_found)?;
        // An id no memory can have is not looked for: not found, as any other.
        let possible = !id.is_empty()
            && id.len() <= crate::memory::MAX_ID_BYTES
            && id.bytes().all(|b| b.is_ascii_graphic());
        if !possible {
            return Err(not_found());
        }
        let visibility = ctx.visibility();
        // The store answers for visibility; what it returns is checked again (fail closed).
        let memory = (self.store.get(&ctx.tenant, &visibility, id).await)
            .map_err(ToolError::from)?
            .filter(|m| visibility.can_see(m))
            .ok_or_else(not_found)?;
        let mut text = String::new();
        render::memory(&mut text, 1, &memory, None);
        Ok(contents(uri, text, &render::data(&memory)))
    }
}

/// The memory browser as an MCP App: one document, the same for every caller (it holds no
/// memory; it asks for them through the host). It needs no domain beyond the host's
/// default policy, so it declares none.
fn app() -> Value {
    json!({
        "uri": crate::ui::APP_URI,
        "mimeType": crate::ui::APP_MIME_TYPE,
        "text": crate::ui::app_document(),
        "_meta": {"ui": {"prefersBorder": true}},
    })
}

/// One resource's contents: its text, and its data as JSON.
fn contents(uri: &str, text: String, data: &Value) -> Vec<Value> {
    vec![
        json!({"uri": uri, "mimeType": "text/plain", "text": text}),
        json!({"uri": uri, "mimeType": "application/json", "text": data.to_string()}),
    ]
}
