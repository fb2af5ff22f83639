//! Every number the confidence label and the duplicate rule use, fitted to what one model
//! made of the calibration set (`measure`), and the errors a set of numbers makes, counted
//! by the scripts of each question and its memory (docs/models.md, "Calibrating a model").
//!
//! - **floor**: halfway between the median similarity of a question to a memory that does
//!   not answer it (the **baseline**) and the 2nd percentile of its similarity to its
//!   answer: below every answer but the odd one, with room for the answers of a project the
//!   fit has not seen (a shared word passes the floor anyway). Answers in the other script
//!   count only for a model that reads across scripts; neither number goes below 0.
//! - **reads across scripts**: whether at least half the questions asked in the other
//!   language find their answer among the five most similar memories.
//! - **abstention**: the word weight and threshold that vouch for the fewest unanswerable
//!   questions while calling at most 10 % of the found answers no match (the fewest misses
//!   when no threshold keeps to that); none when, on the parts left out, the two shares' 95 % upper bounds add up
//!   to 1 or more: no better, for all we can tell, than never abstaining (which vouches for
//!   every unanswerable question and calls no found answer no match).
//! - **high**: the least top similarity from which the top result is the answer at least 95 %
//!   of the time and no more than 2 % of unanswerable questions reach.
//! - **duplicate rule**: for Hangul and for other texts apart, halfway between the most
//!   similar different fact whose words agree with a neighbour (or, when none does, a level
//!   unrelated texts rarely reach) and the next repeat above it, so that no different fact
//!   is refused; `similar` the 5th percentile of a different fact's similarity to the
//!   stored one.

use std::collections::BTreeMap;

use super::measure::{Asked, Observed, Paired};
use super::set::Script as Written;
use crate::dedup::{self, Rule, tokens};
use crate::embed::{Calibration, Expected, Rate};
use crate::ranking::{self, Abstention, RecallMode, Thresholds};

/// The word weights abstention is tried with.
const WORDS: [f64; 7] = [0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0];
/// The share of found answers abstention may call no match: the target for the
/// strongest model (docs/models.md, "Calibrating a model").
const MISSED: f64 = 0.1;
/// How often the top result must be the answer from the high similarity up.
const HIGH_PRECISION: f64 = 0.95;
/// The most unanswerable questions the high similarity may let through.
const HIGH_UNANSWERABLE: f64 = 0.02;

/// What a recall with `thresholds` makes of one question.
struct Outcome {
    /// Its answer is among the results when no floor and no abstention gate it.
    found: bool,
    /// Its answer is among the results.
    answered: bool,
    /// Results are shown at all.
    shown: bool,
    top_similarity: f64,
    top_is_answer: bool,
}

fn outcome(q: &Asked, t: Thresholds, keyword_weight: f64, now: i64) -> Outcome {
    let limit = RecallMode::Balanced.default_limit();
    let rank = |t: Thresholds| {
        let r = ranking::rank(
            q.candidates.clone(),
            q.script,
            RecallMode::Balanced,
            limit,
            t,
            keyword_weight,
            now,
        );
        r.results
    };
    let holds = |results: &[ranking::Ranked]| {
        (q.answer.as_deref()).is_some_and(|a| results.iter().any(|r| r.memory.id == a))
    };
    let open = Thresholds {
        floor: 0.0,
        abstention: None,
        ..t
    };
    let results = rank(t);
    Outcome {
        found: holds(&rank(open)),
        answered: holds(&results),
        shown: !results.is_empty(),
        top_similarity: results.first().map_or(0.0, |r| r.similarity),
        top_is_answer: (results.first()).is_some_and(|r| Some(&r.memory.id) == q.answer.as_ref()),
    }
}

