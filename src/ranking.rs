//! Recall ranking as pure functions (docs/ranking.md#ranking): fusion of the vector and keyword
//! candidates, gates, composite score, confidence and standing. No I/O and no clock: `now`
//! is an argument.
//!
//! Hybrid recall blends two paths (docs/ranking.md#relevance-blend): relevance is a blend
//! of the cosine similarity (relative to the best one) and the BM25 score of the query's
//! words (relative to the best one), weighted by `keyword_weight`; a memory passes the floor
//! if it is similar enough *or* contains a word of the query; and the mode's keep ratio
//! keeps what is close to the best by the blend, by meaning alone or by words alone. With a
//! weight of 0, or when no memory shares a word with the query, relevance is the cosine
//! alone.

use std::collections::HashMap;
use std::sync::Arc;

use crate::memory::{Hit, KeywordHit, Memory};

const DAY_MS: f64 = 86_400_000.0;
const RECENCY_HALF_LIFE_DAYS: f64 = 30.0;
const TRUST_WEIGHT: f64 = 0.1;
/// How far use can move a memory: the use term adds at most this share of the mode's similarity
/// weight, so use reorders matches whose relevance (relative to the best) is within this much of
/// each other's, and never lifts a weaker match past a clearly better one. Recalling a memory used
/// to raise its recency and its access term without bound, and what was recalled before crowded out
/// better answers. Chosen on LoCoMo, 996 questions in a row: the widest band (of 0.1, 0.03, 0.02)
/// at which no mode recalls less with uses recorded than with none (BENCHMARKS.md, "Issue 17:
/// recall without a popularity loop (LoCoMo, questions in a row)").
const USE_BAND: f64 = 0.02;
/// The uses at which the use term is half way to its ceiling.
const HALF_USES: f64 = 4.0;
/// A top result this many times above the floor is a confident match, unless the model's
/// similarities call for a measured threshold (`Thresholds`).
const HIGH_CONFIDENCE_MULTIPLE: f64 = 3.0;

/// The similarities recall judges by (docs/ranking.md#ranking): below `floor` a memory is
/// no match by meaning, and a top result at `high` or above is a confident one. Closeness
/// by meaning is measured from `baseline`, where the model puts unrelated text: a model
/// that puts every text between 0.7 and 1 would otherwise rank 0.85 and 0.80 as nearly
/// equal, and a memory's uses or a shared word would outweigh its meaning.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    pub floor: f64,
    pub high: f64,
    pub baseline: f64,
    /// Whether the best matches address the question at all, for a model measured for it.
    pub abstention: Option<Abstention>,
    /// Whether the model reads Korean and English in one space of meaning (e5): then a
    /// Hangul query's words weigh `HANGUL_WORDS` of the keyword weight, and a memory in the
    /// other script that shares no word with the query is ranked by meaning alone. An
    /// English-only model finds Korean by its words, and its cosine between the scripts
    /// means nothing.
    pub reads_across_scripts: bool,
}

impl Thresholds {
    /// The spec's rule: HIGH at 3× the floor, closeness from 0.
    pub const fn of_floor(floor: f64) -> Thresholds {
        Thresholds {
            floor,
            high: HIGH_CONFIDENCE_MULTIPLE * floor,
            baseline: 0.0,
            abstention: None,
            reads_across_scripts: false,
        }
    }
}

/// When a recall's matches are no answer (docs/ranking.md#abstention): the floor tells
/// "something is similar", not "something addresses this", because a model puts every
/// question fairly close to every memory of a tenant about one project. The signal is the
/// best match's similarity raised by how much of the question's rarer words the best
/// matches by meaning hold; below `threshold`, the confidence is NO CONFIDENT MATCH. Both
/// numbers are measured per model on the development sets (docs/models.md, "Abstention").
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Abstention {
    /// Similarity a question whose every word the best match holds gains.
    pub words: f64,
    pub threshold: f64,
}

/// What a recall found, for `Abstention`: the best similarity among the candidates, and
/// the share of the query's idf that one of the `AGREEMENT_DEPTH` most similar holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Evidence {
    pub similarity: f64,
    pub words: f64,
}

