//! What `remember` does once a store has found the new memory's nearest visible neighbours,
//! decided here for every store: whether one of them already says it (`dedup`), the memory
//! as stored, its terms, and what the write does to a tenant's index held in this process.
//! Each store keeps only its own part around it: the lock or transaction that makes check
//! and insert one step, its SQL, and where it looks for the neighbours. A change to the
//! duplicate rule or to `replaces` is made here, once (docs/behavior.md, "Duplicates").

use crate::dedup;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
use crate::memory::Conversation;
use crate::memory::{Hit, Memory, NewMemory};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
use crate::search::{self, Entry, SearchIndex};

use super::Remembered;

/// What a write decided.
pub enum Decision {
    /// Nothing is written: a neighbour already says it.
    Known(Known),
    /// The memory is written, and what it replaces (if anything) deleted.
    Store(Stored),
}

/// A memory a neighbour already says. What it was to replace is deleted all the same: the
/// caller said that memory is wrong, and the neighbour says what it should (docs/behavior.md,
/// "remember").
pub struct Known {
    pub existing: Memory,
    pub replaces: Option<String>,
}

impl Known {
    /// The write as a tenant's index takes it.
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    pub fn apply(&self, index: &mut impl Indexed) {
        if let Some(id) = &self.replaces {
            index.remove(id);
        }
    }

    /// The answer once the delete (if any) committed.
    pub fn remembered(self) -> Remembered {
        Remembered::AlreadyKnown {
            existing: self.existing,
            removed: self.replaces,
        }
    }
}

/// A memory to write.
pub struct Stored {
    pub memory: Memory,
    /// Its words as recall matches them (`search::terms`), for a store that indexes them.
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    pub terms: Vec<String>,
    /// The visible memories that say nearly the same thing (`dedup::Verdict::New`).
    similar: Vec<Memory>,
}

/// Decides the write of `memory` given its nearest neighbours (`dedup::NEIGHBOURS`, limited
/// to what the writer may see: `Visibility::for_dedup`). The caller has checked that what it
/// replaces is visible, and holds whatever keeps another writer out until it has written.
pub fn decide(memory: NewMemory, neighbours: &[Hit], rule: dedup::Rule) -> Decision {
    match dedup::judge(&memory, neighbours, rule) {
        dedup::Verdict::Repeat(existing) => Decision::Known(Known {
            existing: Memory::clone(&existing.memory),
            replaces: memory.replaces,
        }),
        dedup::Verdict::New { similar } => Decision::Store(Stored {
            #[cfg(any(feature = "sqlite", feature = "postgres"))]
            terms: search::terms(&memory.content),
            memory: memory.into_memory(),
            similar,
        }),
    }
}

impl Stored {
    /// The write as a tenant's index takes it: what it replaces out, the memory in.
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    pub fn apply(&self, index: &mut impl Indexed, vector: &[f32]) {
        if let Some(id) = &self.memory.replaces {
            index.remove(id);
        }
        index.insert(&self.memory, vector, &self.terms);
    }

    /// The answer once the write committed.
    pub fn remembered(self) -> Remembered {
        Remembered::Stored(self.memory, self.similar)
    }
}

/// A tenant's index as a write changes it in place.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub trait Indexed {
    fn insert(&mut self, memory: &Memory, vector: &[f32], terms: &[String]);
    fn remove(&mut self, id: &str);
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl Indexed for SearchIndex {
    fn insert(&mut self, memory: &Memory, vector: &[f32], terms: &[String]) {
        let entry = Entry {
            id: &memory.id,
            scope: memory.scope,
            conversation: memory.conversation.as_ref().map(Conversation::as_str),
            expires_at: memory.expires_at,
        };
        self.push(entry, vector, terms);
    }

    fn remove(&mut self, id: &str) {
        SearchIndex::remove(self, id);
    }
}
