//! Asking the user about a memory that nearly repeats another with a different value
//! (docs/tools.md#asking-before-a-conflicting-memory-stays), for 2026-07-28 clients that can
//! be asked (elicitation). `remember` stores the new memory beside the similar one as it always
//! does, then the user chooses: replace the old one, keep both, or discard the new one. Stored
//! first, so a question never answered loses nothing: both stay, as without asking.
//!
//! Stateless: what the second round needs travels in the request state, sealed with this
//! server's key (HMAC-SHA-256) and bound to the caller (tenant, conversation, credential) and to
//! the two memories, for ten minutes. A state from another caller, another server key, or
//! changed in any byte is refused and changes nothing.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::Sha256;

use std::time::Instant;

use super::{ToolResult, ToolService, render};
use crate::context::{Identity, RequestContext};
use crate::log;
use crate::memory::now_ms;
use crate::metrics::Outcome;

/// The key of the one input request.
pub const INPUT: &str = "conflict";
/// How long the user has to answer.
const VALID_MS: i64 = 10 * 60 * 1000;

/// What the second round needs, and whom it is for.
#[derive(Serialize, Deserialize, PartialEq, Debug)]
struct State {
    tenant: String,
    conversation: Option<String>,
    author: Option<String>,
    stored: String,
    similar: String,
    until: i64,
}

/// The question for the client to put to the user, and the state to send back with the answer.
pub struct Question {
    pub input_requests: Value,
    pub state: String,
}

impl ToolService {
    /// After `remember` stored a memory beside a similar one: the question, if there is one.
    pub fn conflict_question(&self, ctx: &RequestContext, result: &ToolResult) -> Option<Question> {
        let data = result.structured.as_ref().filter(|_| !result.is_error)?;
        if data["outcome"] != "stored" {
            return None;
        }
        let similar = data["similar"].as_array()?.first()?;
        let state = State {
            tenant: ctx.tenant.as_str().to_owned(),
            conversation: ctx.conversation.as_ref().map(|c| c.as_str().to_owned()),
            author: ctx.author.clone(),
            stored: data["id"].as_str()?.to_owned(),
            similar: similar["id"].as_str()?.to_owned(),
            until: now_ms() + VALID_MS,
        };
        let old = render::quote(similar["content"].as_str()?, 300);
        let new = render::quote(data["memory"]["content"].as_str()?, 300);
        let message = format!(
            "A stored memory says nearly the same with a different value:\n\n  old: {old}\n  \
             new: {new}\n\nThe new one is stored beside it. Which should the project keep?"
        );
        let choice = json!({
            "type": "string",
            "title": "Keep",
            "oneOf": [
                {"const": "replace", "title": "Only the new one (it corrects the old)"},
                {"const": "keep_both", "title": "Both"},
                {"const": "discard_new", "title": "Only the old one"},
            ],
        });
        Some(Question {
            input_requests: json!({INPUT: {
                "method": "elicitation/create",
                "params": {
                    "message": message,
                    "requestedSchema": {"type": "object", "properties": {"choice": choice},
                                        "required": ["choice"]},
                },
            }}),
            state: seal(&self.state_key, &state),
        })
    }

    /// The second round: `remember` called again with the user's answer and the state;
    /// counted and logged as a call of `remember`, as the first round was.
    pub async fn conflict_answer(
        &self,
        caller: &Identity,
        state: &str,
        responses: Option<&Value>,
    ) -> ToolResult {
        let ctx = match caller {
            Ok(ctx) => ctx,
            Err(refusal) => return ToolResult::error(refusal.clone()),
        };
        let started = Instant::now();
        let (result, outcome) = self.settle(ctx, state, responses).await;
        let elapsed = started.elapsed();
        let tenant = Some(ctx.tenant.as_str());
        self.metrics.tool_call("remember", tenant, outcome, elapsed);
        let fields = log::Fields {
            tenant,
            tool: Some("remember"),
            credential: ctx.author.as_deref(),
            ms: Some(elapsed.as_millis()),
            ok: Some(!result.is_error),
            in_conversation: Some(ctx.conversation.is_some()),
        };
        log::info("tool_call", &fields);
        result
    }