/// The label's errors and the duplicate rule's, by pair of scripts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Errors {
    /// By (question, memory): answers found, and of them called no match.
    pub found: BTreeMap<(Written, Written), (usize, usize)>,
    /// By (question, memory): unanswerable questions, and of them vouched for.
    pub unanswerable: BTreeMap<(Written, Written), (usize, usize)>,
    /// By the pair's script: repeats, and of them stored twice.
    pub repeats: BTreeMap<Written, (usize, usize)>,
    /// By the pair's script: different facts, and of them refused.
    pub different: BTreeMap<Written, (usize, usize)>,
}

impl Errors {
    /// Both counts summed over every pair of scripts.
    pub fn total(counts: &BTreeMap<impl Ord, (usize, usize)>) -> (usize, usize) {
        (counts.values()).fold((0, 0), |(n, k), (a, b)| (n + a, k + b))
    }

    /// Each kind of error over every pair of scripts, as a fit records them.
    pub fn expected(&self) -> Expected {
        let rate = |(of, errors)| Rate { errors, of };
        Expected {
            found_called_no_match: rate(Self::total(&self.found)),
            unanswerable_vouched: rate(Self::total(&self.unanswerable)),
            repeats_stored_twice: rate(Self::total(&self.repeats)),
            different_refused: rate(Self::total(&self.different)),
        }
    }

    fn add(&mut self, other: Errors) {
        fn merge<K: Ord>(
            into: &mut BTreeMap<K, (usize, usize)>,
            from: BTreeMap<K, (usize, usize)>,
        ) {
            for (key, (n, k)) in from {
                let counts = into.entry(key).or_default();
                counts.0 += n;
                counts.1 += k;
            }
        }
        merge(&mut self.found, other.found);
        merge(&mut self.unanswerable, other.unanswerable);
        merge(&mut self.repeats, other.repeats);
        merge(&mut self.different, other.different);
    }
}

/// The errors `thresholds` and `rule` make on the parts `held`.
pub fn errors(
    observed: &Observed,
    held: impl Fn(usize) -> bool,
    thresholds: Thresholds,
    rule: Rule,
    keyword_weight: f64,
    now: i64,
) -> Errors {
    let mut errors = Errors::default();
    for q in observed.asked.iter().filter(|q| held(q.part)) {
        let o = outcome(q, thresholds, keyword_weight, now);
        let vouched = o.shown && (thresholds.abstention).is_none_or(|a| a.addresses(q.evidence));
        match q.answer {
            Some(_) if o.found => {
                let counts = errors.found.entry(q.pair).or_default();
                counts.0 += 1;
                counts.1 += usize::from(!(o.answered && vouched));
            }
            Some(_) => {}
            None => {
                let counts = errors.unanswerable.entry(q.pair).or_default();
                counts.0 += 1;
                counts.1 += usize::from(vouched);
            }
        }
    }
    for pair in observed.paired.iter().filter(|p| held(p.part)) {
        let refused = matches!(
            dedup::judge(&pair.new, &pair.neighbours, rule),
            dedup::Verdict::Repeat(_)
        );
        let (counts, wrong) = match pair.repeat {
            true => (errors.repeats.entry(pair.lang).or_default(), !refused),
            false => (errors.different.entry(pair.lang).or_default(), refused),
        };
        counts.0 += 1;
        counts.1 += usize::from(wrong);
    }
    errors
}

