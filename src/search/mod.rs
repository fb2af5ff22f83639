//! The search engine: what a recall reads, kept in memory for one tenant, compiled in every
//! build whatever the stores. Each memory has a position; beside it the index keeps its
//! vector (`vectors.rs`, an exact scan in integers with exact rescoring), its terms as
//! postings (`postings.rs`, scored by `bm25.rs`) and who may see it (`audiences.rs`).
//! Answers are positions with their scores, which a store maps back to its memories
//! (`SearchIndex::id`); the store keeps the index in step with what it writes, and
//! `cache.rs` holds the tenants' indexes a process keeps, within a budget. Searches of one
//! index that arrive together share their scans (`passes.rs`).

pub mod audiences;
pub mod bm25;
pub mod cache;
pub mod exact;
mod passes;
pub mod postings;
pub mod scan;
pub mod terms;
pub mod vectors;

use std::collections::HashMap;

use crate::memory::{Scope, Visibility};
use audiences::Audiences;
use postings::Postings;
use vectors::Vectors;

pub use exact::{VectorFiles, VectorHome};
pub use terms::{query_terms, terms};
pub use vectors::cosine;

/// Where a memory is in its tenant's index. Positions are dense: removing a memory moves the
/// last one into its place (`SearchIndex::remove`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position(u32);

impl Position {
    fn at(index: usize) -> Position {
        Position(u32::try_from(index).expect("a tenant holds fewer than 2^32 memories"))
    }

    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// What a recall looks for: memories near `vector`, and memories holding any of `terms`
/// (distinct, from `query_terms`; none for a search by meaning only), `k` of each.
#[derive(Debug, Clone, Copy)]
pub struct Query<'a> {
    pub vector: &'a [f32],
    pub terms: &'a [String],
    pub k: usize,
}

/// A memory found by meaning: its exact cosine similarity to the query.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Nearest {
    pub position: Position,
    pub similarity: f64,
}

/// A memory found by words: its BM25 score among what the caller can see, and its exact
/// cosine similarity to the query, so both rankings can be fused.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WordMatch {
    pub position: Position,
    pub similarity: f64,
    pub score: f64,
}

/// A search's two answers, each best first.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Found {
    pub nearest: Vec<Nearest>,
    pub by_words: Vec<WordMatch>,
    /// Each query term's idf among what the caller sees, in the query's order.
    pub idf: Vec<f64>,
}

/// What the index needs of a memory besides its vector and terms.
pub struct Entry<'a> {
    pub id: &'a str,
    pub scope: Scope,
    pub conversation: Option<&'a str>,
    pub expires_at: Option<i64>,
}

pub struct SearchIndex {
    ids: Vec<Box<str>>,
    positions: HashMap<Box<str>, Position>,
    vectors: Vectors,
    postings: Postings,
    audiences: Audiences,
    /// What the ids take, twice (in `ids` and `positions`), kept as they come and go.
    id_bytes: usize,
}

impl SearchIndex {
    /// An empty index of vectors `width` wide, whose exact vectors go where `files` says.
    pub fn new(width: usize, files: &VectorFiles) -> SearchIndex {
        SearchIndex {
            ids: Vec::new(),
            positions: HashMap::new(),
            vectors: Vectors::new(width, files),
            postings: Postings::default(),
            audiences: Audiences::default(),
            id_bytes: 0,
        }
    }

    /// How many memories it holds.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The id of the memory at `position`.
    pub fn id(&self, position: Position) -> &str {
        &self.ids[position.index()]
    }

    pub fn position(&self, id: &str) -> Option<Position> {
        self.positions.get(id).copied()
    }

    /// Adds a memory at the end (position `len()`), and returns that position; an id
    /// already held is replaced.
    pub fn push(&mut self, entry: Entry<'_>, vector: &[f32], terms: &[String]) -> Position {
        self.remove(entry.id);
        let position = Position::at(self.ids.len());
        (self.audiences).push(
            entry.scope,
            entry.conversation,
            entry.expires_at,
            terms.len(),
        );
        self.vectors.push(vector);
        self.postings.push(position, terms);
        self.id_bytes += id_bytes(entry.id);
        self.ids.push(entry.id.into());
        self.positions.insert(entry.id.into(), position);
        position
    }

