//! Who may see each memory of a tenant: the whole tenant, or one conversation. Conversations
//! are numbered as first seen, so a search compares small integers, never strings; and the
//! memories and terms of each audience are kept added up, so BM25's corpus (what the caller
//! can see) needs no pass over the tenant.

use std::collections::HashMap;

use super::Position;
use crate::memory::{Scope, Visibility};

type Audience = u32;
const PROJECT: Audience = 0;
/// A conversation note without a conversation: no request can see it.
const NOBODY: Audience = u32::MAX;

/// How many memories an audience holds, and how many terms they have together.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    pub memories: u64,
    pub terms: u64,
}

#[derive(Default)]
pub struct Audiences {
    /// Each memory's, by position.
    of: Vec<Audience>,
    conversations: HashMap<Box<str>, Audience>,
    totals: HashMap<Audience, Totals>,
}

/// What one request may see, in the index's numbers: the project, and its conversation's
/// notes if any memory has that conversation.
#[derive(Clone, Copy)]
pub struct Viewer {
    mine: Option<Audience>,
}

impl Audiences {
    /// The audience of a memory added at the end, with `terms` terms.
    pub fn push(&mut self, scope: Scope, conversation: Option<&str>, terms: usize) {
        let audience = match (scope, conversation) {
            (Scope::Project, _) => PROJECT,
            (Scope::Conversation, None) => NOBODY,
            (Scope::Conversation, Some(c)) => {
                let next = self.conversations.len() as Audience + 1;
                *self.conversations.entry(c.into()).or_insert(next)
            }
        };
        let total = self.totals.entry(audience).or_default();
        total.memories += 1;
        total.terms += terms as u64;
        self.of.push(audience);
    }

    /// Removes the memory at `gone`, which had `terms` terms; the last takes its place.
    pub fn swap_remove(&mut self, gone: Position, terms: u32) {
        let audience = self.of.swap_remove(gone.index());
        if let Some(total) = self.totals.get_mut(&audience) {
            total.memories -= 1;
            total.terms -= u64::from(terms);
        }
    }

    pub fn viewer(&self, visibility: &Visibility) -> Viewer {
        Viewer {
            mine: visibility
                .conversation
                .as_ref()
                .and_then(|c| self.conversations.get(c.as_str()).copied()),
        }
    }

    /// Whether `viewer` may see the memory at `position` (a bare index, for scan loops).
    #[inline]
    pub fn sees(&self, viewer: Viewer, position: usize) -> bool {
        let audience = self.of[position];
        audience == PROJECT || Some(audience) == viewer.mine
    }

    /// Everything `viewer` can see, added up.
    pub fn visible(&self, viewer: Viewer) -> Totals {
        [Some(PROJECT), viewer.mine]
            .into_iter()
            .flatten()
            .filter_map(|a| self.totals.get(&a))
            .fold(Totals::default(), |sum, t| Totals {
                memories: sum.memories + t.memories,
                terms: sum.terms + t.terms,
            })
    }
}