    async fn settle(
        &self,
        ctx: &RequestContext,
        state: &str,
        responses: Option<&Value>,
    ) -> (ToolResult, Outcome) {
        let refused = || {
            let text = "Error: requestState is not one this server gave this caller, or its ten \
                        minutes are over; nothing was changed (list_memories shows what is stored).";
            (ToolResult::error(text.into()), Outcome::Invalid)
        };
        let failed = |e: crate::store::StoreError| {
            let fields = log::Fields {
                tenant: Some(ctx.tenant.as_str()),
                tool: Some("remember"),
                ..Default::default()
            };
            log::error("tool_failed", &e.to_string(), &fields);
            let text = format!("Error: {}", super::store_failed(&e.to_string()));
            (ToolResult::error(text), Outcome::Failed)
        };
        let Some(state) = open(&self.state_key, state) else {
            return refused();
        };
        let bound = state.tenant == ctx.tenant.as_str()
            && state.conversation.as_deref() == ctx.conversation.as_ref().map(|c| c.as_str())
            && state.author == ctx.author
            && state.until > now_ms();
        if !bound {
            return refused();
        }
        let answer = responses.and_then(|r| r.get(INPUT));
        let choice = match answer.and_then(|a| a["action"].as_str()) {
            Some("accept") => answer.and_then(|a| a["content"]["choice"].as_str()),
            // Declined or dismissed: nothing is decided, so both stay.
            _ => None,
        };
        let visibility = ctx.visibility();
        let (gone, kept, outcome) = match choice {
            Some("replace") => (Some(&state.similar), &state.stored, "replaced"),
            Some("discard_new") => (Some(&state.stored), &state.similar, "discarded"),
            _ => (None, &state.stored, "stored"),
        };
        if let Some(gone) = gone
            && let Err(e) = self.store.delete(&ctx.tenant, &visibility, gone).await
        {
            return failed(e);
        }
        let memory = match self.store.get(&ctx.tenant, &visibility, kept).await {
            Ok(Some(memory)) => memory,
            Ok(None) => return refused(),
            Err(e) => return failed(e),
        };
        let mut text = match outcome {
            "replaced" => format!(
                "[MEMORY] Stored as {kept}, replacing {} (the user chose the new one).\n\n",
                state.similar
            ),
            "discarded" => format!(
                "[MEMORY] Not kept: the user chose the old memory, so {} was removed.\n\n",
                state.stored
            ),
            _ => format!(
                "[MEMORY] Stored as {kept}, beside {} (the user kept both, or did not say).\n\n",
                state.similar
            ),
        };
        render::memory(&mut text, 1, &memory, None);
        let similar = match outcome {
            "stored" => vec![json!({"id": state.similar, "content": ""})],
            _ => Vec::new(),
        };
        let data = json!({"outcome": outcome, "id": memory.id, "memory": render::data(&memory),
                          "similar": similar, "removed": gone});
        (ToolResult::ok(super::Answer::new(text, data)), Outcome::Ok)
    }
}

type HmacSha256 = Hmac<Sha256>;

/// `state` and its tag under `key`, each base64url.
fn seal(key: &[u8], state: &State) -> String {
    let body = serde_json::to_vec(state).expect("a state serialises");
    let mut mac = HmacSha256::new_from_slice(key).expect("any key length");
    mac.update(&body);
    let tag = mac.finalize().into_bytes();
    format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(body),
        URL_SAFE_NO_PAD.encode(tag)
    )
}

/// The state `sealed` holds, if `key` made its tag (compared in constant time).
fn open(key: &[u8], sealed: &str) -> Option<State> {
    let (body, tag) = sealed.split_once('.')?;
    let (body, tag) = (
        URL_SAFE_NO_PAD.decode(body).ok()?,
        URL_SAFE_NO_PAD.decode(tag).ok()?,
    );
    let mut mac = HmacSha256::new_from_slice(key).expect("any key length");
    mac.update(&body);
    mac.verify_slice(&tag).ok()?;
    serde_json::from_slice(&body).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_state_opens_only_unchanged_and_under_its_key() {
        let state = State {
            tenant: "acme".into(),
            conversation: None,
            author: Some("key:ci".into()),
            stored: "01J0000000000000000000000A".into(),
            similar: "01J0000000000000000000000B".into(),
            until: 1,
        };
        let sealed = seal(&[7; 32], &state);
        assert_eq!(open(&[7; 32], &sealed), Some(state));
        let (body, tag) = sealed.split_once('.').unwrap();
        let mut forged: Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(body).unwrap()).unwrap();
        forged["tenant"] = json!("other");
        let forged = format!("{}.{tag}", URL_SAFE_NO_PAD.encode(forged.to_string()));
        assert_eq!(open(&[7; 32], &forged), None);
        assert_eq!(open(&[8; 32], &sealed), None, "another server's key");
        assert_eq!(open(&[7; 32], "not.sealed"), None);
    }
}
