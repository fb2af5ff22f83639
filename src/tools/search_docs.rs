//! `search_docs`: passages from the shared documentation library (docs/tools.md#search_docs). Offered
//! only when a knowledge base is configured. The tenant header is still required, but the
//! library is the same for every tenant.

use std::fmt::Write;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use serde_json::{Value, json};

use super::schema::{self, Definition, Effect};
use super::{Answer, Tool, ToolError, ToolService, args};
use crate::context::RequestContext;
use crate::library::Library;

pub const MAX_QUERY_CHARS: usize = 1_000;
const DEFAULT_LIMIT: usize = 5;
/// Longer passages are cut here, with a note pointing at the source.
const EXCERPT_CHARS: usize = 2_000;

const DEFINITION: Definition = Definition {
    name: "search_docs",
    title: "Search the documentation",
    description: "Search the shared documentation library (product and engineering documents, the \
        same for every project) for passages that answer a question. Use recall for what this \
        project learned; use this for what is written down. Returns excerpts with their sources.",
    effect: Effect::Reads,
    open_world: true,
    app: None,
    output,
};

fn output() -> Value {
    let excerpt = schema::object(json!({
        "text": {"type": "string"},
        "source": {"type": ["string", "null"]},
        "score": {"type": ["number", "null"]},
    }));
    schema::object(json!({"excerpts": {"type": "array", "items": excerpt}}))
}

#[derive(Deserialize, JsonSchema)]
pub(super) struct Args {
    /// The one thing you want to know, in natural language (max 1000 characters).
    query: String,
    /// How many excerpts to return (1-50). Default 5.
    #[schemars(with = "Option<i64>")]
    limit: Option<f64>,
}

pub(super) struct SearchDocs;

#[async_trait]
impl Tool for SearchDocs {
    type Args = Args;

    fn definition(&self) -> &'static Definition {
        &DEFINITION
    }

    async fn run(
        &self,
        service: &ToolService,
        _: &RequestContext,
        args: Args,
    ) -> Result<Answer, ToolError> {
        // Offered only with a library: the catalogue has no `search_docs` otherwise.
        let Some(library) = &service.docs else {
            return Err(ToolError::Invalid("unknown tool \"search_docs\".".into()));
        };
        search(library.as_ref(), args).await
    }
}

async fn search(library: &dyn Library, args: Args) -> Result<Answer, ToolError> {
    let query = args::non_blank(&args.query, "query")?;
    let length = query.chars().count();
    if length > MAX_QUERY_CHARS {
        return Err(ToolError::Invalid(format!(
            "`query` is {length} characters; the maximum is {MAX_QUERY_CHARS}. Ask for the one \
             thing you want to know."
        )));
    }
    let limit = args::limit(args.limit, DEFAULT_LIMIT)?;
    let excerpts = library.search(query, limit).await?;
    let data = json!({"excerpts": (excerpts.iter())
        .map(|e| json!({"text": excerpt(&e.text), "source": e.source, "score": e.score}))
        .collect::<Vec<_>>()});
    if excerpts.is_empty() {
        return Ok(Answer::new(
            format!(
                "[DOCS] Nothing in the documentation library matched \"{query}\".\nAn empty result \
             means nothing close to the query is indexed, which is not the same as the subject \
             having no answer. Rephrasing the query may help."
            ),
            data,
        ));
    }
    let top = excerpts
        .iter()
        .map(|e| e.score.unwrap_or(0.0))
        .fold(0.0, f64::max);
    let n = excerpts.len();
    let noun = if n == 1 { "excerpt" } else { "excerpts" };
    let mut out = format!("[DOCS] {n} {noun} matched \"{query}\" in the documentation library.\n");
    for (i, e) in excerpts.iter().enumerate() {
        let mut facets = Vec::new();
        if let Some(score) = e.score.filter(|_| top > 0.0) {
            // Relative to the top result: a raw score means nothing to the reader.
            let percent = ((score / top).min(1.0) * 100.0).round();
            facets.push(format!("{percent}% of the top result"));
        }
        if let Some(source) = &e.source {
            facets.push(format!("source: {source}"));
        }
        let _ = write!(out, "\n{}.", i + 1);
        if !facets.is_empty() {
            let _ = write!(out, " ({})", facets.join(", "));
        }
        let _ = write!(out, "\n   {}", excerpt(&e.text));
    }
    Ok(Answer::new(out, data))
}

