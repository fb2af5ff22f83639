//! What recall's confidence label is decided from, question by question, on every quality set,
//! for calibrating it offline (docs/models.md, "Abstention"): the multilingual set
//! (bench/korean_recall.json) and the LoCoMo development conversations with the questions
//! whose answer is never said in them (bench/locomo_unanswerable.json).
//!
//! Each set's memories go into a search index as a store keeps them (every text, no duplicate
//! check), each question is embedded, searched, fused and ranked as `recall` does at the
//! model's own thresholds (balanced, hybrid, limit 5), and one line per question is written:
//! whether its answer is among the five shown, the label recall gives, and the evidence
//! behind it (the best similarity; per result shown: similarity, share of the question's idf
//! it holds, script).
//!
//!     make models && cargo bench --bench evidence -- MODEL_DIR... [--locomo FILE]
//!
//! Writes bench/results/evidence-<model>.jsonl; bench/calibrate_labels.py reads them.

mod sets;

use std::collections::HashMap;
use std::sync::Arc;

use mcp_memory::embed::Embedder;
use mcp_memory::embed::local::LocalEmbedder;
use mcp_memory::memory::{Hit, KeywordHit, Memory, MemoryType, NewMemory, Scope, Visibility};
use mcp_memory::ranking::{self, Confidence, Evidence, RecallMode, Script};
use mcp_memory::search::{Entry, Query, SearchIndex, VectorFiles, query_terms, terms};
use serde_json::{Value, json};

const LIMIT: usize = 5;

/// One tenant's memories, and the questions asked of it.
struct Tenant {
    set: &'static str,
    memories: Vec<(String, String)>,
    questions: Vec<Question>,
}

struct Question {
    text: String,
    kind: String,
    /// The ids of the memories that answer it; none for an unanswerable question.
    answers: Vec<String>,
}

#[tokio::main]
async fn main() {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let locomo = match args.iter().position(|a| a == "--locomo") {
        Some(i) => {
            let file = args.remove(i + 1);
            args.remove(i);
            file
        }
        None => format!("{root}/../shared/data/locomo-dev.json"),
    };
    let mut tenants = vec![multilingual(root)];
    tenants.extend(locomo_tenants(root, &locomo));
    for dir in &args {
        let model = std::path::Path::new(dir);
        let name = model.file_name().unwrap().to_string_lossy().into_owned();
        let env: HashMap<&str, String> = [
            ("DATABASE_URL", "sqlite::memory:".to_owned()),
            ("EMBEDDING_PROVIDER", "local".into()),
            ("EMBEDDING_MODEL", dir.clone()),
        ]
        .into_iter()
        .collect();
        let config = mcp_memory::config::Config::from_vars(|k| env.get(k).cloned()).unwrap();
        let embedder = LocalEmbedder::load(model, None).unwrap();
        let mut lines = String::new();
        for tenant in &tenants {
            for line in ask(&embedder, &config, tenant).await {
                lines.push_str(&line.to_string());
                lines.push('\n');
            }
        }
        let out = format!("{root}/bench/results/evidence-{name}.jsonl");
        std::fs::write(&out, lines).unwrap();
        println!("wrote {out}");
    }
}

/// Stores a tenant's memories in an index, then asks each question as `recall` does.
async fn ask(
    embedder: &LocalEmbedder,
    config: &mcp_memory::config::Config,
    tenant: &Tenant,
) -> Vec<Value> {
    let texts: Vec<&str> = tenant.memories.iter().map(|(_, t)| t.as_str()).collect();
    let mut vectors = Vec::new();
    for chunk in texts.chunks(32) {
        vectors.extend(embedder.embed_batch(chunk).await.unwrap());
    }
    let mut index = SearchIndex::new(vectors[0].len(), &VectorFiles::heap());
    let mut memories = Vec::new();
    for ((id, text), vector) in tenant.memories.iter().zip(&vectors) {
        let entry = Entry {
            id,
            scope: Scope::Project,
            conversation: None,
            expires_at: None,
        };
        index.push(entry, vector, &terms(text));
        memories.push(Arc::new(memory(id, text)));
    }
    let visibility = Visibility::now(None);
    let mut lines = Vec::new();
    for q in &tenant.questions {
        let vector = embedder.embed_query(&q.text).await.unwrap();
        let words = query_terms(&q.text);
        let found = index.search(
            &Query {
                vector: &vector,
                terms: &words,
                k: ranking::HYBRID_CANDIDATES,
            },
            &visibility,
        );
        let hit = |position: mcp_memory::search::Position, similarity| Hit {
            memory: memories[position.index()].clone(),
            similarity,
        };
        let nearest = found
            .nearest
            .iter()
            .map(|n| hit(n.position, n.similarity))
            .collect();
        let by_words = found
            .by_words
            .iter()
            .map(|w| KeywordHit {
                hit: hit(w.position, w.similarity),
                score: w.score,
            })
            .collect();
        let candidates = ranking::fuse(nearest, by_words);
        let evidence = Evidence::of(&candidates, &words, &found.idf);
        let closest = (candidates.iter())
            .max_by(|a, b| a.hit.similarity.total_cmp(&b.hit.similarity))
            .map(|c| script_name(Script::of(&c.hit.memory.content)));
        let script = Script::of(&q.text);
        // The numbers the project measured for the model, as a store with no fit recorded
        // judges by.
        let thresholds = config.numbers.judged(None).thresholds;
        let addressed = (thresholds.abstention).map(|a| a.addresses(evidence));
        let ranked = ranking::rank(
            candidates,
            script,
            RecallMode::Balanced,
            LIMIT,
            thresholds,
            config.keyword_weight,
            mcp_memory::memory::now_ms(),
        );
        let label = match (ranked.results.is_empty(), addressed, ranked.confidence) {
            (true, _, _) | (_, Some(false), _) => "no_confident_match",
            (_, _, Confidence::High) => "high",
            _ => "medium",
        };
        let total: f64 = found.idf.iter().sum();
        let shown: Vec<Value> = ranked
            .results
            .iter()
            .map(|r| {
                let held = terms(&r.memory.content);
                let share = (words.iter().zip(&found.idf))
                    .filter(|(t, _)| held.contains(t))
                    .map(|(_, idf)| idf)
                    .sum::<f64>()
                    / total.max(f64::MIN_POSITIVE);
                json!({"similarity": r.similarity, "words": share,
                       "script": script_name(Script::of(&r.memory.content)),
                       "answers": q.answers.contains(&r.memory.id)})
            })
            .collect();
        let rank = (ranked.results.iter()).position(|r| q.answers.contains(&r.memory.id));
        lines.push(json!({
            "set": tenant.set, "kind": q.kind, "answerable": !q.answers.is_empty(),
            "query_script": script_name(script), "rank": rank, "label": label,
            "similarity": evidence.similarity, "words": evidence.words, "closest_script": closest,
            "idf": found.idf, "memories": tenant.memories.len(),
            "nearest": found.nearest.iter().map(|n| (n.similarity * 1e4).round() / 1e4).collect::<Vec<_>>(),
            "shown": shown,
        }));
    }
    lines
}

