//! What the quality sets hold, read the same way by every benchmark that uses them: the kinds
//! of bench/korean_recall.json's questions, and LoCoMo's turns as memories. Each benchmark
//! uses part of it.
#![allow(dead_code)]

use serde_json::Value;

/// The language of the memory a fact id names.
fn language_of(fact: &str) -> &'static str {
    match fact.as_bytes()[0] {
        b'e' => "en",
        b'm' => "mixed",
        _ => "ko",
    }
}

/// A question of the multilingual set by its languages: `<question's>-><memory's>` (`ko->en`
/// is a Korean question whose answer is an English memory), `-kw` where it shares a word with
/// its Korean fact, `unanswerable-<question's>` where nothing answers it.
pub fn kind_of_question(question: &Value) -> String {
    let lang = question["lang"].as_str().unwrap();
    match question["answer"].as_str() {
        None => format!("unanswerable-{lang}"),
        Some(fact) => {
            let keyword = if question["kind"] == "keyword" {
                "-kw"
            } else {
                ""
            };
            format!("{lang}->{}{keyword}", language_of(fact))
        }
    }
}

/// Every turn of one LoCoMo conversation, in session order, as (dia_id, content): the
/// content `[session date] speaker: text`.
pub fn locomo_turns(conversation: &Value) -> Vec<(String, String)> {
    let c = conversation.as_object().unwrap();
    let mut sessions: Vec<(u32, &Value, &str)> = c
        .iter()
        .filter_map(|(k, v)| {
            let n = k.strip_prefix("session_")?.parse().ok()?;
            let date = c.get(&format!("session_{n}_date_time"))?.as_str()?;
            Some((n, v, date))
        })
        .filter(|(_, v, _)| v.is_array())
        .collect();
    sessions.sort_by_key(|(n, _, _)| *n);
    sessions
        .into_iter()
        .flat_map(|(_, turns, date)| {
            turns.as_array().unwrap().iter().map(move |t| {
                (
                    t["dia_id"].as_str().unwrap().to_owned(),
                    format!(
                        "[{date}] {}: {}",
                        t["speaker"].as_str().unwrap(),
                        t["text"].as_str().unwrap()
                    ),
                )
            })
        })
        .collect()
}

/// Whether the benchmark's environment chooses the OpenAI-compatible embedder: the quality
/// sets asked through a remote model, whose variables every server gets (`crate::mcp`).
pub fn remote() -> bool {
    std::env::var("EMBEDDING_PROVIDER").is_ok_and(|p| p == "openai")
}

/// The model folders a benchmark runs: those named on its command line, or else every model
/// `make models` fetches; under `EMBEDDING_PROVIDER=openai`, one name for the remote model.
pub fn model_dirs(root: &str) -> Vec<String> {
    // One remote model, named by whether it gets prompts.
    if remote() {
        let prompted = ["EMBEDDING_QUERY_PROMPT", "EMBEDDING_DOCUMENT_PROMPT"]
            .iter()
            .any(|k| std::env::var(k).is_ok_and(|v| !v.is_empty()));
        let name = if prompted {
            "openai-prompted"
        } else {
            "openai"
        };
        return vec![format!("{root}/.models/{name}")];
    }
    let named: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    if !named.is_empty() {
        return named;
    }
    [
        "multilingual-e5-small",
        "all-MiniLM-L6-v2",
        "all-mpnet-base-v2",
        "embeddinggemma-300m",
    ]
    .map(|m| format!("{root}/.models/{m}"))
    .to_vec()
}
