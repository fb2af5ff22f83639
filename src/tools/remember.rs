//! `remember`: store a durable fact, unless a visible memory already says it; or correct
//! one, putting the new memory in its place (`replaces`).

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use serde_json::{Value, json};

use super::schema::{self, Definition, Effect};
use super::{Answer, Tool, ToolError, ToolService, render};
use crate::context::RequestContext;
use crate::memory::{self, MemoryType, NewMemory, Scope, new_id, now_ms};
use crate::store::Remembered;

/// The furthest a memory's expiry may be, either way it is given: ten years of 365 days.
pub const MAX_EXPIRY_DAYS: i64 = 3650;
const DAY_MS: i64 = 86_400_000;

const DEFINITION: Definition = Definition {
    name: "remember",
    title: "Remember",
    description: "Store a durable fact for later runs: a decision and its reason, a convention, a command \
        that worked. Near-identical content is not written twice: you are told which memory already \
        says it, and the tags, category and expiry you passed are discarded. By default the memory \
        belongs to the whole project (every conversation); scope 'conversation' keeps it for this \
        thread only. When a stored fact has changed or a convention was reversed, pass the old \
        memory's id as `replaces`: the new memory takes its place, so the stale one stops being \
        recalled. For a fact that only holds for a while (a temporary workaround, a freeze until a \
        date), pass `expires_in_days` or `expires_at`: from then on it is never recalled, and it \
        is deleted. Without either, a memory never expires.",
    effect: Effect::Adds,
    open_world: false,
    app: None,
    output,
};

fn output() -> Value {
    schema::object(json!({
        "outcome": {"type": "string", "enum": ["stored", "replaced", "already_known", "discarded"]},
        "id": {"type": "string"},
        "memory": schema::memory(),
        "similar": {"type": "array", "items": schema::object(json!({
            "id": {"type": "string"},
            "content": {"type": "string"},
        }))},
        "removed": {"type": ["string", "null"]},
    }))
}

#[derive(Deserialize, JsonSchema)]
pub(super) struct Args {
    /// The fact, written so it makes sense months from now without this conversation.
    content: String,
    /// project (default): visible to every conversation. conversation: only this
    /// thread; needs a conversation on the request (chats, Slack threads, A2A calls).
    scope: Option<Scope>,
    /// project (default): how the project is built or decided. pattern: a reusable
    /// snippet or command. reference: an external fact or link. conversation: something the
    /// user said that should persist.
    #[serde(rename = "type")]
    memory_type: Option<MemoryType>,
    /// Optional sub-label such as decision, architecture or convention (max 128 bytes).
    category: Option<String>,
    /// Optional labels (max 20), each up to 64 bytes.
    tags: Option<Vec<String>>,
    /// The id of a memory this one corrects (from recall or list_memories).
    /// It is removed as this one is stored; this memory takes the scope, type, category,
    /// tags and expiry given here.
    replaces: Option<String>,
    /// Days from now after which the memory is gone (1 to 3650). Not with
    /// expires_at.
    #[schemars(with = "Option<i64>")]
    expires_in_days: Option<f64>,
    /// When the memory is gone, as an RFC 3339 time such as
    /// 2027-03-31T00:00:00Z: in the future, at most 3650 days ahead. Not with
    /// expires_in_days.
    expires_at: Option<String>,
}

pub(super) struct Remember;

#[async_trait]
impl Tool for Remember {
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
        let memory = validate(ctx, args)?;
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
        .remember(
            &ctx.tenant,
            &ctx.visibility(),
            memory,
            &vector,
            service.judged().await?.duplicates,
        )
        .await?;
    let removed = match &outcome {
        Remembered::Stored(m, _) => m.replaces.clone(),
        Remembered::AlreadyKnown { removed, .. } => removed.clone(),
    };
    let (mut out, outcome, memory, similar) = match outcome {
        Remembered::Stored(m, similar) => match &m.replaces {
            Some(old) => (
                format!("[MEMORY] Stored as {}, replacing {old}.\n\n", m.id),
                "replaced",
                m,
                similar,
            ),
            None => (
                format!("[MEMORY] Stored as {}.\n\n", m.id),
                "stored",
                m,
                similar,
            ),
        },
        Remembered::AlreadyKnown { existing, .. } => {
            (service.count_uses(ctx, "remember", &[&existing], now_ms())).await;
            let said = match &removed {
                None => "[MEMORY] Already known — an existing memory already says this, so \
                         nothing new was written.\n\n"
                    .to_owned(),
                Some(old) => format!(
                    "[MEMORY] Already known — an existing memory already says this, so nothing \
                     new was written; the memory it replaces ({old}) was removed.\n\n"
                ),
            };
            (said, "already_known", existing, Vec::new())
        }
    };
    render::memory(&mut out, 1, &memory, None);
    if !similar.is_empty() {
        similar_memories(&mut out, &similar);
    }
    let similar: Vec<Value> = (similar.iter())
        .map(|m| json!({"id": m.id, "content": m.content}))
        .collect();
    let data = json!({"outcome": outcome, "id": memory.id, "memory": render::data(&memory),
                      "similar": similar, "removed": removed});
    Ok(Answer::new(out, data))
}

