//! `recall`: the memories closest in meaning to a question, ranked, with a confidence level.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use serde_json::{Value, json};

use super::schema::{self, Definition, Effect};
use super::{Answer, Tool, ToolError, ToolService, args, render};
use crate::context::RequestContext;
use crate::embed::{Calibrated, Judged};
use crate::memory::{Memory, now_ms};
use crate::ranking::{self, Confidence, Evidence, RecallMode, Script};
use crate::search::{self, Query};

const DEFINITION: Definition = Definition {
    name: "recall",
    title: "Recall memories",
    description: "Search this project's remembered knowledge by meaning. Call it at the start of a task, \
        and before asking the user to explain something again: decisions, conventions and setup steps \
        from earlier sessions are only here. Returns the memories themselves, ranked, with a confidence \
        level. An empty result means nothing was stored on the subject, not that the subject has no \
        answer. Results are the project's shared memory plus this conversation's own notes, never \
        another conversation's.",
    effect: Effect::Reads,
    open_world: false,
    app: None,
    output,
};

fn output() -> Value {
    let mut result = schema::memory();
    result["properties"]["standing"] = json!({"type": "number", "minimum": 0, "maximum": 1});
    if let Some(required) = result["required"].as_array_mut() {
        required.push(json!("standing"));
    }
    schema::object(json!({
        "mode": {"type": "string", "enum": RecallMode::NAMES},
        "confidence": {"type": "string", "enum": ["high", "medium", "no_confident_match", "no_match"]},
        "results": {"type": "array", "items": result},
        "omitted": {"type": "integer", "minimum": 0, "description": "Lower-ranked results left out to keep the answer within its size bound."},
    }))
}

/// The longest query recall embeds and searches for, as long as the longest memory.
pub const MAX_QUERY_BYTES: usize = 32_000;
/// How much of a query an answer quotes back.
const QUOTE_CHARS: usize = 200;

#[derive(Deserialize, JsonSchema)]
pub(super) struct Args {
    /// What you want to know, in natural language.
    query: String,
    /// Maximum number of memories to return (1-50). Default: the mode's own.
    #[schemars(with = "Option<i64>")]
    limit: Option<f64>,
    /// precision: few, close matches. balanced (default). exploratory: more, looser
    /// matches; use it when balanced found nothing.
    mode: Option<RecallMode>,
}

pub(super) struct Recall;

#[async_trait]
impl Tool for Recall {
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
        let mode = args.mode.unwrap_or(RecallMode::Balanced);
        recall(service, ctx, &args.query, mode, args.limit).await
    }
}

/// What recall answers for `query`, checked as the tool checks its arguments; for the
/// tool, and for the prompt that starts a task from it (`prompts`).
pub(super) async fn recall(
    service: &ToolService,
    ctx: &RequestContext,
    query: &str,
    mode: RecallMode,
    limit: Option<f64>,
) -> Result<Answer, ToolError> {
    let query = args::non_blank(query, "query")?;
    if query.len() > MAX_QUERY_BYTES {
        return Err(ToolError::Invalid(format!(
            "`query` is {} bytes; the maximum is {MAX_QUERY_BYTES}. Ask for the one thing \
             you want to know.",
            query.len()
        )));
    }
    let limit = args::limit(limit, mode.default_limit())?;
    ranked(service, ctx, query, mode, limit).await
}

