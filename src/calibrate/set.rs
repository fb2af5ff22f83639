//! The calibration set (calibration/README.md): four projects' memories in Korean, English
//! and both mixed, with questions each memory answers, questions near them that nothing
//! answers, repeats that must be refused and different facts that must be kept. Compiled
//! into the binary, so every build measures on the same set.

use serde::Deserialize;

/// Each part is one project: its memories are stored apart (a tenant of its own) and its
/// questions asked among them, as the parts name the same services for different facts.
const PARTS: [(&str, &str); 4] = [
    ("ops", include_str!("../../calibration/ops.json")),
    ("code", include_str!("../../calibration/code.json")),
    ("team", include_str!("../../calibration/team.json")),
    ("infra", include_str!("../../calibration/infra.json")),
];

/// How a text is written: the pair of a question's and its memory's is what the error
/// rates are given by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Script {
    Ko,
    En,
    Mixed,
}

/// How a question reaches its memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Asked {
    /// Other words, the memory's language.
    Paraphrase,
    /// Korean about English, or English about Korean.
    OtherLanguage,
    /// By a command, flag, path, name or key the memory holds.
    Identifier,
    /// A fact in the last paragraph of a long memory.
    Tail,
}

/// What a repeat changes and leaves the fact alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rewording {
    Particle,
    Ending,
    Politeness,
    Spacing,
    Punctuation,
    Contraction,
    WordOrder,
    NearSynonym,
}

/// The one value a different fact changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Change {
    Number,
    Date,
    Version,
    Name,
    Negation,
    BeforeAfter,
    MoreLess,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Memory {
    pub id: String,
    pub lang: Script,
    pub text: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Question {
    pub id: String,
    pub lang: Script,
    pub kind: Asked,
    /// The id of the one memory that answers it.
    pub answer: String,
    pub text: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Unanswerable {
    pub id: String,
    pub lang: Script,
    /// The memory nearest its subject, which does not answer it.
    pub near: String,
    pub text: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Repeat {
    pub id: String,
    pub lang: Script,
    pub kind: Rewording,
    pub stored: String,
    pub repeat: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Different {
    pub id: String,
    pub lang: Script,
    pub kind: Change,
    pub stored: String,
    pub other: String,
}

/// One project's part of the set.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Part {
    #[serde(skip)]
    pub name: &'static str,
    pub about: String,
    pub memories: Vec<Memory>,
    pub questions: Vec<Question>,
    pub unanswerable: Vec<Unanswerable>,
    pub repeats: Vec<Repeat>,
    pub different: Vec<Different>,
}

impl Part {
    /// The memory `id` names.
    pub fn memory(&self, id: &str) -> Option<&Memory> {
        self.memories.iter().find(|m| m.id == id)
    }
}

/// The four parts, parsed from the files compiled in.
pub fn parts() -> Vec<Part> {
    PARTS
        .iter()
        .map(|(name, json)| {
            let mut part: Part = serde_json::from_str(json)
                .unwrap_or_else(|e| panic!("calibration/{name}.json is checked by its tests: {e}"));
            part.name = name;
            part
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::*;

    /// What issue 62 asks of the set, counted over the four parts.
    #[test]
    fn the_set_holds_what_it_promises() {
        let parts = parts();
        let count = |f: fn(&Part) -> usize| parts.iter().map(f).sum::<usize>();
        assert!(count(|p| p.memories.len()) >= 400);
        assert!(count(|p| p.questions.len()) >= 300);
        assert!(count(|p| p.unanswerable.len()) >= 100);
        assert!(count(|p| p.repeats.len()) >= 100);
        assert!(count(|p| p.different.len()) >= 100);
        let mut ids = HashSet::new();
        for part in &parts {
            let all = (part.memories.iter().map(|m| &m.id))
                .chain(part.questions.iter().map(|q| &q.id))
                .chain(part.unanswerable.iter().map(|u| &u.id))
                .chain(part.repeats.iter().map(|r| &r.id))
                .chain(part.different.iter().map(|d| &d.id));
            for id in all {
                assert!(ids.insert(id.clone()), "{id} twice");
            }
            for q in &part.questions {
                let memory = part.memory(&q.answer);
                assert!(memory.is_some(), "{} answers with {}", q.id, q.answer);
                if q.kind == Asked::Tail {
                    let text = &memory.unwrap().text;
                    assert!(text.chars().count() >= 1_500, "{}'s memory is long", q.id);
                }
            }
            for u in &part.unanswerable {
                assert!(
                    part.memory(&u.near).is_some(),
                    "{} is near {}",
                    u.id,
                    u.near
                );
            }
            for r in &part.repeats {
                assert_ne!(r.stored, r.repeat, "{} changes something", r.id);
            }
            for d in &part.different {
                assert_ne!(d.stored, d.other, "{} changes something", d.id);
            }
        }
        // Every script, every way of asking, every rewording and change is there to measure.
        let questions = parts.iter().flat_map(|p| &p.questions);
        let mut by_script: HashMap<Script, usize> = HashMap::new();
        let mut by_kind: HashMap<Asked, usize> = HashMap::new();
        for q in questions {
            *by_script.entry(q.lang).or_default() += 1;
            *by_kind.entry(q.kind).or_default() += 1;
        }
        assert!(by_script.values().all(|&n| n >= 50), "{by_script:?}");
        assert!(
            by_kind.len() == 4 && by_kind.values().all(|&n| n >= 30),
            "{by_kind:?}"
        );
        let rewordings: HashSet<Rewording> = parts
            .iter()
            .flat_map(|p| &p.repeats)
            .map(|r| r.kind)
            .collect();
        let changes: HashSet<Change> = parts
            .iter()
            .flat_map(|p| &p.different)
            .map(|d| d.kind)
            .collect();
        assert_eq!((rewordings.len(), changes.len()), (8, 7));
    }
}