/// Every number fitted on the parts `held`; no abstention unless `abstains`.
pub fn fit(
    observed: &Observed,
    held: impl Fn(usize) -> bool,
    keyword_weight: f64,
    now: i64,
    abstains: bool,
) -> Calibration {
    let asked: Vec<&Asked> = observed.asked.iter().filter(|q| held(q.part)).collect();
    let answerable: Vec<&Asked> = asked
        .iter()
        .copied()
        .filter(|q| q.answer.is_some())
        .collect();
    let across: Vec<bool> = (answerable.iter())
        .filter(|q| crosses(q.pair))
        .map(|q| {
            let mut by_meaning: Vec<&ranking::Candidate> = q.candidates.iter().collect();
            by_meaning.sort_by(|a, b| b.hit.similarity.total_cmp(&a.hit.similarity));
            (by_meaning.iter().take(5)).any(|c| Some(&c.hit.memory.id) == q.answer.as_ref())
        })
        .collect();
    let reads_across_scripts =
        !across.is_empty() && across.iter().filter(|&&f| f).count() * 2 >= across.len();
    let mut unrelated: Vec<f64> = (answerable.iter())
        .flat_map(|q| {
            (q.candidates.iter())
                .filter(|c| Some(&c.hit.memory.id) != q.answer.as_ref())
                .map(|c| c.hit.similarity)
        })
        .collect();
    let typical = quantile(&mut unrelated, 0.5).unwrap_or(0.0).max(0.0);
    let rare = quantile(&mut unrelated, 0.99).unwrap_or(0.0);
    // A model that cannot read across scripts finds those answers by their words alone.
    let mut answers: Vec<f64> = (answerable.iter())
        .filter(|q| reads_across_scripts || !crosses(q.pair))
        .filter_map(|q| q.answer_similarity)
        .collect();
    let least = quantile(&mut answers, 0.02).unwrap_or(0.0).max(0.0);
    let floor = ((least + typical) / 2.0).min(least);
    let baseline = typical.min(floor);
    let open = Thresholds {
        floor,
        high: f64::INFINITY,
        baseline,
        abstention: None,
        reads_across_scripts,
    };
    let outcomes: Vec<(&Asked, Outcome)> = (asked.iter())
        .map(|q| (*q, outcome(q, open, keyword_weight, now)))
        .collect();
    let abstention = abstention(&outcomes).filter(|_| abstains);
    let high = high(&outcomes, abstention);
    Calibration {
        floor,
        high: Some(high.max(floor)),
        baseline,
        duplicates: rule(observed, &held, rare),
        abstention,
        reads_across_scripts,
    }
}

/// Korean asked of English or the reverse.
fn crosses(pair: (Written, Written)) -> bool {
    matches!(
        pair,
        (Written::Ko, Written::En) | (Written::En, Written::Ko)
    )
}

/// The abstention that vouches for the fewest unanswerable questions while calling at most
/// `MISSED` of the found answers no match; when none can, the one that misses fewest. None
/// when never abstaining does as well.
fn abstention(outcomes: &[(&Asked, Outcome)]) -> Option<Abstention> {
    let found = outcomes
        .iter()
        .filter(|(q, o)| q.answer.is_some() && o.found)
        .count();
    let unanswerable = outcomes.iter().filter(|(q, _)| q.answer.is_none()).count();
    let share = |k: usize, n: usize| if n == 0 { 0.0 } else { k as f64 / n as f64 };
    // Worse is further above the allowed misses, then vouching for more, then missing more.
    let worse = |a: (f64, f64), b: (f64, f64)| {
        let over = |s: (f64, f64)| (s.0 - MISSED).max(0.0);
        (over(a), a.1, a.0).partial_cmp(&(over(b), b.1, b.0)) == Some(std::cmp::Ordering::Greater)
    };
    let errors = |vouched: &dyn Fn(&Asked, &Outcome) -> bool| {
        let missed = (outcomes.iter())
            .filter(|(q, o)| q.answer.is_some() && o.found && !(o.answered && vouched(q, o)))
            .count();
        let wrong = (outcomes.iter())
            .filter(|(q, o)| q.answer.is_none() && vouched(q, o))
            .count();
        (share(missed, found), share(wrong, unanswerable))
    };
    let mut best: (Option<Abstention>, (f64, f64)) = (None, errors(&|_, o| o.shown));
    for words in WORDS {
        let signal = |q: &Asked| q.evidence.similarity + words * q.evidence.words;
        let mut levels: Vec<f64> = outcomes.iter().map(|(q, _)| signal(q)).collect();
        levels.sort_by(f64::total_cmp);
        levels.dedup();
        // Each threshold halfway between two levels the evidence reaches.
        for pair in levels.windows(2) {
            let threshold = (pair[0] + pair[1]) / 2.0;
            let shares = errors(&|q, o| o.shown && signal(q) >= threshold);
            if worse(best.1, shares) {
                best = (Some(Abstention { words, threshold }), shares);
            }
        }
    }
    best.0
}