fn excerpt(text: &str) -> String {
    match text.char_indices().nth(EXCERPT_CHARS) {
        None => text.to_owned(),
        Some((cut, _)) => format!(
            "{}… (truncated — read the source document for the rest)",
            &text[..cut]
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::library::{DocsError, Excerpt};
    use async_trait::async_trait;
    use serde_json::json;
    use std::sync::Mutex;

    /// Answers with fixed excerpts and remembers what it was asked.
    struct Shelf {
        excerpts: Result<Vec<Excerpt>, DocsError>,
        asked: Mutex<Vec<(String, usize)>>,
    }

    #[async_trait]
    impl Library for Shelf {
        async fn search(&self, query: &str, limit: usize) -> Result<Vec<Excerpt>, DocsError> {
            self.asked.lock().unwrap().push((query.into(), limit));
            self.excerpts.clone()
        }
    }

    fn shelf(excerpts: Result<Vec<Excerpt>, DocsError>) -> Shelf {
        Shelf {
            excerpts,
            asked: Mutex::default(),
        }
    }

    fn call(library: &Shelf, args: serde_json::Value) -> Result<String, ToolError> {
        answer(library, args).map(|a| a.text)
    }

    fn answer(library: &Shelf, args: serde_json::Value) -> Result<Answer, ToolError> {
        let args = args.as_object().unwrap().clone();
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(search(library, schema::parse(&args)?))
    }

    fn passage(text: &str, source: Option<&str>, score: Option<f64>) -> Excerpt {
        Excerpt {
            text: text.into(),
            source: source.map(str::to_owned),
            score,
        }
    }

    #[test]
    fn excerpts_render_in_order_relative_to_the_top_score() {
        let library = shelf(Ok(vec![
            passage(
                "Refunds take 5 business days",
                Some("s3://docs/refunds.md"),
                Some(0.8),
            ),
            passage("Invoices are monthly", None, Some(0.2)),
            passage("No score here", Some("s3://docs/x.md"), None),
        ]));
        let out = call(&library, json!({"query": "refunds"})).unwrap();
        assert_eq!(
            out,
            "[DOCS] 3 excerpts matched \"refunds\" in the documentation library.\n\
             \n1. (100% of the top result, source: s3://docs/refunds.md)\n   Refunds take 5 business days\
             \n2. (25% of the top result)\n   Invoices are monthly\
             \n3. (source: s3://docs/x.md)\n   No score here"
        );
        assert_eq!(library.asked.lock().unwrap()[0], ("refunds".into(), 5));
        call(&library, json!({"query": "refunds", "limit": 12})).unwrap();
        assert_eq!(library.asked.lock().unwrap()[1].1, 12);
    }

    #[test]
    fn long_passages_are_cut_at_two_thousand_characters() {
        let long = "é".repeat(2_500);
        let library = shelf(Ok(vec![passage(&long, None, Some(0.0))]));
        let out = call(&library, json!({"query": "q"})).unwrap();
        assert!(out.starts_with("[DOCS] 1 excerpt matched"));
        assert!(
            !out.contains('%'),
            "a zero top score shows no percentage: {out}"
        );
        let body = out.split("\n   ").nth(1).unwrap();
        assert_eq!(
            body,
            format!(
                "{}… (truncated — read the source document for the rest)",
                "é".repeat(2_000)
            )
        );
    }

    #[test]
    fn an_empty_answer_says_what_it_does_not_mean() {
        let out = call(&shelf(Ok(vec![])), json!({"query": "refunds"})).unwrap();
        assert!(
            out.starts_with("[DOCS] Nothing in the documentation library matched \"refunds\".")
        );
        assert!(out.contains("not the same as the subject having no answer"));
    }

    #[test]
    fn refusals_name_the_field_and_touch_nothing() {
        let library = shelf(Ok(vec![]));
        let Err(ToolError::Invalid(long)) = call(&library, json!({"query": "x".repeat(1_001)}))
        else {
            panic!("a 1,001-character query must be refused");
        };
        assert!(long.contains("`query` is 1001 characters") && long.contains("1000"));
        assert!(call(&library, json!({"query": "ä".repeat(1_000)})).is_ok());
        assert!(matches!(
            call(&library, json!({"query": "q", "limit": 51})),
            Err(ToolError::Invalid(_))
        ));
        assert_eq!(library.asked.lock().unwrap().len(), 1);
        let broken = shelf(Err(DocsError("AccessDeniedException: no".into())));
        let Err(ToolError::Docs(cause)) = call(&broken, json!({"query": "q"})) else {
            panic!("a library failure is a dependency failure");
        };
        assert_eq!(cause, "AccessDeniedException: no");
    }
}
