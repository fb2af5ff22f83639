//! `recall`: the memories closest in meaning to a question, ranked, with a confidence level.

use super::{Arguments, Memories, ToolError, args, render};
use crate::context::RequestContext;
use crate::keywords;
use crate::memory::{Memory, now_ms};
use crate::ranking::{self, Confidence, RecallMode};

pub(super) async fn run(
    memories: &Memories,
    ctx: &RequestContext,
    args: &Arguments,
) -> Result<String, ToolError> {
    let mode = args::mode(args)?;
    let query = args::required_string(args, "query")?;
    let limit = args::limit(args, mode.default_limit())?;

    let vector = memories.embedder.embed(query).await?;
    let visibility = ctx.visibility();
    let terms = keywords::query_terms(query);
    let hybrid = memories.keyword_weight > 0.0 && !terms.is_empty();
    let wanted = if hybrid {
        ranking::HYBRID_CANDIDATES
    } else {
        ranking::candidate_count(limit)
    };
    let words = if hybrid { &terms[..] } else { &[] };
    let found = memories
        .store
        .candidates(&ctx.tenant, &visibility, &vector, words, wanted)
        .await?;
    let mut candidates = ranking::fuse(found.nearest, found.by_words);
    // The store already filtered; checking again means a store bug fails closed.
    candidates.retain(|c| visibility.can_see(&c.hit.memory));

    if candidates.is_empty() {
        return Ok(format!(
            "[MEMORY] No memories stored for this project matched \"{query}\".\n{}",
            no_match_guidance(mode)
        ));
    }
    let now = now_ms();
    let ranking = ranking::rank(
        candidates,
        mode,
        limit,
        memories.min_similarity,
        memories.keyword_weight,
        now,
    );
    if ranking.results.is_empty() {
        let g = ranking.gated;
        let (noun, verb) = if g == 1 {
            ("memory", "was")
        } else {
            ("memories", "were")
        };
        return Ok(format!(
            "[MEMORY] Nothing matched \"{query}\" closely enough.\n\
             NO CONFIDENT MATCH: {g} {noun} {verb} found but fell below the similarity threshold. \
             Rephrase the query, or reason from first principles and say that you did. \
             Do not present a guess as a remembered fact."
        ));
    }

    let used: Vec<&Memory> = ranking.results.iter().map(|r| &*r.memory).collect();
    memories
        .store
        .record_access(&ctx.tenant, &visibility, &used, now)
        .await?;

    let n = ranking.results.len() as u64;
    let guidance = match ranking.confidence {
        Confidence::High => {
            "HIGH CONFIDENCE: the top result closely matches the question; use these directly."
        }
        _ => {
            "MEDIUM CONFIDENCE: these are relevant, but check that they apply to the current \
             context before relying on them."
        }
    };
    let mut out = format!(
        "[MEMORY] {n} {} matched \"{query}\" (mode: {}).\n{guidance}\n\n",
        render::memories(n),
        mode.as_str()
    );
    render::list(
        &mut out,
        ranking
            .results
            .iter()
            .map(|r| (&*r.memory, Some(r.standing))),
    );
    Ok(out)
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