/// The least top similarity that is a confident match (`HIGH_PRECISION`,
/// `HIGH_UNANSWERABLE`); 1 when none is.
fn high(outcomes: &[(&Asked, Outcome)], abstention: Option<Abstention>) -> f64 {
    let addressed = |q: &Asked| abstention.is_none_or(|a| a.addresses(q.evidence));
    let shown: Vec<(&Asked, &Outcome)> = (outcomes.iter())
        .filter(|(q, o)| o.shown && addressed(q))
        .map(|(q, o)| (*q, o))
        .collect();
    let unanswerable = outcomes.iter().filter(|(q, _)| q.answer.is_none()).count();
    let mut levels: Vec<f64> = shown.iter().map(|(_, o)| o.top_similarity).collect();
    levels.sort_by(f64::total_cmp);
    levels.dedup();
    for level in levels {
        let above = shown.iter().filter(|(_, o)| o.top_similarity >= level);
        let (mut right, mut answerable, mut wrong) = (0usize, 0usize, 0usize);
        for (q, o) in above {
            match q.answer {
                Some(_) => {
                    answerable += 1;
                    right += usize::from(o.top_is_answer);
                }
                None => wrong += 1,
            }
        }
        let precise =
            answerable > 0 && right as f64 >= HIGH_PRECISION * (answerable + wrong) as f64;
        let rare = wrong as f64 <= HIGH_UNANSWERABLE * unanswerable as f64;
        if precise && rare {
            return level;
        }
    }
    1.0
}

/// The duplicate rule fitted on the pairs of the parts `held`; `rare` is a similarity
/// unrelated texts seldom reach.
fn rule(observed: &Observed, held: &impl Fn(usize) -> bool, rare: f64) -> Rule {
    let pairs: Vec<&Paired> = observed.paired.iter().filter(|p| held(p.part)).collect();
    let agreeing = |p: &Paired| {
        let new = tokens::said(&p.new.content);
        (p.neighbours.iter())
            .filter(|n| tokens::agree(&new, &tokens::said(&n.memory.content)))
            .map(|n| n.similarity)
            .fold(None, |best: Option<f64>, s| {
                Some(best.map_or(s, |b| b.max(s)))
            })
    };
    let repeat_for = |script: ranking::Script| {
        let ours = pairs
            .iter()
            .filter(|p| ranking::Script::of(&p.new.content) == script);
        let (mut different, mut repeats) = (Vec::new(), Vec::new());
        for p in ours {
            if let Some(s) = agreeing(p) {
                match p.repeat {
                    true => repeats.push(s),
                    false => different.push(s),
                }
            }
        }
        let low = different.into_iter().fold(rare, f64::max);
        let next = repeats
            .into_iter()
            .filter(|&s| s > low)
            .fold(None, |m: Option<f64>, s| Some(m.map_or(s, |m| m.min(s))));
        match next {
            Some(next) => (low + next) / 2.0,
            None => (low + 0.01).min(1.0),
        }
    };
    let repeat = repeat_for(ranking::Script::Other);
    let hangul_repeat = repeat_for(ranking::Script::Hangul);
    let mut different: Vec<f64> = (pairs.iter())
        .filter(|p| !p.repeat)
        .map(|p| p.similarity)
        .collect();
    let similar = quantile(&mut different, 0.05)
        .unwrap_or(Rule::SPECIFIED.similar)
        .min(repeat.min(hangul_repeat));
    Rule {
        repeat,
        hangul_repeat,
        similar,
    }
}

