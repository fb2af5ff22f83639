//! The near-verbatim repeat rule of `remember` (docs/behavior.md#duplicate-rule): a new fact is "already
//! known" when its nearest visible neighbour is both very close in meaning and shares at
//! least half its words. Both constants are compiled in on purpose.

use std::collections::HashSet;
use std::sync::LazyLock;

use regex::Regex;

use crate::memory::{Hit, NewMemory};

/// How many neighbours the duplicate check looks at.
pub const NEIGHBOURS: usize = 5;
const MIN_SIMILARITY: f64 = 0.92;
const MIN_WORD_OVERLAP: f64 = 0.5;

static SEPARATORS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"[^\p{L}\p{N}]+").expect("static regex"));

/// Distinct lowercase words: runs of Unicode letters and numbers, so Hangul and other
/// scripts tokenize too.
pub fn words(text: &str) -> HashSet<String> {
    SEPARATORS
        .split(&text.to_lowercase())
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Jaccard similarity of the distinct words of `a` and `b`; 0 when either has none.
pub fn word_overlap(a: &str, b: &str) -> f64 {
    let (a, b) = (words(a), words(b));
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    let shared = a.intersection(&b).count();
    shared as f64 / (a.len() + b.len() - shared) as f64
}

/// The existing memory that already says `memory`'s content, if any: never the memory it
/// replaces (a correction is not a repeat). `neighbours` must already be limited to what
/// the writer may see; their order does not matter.
pub fn find_duplicate<'a>(memory: &NewMemory, neighbours: &'a [Hit]) -> Option<&'a Hit> {
    let content = memory.content.as_str();
    let nearest = neighbours
        .iter()
        .filter(|n| Some(&n.memory.id) != memory.replaces.as_ref())
        .max_by(|a, b| a.similarity.total_cmp(&b.similarity))?;
    (nearest.similarity >= MIN_SIMILARITY
        && word_overlap(content, &nearest.memory.content) >= MIN_WORD_OVERLAP)
        .then_some(nearest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{MemoryType, Scope};

    fn new(content: &str) -> NewMemory {
        NewMemory {
            id: content.into(),
            content: content.into(),
            memory_type: MemoryType::Project,
            category: None,
            tags: vec![],
            created_at: 0,
            scope: Scope::Project,
            conversation: None,
            replaces: None,
            expires_at: None,
        }
    }

    fn hit(content: &str, similarity: f64) -> Hit {
        Hit::new(new(content).into_memory(), similarity)
    }

    #[test]
    fn tokenisation_is_unicode_aware_and_lowercase() {
        let w = words("Deploy to ECR, then 배포 완료! v2.1 über-fast");
        for expected in [
            "deploy", "to", "ecr", "then", "배포", "완료", "v2", "1", "über", "fast",
        ] {
            assert!(w.contains(expected), "missing {expected} in {w:?}");
        }
        assert_eq!(w.len(), 10);
        assert!(words("  ...  ").is_empty());
    }

    #[test]
    fn overlap_is_jaccard_of_distinct_words() {
        assert_eq!(word_overlap("a b c", "a b c"), 1.0);
        assert_eq!(word_overlap("a a b", "a b"), 1.0);
        assert_eq!(word_overlap("a b c d", "a b e f"), 2.0 / 6.0);
        assert_eq!(word_overlap("", "a"), 0.0);
        assert_eq!(
            word_overlap(
                "배포는 금요일에 하지 않는다",
                "배포는 금요일에 하지 않는다."
            ),
            1.0
        );
    }

    #[test]
    fn a_repeat_must_be_close_in_meaning_and_in_words() {
        let text = "we deploy with blue green releases";
        let m = new(text);
        assert!(find_duplicate(&m, &[hit(text, 0.95)]).is_some());
        assert!(find_duplicate(&m, &[hit(text, 0.92)]).is_some());
        assert!(find_duplicate(&m, &[hit(text, 0.9199)]).is_none());
        // A paraphrase is close in meaning but shares too few words.
        assert!(find_duplicate(&m, &[hit("releases go out blue/green style", 0.95)]).is_none());
    }

    #[test]
    fn the_most_similar_neighbour_decides_whatever_the_order() {
        let text = "use pnpm not npm";
        let hits = [
            hit("something else entirely", 0.5),
            hit(text, 0.99),
            hit("pnpm", 0.93),
        ];
        assert_eq!(
            find_duplicate(&new(text), &hits).unwrap().memory.content,
            text
        );
        assert!(find_duplicate(&new(text), &[]).is_none());
    }

    #[test]
    fn a_correction_is_not_a_repeat_of_what_it_replaces_but_of_anything_else() {
        let text = "use pnpm not npm";
        let mut correction = new(text);
        correction.replaces = Some(text.into());
        // `hit` ids are their content: the neighbour is the memory being replaced.
        assert!(find_duplicate(&correction, &[hit(text, 0.99)]).is_none());
        let third = Hit::new(
            NewMemory {
                id: "third".into(),
                ..new(text)
            }
            .into_memory(),
            0.97,
        );
        assert_eq!(
            find_duplicate(&correction, &[hit(text, 0.99), third])
                .unwrap()
                .memory
                .id,
            "third"
        );
    }

    proptest::proptest! {
        /// Word overlap is a similarity: symmetric, within [0, 1], 1 for a text with words
        /// against itself, lowercased or wrapped in punctuation.
        #[test]
        fn word_overlap_is_a_similarity(a in "\\PC{0,50}", b in "\\PC{0,50}") {
            let (ab, ba) = (word_overlap(&a, &b), word_overlap(&b, &a));
            proptest::prop_assert_eq!(ab, ba);
            proptest::prop_assert!((0.0..=1.0).contains(&ab));
            if !words(&a).is_empty() {
                proptest::prop_assert_eq!(word_overlap(&a, &a), 1.0);
                proptest::prop_assert_eq!(word_overlap(&a, &format!("¿{}!", a.to_lowercase())), 1.0);
            }
        }
    }
}
