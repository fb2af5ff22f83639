//! The calibration set as one model sees it: each part stored apart in a search index of its
//! own, as a tenant's memories are (`crate::search`), and what a recall or a `remember`
//! would find there, kept so that `fit` can try its numbers without embedding again.

use std::collections::HashMap;
use std::sync::Arc;

use super::set::{self, Script as Written};
use crate::dedup;
use crate::memory::{Hit, KeywordHit, Memory, NewMemory, Scope, Visibility};
use crate::ranking::{self, Candidate, Evidence, RecallMode};
use crate::search::{self, Entry, Query, SearchIndex, VectorFiles};

/// The vector of every text of the set, by its text: memories (and the texts of the pairs)
/// as stored, questions as asked.
#[derive(Default)]
pub struct Vectors {
    pub memories: HashMap<String, Vec<f32>>,
    pub questions: HashMap<String, Vec<f32>>,
}

impl Vectors {
    /// The texts each map needs, each once, in the set's order.
    pub fn wanted(parts: &[set::Part]) -> (Vec<String>, Vec<String>) {
        let mut memories = Vec::new();
        let mut questions = Vec::new();
        for part in parts {
            memories.extend(part.memories.iter().map(|m| m.text.clone()));
            for r in &part.repeats {
                memories.extend([r.stored.clone(), r.repeat.clone()]);
            }
            for d in &part.different {
                memories.extend([d.stored.clone(), d.other.clone()]);
            }
            questions.extend(part.questions.iter().map(|q| q.text.clone()));
            questions.extend(part.unanswerable.iter().map(|u| u.text.clone()));
        }
        (distinct(memories), distinct(questions))
    }
}

fn distinct(texts: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    texts
        .into_iter()
        .filter(|t| seen.insert(t.clone()))
        .collect()
}

/// One question as its part's index answered it.
#[derive(Debug, Clone)]
pub struct Asked {
    pub part: usize,
    /// How the question is written, and how the memory it is about is (its answer's, or
    /// the nearest one's for a question nothing answers).
    pub pair: (Written, Written),
    /// The memory that answers it; None: nothing does.
    pub answer: Option<String>,
    /// Its similarity to the memory that answers it.
    pub answer_similarity: Option<f64>,
    pub script: ranking::Script,
    /// What recall ranks (`crate::tools` recall's search, unchanged).
    pub candidates: Vec<Candidate>,
    pub evidence: Evidence,
}

/// A new memory said beside a stored one: a repeat, which must be refused, or a different
/// fact, which must be kept.
#[derive(Debug, Clone)]
pub struct Paired {
    pub part: usize,
    pub lang: Written,
    pub repeat: bool,
    pub new: NewMemory,
    /// Its `dedup::NEIGHBOURS` nearest among its part's memories and the stored text, as the
    /// duplicate check sees them.
    pub neighbours: Vec<Hit>,
    /// Its similarity to the stored text.
    pub similarity: f64,
}

/// The whole set as one model sees it.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub parts: usize,
    pub asked: Vec<Asked>,
    pub paired: Vec<Paired>,
}

/// Every part stored apart and every question asked, as recall asks it with
/// `keyword_weight`; `now` is every memory's creation time.
pub fn observe(parts: &[set::Part], vectors: &Vectors, keyword_weight: f64, now: i64) -> Observed {
    let mut observed = Observed {
        parts: parts.len(),
        ..Observed::default()
    };
    let everyone = Visibility::now(None);
    for (p, part) in parts.iter().enumerate() {
        let width = (part.memories.first()).map_or(0, |m| vectors.memories[&m.text].len());
        let mut index = SearchIndex::new(width, &VectorFiles::heap());
        let mut stored: HashMap<&str, (Arc<Memory>, &[f32], Written)> = HashMap::new();
        for m in &part.memories {
            let vector = &vectors.memories[&m.text];
            let entry = Entry {
                id: &m.id,
                scope: Scope::Project,
                conversation: None,
                expires_at: None,
            };
            index.push(entry, vector, &search::terms(&m.text));
            stored.insert(
                &m.id,
                (Arc::new(memory(&m.id, &m.text, now)), vector, m.lang),
            );
        }
        let hit = |position: search::Position, similarity: f64| Hit {
            memory: Arc::clone(&stored[index.id(position)].0),
            similarity,
        };
        let ask = |text: &str, about: &str, answers: bool| {
            let vector = &vectors.questions[text];
            let terms = search::query_terms(text);
            let hybrid = keyword_weight > 0.0 && !terms.is_empty();
            let k = match hybrid {
                true => ranking::HYBRID_CANDIDATES,
                false => ranking::candidate_count(RecallMode::Balanced.default_limit()),
            };
            let query = Query {
                vector,
                terms: &terms,
                k,
            };
            let found = index.search(&query, &everyone);
            let nearest = (found.nearest.iter()).map(|n| hit(n.position, n.similarity));
            let by_words = (found.by_words.iter()).map(|m| KeywordHit {
                hit: hit(m.position, m.similarity),
                score: m.score,
            });
            let by_words = if hybrid {
                by_words.collect()
            } else {
                Vec::new()
            };
            let candidates = ranking::fuse(nearest.collect(), by_words);
            let evidence = Evidence::of(&candidates, &terms, &found.idf);
            let (_, about_vector, about_lang) = &stored[about];
            Asked {
                part: p,
                pair: (Written::Ko, *about_lang),
                answer: answers.then(|| about.to_owned()),
                answer_similarity: answers.then(|| search::cosine(vector, about_vector)),
                script: ranking::Script::of(text),
                candidates,
                evidence,
            }
        };
        for q in &part.questions {
            let mut asked = ask(&q.text, &q.answer, true);
            asked.pair.0 = q.lang;
            observed.asked.push(asked);
        }
        for u in &part.unanswerable {
            let mut asked = ask(&u.text, &u.near, false);
            asked.pair.0 = u.lang;
            observed.asked.push(asked);
        }
        let pair = |lang: Written, repeat: bool, was: &str, new: &str, n: usize| {
            let vector = &vectors.memories[new];
            let old = &vectors.memories[was];
            let id = format!("{}-{}-{n}", part.name, if repeat { "r" } else { "d" });
            let mut neighbours: Vec<Hit> = (stored.values())
                .map(|(m, v, _)| Hit {
                    memory: Arc::clone(m),
                    similarity: search::cosine(vector, v),
                })
                .collect();
            let similarity = search::cosine(vector, old);
            neighbours.push(Hit::new(memory(&id, was, now), similarity));
            neighbours.sort_by(|a, b| b.similarity.total_cmp(&a.similarity));
            neighbours.truncate(dedup::NEIGHBOURS);
            Paired {
                part: p,
                lang,
                repeat,
                new: NewMemory::plain(&format!("{id}-new"), new, now),
                neighbours,
                similarity,
            }
        };
        for (n, r) in part.repeats.iter().enumerate() {
            observed
                .paired
                .push(pair(r.lang, true, &r.stored, &r.repeat, n));
        }
        for (n, d) in part.different.iter().enumerate() {
            observed
                .paired
                .push(pair(d.lang, false, &d.stored, &d.other, n));
        }
    }
    observed
}

fn memory(id: &str, text: &str, now: i64) -> Memory {
    NewMemory::plain(id, text, now).into_memory()
}
