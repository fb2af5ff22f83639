//! Who may see each memory of a tenant: the whole tenant, or one conversation, until the
//! memory expires. Conversations are numbered as first seen, so a search compares small
//! integers, never strings; and the memories and terms of each audience are kept added up,
//! so BM25's corpus (what the caller can see) needs no pass over the tenant. A memory that
//! expires is also added up by its expiry, so the corpus at a request's instant leaves out
//! what has expired by then, exactly, though the store's sweep has not deleted it yet.

use std::collections::{BTreeMap, HashMap};

use super::Position;
use crate::memory::{Scope, Visibility};

type Audience = u32;
const PROJECT: Audience = 0;
/// A conversation note without a conversation: no request can see it.
const NOBODY: Audience = u32::MAX;
const NEVER: i64 = i64::MAX;
/// A conversation's entries in the map, by number and in `totals`, besides its id.
const PER_CONVERSATION: usize = 96;

/// How many memories an audience holds, and how many terms they have together.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    pub memories: u64,
    pub terms: u64,
}

impl Totals {
    fn add(&mut self, terms: u64) {
        self.memories += 1;
        self.terms += terms;
    }

    fn take(&mut self, terms: u64) {
        self.memories -= 1;
        self.terms -= terms;
    }
}

#[derive(Default)]
pub struct Audiences {
    /// Each memory's, by position.
    of: Vec<Audience>,
    /// Each memory's expiry (ms), by position; `NEVER` for most.
    expires: Vec<i64>,
    conversations: HashMap<Box<str>, Audience>,
    /// Each conversation's id, by its number less one (empty once released), so the
    /// numbers of conversations whose last note went are reused and their ids let go.
    spellings: Vec<Box<str>>,
    free: Vec<Audience>,
    /// What the conversations take, kept as they come and go (`conversation_bytes`).
    conversation_bytes: usize,
    totals: HashMap<Audience, Totals>,
    /// The part of `totals` that expires, by audience and expiry.
    expiring: BTreeMap<(Audience, i64), Totals>,
}

fn conversation_bytes(id: &str) -> usize {
    PER_CONVERSATION + 2 * id.len()
}

/// What one request may see, in the index's numbers: the project, and its conversation's
/// notes if any memory has that conversation, as of its instant.
#[derive(Clone, Copy)]
pub struct Viewer {
    mine: Option<Audience>,
    /// The request's instant; None when no memory of the index expires, so a scan of a
    /// tenant without expiry never reads `expires`.
    at: Option<i64>,
}

impl Audiences {
    /// The audience of a memory added at the end, with `terms` terms.
    pub fn push(
        &mut self,
        scope: Scope,
        conversation: Option<&str>,
        expires_at: Option<i64>,
        terms: usize,
    ) {
        let audience = match (scope, conversation) {
            (Scope::Project, _) => PROJECT,
            (Scope::Conversation, None) => NOBODY,
            (Scope::Conversation, Some(c)) => self.conversation(c),
        };
        let expires = expires_at.unwrap_or(NEVER);
        self.totals.entry(audience).or_default().add(terms as u64);
        if expires != NEVER {
            (self.expiring.entry((audience, expires)).or_default()).add(terms as u64);
        }
        self.of.push(audience);
        self.expires.push(expires);
    }

    /// The number of conversation `id`, a new one if no memory has it.
    fn conversation(&mut self, id: &str) -> Audience {
        if let Some(audience) = self.conversations.get(id) {
            return *audience;
        }
        let audience = match self.free.pop() {
            Some(audience) => {
                self.spellings[audience as usize - 1] = id.into();
                audience
            }
            None => {
                self.spellings.push(id.into());
                // Numbers are reused, so there are never more than the memories.
                self.spellings.len() as Audience
            }
        };
        self.conversations.insert(id.into(), audience);
        self.conversation_bytes += conversation_bytes(id);
        audience
    }

    /// Removes the memory at `gone`, which had `terms` terms; the last takes its place. A
    /// conversation left with no note is released.
    pub fn swap_remove(&mut self, gone: Position, terms: u32) {
        let audience = self.of.swap_remove(gone.index());
        let expires = self.expires.swap_remove(gone.index());
        if let Some(total) = self.totals.get_mut(&audience) {
            total.take(u64::from(terms));
            if total.memories == 0 && audience != PROJECT {
                self.totals.remove(&audience);
                if audience != NOBODY {
                    let id = std::mem::take(&mut self.spellings[audience as usize - 1]);
                    self.conversations.remove(&id);
                    self.conversation_bytes -= conversation_bytes(&id);
                    self.free.push(audience);
                }
            }
        }
        if let Some(total) = self.expiring.get_mut(&(audience, expires)) {
            total.take(u64::from(terms));
            if total.memories == 0 {
                self.expiring.remove(&(audience, expires));
            }
        }
    }

    pub fn viewer(&self, visibility: &Visibility) -> Viewer {
        Viewer {
            mine: visibility
                .conversation
                .as_ref()
                .and_then(|c| self.conversations.get(c.as_str()).copied()),
            at: (!self.expiring.is_empty()).then_some(visibility.at),
        }
    }

    /// Whether `viewer` may see the memory at `position` (a bare index, for scan loops).
    #[inline]
    pub fn sees(&self, viewer: Viewer, position: usize) -> bool {
        let audience = self.of[position];
        (audience == PROJECT || Some(audience) == viewer.mine)
            && viewer.at.is_none_or(|at| self.expires[position] > at)
    }

    /// How many conversations have a note.
    pub fn conversations(&self) -> usize {
        self.conversations.len()
    }

    /// What the conversations take: their ids, twice (in the map and by number).
    pub fn conversation_bytes(&self) -> usize {
        self.conversation_bytes
    }

    /// `conversation_bytes` counted the long way, to check the running count.
    #[cfg(test)]
    pub fn recount_conversations(&self) -> usize {
        self.conversations
            .keys()
            .map(|id| conversation_bytes(id))
            .sum()
    }

    /// How many (audience, expiry) sums are kept: about one per memory that expires.
    pub fn expiring(&self) -> usize {
        self.expiring.len()
    }

    /// Everything `viewer` can see, added up: its audiences, less what expired by its
    /// instant (the few memories the sweep has yet to delete).
    pub fn visible(&self, viewer: Viewer) -> Totals {
        let mut sum = Totals::default();
        let at = viewer.at.unwrap_or(i64::MIN);
        for audience in [Some(PROJECT), viewer.mine].into_iter().flatten() {
            let all = self.totals.get(&audience).copied().unwrap_or_default();
            let expired = (self.expiring.range((audience, i64::MIN)..=(audience, at))).fold(
                Totals::default(),
                |sum, (_, t)| Totals {
                    memories: sum.memories + t.memories,
                    terms: sum.terms + t.terms,
                },
            );
            sum.memories += all.memories - expired.memories;
            sum.terms += all.terms - expired.terms;
        }
        sum
    }
}