    /// Removes a memory; the last one takes its position, which is returned so a caller
    /// keeping memories alongside can do the same (`Vec::swap_remove`).
    pub fn remove(&mut self, id: &str) -> Option<Position> {
        let gone = self.positions.remove(id)?;
        self.id_bytes -= id_bytes(id);
        let last = Position::at(self.ids.len() - 1);
        self.audiences.swap_remove(gone, self.postings.length(gone));
        self.postings.swap_remove(gone, last);
        self.vectors.swap_remove(gone, last);
        if gone != last {
            self.positions.insert(self.ids[last.index()].clone(), gone);
        }
        self.ids.swap_remove(gone.index());
        Some(gone)
    }

    /// Up to `k` memories `visibility` may see nearest to `vector`, most similar first.
    pub fn nearest(&self, vector: &[f32], visibility: &Visibility, k: usize) -> Vec<Nearest> {
        let viewer = self.audiences.viewer(visibility);
        self.vectors
            .nearest(vector, |i| self.audiences.sees(viewer, i), k)
    }

    /// Both of a recall's searches: the `k` nearest, and the `k` best by the query's words
    /// (when it has any). A memory found both ways is scored exactly once.
    pub fn search(&self, query: &Query<'_>, visibility: &Visibility) -> Found {
        let nearest = self.nearest(query.vector, visibility, query.k);
        let (matches, idf) = self.keyword_matches(query.terms, visibility, query.k);
        let by_words = self.with_similarity(matches, query.vector, &nearest);
        Found {
            nearest,
            by_words,
            idf,
        }
    }

    /// `matches` with each one's similarity: from `known` when it is there, scored now
    /// otherwise.
    fn with_similarity(
        &self,
        matches: Vec<(Position, f64)>,
        query: &[f32],
        known: &[Nearest],
    ) -> Vec<WordMatch> {
        let mut known: Vec<(Position, f64)> =
            known.iter().map(|n| (n.position, n.similarity)).collect();
        known.sort_unstable_by_key(|(p, _)| *p);
        let unknown: Vec<Position> = (matches.iter())
            .map(|(p, _)| *p)
            .filter(|p| known.binary_search_by_key(p, |(k, _)| *k).is_err())
            .collect();
        let scored = self.vectors.similarities(&unknown, query);
        known.extend(unknown.into_iter().zip(scored));
        known.sort_unstable_by_key(|(p, _)| *p);
        (matches.into_iter())
            .map(|(position, score)| WordMatch {
                position,
                similarity: known[known.partition_point(|(p, _)| *p < position)].1,
                score,
            })
            .collect()
    }

    /// The `k` visible memories best matching `terms` (distinct, from `query_terms`) by
    /// BM25 over the memories the caller can see: best first, ties newest id first, as
    /// `best_first` orders every store's answer.
    fn keyword_matches(
        &self,
        terms: &[String],
        visibility: &Visibility,
        k: usize,
    ) -> (Vec<(Position, f64)>, Vec<f64>) {
        if terms.is_empty() {
            return (Vec::new(), Vec::new());
        }
        let viewer = self.audiences.viewer(visibility);
        let (scored, idf) = self.postings.best(
            terms,
            |i| self.audiences.sees(viewer, i),
            self.audiences.visible(viewer),
            k,
        );
        let scored: Vec<((&str, Position), f64)> = (scored.into_iter())
            .map(|s| ((self.id(s.position), s.position), s.score))
            .collect();
        let best = (best_first(scored, k).into_iter())
            .map(|((_, position), score)| (position, score))
            .collect();
        (best, idf)
    }

    /// Roughly what the index holds on the heap, in bytes, for the cache's budget: exact
    /// vectors in a mapped file are the page cache's (`exact.rs`).
    pub fn bytes(&self) -> usize {
        self.vectors.values()
            + self.vectors.exact_heap_bytes()
            + self.len() * PER_MEMORY
            + self.audiences.expiring() * PER_EXPIRY
            + self.audiences.conversation_bytes()
            + self.id_bytes
            + self.postings.bytes()
    }
}

/// What a memory costs besides its vector, id and terms: norms, scales, audience, expiry.
const PER_MEMORY: usize = 48;
/// What a memory that expires adds: its sum by expiry (`audiences.rs`).
const PER_EXPIRY: usize = 64;