fn script_name(script: Script) -> &'static str {
    match script {
        Script::Hangul => "ko",
        Script::Other => "en",
    }
}

fn memory(id: &str, content: &str) -> Memory {
    NewMemory {
        id: id.to_owned(),
        content: content.to_owned(),
        memory_type: MemoryType::Project,
        category: None,
        tags: Vec::new(),
        created_at: mcp_memory::memory::now_ms(),
        scope: Scope::Project,
        conversation: None,
        replaces: None,
        expires_at: None,
        author: None,
    }
    .into_memory()
}

/// bench/korean_recall.json's facts and questions, kinds named as bench/korean.rs names them.
fn multilingual(root: &str) -> Tenant {
    let set: Value =
        serde_json::from_slice(&std::fs::read(format!("{root}/bench/korean_recall.json")).unwrap())
            .unwrap();
    let memories = (set["facts"].as_array().unwrap().iter())
        .map(|f| {
            let id = f["id"].as_str().unwrap().to_owned();
            (id, f["text"].as_str().unwrap().to_owned())
        })
        .collect();
    let questions = (set["questions"].as_array().unwrap().iter())
        .map(|q| Question {
            text: q["text"].as_str().unwrap().to_owned(),
            kind: sets::kind_of_question(q),
            answers: q["answer"]
                .as_str()
                .map(str::to_owned)
                .into_iter()
                .collect(),
        })
        .collect();
    Tenant {
        set: "multilingual",
        memories,
        questions,
    }
}

/// One tenant per LoCoMo conversation: its turns as bench/locomo.rs stores them, its questions
/// with evidence (kind: the category), and the questions of bench/locomo_unanswerable.json
/// about it.
fn locomo_tenants(root: &str, file: &str) -> Vec<Tenant> {
    let Ok(bytes) = std::fs::read(file) else {
        eprintln!("no LoCoMo data at {file}: the multilingual set only");
        return Vec::new();
    };
    let data: Vec<Value> = serde_json::from_slice(&bytes).unwrap();
    let unanswerable: Value = serde_json::from_slice(
        &std::fs::read(format!("{root}/bench/locomo_unanswerable.json")).unwrap(),
    )
    .unwrap();
    data.iter()
        .map(|sample| {
            let sample_id = sample["sample_id"].as_str().unwrap();
            let memories = sets::locomo_turns(&sample["conversation"]);
            let mut questions: Vec<Question> = (sample["qa"].as_array().unwrap().iter())
                .filter_map(|qa| {
                    let answers: Vec<String> = (qa["evidence"].as_array().into_iter().flatten())
                        .filter_map(|e| Some(e.as_str()?.trim().to_owned()))
                        .filter(|e| memories.iter().any(|(id, _)| id == e))
                        .collect();
                    (!answers.is_empty()).then(|| Question {
                        text: qa["question"].as_str().unwrap_or_default().to_owned(),
                        kind: format!("locomo-{}", qa["category"].as_u64().unwrap_or(0)),
                        answers,
                    })
                })
                .collect();
            questions.extend(
                (unanswerable["questions"].as_array().unwrap().iter())
                    .filter(|q| q["sample_id"] == sample_id)
                    .map(|q| Question {
                        text: q["question"].as_str().unwrap().to_owned(),
                        kind: "unanswerable-locomo".into(),
                        answers: Vec::new(),
                    }),
            );
            Tenant {
                set: "locomo",
                memories,
                questions,
            }
        })
        .collect()
}
