//! `memory_stats`: how many memories the caller can see, by type, and how the model that
//! embeds them was calibrated.

use async_trait::async_trait;

use serde_json::{Map, Value, json};

use super::schema::{self, Definition, Effect, NoArguments};
use super::{Answer, Tool, ToolError, ToolService, render};
use crate::context::RequestContext;
use crate::embed::{Calibrated, Rate};
use crate::memory::iso;

const EXACT_DEFINITION: Definition = Definition {
    name: "memory_stats",
    title: "Memory statistics",
    description: "How many memories this project has, by type, counting the same set recall and \
        list_memories can show: the project's memories plus this conversation's own, never another \
        conversation's.",
    effect: Effect::Reads,
    open_world: false,
    app: None,
    output,
};

fn output() -> Value {
    let rate = schema::object(json!({"errors": {"type": "integer"}, "of": {"type": "integer"}}));
    let expected = schema::object(json!({
        "foundCalledNoMatch": rate,
        "unanswerableVouched": rate,
        "repeatsStoredTwice": rate,
        "differentRefused": rate,
    }));
    schema::object(json!({
        "total": {"type": "integer"},
        "byType": {"type": "object", "additionalProperties": {"type": "integer"}},
        "lowerBound": {"type": "boolean"},
        "calibration": schema::object(json!({
            "model": {"type": "string"},
            "by": {"type": "string", "enum": ["calibrate", "project", "none"]},
            "at": {"type": ["string", "null"]},
            "expected": {"anyOf": [expected, {"type": "null"}]},
        })),
    }))
}

const BOUNDED_DEFINITION: Definition = Definition {
    name: "memory_stats",
    title: "Memory statistics",
    description: "How many memories this project has, by type, counting the same set recall and \
        list_memories can show: the project's memories plus this conversation's own, never another \
        conversation's. Very large projects are counted up to a cap, and the answer then says its \
        figures are lower bounds.",
    effect: Effect::Reads,
    open_world: false,
    app: None,
    output,
};

/// One tool, worded for the store: an exact one, or one that may stop counting at a cap.
pub(super) struct MemoryStats(&'static Definition);

pub(super) static EXACT: MemoryStats = MemoryStats(&EXACT_DEFINITION);
pub(super) static BOUNDED: MemoryStats = MemoryStats(&BOUNDED_DEFINITION);

#[async_trait]
impl Tool for MemoryStats {
    type Args = NoArguments;

    fn definition(&self) -> &'static Definition {
        self.0
    }

    async fn run(
        &self,
        service: &ToolService,
        ctx: &RequestContext,
        _: NoArguments,
    ) -> Result<Answer, ToolError> {
        stats(service, ctx).await
    }
}

/// The caller's memories counted by type; for the tool, and for `memory://stats`
/// (`resources`).
pub(super) async fn stats(
    service: &ToolService,
    ctx: &RequestContext,
) -> Result<Answer, ToolError> {
    let counts = service
        .store
        .count_by_type(&ctx.tenant, &ctx.visibility())
        .await?;
    let by_type: Map<String, Value> = (counts.by_type.iter())
        .map(|(t, n)| (t.as_str().to_owned(), json!(n)))
        .collect();
    let model = service.embedder.model().name;
    let calibrated = &service.judged().await?.calibrated;
    let data = json!({
        "total": counts.total,
        "byType": by_type,
        "lowerBound": counts.scan_cap.is_some(),
        "calibration": calibration(calibrated, &model),
    });
    let calibrated = format!("Confidence levels: {}.", calibrated.describe(&model));
    if counts.total == 0 {
        return Ok(Answer::new(
            format!("[MEMORY] This project has no memories yet.\n{calibrated}"),
            data,
        ));
    }
    let breakdown = counts
        .by_type
        .iter()
        .map(|(t, n)| format!("{t}: {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    let noun = render::memories(counts.total);
    let text = match counts.scan_cap {
        None => format!(
            "[MEMORY] {} {noun} for this project ({breakdown}).\n{calibrated}",
            counts.total
        ),
        Some(cap) => format!(
            "[MEMORY] At least {} {noun} for this project ({breakdown}). Counting stopped at \
             {cap} keys, so every figure here is a lower bound.\n{calibrated}",
            counts.total
        ),
    };
    Ok(Answer::new(text, data))
}

/// Where the numbers behind recall's confidence levels come from, as structured results
/// give it.
fn calibration(calibrated: &Calibrated, model: &str) -> Value {
    let rate = |r: Rate| json!({"errors": r.errors, "of": r.of});
    match calibrated {
        Calibrated::Recorded(fit) => json!({
            "model": model,
            "by": "calibrate",
            "at": iso(fit.at),
            "expected": {
                "foundCalledNoMatch": rate(fit.expected.found_called_no_match),
                "unanswerableVouched": rate(fit.expected.unanswerable_vouched),
                "repeatsStoredTwice": rate(fit.expected.repeats_stored_twice),
                "differentRefused": rate(fit.expected.different_refused),
            },
        }),
        Calibrated::Shipped => {
            json!({"model": model, "by": "project", "at": null, "expected": null})
        }
        Calibrated::Not => json!({"model": model, "by": "none", "at": null, "expected": null}),
    }
}