fn id_bytes(id: &str) -> usize {
    2 * (40 + id.len())
}

#[cfg(test)]
impl SearchIndex {
    /// `bytes` counted the long way, to check the running count.
    fn recount(&self) -> usize {
        let ids: usize = self.ids.iter().map(|id| id_bytes(id)).sum();
        self.vectors.values()
            + self.vectors.exact_heap_bytes()
            + self.len() * PER_MEMORY
            + self.audiences.expiring() * PER_EXPIRY
            + self.audiences.recount_conversations()
            + ids
            + self.postings.recount()
    }
}

impl cache::Weigh for SearchIndex {
    fn bytes(&self) -> usize {
        SearchIndex::bytes(self)
    }

    fn is_empty(&self) -> bool {
        SearchIndex::is_empty(self)
    }

    /// The exact vectors count wherever they are: a search rescores from them, and reads
    /// them from the disk once the kernel has paged them out.
    fn searched_bytes(&self) -> usize {
        SearchIndex::bytes(self) + self.vectors.values() * 4 - self.vectors.exact_heap_bytes()
    }
}

/// The `k` best of `scored` (id, score), best first. Ties go in id order, newest first, so
/// every store answers alike. Only the best k are sorted: a common word can match most of
/// a tenant.
pub fn best_first<I: Ord>(mut scored: Vec<(I, f64)>, k: usize) -> Vec<(I, f64)> {
    let order = |a: &(I, f64), b: &(I, f64)| b.1.total_cmp(&a.1).then_with(|| b.0.cmp(&a.0));
    if scored.len() > k && k > 0 {
        scored.select_nth_unstable_by(k - 1, order);
    }
    scored.truncate(k);
    scored.sort_by(order);
    scored
}

#[cfg(test)]
mod tests {
    use super::bm25::{Corpus, bm25};
    use super::terms as keywords;
    use super::*;
    use crate::memory::Conversation;