/// How many of the most similar candidates the word agreement looks at.
const AGREEMENT_DEPTH: usize = 5;

impl Evidence {
    /// `idf` is each of `terms`' (the query's, in order) as the store counted it; without
    /// it (no text index) no word agrees.
    pub fn of(candidates: &[Candidate], terms: &[String], idf: &[f64]) -> Evidence {
        let mut by_meaning: Vec<&Candidate> = candidates.iter().collect();
        by_meaning.sort_by(|a, b| b.hit.similarity.total_cmp(&a.hit.similarity));
        let similarity = by_meaning.first().map_or(0.0, |c| c.hit.similarity);
        let total: f64 = idf.iter().sum();
        let words = if total <= 0.0 || idf.len() != terms.len() {
            0.0
        } else {
            (by_meaning.iter().take(AGREEMENT_DEPTH))
                .map(|c| {
                    let held = crate::search::terms(&c.hit.memory.content);
                    (terms.iter().zip(idf))
                        .filter(|(t, _)| held.contains(t))
                        .map(|(_, idf)| idf)
                        .sum::<f64>()
                        / total
                })
                .fold(0.0, f64::max)
        };
        Evidence { similarity, words }
    }
}

impl Abstention {
    pub fn addresses(&self, evidence: Evidence) -> bool {
        evidence.similarity + self.words * evidence.words >= self.threshold
    }
}

/// How close and how many: the three recall modes of docs/ranking.md#modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RecallMode {
    Precision,
    Balanced,
    Exploratory,
}

struct Weights {
    keep_ratio: f64,
    default_limit: usize,
    similarity: f64,
    recency: f64,
}

impl RecallMode {
    pub const ALL: [RecallMode; 3] = [
        RecallMode::Precision,
        RecallMode::Balanced,
        RecallMode::Exploratory,
    ];
    pub const NAMES: [&'static str; 3] = crate::memory::names!(RecallMode, 3);

    pub const fn as_str(self) -> &'static str {
        match self {
            RecallMode::Precision => "precision",
            RecallMode::Balanced => "balanced",
            RecallMode::Exploratory => "exploratory",
        }
    }

    fn weights(self) -> Weights {
        match self {
            RecallMode::Precision => Weights {
                keep_ratio: 0.80,
                default_limit: 3,
                similarity: 0.85,
                recency: 0.10,
            },
            RecallMode::Balanced => Weights {
                keep_ratio: 0.60,
                default_limit: 5,
                similarity: 0.70,
                recency: 0.20,
            },
            RecallMode::Exploratory => Weights {
                keep_ratio: 0.35,
                default_limit: 10,
                similarity: 0.50,
                recency: 0.30,
            },
        }
    }

    pub fn default_limit(self) -> usize {
        self.weights().default_limit
    }
}

/// How much a Korean query's words weigh, as a share of the keyword weight, for a model that reads
/// Korean by meaning: Hangul is indexed as overlapping pairs of syllables, which match by accident
/// far more often than English words do, and a paraphrase then loses to any memory sharing a pair.
/// Measured with multilingual-e5-small on the multilingual set (BENCHMARKS.md, "Issue 31: memory
/// you can trust on the default model"): at the full weight of 0.5, Korean questions in other words
/// found their Korean fact among the first five 54 % of the time, against 64 % at 0.2 and 65 % by
/// meaning alone.
pub const HANGUL_WORDS: f64 = 0.4;

/// How many candidates hybrid recall asks each path for, whatever the limit: the blend
/// reorders deeply, and on LoCoMo a pool of 100 recalled more than one of 30.
pub const HYBRID_CANDIDATES: usize = 100;

/// How many neighbours to ask the store for when `limit` results are wanted: enough slack
/// for the gates, one page at most.
pub fn candidate_count(limit: usize) -> usize {
    (3 * limit).clamp(30, 100)
}

