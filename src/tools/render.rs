//! How memories read in tool answers (docs/behavior.md#rendering-a-memory).

use std::fmt::Write;

use crate::memory::{Memory, Scope, iso};

/// `text` as an answer quotes it: at most `chars` characters, then `…`.
pub fn quote(text: &str, chars: usize) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(chars) {
        None => text.into(),
        Some((cut, _)) => format!("{}…", &text[..cut]).into(),
    }
}

/// `memory` for one, `memories` otherwise.
pub fn memories(n: impl Into<u64>) -> &'static str {
    if n.into() == 1 { "memory" } else { "memories" }
}

/// One numbered entry; `standing` (0..=1) only in recall results.
pub fn memory(out: &mut String, position: usize, m: &Memory, standing: Option<f64>) {
    let mut facets = vec![match &m.category {
        Some(category) => format!("{}/{category}", m.memory_type),
        None => m.memory_type.to_string(),
    }];
    if m.scope == Scope::Conversation {
        facets.push("this conversation only".into());
    }
    if let Some(standing) = standing {
        // Round half up, as the percentage is what the model reads.
        facets.push(format!(
            "{}% of the top result",
            (standing * 100.0 + 0.5).floor()
        ));
    }
    let created = iso(m.created_at);
    facets.push(format!("stored {}", created.get(..10).unwrap_or(&created)));
    let _ = write!(
        out,
        "{position}. [id:{}] ({})\n   {}",
        m.id,
        facets.join(", "),
        m.content
    );
    if !m.tags.is_empty() {
        let _ = write!(out, "\n   tags: {}", m.tags.join(", "));
    }
}

/// Entries separated by single newlines.
pub fn list<'a>(out: &mut String, entries: impl IntoIterator<Item = (&'a Memory, Option<f64>)>) {
    for (i, (m, standing)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        memory(out, i + 1, m, standing);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{Conversation, MemoryType, NewMemory};

    #[test]
    fn facets_in_order() {
        let mut m = NewMemory {
            id: "01J0000000000000000000000A".into(),
            content: "use pnpm".into(),
            memory_type: MemoryType::Pattern,
            category: Some("convention".into()),
            tags: vec!["build".into(), "node".into()],
            created_at: 1_782_909_296_789,
            scope: Scope::Conversation,
            conversation: Some(Conversation::new_unchecked("chat:1".into())),
        }
        .into_memory();
        let mut out = String::new();
        memory(&mut out, 2, &m, Some(0.845));
        assert_eq!(
            out,
            "2. [id:01J0000000000000000000000A] (pattern/convention, this conversation only, \
             85% of the top result, stored 2026-07-01)\n   use pnpm\n   tags: build, node"
        );
        m.scope = Scope::Project;
        m.category = None;
        m.tags.clear();
        let mut out = String::new();
        list(&mut out, [(&m, None), (&m, None)]);
        assert_eq!(
            out,
            "1. [id:01J0000000000000000000000A] (pattern, stored 2026-07-01)\n   use pnpm\n\
             2. [id:01J0000000000000000000000A] (pattern, stored 2026-07-01)\n   use pnpm"
        );
    }
}