    fn entry(id: &str) -> Entry<'_> {
        Entry {
            id,
            scope: Scope::Project,
            conversation: None,
            expires_at: None,
        }
    }

    /// The instant the tests' viewers see the index at.
    const NOW: i64 = 1_000;

    fn everyone() -> Visibility {
        Visibility {
            conversation: None,
            at: NOW,
        }
    }

    const NOTES: [&str; 5] = [
        "redis runs on port 6380",
        "the deploy uses redis sentinel and redis cluster",
        "postgres backups run nightly",
        "deploy on fridays is forbidden",
        "redis",
    ];

    fn indexed(notes: &[&str]) -> SearchIndex {
        let mut index = SearchIndex::new(2, &VectorFiles::heap());
        for (i, note) in notes.iter().enumerate() {
            let id = format!("m{i}");
            index.push(entry(&id), &[1.0, i as f32], &keywords::terms(note));
        }
        index
    }

    /// The same scores as BM25 over every memory's whole term list.
    fn by_brute_force(notes: &[(&str, &str)], query: &[String]) -> Vec<(String, f64)> {
        let terms: Vec<Vec<String>> = notes.iter().map(|(_, n)| keywords::terms(n)).collect();
        let corpus = Corpus {
            memories: notes.len() as u64,
            average_terms: terms.iter().map(Vec::len).sum::<usize>() as f64 / notes.len() as f64,
            containing: query
                .iter()
                .map(|q| terms.iter().filter(|t| t.contains(q)).count() as u64)
                .collect(),
        };
        let scored = notes
            .iter()
            .zip(&terms)
            .map(|((id, _), t)| (id.to_string(), bm25(query, t, &corpus)))
            .filter(|(_, s)| *s > 0.0)
            .collect();
        best_first(scored, 10)
    }

    #[test]
    fn keyword_scores_are_bm25_to_the_last_bit_after_removals() {
        let mut index = indexed(&NOTES);
        let query = keywords::query_terms("redis deploy port");
        let found = |index: &SearchIndex| -> Vec<(String, f64)> {
            index
                .keyword_matches(&query, &everyone(), 10)
                .0
                .into_iter()
                .map(|(p, s)| (index.id(p).to_owned(), s))
                .collect()
        };
        let all: Vec<(&str, &str)> = ["m0", "m1", "m2", "m3", "m4"]
            .into_iter()
            .zip(NOTES)
            .collect();
        assert_eq!(found(&index), by_brute_force(&all, &query));
        assert_eq!(found(&index).len(), 4);
        // Each query term's idf, as BM25 counts it over every visible memory; a word no
        // memory holds is the rarest.
        let (_, idf) =
            index.keyword_matches(&keywords::query_terms("redis zeppelin"), &everyone(), 10);
        let terms: Vec<Vec<String>> = NOTES.iter().map(|n| keywords::terms(n)).collect();
        let holding = terms
            .iter()
            .filter(|t| t.contains(&"redi".to_owned()) || t.contains(&"redis".to_owned()))
            .count();
        let corpus = Corpus {
            memories: NOTES.len() as u64,
            average_terms: 0.0,
            containing: vec![holding as u64, 0],
        };
        assert_eq!(idf, corpus.idf());
        assert!(idf[1] > idf[0]);
        // Removing moves the last memory into the gap; its postings must follow it.
        assert_eq!(index.remove("m1"), Some(Position(1)));
        assert_eq!(index.remove("m1"), None);
        let left: Vec<(&str, &str)> = all.iter().copied().filter(|(id, _)| *id != "m1").collect();
        assert_eq!(found(&index), by_brute_force(&left, &query));
        assert_eq!(index.position("m4"), Some(Position(1)));
        assert_eq!(index.len(), 4);
    }

    #[test]
    fn an_index_under_churn_weighs_what_a_fresh_one_does() {
        // A long Korean note of its own words each time, remembered then forgotten, in its
        // own conversation, beside one memory that stays.
        let kept = "스테이징 클러스터는 EKS에 있고 노드는 세 대다";
        let note = |i: usize| -> String {
            (0..200)
                .map(|j| char::from_u32(0xAC00 + ((i * 200 + j) % 11_000) as u32).unwrap())
                .collect::<String>()
                + &format!(" 배포 {i}")
        };
        let fresh = indexed(&[kept]);
        let mut churned = indexed(&[kept]);
        for i in 0..300 {
            let id = format!("n{i}");
            let conversation = format!("c{i}");
            let entry = Entry {
                conversation: Some(&conversation),
                scope: Scope::Conversation,
                ..entry(&id)
            };
            churned.push(entry, &[0.5, 0.5], &keywords::terms(&note(i)));
            assert!(churned.bytes() > fresh.bytes() + 1000);
            churned.remove(&id);
        }
        assert_eq!(churned.bytes(), fresh.bytes());
        assert_eq!(churned.bytes(), churned.recount());
        assert_eq!(churned.postings.words(), fresh.postings.words());
        assert_eq!(churned.audiences.conversations(), 0);
        // What stays is found as before.
        let query = keywords::query_terms("스테이징 노드");
        let found = churned.keyword_matches(&query, &everyone(), 10).0;
        assert_eq!(found.len(), 1);
        assert_eq!(churned.id(found[0].0), "m0");
    }

    /// Deterministic pseudo-random numbers in [-1, 1).
    fn noise(seed: u64) -> impl FnMut() -> f32 {
        let mut state = seed;
        move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        }
    }

    /// Exact vectors on the heap, or every one of them in a mapped file.
    fn files(mapped: bool) -> VectorFiles {
        if mapped {
            VectorFiles::in_dir(std::env::temp_dir(), 0)
        } else {
            VectorFiles::heap()
        }
    }

    /// Vectors in a file leave the heap's weight (the budget's) but not what a search
    /// reads, which decides whether it runs on a blocking thread.
    #[test]
    fn mapped_vectors_weigh_on_the_search_not_on_the_budget() {
        use cache::Weigh;
        let [heap, mapped] = [false, true].map(|mapped| {
            let mut index = SearchIndex::new(384, &files(mapped));
            for i in 0..10 {
                let id = format!("m{i}");
                index.push(entry(&id), &[i as f32; 384], &keywords::terms("redis port"));
            }
            index
        });
        assert_eq!(heap.searched_bytes(), heap.bytes());
        assert_eq!(mapped.searched_bytes(), heap.bytes());
        assert_eq!(mapped.bytes(), heap.bytes() - 10 * 384 * 4);
    }

    #[test]
    fn nearest_is_the_exact_top_k_by_cosine() {
        nearest_is_exact(false);
        nearest_is_exact(true);
    }

    fn nearest_is_exact(mapped: bool) {
        let width = 48;
        let mut next = noise(7);
        let mut index = SearchIndex::new(width, &files(mapped));
        let mut stored: Vec<(String, Vec<f32>, bool)> = Vec::new();
        let base: Vec<f32> = (0..width).map(|_| next()).collect();
        for i in 0..600 {
            // Many memories close to one direction, at every scale, some within a rounding
            // of each other: where a coarse score alone would pick wrongly.
            let scale = [1e-3, 1.0, 7.0, 1e4][i % 4];
            let spread = [0.5, 0.05, 1e-4, 0.0][i % 3];
            let v: Vec<f32> = base.iter().map(|b| (b + spread * next()) * scale).collect();
            let private = i % 5 == 0;
            let id = format!("m{i:04}");
            let entry = Entry {
                id: &id,
                scope: if private {
                    Scope::Conversation
                } else {
                    Scope::Project
                },
                conversation: private.then_some("conv-a"),
                expires_at: None,
            };
            index.push(entry, &v, &[]);
            stored.push((id, v, private));
        }
        for (round, k) in [1, 5, 30, 100, 700].into_iter().enumerate() {
            let query: Vec<f32> = base.iter().map(|b| b + 0.01 * next()).collect();
            let mine = Visibility {
                conversation: (round % 2 == 0)
                    .then(|| Conversation::new_unchecked("conv-a".into())),
                at: NOW,
            };
            let mut expected: Vec<(&str, f64)> = stored
                .iter()
                .filter(|(_, _, private)| !private || mine.conversation.is_some())
                .map(|(id, v, _)| (id.as_str(), cosine(&query, v)))
                .collect();
            expected.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
            let got: Vec<(&str, f64)> = index
                .nearest(&query, &mine, k)
                .into_iter()
                .map(|n| (index.id(n.position), n.similarity))
                .collect();
            assert_eq!(got.len(), k.min(expected.len()));
            // The same similarities, exactly; ids may differ only between equal ones.
            for (g, e) in got.iter().zip(&expected) {
                assert_eq!(g.1, e.1, "k = {k}");
            }
            for (id, s) in &got {
                assert_eq!(*s, expected.iter().find(|(e, _)| e == id).unwrap().1);
            }
        }
    }

    #[test]
    fn nearest_and_similarity_follow_a_moved_memory() {
        let mut index = indexed(&NOTES);
        index.remove("m0");
        let best = index.nearest(&[1.0, 4.0], &everyone(), 1);
        assert_eq!(index.id(best[0].position), "m4");
        assert!((best[0].similarity - 1.0).abs() < 1e-12);
        assert_eq!(index.nearest(&[1.0], &everyone(), 1), []);
    }

    #[test]
    fn conversation_notes_count_and_match_only_in_their_conversation() {
        let mut index = SearchIndex::new(2, &VectorFiles::heap());
        index.push(entry("p"), &[1.0, 0.0], &keywords::terms("redis on 6380"));
        index.push(
            Entry {
                id: "c",
                scope: Scope::Conversation,
                conversation: Some("conv-a"),
                expires_at: None,
            },
            &[1.0, 0.0],
            &keywords::terms("redis moved to 6381"),
        );
        let query = keywords::query_terms("redis");
        let mine = Visibility {
            conversation: Some(Conversation::new_unchecked("conv-a".into())),
            at: NOW,
        };
        let other = Visibility {
            conversation: Some(Conversation::new_unchecked("conv-b".into())),
            at: NOW,
        };
        assert_eq!(index.keyword_matches(&query, &mine, 10).0.len(), 2);
        assert_eq!(index.keyword_matches(&query, &other, 10).0.len(), 1);
        assert_eq!(index.nearest(&[1.0, 0.0], &everyone(), 5).len(), 1);
        assert_eq!(index.nearest(&[1.0, 0.0], &mine, 5).len(), 2);
    }

    const WORDS: [&str; 8] = [
        "redis", "deploy", "port", "backup", "nightly", "friday", "cluster", "sentinel",
    ];

    /// A memory as generated: audience (0 project, 1 conversation c1, 2 c2), vector, words,
    /// and expiry (0 never, 1 at `NOW`: gone, 2 just after `NOW`: still there).
    type Generated = (u8, Vec<f32>, Vec<usize>, u8);

    fn expiry(generated: u8) -> Option<i64> {
        [None, Some(NOW), Some(NOW + 1)][generated as usize]
    }

    fn text(words: &[usize]) -> String {
        words
            .iter()
            .map(|w| WORDS[*w])
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn conversation(audience: u8) -> Option<&'static str> {
        [None, Some("c1"), Some("c2")][audience as usize]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]

        /// The index against brute force over what the caller may see at its instant (no
        /// memory expired by then): the exact top k by cosine, BM25 over the visible
        /// corpus, after any removals; and its running weight equals the weight counted the
        /// long way.
        #[test]
        fn search_agrees_with_brute_force_over_the_visible_set(
            memories in proptest::collection::vec(
                (0u8..3, proptest::collection::vec(-1.0f32..1.0, 4),
                 proptest::collection::vec(0usize..8, 0..6), 0u8..3),
                1..40,
            ),
            removals in proptest::collection::vec(0usize..40, 0..15),
            query in proptest::collection::vec(-1.0f32..1.0, 4),
            asked in proptest::collection::vec(0usize..8, 1..3),
            viewer in 0u8..3,
            k in 1usize..8,
            mapped: bool,
        ) {
            let mut index = SearchIndex::new(4, &files(mapped));
            let mut held: Vec<(String, Generated)> = Vec::new();
            for (i, memory) in memories.into_iter().enumerate() {
                let id = format!("m{i:02}");
                let entry = Entry {
                    id: &id,
                    scope: if memory.0 == 0 { Scope::Project } else { Scope::Conversation },
                    conversation: conversation(memory.0),
                    expires_at: expiry(memory.3),
                };
                index.push(entry, &memory.1, &keywords::terms(&text(&memory.2)));
                held.push((id, memory));
            }
            for removal in removals {
                let id = format!("m{removal:02}");
                let was_held = held.iter().any(|(h, _)| *h == id);
                proptest::prop_assert_eq!(index.remove(&id).is_some(), was_held);
                held.retain(|(h, _)| *h != id);
            }
            proptest::prop_assert_eq!(index.bytes(), index.recount());
            proptest::prop_assert_eq!(index.len(), held.len());

            let visibility = Visibility {
                conversation: conversation(viewer).map(|c| Conversation::new_unchecked(c.into())),
                at: NOW,
            };
            let visible: Vec<&(String, Generated)> = held
                .iter()
                .filter(|(_, (audience, _, _, _))| *audience == 0 || *audience == viewer)
                .filter(|(_, m)| visibility.sees_alive(expiry(m.3)))
                .collect();

            let mut expected: Vec<f64> = visible.iter().map(|(_, (_, v, _, _))| cosine(&query, v)).collect();
            expected.sort_by(|a, b| b.total_cmp(a));
            expected.truncate(k);
            let got: Vec<f64> = index.nearest(&query, &visibility, k).iter().map(|n| n.similarity).collect();
            proptest::prop_assert_eq!(got.len(), expected.len());
            for (g, e) in got.iter().zip(&expected) {
                proptest::prop_assert!((g - e).abs() < 1e-12, "{} against {}", g, e);
            }

            let query_terms = keywords::query_terms(&text(&asked));
            let notes: Vec<(String, String)> = visible.iter().map(|(id, (_, _, w, _))| (id.clone(), text(w))).collect();
            let notes: Vec<(&str, &str)> = notes.iter().map(|(id, t)| (id.as_str(), t.as_str())).collect();
            let mut wanted = if notes.is_empty() { Vec::new() } else { by_brute_force(&notes, &query_terms) };
            wanted.truncate(k);
            let found: Vec<(String, f64)> = index
                .keyword_matches(&query_terms, &visibility, k)
                .0
                .into_iter()
                .map(|(p, s)| (index.id(p).to_owned(), s))
                .collect();
            proptest::prop_assert_eq!(found, wanted);
        }
    }
}