/// The stored memories that say nearly what the new one says but differ in a value or a
/// word (docs/ranking.md#duplicate-rule): both are kept, and the agent is told how to
/// keep only the new one if it is a correction.
fn similar_memories(out: &mut String, similar: &[crate::memory::Memory]) {
    let (n, first) = (similar.len(), &similar[0].id);
    let (noun, verb) = if n == 1 {
        ("memory", "says")
    } else {
        ("memories", "say")
    };
    out.push_str(&format!(
        "\n\nSIMILAR: {n} stored {noun} {verb} nearly the same but differ{} in a value or a \
         word, so the new memory was stored beside {}. If the new one corrects it, remove the \
         old one with forget (id \"{first}\"); next time pass `replaces: \"{first}\"` to \
         remember, and the correction takes its place in one step.\n\n",
        if n == 1 { "s" } else { "" },
        if n == 1 { "it" } else { "them" },
    ));
    render::list(out, similar.iter().map(|m| (m, None)));
}

/// docs/tools.md#remember, first failure wins.
fn validate(ctx: &RequestContext, args: Args) -> Result<NewMemory, ToolError> {
    let content = memory::content(&args.content)?;
    let category = memory::category(args.category.as_deref())?;
    let scope = args.scope.unwrap_or(Scope::Project);
    if scope == Scope::Conversation && ctx.conversation.is_none() {
        return Err(ToolError::Invalid(
            "scope 'conversation' needs a conversation, but this request carries no \
             X-Conversation-Id header. Store it for the project instead, or leave scope unset."
                .into(),
        ));
    }
    let memory_type = args.memory_type.unwrap_or(MemoryType::Project);
    let tags = memory::tags(args.tags)?;
    let replaces = (args.replaces.as_deref().map(memory::replaces)).transpose()?;
    let now = now_ms();
    let expires_at = expiry(args.expires_in_days, args.expires_at.as_deref(), now)?;
    Ok(NewMemory {
        id: new_id(now),
        content: content.to_owned(),
        memory_type,
        category,
        tags,
        created_at: now,
        scope,
        conversation: ctx.conversation.clone(),
        replaces,
        expires_at,
        author: ctx.author.clone(),
    })
}

/// The instant (ms) a memory written at `now` expires, from either argument; both are
/// bounded by `MAX_EXPIRY_DAYS`.
fn expiry(days: Option<f64>, at: Option<&str>, now: i64) -> Result<Option<i64>, ToolError> {
    let invalid = |message: String| Err(ToolError::Invalid(message));
    match (days, at) {
        (None, None) => Ok(None),
        (Some(_), Some(_)) => invalid(
            "give `expires_in_days` or `expires_at`, not both: they say the same thing.".into(),
        ),
        (Some(days), None) => {
            if !(1.0..=MAX_EXPIRY_DAYS as f64).contains(&days) {
                return invalid(format!(
                    "`expires_in_days` must be an integer between 1 and {MAX_EXPIRY_DAYS}."
                ));
            }
            Ok(Some(now + days as i64 * DAY_MS))
        }
        (None, Some(text)) => {
            let Ok(at) = chrono::DateTime::parse_from_rfc3339(crate::memory::trim(text)) else {
                return invalid(format!(
                    "`expires_at` must be an RFC 3339 time with its offset, such as \
                     2027-03-31T00:00:00Z; \"{}\" is not one.",
                    render::quote(text, 40)
                ));
            };
            let at = at.timestamp_millis();
            if at <= now {
                return invalid("`expires_at` must be in the future.".into());
            }
            if at > now + MAX_EXPIRY_DAYS * DAY_MS {
                return invalid(format!(
                    "`expires_at` may be at most {MAX_EXPIRY_DAYS} days (ten years) ahead."
                ));
            }
            Ok(Some(at))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_780_000_000_000;

    fn refusal(days: Option<f64>, at: Option<&str>) -> String {
        match expiry(days, at, NOW) {
            Err(ToolError::Invalid(message)) => message,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn an_expiry_is_counted_from_now_and_bounded_either_way() {
        assert_eq!(expiry(None, None, NOW).unwrap(), None);
        assert_eq!(expiry(Some(1.0), None, NOW).unwrap(), Some(NOW + DAY_MS));
        let furthest = NOW + MAX_EXPIRY_DAYS * DAY_MS;
        assert_eq!(expiry(Some(3650.0), None, NOW).unwrap(), Some(furthest));
        let at = crate::memory::iso(furthest);
        assert_eq!(expiry(None, Some(&at), NOW).unwrap(), Some(furthest));
        let soon = crate::memory::iso(NOW + 1);
        assert_eq!(expiry(None, Some(&soon), NOW).unwrap(), Some(NOW + 1));
        // Any offset is the same instant.
        assert_eq!(
            expiry(None, Some("2026-05-29T09:26:40+09:00"), NOW).unwrap(),
            Some(NOW + 3_600_000 * 4)
        );
    }

    #[test]
    fn bad_expiries_are_refused_by_name() {
        for days in [0.0, -1.0, 3651.0] {
            assert_eq!(
                refusal(Some(days), None),
                "`expires_in_days` must be an integer between 1 and 3650."
            );
        }
        let now = crate::memory::iso(NOW);
        assert_eq!(
            refusal(None, Some(&now)),
            "`expires_at` must be in the future."
        );
        let too_far = crate::memory::iso(NOW + MAX_EXPIRY_DAYS * DAY_MS + 1);
        assert_eq!(
            refusal(None, Some(&too_far)),
            "`expires_at` may be at most 3650 days (ten years) ahead."
        );
        for bad in ["tomorrow", "2027-03-31", "2027-03-31T00:00:00", ""] {
            assert!(refusal(None, Some(bad)).starts_with("`expires_at` must be an RFC 3339"));
        }
        assert!(refusal(Some(3.0), Some("2027-03-31T00:00:00Z")).contains("not both"));
    }
}