/// The `q` quantile of `values` (the nearest rank below), None for none.
fn quantile(values: &mut [f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let at = ((values.len() - 1) as f64 * q).floor() as usize;
    Some(values[at])
}

/// Each part judged by numbers fitted on the others (leave one part out).
pub fn cross_validate(
    observed: &Observed,
    keyword_weight: f64,
    now: i64,
    abstains: bool,
) -> Errors {
    let mut held_out = Errors::default();
    for part in 0..observed.parts {
        let fit = fit(observed, |p| p != part, keyword_weight, now, abstains);
        held_out.add(errors(
            observed,
            |p| p == part,
            fit.thresholds(),
            fit.duplicates,
            keyword_weight,
            now,
        ));
    }
    held_out
}

/// A model's fit on the whole set, and the errors of fits on parts they did not see.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibrated {
    pub calibration: Calibration,
    pub held_out: Errors,
    /// Whether abstaining told found answers from unanswerable questions on the parts left
    /// out; when not, the fit has no abstention.
    pub separable: bool,
}

/// The fit of every number, its abstention kept only if it holds on parts it did not see.
pub fn calibrate(observed: &Observed, keyword_weight: f64, now: i64) -> Calibrated {
    let held_out = cross_validate(observed, keyword_weight, now, true);
    let upper = |(n, k): (usize, usize)| wilson(k, n).1;
    let separable =
        upper(Errors::total(&held_out.found)) + upper(Errors::total(&held_out.unanswerable)) < 1.0;
    let held_out = match separable {
        true => held_out,
        false => cross_validate(observed, keyword_weight, now, false),
    };
    Calibrated {
        calibration: fit(observed, |_| true, keyword_weight, now, separable),
        held_out,
        separable,
    }
}