async fn ranked(
    service: &ToolService,
    ctx: &RequestContext,
    query: &str,
    mode: RecallMode,
    limit: usize,
) -> Result<Answer, ToolError> {
    let asked = render::quote(query, QUOTE_CHARS);
    let data = |confidence: &str, results: Vec<Value>, omitted: usize| json!({"mode": mode.as_str(), "confidence": confidence, "results": results, "omitted": omitted});
    let vector = service.embedder.embed_query(query).await?;
    let judged = service.judged().await?;
    let visibility = ctx.visibility();
    let terms = search::query_terms(query);
    let hybrid = service.keyword_weight > 0.0 && !terms.is_empty();
    let wanted = if hybrid {
        ranking::HYBRID_CANDIDATES
    } else {
        ranking::candidate_count(limit)
    };
    // The words go to the store whenever the model abstains by them (their idf is part
    // of the evidence), but rank only in hybrid recall.
    let abstains = judged.thresholds.abstention.is_some();
    let words = if hybrid || abstains { &terms[..] } else { &[] };
    let wanted = Query {
        vector: &vector,
        terms: words,
        k: wanted,
    };
    let found = service
        .store
        .search(&ctx.tenant, &visibility, &wanted)
        .await?;
    let by_words = if hybrid { found.by_words } else { Vec::new() };
    let mut candidates = ranking::fuse(found.nearest, by_words);
    // The store already filtered; checking again means a store bug fails closed.
    candidates.retain(|c| visibility.can_see(&c.hit.memory));
    // Only a model that abstains needs the evidence (the terms of its closest memories).
    let addressed = (judged.thresholds.abstention)
        .map(|a| a.addresses(Evidence::of(&candidates, words, &found.idf)));

    if candidates.is_empty() {
        let text = format!(
            "[MEMORY] No memories stored for this project matched \"{asked}\".\n{}",
            no_match_guidance(mode)
        );
        return Ok(Answer::new(text, data("no_match", Vec::new(), 0)));
    }
    let now = now_ms();
    let mut ranking = ranking::rank(
        candidates,
        Script::of(query),
        mode,
        limit,
        judged.thresholds,
        service.keyword_weight,
        now,
    );
    if addressed == Some(false) && !ranking.results.is_empty() {
        ranking.confidence = Confidence::NotAddressed;
    }
    if ranking.results.is_empty() {
        let g = ranking.gated;
        let (noun, verb) = if g == 1 {
            ("memory", "was")
        } else {
            ("memories", "were")
        };
        let text = format!(
            "[MEMORY] Nothing matched \"{asked}\" closely enough.\n\
             NO CONFIDENT MATCH: {g} {noun} {verb} found but fell below the similarity threshold. \
             Rephrase the query, or reason from first principles and say that you did. \
             Do not present a guess as a remembered fact.{}",
            unmeasured(judged)
        );
        return Ok(Answer::new(text, data("no_confident_match", Vec::new(), 0)));
    }

    let fit = render::fitting(ranking.results.iter().map(|r| &*r.memory));
    let omitted = ranking.results.len() - fit;
    ranking.results.truncate(fit);
    let used: Vec<&Memory> = ranking.results.iter().map(|r| &*r.memory).collect();
    service.count_uses(ctx, "recall", &used, now).await;

    let n = ranking.results.len() as u64;
    let (guidance, confidence) = match ranking.confidence {
        Confidence::High => (
            "HIGH CONFIDENCE: the top result closely matches the question; use these directly.",
            "high",
        ),
        Confidence::NotAddressed => (
            "NO CONFIDENT MATCH: these are only the closest stored memories, and none of them \
             clearly addresses the question. Use one only if it plainly answers it; otherwise \
             nothing is stored on this subject: reason from first principles and say that you \
             did. Do not present a guess as a remembered fact.",
            "no_confident_match",
        ),
        _ => (
            "MEDIUM CONFIDENCE: these are relevant, but check that they apply to the current \
             context before relying on them.",
            "medium",
        ),
    };
    let mut out = format!(
        "[MEMORY] {n} {} matched \"{asked}\" (mode: {}).\n{guidance}{}\n\n",
        render::memories(n),
        mode.as_str(),
        unmeasured(judged)
    );
    render::list(
        &mut out,
        ranking
            .results
            .iter()
            .map(|r| (&*r.memory, Some(r.standing))),
    );
    if omitted > 0 {
        out.push_str(&format!(
            "\n\n{omitted} lower-ranked {} left out: one answer carries at most {} bytes of \
             memories. Ask a narrower question to reach them.",
            render::memories(omitted as u64),
            super::MAX_ANSWER_BYTES
        ));
    }
    let results = (ranking.results.iter())
        .map(|r| {
            let mut memory = render::data(&r.memory);
            memory["standing"] = json!(r.standing);
            memory
        })
        .collect();
    let links = (ranking.results.iter())
        .map(|r| super::resources::resource(&r.memory))
        .collect();
    Ok(Answer::new(out, data(confidence, results, omitted)).linking(links))
}

/// What the label line adds when nobody measured the model's numbers: the level is the
/// specification's guess, not a measurement (docs/models.md, "Calibrating a model").
fn unmeasured(judged: &Judged) -> &'static str {
    match judged.calibrated {
        Calibrated::Not => {
            " The embedding model was never calibrated for this server, so this confidence \
             level is a rough guess."
        }
        _ => "",
    }
}

fn no_match_guidance(mode: RecallMode) -> String {
    let mut suggestions = Vec::new();
    if mode == RecallMode::Precision {
        suggestions.push("try mode 'exploratory' for a looser search");
    }
    suggestions.push("try rephrasing the query");
    suggestions.push("store the answer with remember once you have it");
    format!(
        "NO MATCH FOUND: nothing is stored on this subject. Suggestions: {}. \
         Absence of a memory is not evidence about the subject: do not infer an answer from it.",
        suggestions.join("; ")
    )
}