/// A memory either path found: its cosine similarity always, its keyword score when it
/// contains a word of the query (0 otherwise).
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub hit: Hit,
    pub keyword_score: f64,
    /// Written in another script than the query, and sharing no word with it: it is
    /// ranked by meaning alone (`rank`).
    pub other_script: bool,
}

impl From<Hit> for Candidate {
    fn from(hit: Hit) -> Self {
        Candidate {
            hit,
            keyword_score: 0.0,
            other_script: false,
        }
    }
}

/// The script most of a text's letters are in: a Korean question cannot share a word with
/// an English memory, nor the reverse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Script {
    Hangul,
    Other,
}

impl Script {
    pub fn of(text: &str) -> Script {
        let (mut hangul, mut other) = (0usize, 0usize);
        for c in text.chars().filter(|c| c.is_alphabetic()) {
            if ('\u{AC00}'..='\u{D7A3}').contains(&c) || ('\u{1100}'..='\u{11FF}').contains(&c) {
                hangul += 1;
            } else {
                other += 1;
            }
        }
        if hangul > other {
            Script::Hangul
        } else {
            Script::Other
        }
    }
}

/// One candidate per memory: the vector path's in its order, then those only the keyword
/// path found.
pub fn fuse(vector: Vec<Hit>, keyword: Vec<KeywordHit>) -> Vec<Candidate> {
    let by_id: HashMap<&str, usize> = keyword
        .iter()
        .enumerate()
        .map(|(i, k)| (k.hit.memory.id.as_str(), i))
        .collect();
    let mut fused = vec![false; keyword.len()];
    let mut candidates: Vec<Candidate> = vector
        .into_iter()
        .map(|hit| {
            let also = by_id.get(hit.memory.id.as_str()).copied();
            let keyword_score = match also {
                Some(i) if !fused[i] => {
                    fused[i] = true;
                    keyword[i].score
                }
                _ => 0.0,
            };
            Candidate {
                hit,
                keyword_score,
                other_script: false,
            }
        })
        .collect();
    candidates.extend(
        keyword
            .into_iter()
            .zip(fused)
            .filter(|(_, fused)| !fused)
            .map(|(k, _)| Candidate {
                hit: k.hit,
                keyword_score: k.score,
                other_script: false,
            }),
    );
    candidates
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confidence {
    High,
    Medium,
    /// Results, but none addresses the question (`Abstention`).
    NotAddressed,
    Low,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Ranked {
    pub memory: Arc<Memory>,
    pub similarity: f64,
    pub score: f64,
    /// Score relative to the top result, in [0, 1]; the first result is always 1.
    pub standing: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Ranking {
    pub results: Vec<Ranked>,
    /// Visible candidates that did not make it past the gates.
    pub gated: usize,
    pub confidence: Confidence,
}

/// Ranks visible candidates for a query written in `script`. `thresholds` come from
/// RECALL_MIN_SIMILARITY and RECALL_HIGH_SIMILARITY, `keyword_weight` from
/// RECALL_KEYWORD_WEIGHT; `now` is the request time in ms.
///
/// For a model that reads across scripts, a candidate in another script that shares no word
/// with the query is ranked by meaning alone: weighing words it cannot have would put every
/// same-script memory that shares a common word above the other-language memory that
/// answers (docs/ranking.md#relevance-blend).
pub fn rank(
    mut candidates: Vec<Candidate>,
    script: Script,
    mode: RecallMode,
    limit: usize,
    thresholds: Thresholds,
    keyword_weight: f64,
    now: i64,
) -> Ranking {
    if keyword_weight > 0.0 && thresholds.reads_across_scripts {
        for c in candidates.iter_mut().filter(|c| c.keyword_score == 0.0) {
            c.other_script = Script::of(&c.hit.memory.content) != script;
        }
    }
    let floor = thresholds.floor;
    let w = mode.weights();
    let visible = candidates.len();
    // Similar enough, or sharing a word with the query.
    let relevant: Vec<Candidate> = candidates
        .into_iter()
        .filter(|c| c.hit.similarity >= floor || c.keyword_score > 0.0)
        .collect();
    let closeness = |c: &Candidate| (c.hit.similarity - thresholds.baseline).max(0.0);
    let top_closeness = relevant.iter().map(closeness).fold(0.0, f64::max);
    let top_keyword = relevant.iter().map(|c| c.keyword_score).fold(0.0, f64::max);
    let kw = match (top_keyword > 0.0, script) {
        (false, _) => 0.0,
        (true, Script::Hangul) if thresholds.reads_across_scripts => keyword_weight * HANGUL_WORDS,
        (true, _) => keyword_weight,
    };
    let relevance = |c: &Candidate| {
        let similarity = ratio(closeness(c), top_closeness);
        let keyword = ratio(c.keyword_score, top_keyword);
        let kw = if c.other_script { 0.0 } else { kw };
        (1.0 - kw) * similarity + kw * keyword
    };
    let top_relevance = relevant.iter().map(relevance).fold(0.0, f64::max);
    // Close enough to the best by the blend, by meaning alone, or by words alone.
    let close = |c: &Candidate, r: f64| {
        r >= top_relevance * w.keep_ratio
            || (c.hit.similarity >= floor && closeness(c) >= top_closeness * w.keep_ratio)
            || (kw > 0.0 && c.keyword_score >= top_keyword * w.keep_ratio)
    };
    let keeping: Vec<(Hit, f64)> = relevant
        .into_iter()
        .filter_map(|c| {
            let r = relevance(&c);
            close(&c, r).then_some((c.hit, r))
        })
        .collect();
    let gated = visible - keeping.len();

    let mut scored: Vec<Ranked> = keeping
        .into_iter()
        .map(|(hit, relevance)| {
            // The fact's own age: being recalled does not make a memory newer.
            let days = days_since(hit.memory.created_at, now);
            let score = ratio(relevance, top_relevance) * w.similarity
                + recency(days) * w.recency
                + uses(&hit.memory) * USE_BAND * w.similarity
                + trust(&hit.memory, days) * TRUST_WEIGHT;
            Ranked {
                memory: hit.memory,
                similarity: hit.similarity,
                score,
                standing: 0.0,
            }
        })
        .collect();
    // `sort_by` is stable: ties keep the store's order.
    scored.sort_by(|a, b| b.score.total_cmp(&a.score));
    scored.truncate(limit);

    let best = scored.first().map(|r| r.score).unwrap_or(0.0);
    for r in &mut scored {
        r.standing = if best <= 0.0 {
            0.0
        } else {
            (r.score / best).min(1.0)
        };
    }
    let confidence = match scored.first() {
        None => Confidence::Low,
        Some(r) if r.similarity >= thresholds.high => Confidence::High,
        Some(_) => Confidence::Medium,
    };
    Ranking {
        results: scored,
        gated,
        confidence,
    }
}

/// `value` relative to the best, in [0, 1]; 0 when there is no best.
fn ratio(value: f64, best: f64) -> f64 {
    if best <= 0.0 {
        0.0
    } else {
        (value / best).clamp(0.0, 1.0)
    }
}

/// Whole days (fractional) since `then`; the future counts as now.
fn days_since(then: i64, now: i64) -> f64 {
    ((now - then) as f64 / DAY_MS).max(0.0)
}

/// 1 now, 0.5 after one half-life.
pub fn recency(days: f64) -> f64 {
    (-days / RECENCY_HALF_LIFE_DAYS).exp2()
}

/// How much use a memory has seen, in [0, 1]: 0 unused, half at `HALF_USES`, saturating,
/// so a memory recalled a thousand times is barely above one recalled twenty.
pub fn uses(memory: &Memory) -> f64 {
    1.0 - (-(memory.access_count as f64) / HALF_USES).exp2()
}

/// How much a memory can still be trusted: decays by its type's half-life from when it was
/// written, never above what it was written with. Use counts once, in `uses`.
pub fn trust(memory: &Memory, days: f64) -> f64 {
    let decay = (-days / memory.memory_type.trust_half_life_days()).exp2();
    memory.trust_base * decay.min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{MemoryType, NewMemory, Scope};

    const NOW: i64 = 1_800_000_000_000;
    const DAY: i64 = 86_400_000;

    fn memory(id: &str, memory_type: MemoryType, age_days: i64, access_count: u64) -> Memory {
        let mut m = NewMemory {
            id: id.into(),
            content: id.into(),
            memory_type,
            category: None,
            tags: vec![],
            created_at: NOW - age_days * DAY,
            scope: Scope::Project,
            conversation: None,
            replaces: None,
            expires_at: None,
            author: None,
        }
        .into_memory();
        m.access_count = access_count;
        m
    }

    fn hit(id: &str, similarity: f64) -> Hit {
        Hit::new(memory(id, MemoryType::Project, 0, 0), similarity)
    }

    const TENTH: Thresholds = Thresholds::of_floor(0.1);

    /// Vector-only ranking, as docs/ranking.md#ranking has it.
    fn rank(hits: Vec<Hit>, mode: RecallMode, limit: usize, floor: f64, now: i64) -> Ranking {
        super::rank(
            hits.into_iter().map(Candidate::from).collect(),
            Script::Other,
            mode,
            limit,
            Thresholds::of_floor(floor),
            0.5,
            now,
        )
    }

    fn ids(r: &Ranking) -> Vec<&str> {
        r.results.iter().map(|r| r.memory.id.as_str()).collect()
    }

    #[test]
    fn recency_reference_values() {
        assert!((recency(0.0) - 1.0).abs() < 1e-12);
        assert!((recency(30.0) - 0.5).abs() < 1e-12);
        assert!((recency(60.0) - 0.25).abs() < 1e-12);
        // A future timestamp (clock skew) counts as now.
        assert_eq!(days_since(NOW + DAY, NOW), 0.0);
    }

    #[test]
    fn trust_reference_values() {
        let untouched = memory("c", MemoryType::Conversation, 60, 0);
        assert!((trust(&untouched, 60.0) - 0.25).abs() < 1e-12);
        let fresh_and_used = memory("p", MemoryType::Project, 0, 500);
        assert_eq!(trust(&fresh_and_used, 0.0), 1.0);
        // Use no longer slows the decay: it counts once, in `uses`.
        let used = memory("p", MemoryType::Pattern, 60, 1_000_000);
        let unused = memory("p", MemoryType::Pattern, 60, 0);
        assert_eq!(trust(&used, 60.0), trust(&unused, 60.0));
    }

    #[test]
    fn use_saturates() {
        assert_eq!(uses(&memory("a", MemoryType::Project, 0, 0)), 0.0);
        assert_eq!(uses(&memory("a", MemoryType::Project, 0, 4)), 0.5);
        let heavy = uses(&memory("a", MemoryType::Project, 0, 1_000));
        assert!(heavy <= 1.0 && heavy - uses(&memory("a", MemoryType::Project, 0, 20)) < 0.04);
    }

    proptest::proptest! {
        /// Use reorders close matches only: whatever the uses, a memory whose relevance is
        /// clearly better (by more than the band) outranks one that is not, and among
        /// equals the more used goes first.
        #[test]
        fn use_never_lifts_a_weaker_match_past_a_clearly_better_one(
            better in 0.5f64..1.0,
            gap in 0.0f64..0.5,
            used in 0u64..100_000,
            mode in 0usize..3,
        ) {
            let mode = RecallMode::ALL[mode];
            let weaker = better * (1.0 - gap);
            let mut popular = hit("popular", weaker);
            Arc::make_mut(&mut popular.memory).access_count = used;
            let r = rank(vec![popular, hit("better", better)], mode, 5, 0.01, NOW);
            if gap > USE_BAND {
                proptest::prop_assert_eq!(ids(&r)[0], "better");
            }
            if gap == 0.0 && used > 0 {
                proptest::prop_assert_eq!(ids(&r)[0], "popular");
            }
        }
    }

    #[test]
    fn candidate_counts() {
        assert_eq!(candidate_count(3), 30);
        assert_eq!(candidate_count(10), 30);
        assert_eq!(candidate_count(20), 60);
        assert_eq!(candidate_count(50), 100);
    }

    #[test]
    fn precision_keeps_only_the_clear_answer_where_exploratory_keeps_the_neighbour() {
        let hits = vec![hit("neighbour", 0.69), hit("answer", 0.94)];
        let p = rank(hits.clone(), RecallMode::Precision, 3, 0.3, NOW);
        assert_eq!(ids(&p), ["answer"]);
        assert_eq!(p.gated, 1);
        let e = rank(hits, RecallMode::Exploratory, 10, 0.3, NOW);
        assert_eq!(ids(&e), ["answer", "neighbour"]);
    }

    #[test]
    fn gating_uses_the_strongest_hit_whatever_the_store_order() {
        let hits = vec![hit("c", 0.2), hit("b", 0.5), hit("a", 0.9)];
        let r = rank(hits, RecallMode::Balanced, 5, 0.1, NOW);
        assert_eq!(ids(&r), ["a"]);
        assert_eq!(r.gated, 2);
    }

    #[test]
    fn a_weak_but_best_match_is_kept() {
        let r = rank(vec![hit("weak", 0.12)], RecallMode::Precision, 3, 0.1, NOW);
        assert_eq!(ids(&r), ["weak"]);
        assert_eq!(r.confidence, Confidence::Medium);
    }

    #[test]
    fn below_the_floor_everything_is_gated_and_confidence_is_low() {
        let r = rank(
            vec![hit("a", 0.05), hit("b", 0.09)],
            RecallMode::Balanced,
            5,
            0.1,
            NOW,
        );
        assert!(r.results.is_empty());
        assert_eq!(r.gated, 2);
        assert_eq!(r.confidence, Confidence::Low);
        // The floor itself is inclusive.
        assert_eq!(
            rank(vec![hit("a", 0.1)], RecallMode::Balanced, 5, 0.1, NOW)
                .results
                .len(),
            1
        );
    }

    #[test]
    fn confidence_is_a_multiple_of_the_floor() {
        let conf = |sim: f64, floor: f64| {
            rank(vec![hit("a", sim)], RecallMode::Balanced, 5, floor, NOW).confidence
        };
        assert_eq!(conf(0.33, 0.1), Confidence::High);
        assert_eq!(conf(0.15, 0.1), Confidence::Medium);
        assert_eq!(conf(0.9, 0.7), Confidence::Medium);
    }

    /// A model that puts every text above 0.7 (e5): 0.85 and 0.84 are close from 0, so a
    /// much-used memory overtakes the better match; measured from the model's baseline they
    /// are not, and meaning decides.
    #[test]
    fn closeness_is_measured_from_the_baseline() {
        let hits = || {
            vec![
                Candidate::from(hit("better", 0.85)),
                Candidate::from(Hit::new(memory("used", MemoryType::Project, 0, 100), 0.84)),
            ]
        };
        let first = |baseline: f64| {
            let thresholds = Thresholds {
                floor: 0.78,
                high: 0.87,
                baseline,
                abstention: None,
                reads_across_scripts: false,
            };
            let r = super::rank(
                hits(),
                Script::Other,
                RecallMode::Balanced,
                5,
                thresholds,
                0.5,
                NOW,
            );
            r.results[0].memory.id.clone()
        };
        assert_eq!(first(0.0), "used");
        assert_eq!(first(0.7), "better");
    }

    #[test]
    fn a_measured_high_threshold_replaces_the_multiple() {
        // e5's similarities all sit above 0.7: 3x its floor would never be reached.
        let measured = Thresholds {
            floor: 0.78,
            high: 0.87,
            baseline: 0.0,
            abstention: None,
            reads_across_scripts: false,
        };
        let conf = |sim: f64| {
            let hits = vec![Candidate::from(hit("a", sim))];
            super::rank(
                hits,
                Script::Other,
                RecallMode::Balanced,
                5,
                measured,
                0.5,
                NOW,
            )
            .confidence
        };
        assert_eq!(conf(0.87), Confidence::High);
        assert_eq!(conf(0.869), Confidence::Medium);
        assert_eq!(conf(0.77), Confidence::Low);
    }

    #[test]
    fn standing_starts_at_one_and_never_rises() {
        let hits = vec![hit("a", 0.7), hit("b", 0.9), hit("c", 0.8), hit("d", 0.75)];
        let r = rank(hits, RecallMode::Exploratory, 10, 0.1, NOW);
        assert_eq!(r.results[0].standing, 1.0);
        assert!(r.results.windows(2).all(|w| w[0].standing >= w[1].standing));
        assert_eq!(ids(&r), ["b", "c", "d", "a"]);
    }

    #[test]
    fn an_explicit_limit_replaces_the_mode_default() {
        let hits: Vec<Hit> = (0..20).map(|i| hit(&format!("m{i:02}"), 0.9)).collect();
        assert_eq!(
            rank(hits.clone(), RecallMode::Precision, 12, 0.1, NOW)
                .results
                .len(),
            12
        );
        assert_eq!(
            rank(hits, RecallMode::Balanced, 1, 0.1, NOW).results.len(),
            1
        );
    }

    #[test]
    fn ties_keep_the_store_order() {
        let hits = vec![hit("first", 0.8), hit("second", 0.8), hit("third", 0.8)];
        let r = rank(hits, RecallMode::Balanced, 5, 0.1, NOW);
        assert_eq!(ids(&r), ["first", "second", "third"]);
    }

    #[test]
    fn use_lifts_an_equally_similar_memory_but_recall_does_not_make_it_new() {
        let mut stale = hit("stale", 0.8);
        Arc::make_mut(&mut stale.memory).created_at = NOW - 90 * DAY;
        let mut used = hit("used", 0.8);
        let memory = Arc::make_mut(&mut used.memory);
        memory.created_at = NOW - 90 * DAY;
        memory.access_count = 4;
        memory.last_accessed_at = Some(NOW - DAY);
        let r = rank(
            vec![stale.clone(), used.clone()],
            RecallMode::Balanced,
            5,
            0.1,
            NOW,
        );
        assert_eq!(ids(&r), ["used", "stale"]);
        assert!(r.results[1].standing < 1.0);
        // A newer memory a little less similar beats the old one however often it was used.
        let mut new = hit("new", 0.78);
        Arc::make_mut(&mut new.memory).created_at = NOW - DAY;
        Arc::make_mut(&mut used.memory).access_count = 1_000_000;
        let r = rank(vec![used, new], RecallMode::Exploratory, 5, 0.1, NOW);
        assert_eq!(ids(&r)[0], "new");
    }

    fn keyword(id: &str, similarity: f64, score: f64) -> KeywordHit {
        KeywordHit {
            hit: hit(id, similarity),
            score,
        }
    }

    #[test]
    fn fusion_keeps_one_candidate_per_memory() {
        let fused = fuse(
            vec![hit("both", 0.8), hit("vector", 0.7)],
            vec![keyword("keyword", 0.02, 3.0), keyword("both", 0.8, 1.0)],
        );
        let seen: Vec<(&str, f64)> = fused
            .iter()
            .map(|c| (c.hit.memory.id.as_str(), c.keyword_score))
            .collect();
        assert_eq!(seen, [("both", 1.0), ("vector", 0.0), ("keyword", 3.0)]);
    }

    #[test]
    fn a_word_match_passes_the_floor_but_never_earns_high_confidence() {
        let identifier = fuse(vec![hit("near", 0.05)], vec![keyword("exact", 0.04, 2.5)]);
        let r = super::rank(
            identifier,
            Script::Other,
            RecallMode::Balanced,
            5,
            TENTH,
            0.5,
            NOW,
        );
        assert_eq!(ids(&r), ["exact"]);
        assert_eq!(r.gated, 1);
        assert_eq!(r.confidence, Confidence::Medium);
        // With no weight on words the floor alone decides, as in docs/ranking.md#ranking.
        let dense = super::rank(
            fuse(vec![hit("near", 0.05)], vec![]),
            Script::Other,
            RecallMode::Balanced,
            5,
            TENTH,
            0.0,
            NOW,
        );
        assert!(dense.results.is_empty());
    }

    #[test]
    fn words_and_meaning_together_outrank_either_alone() {
        let fused = fuse(
            vec![hit("meaning", 0.60), hit("both", 0.55)],
            vec![keyword("both", 0.55, 2.0), keyword("words", 0.20, 2.2)],
        );
        let r = super::rank(
            fused,
            Script::Other,
            RecallMode::Exploratory,
            10,
            TENTH,
            0.5,
            NOW,
        );
        assert_eq!(ids(&r), ["both", "words", "meaning"]);
        assert_eq!(
            r.confidence,
            Confidence::High,
            "the top result is similar enough"
        );
    }

    fn worded(content: &str, similarity: f64) -> Candidate {
        let mut m = memory(content, MemoryType::Project, 0, 0);
        m.content = content.into();
        Candidate::from(Hit::new(m, similarity))
    }

    #[test]
    fn a_script_is_what_most_letters_are_written_in() {
        assert_eq!(Script::of("배포는 화요일에 한다"), Script::Hangul);
        assert_eq!(Script::of("스테이징 DB는 EKS에 있다"), Script::Hangul);
        assert_eq!(Script::of("Deploys happen on Tuesday, 배포"), Script::Other);
        assert_eq!(Script::of("8080"), Script::Other);
    }

    /// A Korean question: the English memory that answers it cannot share its words, so a
    /// Korean memory sharing one common syllable pair must not outrank it for that, with a
    /// model that reads both; an English-only model's cosine across scripts means nothing.
    #[test]
    fn a_memory_in_another_script_is_ranked_by_meaning_alone() {
        const ACROSS: Thresholds = Thresholds {
            reads_across_scripts: true,
            ..Thresholds::of_floor(0.1)
        };
        let mut shares_a_word = worded("배포 일정은 캘린더에 있다", 0.80);
        shares_a_word.keyword_score = 2.0;
        let answer = worded("Feature flags live in LaunchDarkly", 0.86);
        let first = |thresholds: Thresholds, candidates: Vec<Candidate>, weight: f64| {
            let r = super::rank(
                candidates,
                Script::Hangul,
                RecallMode::Balanced,
                5,
                thresholds,
                weight,
                NOW,
            );
            r.results[0].memory.content.clone()
        };
        let both = vec![shares_a_word.clone(), answer];
        assert_eq!(
            first(ACROSS, both.clone(), 0.5),
            "Feature flags live in LaunchDarkly"
        );
        assert_eq!(first(TENTH, both, 0.5), "배포 일정은 캘린더에 있다");
        // The same memory in the query's own script, sharing no word, is outranked: words
        // count where they could have been shared.
        let korean_answer = worded("기능 플래그는 런치다클리에 있다", 0.86);
        assert_eq!(
            first(ACROSS, vec![shares_a_word, korean_answer], 1.0),
            "배포 일정은 캘린더에 있다"
        );
    }

    #[test]
    fn evidence_is_the_best_similarity_and_the_rare_words_the_closest_hold() {
        let terms = crate::search::query_terms("LaunchDarkly flag");
        assert_eq!(terms.len(), 2);
        let idf = [3.0, 1.0];
        let candidates = [
            worded("flags are cleaned up monthly", 0.84),
            worded("LaunchDarkly holds every flag", 0.83),
            worded("unrelated", 0.5),
        ];
        let e = Evidence::of(&candidates, &terms, &idf);
        assert_eq!(e.similarity, 0.84);
        assert_eq!(e.words, 1.0);
        let e = Evidence::of(&candidates[..1], &terms, &idf);
        assert_eq!(e.words, 0.25);
        // Without the store's idf no word agrees.
        assert_eq!(Evidence::of(&candidates, &terms, &[]).words, 0.0);
        let abstention = Abstention {
            words: 0.1,
            threshold: 0.9,
        };
        assert!(abstention.addresses(Evidence {
            similarity: 0.8,
            words: 1.0
        }));
        assert!(!abstention.addresses(Evidence {
            similarity: 0.85,
            words: 0.4
        }));
    }
}