/// The Wilson score interval of `k` in `n` at 95 %.
pub fn wilson(k: usize, n: usize) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (k, n, z) = (k as f64, n as f64, 1.96_f64);
    let p = k / n;
    let centre = p + z * z / (2.0 * n);
    let spread = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt();
    let denominator = 1.0 + z * z / n;
    (
        ((centre - spread) / denominator).max(0.0),
        ((centre + spread) / denominator).min(1.0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::measure::{Asked, Paired};
    use crate::memory::{Hit, NewMemory};
    use crate::ranking::{Candidate, Evidence};

    const NOW: i64 = 1_800_000_000_000;
    const PARTS: usize = 4;
    const MEMORIES: usize = 20;

    fn new(id: &str, text: &str) -> NewMemory {
        NewMemory::plain(id, text, NOW)
    }

    /// A question of part `part` whose memories sit at `similarities` (memory i at the
    /// i-th), answered by memory `answer` when given.
    fn asked(part: usize, answer: Option<usize>, similarities: &[f64]) -> Asked {
        let candidates: Vec<Candidate> = (similarities.iter().enumerate())
            .map(|(i, &s)| {
                Candidate::from(Hit::new(new(&format!("m{i}"), "fact").into_memory(), s))
            })
            .collect();
        let top = similarities.iter().copied().fold(0.0, f64::max);
        Asked {
            part,
            pair: (Written::En, Written::En),
            answer: answer.map(|a| format!("m{a}")),
            answer_similarity: answer.map(|a| similarities[a]),
            script: ranking::Script::Other,
            candidates,
            evidence: Evidence {
                similarity: top,
                words: 0.0,
            },
        }
    }

    /// A different spread for every question, from a fixed seed.
    fn spread(seed: usize, i: usize) -> f64 {
        ((seed * 7919 + i * 104_729) % 1000) as f64 / 1000.0
    }

    /// Four parts of ten answerable questions (answer at `answer_at` plus a spread, the rest
    /// 0.2 to 0.3) and five unanswerable ones (top at `unanswerable_at` plus a spread).
    fn model(answer_at: f64, unanswerable_at: f64, width: f64) -> Observed {
        let mut observed = Observed {
            parts: PARTS,
            ..Observed::default()
        };
        for part in 0..PARTS {
            for q in 0..10 {
                let seed = part * 100 + q;
                let mut s: Vec<f64> = (0..MEMORIES).map(|i| 0.2 + 0.1 * spread(seed, i)).collect();
                s[q] = answer_at + width * spread(seed, 99);
                observed.asked.push(asked(part, Some(q), &s));
            }
            for u in 0..5 {
                let seed = part * 100 + 50 + u;
                let mut s: Vec<f64> = (0..MEMORIES).map(|i| 0.2 + 0.1 * spread(seed, i)).collect();
                s[u] = unanswerable_at + width * spread(seed, 98);
                observed.asked.push(asked(part, None, &s));
            }
            let pairs = [
                (
                    true,
                    "The nightly deploy starts at 2 am.",
                    "The nightly deploy starts at 2 am",
                    0.97,
                ),
                (
                    true,
                    "We don't merge on Fridays.",
                    "We do not merge on Fridays.",
                    0.95,
                ),
                (
                    false,
                    "The mock server listens on port 12111.",
                    "The mock server listens on port 12112.",
                    0.98,
                ),
                (
                    false,
                    "Staging is rebuilt every Monday.",
                    "Staging is rebuilt every Tuesday.",
                    0.96,
                ),
            ];
            for (n, (repeat, stored, said, similarity)) in pairs.into_iter().enumerate() {
                let neighbours = vec![
                    Hit::new(new("stored", stored).into_memory(), similarity),
                    Hit::new(
                        new("other", "Unrelated words entirely here.").into_memory(),
                        0.3,
                    ),
                ];
                observed.paired.push(Paired {
                    part,
                    lang: Written::En,
                    repeat,
                    new: new(&format!("{part}-{n}"), said),
                    neighbours,
                    similarity,
                });
            }
        }
        observed
    }

    #[test]
    fn a_model_whose_answers_stand_apart_is_fitted_without_an_error() {
        let observed = model(0.8, 0.45, 0.1);
        let Calibrated {
            calibration: whole,
            held_out,
            separable,
        } = calibrate(&observed, 0.3, NOW);
        assert!(separable);
        assert_eq!(Errors::total(&held_out.found), (40, 0), "{held_out:?}");
        assert_eq!(
            Errors::total(&held_out.unanswerable),
            (20, 0),
            "{held_out:?}"
        );
        assert_eq!(Errors::total(&held_out.repeats), (8, 0), "{held_out:?}");
        assert_eq!(Errors::total(&held_out.different), (8, 0), "{held_out:?}");
        let abstention = whole.abstention.expect("a separable model abstains");
        assert!(
            (0.55..0.8).contains(&abstention.threshold),
            "between the unanswerable and the answers: {abstention:?}"
        );
        assert!(whole.floor <= 0.8 && whole.floor > 0.3, "{whole:?}");
    }

    #[test]
    fn a_model_that_cannot_tell_answers_from_the_rest_is_reported_inseparable() {
        let observed = model(0.6, 0.6, 0.3);
        let calibrated = calibrate(&observed, 0.3, NOW);
        assert!(!calibrated.separable, "{calibrated:?}");
        assert_eq!(calibrated.calibration.abstention, None);
        let (unanswerable, vouched) = Errors::total(&calibrated.held_out.unanswerable);
        assert_eq!(vouched, unanswerable, "no abstention vouches for every one");
    }

    #[test]
    fn the_interval_holds_the_rate_and_narrows_with_more() {
        let (lo, hi) = wilson(5, 50);
        assert!(lo < 0.1 && 0.1 < hi, "{lo} {hi}");
        let (lo2, hi2) = wilson(50, 500);
        assert!(hi2 - lo2 < hi - lo);
        assert_eq!(wilson(0, 20).0, 0.0);
        assert!(wilson(0, 20).1 > 0.1, "none seen in 20 is not none at all");
    }
}
