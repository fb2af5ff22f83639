//! What a search reads, kept in memory for one tenant: each memory's vector (end to end, for
//! the scan kernel), who may see it, and its terms as postings (for each word, the memories
//! holding it and how often). Nearest neighbours are an exact scan; keyword matching reads
//! only the postings of the query's words, so a recall costs the vectors plus the matches,
//! never a pass over every memory's text. Answers are positions, which a store maps back to
//! its memories (`id`); the store keeps the index in step with what it writes (`cache.rs`).

pub mod cache;

use std::collections::HashMap;

use super::{best_first, cosine, scan};
use crate::keywords::{Corpus, Scorer};
use crate::memory::{Scope, Visibility};

/// Who may see a memory: the whole tenant, or one conversation (numbered as first seen).
type Audience = u32;
const PROJECT: Audience = 0;
/// A conversation note without a conversation: no request can see it.
const NOBODY: Audience = u32::MAX;

pub struct SearchIndex {
    width: usize,
    ids: Vec<Box<str>>,
    positions: HashMap<Box<str>, usize>,
    audiences: Vec<Audience>,
    conversations: HashMap<Box<str>, Audience>,
    /// Memories and terms per audience: BM25 counts over what the caller can see.
    totals: HashMap<Audience, (u64, u64)>,
    vectors: Vec<f32>,
    norms: Vec<f32>,
    /// Terms in each memory, repeats included (BM25's document length).
    lengths: Vec<u32>,
    words: HashMap<Box<str>, u32>,
    /// For each word: (position, how often it occurs there).
    postings: Vec<Vec<(u32, u32)>>,
    /// Each memory's distinct words, to find its postings when it goes.
    distinct: Vec<Box<[u32]>>,
}

/// What the index needs of a memory besides its vector and terms.
pub struct Entry<'a> {
    pub id: &'a str,
    pub scope: Scope,
    pub conversation: Option<&'a str>,
}

impl SearchIndex {
    pub fn new(width: usize) -> SearchIndex {
        SearchIndex {
            width,
            ids: Vec::new(),
            positions: HashMap::new(),
            audiences: Vec::new(),
            conversations: HashMap::new(),
            totals: HashMap::new(),
            vectors: Vec::new(),
            norms: Vec::new(),
            lengths: Vec::new(),
            words: HashMap::new(),
            postings: Vec::new(),
            distinct: Vec::new(),
        }
    }

    /// How many memories it holds.
    pub fn memories(&self) -> usize {
        self.ids.len()
    }

    /// The id of the memory at `position`.
    pub fn id(&self, position: usize) -> &str {
        &self.ids[position]
    }

    pub fn position(&self, id: &str) -> Option<usize> {
        self.positions.get(id).copied()
    }

    /// Adds a memory at the end (position `memories()`); an id already held is replaced.
    pub fn push(&mut self, entry: Entry<'_>, vector: &[f32], terms: &[String]) {
        self.remove(entry.id);
        let position = self.ids.len();
        let audience = match (entry.scope, entry.conversation) {
            (Scope::Project, _) => PROJECT,
            (Scope::Conversation, None) => NOBODY,
            (Scope::Conversation, Some(c)) => {
                let next = self.conversations.len() as Audience + 1;
                *self.conversations.entry(c.into()).or_insert(next)
            }
        };
        let total = self.totals.entry(audience).or_default();
        total.0 += 1;
        total.1 += terms.len() as u64;
        self.audiences.push(audience);
        // A stored vector of another width cannot be compared: it takes its slot, padded or
        // cut, with norm 0, which scores 0 as `cosine` does.
        self.norms.push(if vector.len() == self.width {
            scan::norm(vector)
        } else {
            0.0
        });
        let start = self.vectors.len();
        self.vectors.extend(vector.iter().take(self.width));
        self.vectors.resize(start + self.width, 0.0);
        self.lengths
            .push(u32::try_from(terms.len()).unwrap_or(u32::MAX));
        let mut counted: Vec<(u32, u32)> = Vec::new();
        for term in terms {
            let word = match self.words.get(term.as_str()) {
                Some(word) => *word,
                None => {
                    let word = self.postings.len() as u32;
                    self.words.insert(term.as_str().into(), word);
                    self.postings.push(Vec::new());
                    word
                }
            };
            match counted.iter_mut().find(|(w, _)| *w == word) {
                Some((_, n)) => *n += 1,
                None => counted.push((word, 1)),
            }
        }
        for (word, n) in &counted {
            self.postings[*word as usize].push((position as u32, *n));
        }
        self.distinct
            .push(counted.into_iter().map(|(w, _)| w).collect());
        self.ids.push(entry.id.into());
        self.positions.insert(entry.id.into(), position);
    }

    /// Removes a memory; the last one takes its position, which is returned so a caller
    /// keeping memories alongside can do the same (`Vec::swap_remove`).
    pub fn remove(&mut self, id: &str) -> Option<usize> {
        let gone = self.positions.remove(id)?;
        let last = self.ids.len() - 1;
        for word in &self.distinct[gone] {
            let postings = &mut self.postings[*word as usize];
            if let Some(at) = postings.iter().position(|(p, _)| *p as usize == gone) {
                postings.swap_remove(at);
            }
        }
        if let Some(total) = self.totals.get_mut(&self.audiences[gone]) {
            total.0 -= 1;
            total.1 -= u64::from(self.lengths[gone]);
        }
        if gone != last {
            for word in &self.distinct[last] {
                if let Some(posting) = self.postings[*word as usize]
                    .iter_mut()
                    .find(|(p, _)| *p as usize == last)
                {
                    posting.0 = gone as u32;
                }
            }
            self.positions.insert(self.ids[last].clone(), gone);
            self.vectors.copy_within(
                last * self.width..(last + 1) * self.width,
                gone * self.width,
            );
        }
        self.vectors.truncate(last * self.width);
        self.ids.swap_remove(gone);
        self.audiences.swap_remove(gone);
        self.norms.swap_remove(gone);
        self.lengths.swap_remove(gone);
        self.distinct.swap_remove(gone);
        Some(gone)
    }

    /// Whether a request with `visibility` may see the memory at each position.
    fn seen_by(&self, visibility: &Visibility) -> impl Fn(usize) -> bool + '_ {
        let mine = visibility
            .conversation
            .as_ref()
            .and_then(|c| self.conversations.get(c.as_str()).copied());
        move |position| {
            let audience = self.audiences[position];
            audience == PROJECT || Some(audience) == mine
        }
    }

    /// The exact cosine similarity of `query` to the memory at `position`.
    pub fn similarity(&self, position: usize, query: &[f32]) -> f64 {
        // Norm 0: a zero vector or one of another width, both 0 to `cosine` too.
        if self.norms[position] > 0.0 {
            cosine(
                query,
                &self.vectors[position * self.width..(position + 1) * self.width],
            )
        } else {
            0.0
        }
    }

    /// Up to `k` visible memories nearest to `query`, most similar first, with their exact
    /// cosine similarity.
    pub fn nearest(&self, query: &[f32], visibility: &Visibility, k: usize) -> Vec<(usize, f64)> {
        if query.len() != self.width || k == 0 {
            return Vec::new();
        }
        let seen = self.seen_by(visibility);
        let query_norm = scan::norm(query);
        let mut scores = Vec::new();
        scan::dot_all(&self.vectors, query, &mut scores);
        let mut ranked: Vec<(usize, f32)> = scores
            .iter()
            .enumerate()
            .filter(|(i, _)| seen(*i))
            .map(|(i, dot)| {
                let norms = query_norm * self.norms[i];
                (i, if norms > 0.0 { dot / norms } else { 0.0 })
            })
            .collect();
        if ranked.len() > k {
            ranked.select_nth_unstable_by(k - 1, |a, b| b.1.total_cmp(&a.1));
        }
        ranked.truncate(k);
        let mut nearest: Vec<(usize, f64)> = ranked
            .into_iter()
            .map(|(i, _)| (i, self.similarity(i, query)))
            .collect();
        nearest.sort_by(|a, b| b.1.total_cmp(&a.1));
        nearest
    }

    /// The `k` visible memories best matching `query` (distinct terms from
    /// `keywords::query_terms`) by BM25 over the memories the caller can see: best first,
    /// ties newest id first, as `store::best_first` orders every store's answer.
    pub fn keyword_matches(
        &self,
        query: &[String],
        visibility: &Visibility,
        k: usize,
    ) -> Vec<(usize, f64)> {
        let words: Vec<Option<&Vec<(u32, u32)>>> = query
            .iter()
            .map(|t| {
                self.words
                    .get(t.as_str())
                    .map(|w| &self.postings[*w as usize])
            })
            .collect();
        if words.iter().all(Option::is_none) {
            return Vec::new();
        }
        let seen = self.seen_by(visibility);
        let mine = visibility
            .conversation
            .as_ref()
            .and_then(|c| self.conversations.get(c.as_str()));
        let (memories, terms) = [Some(&PROJECT), mine]
            .into_iter()
            .flatten()
            .filter_map(|a| self.totals.get(a))
            .fold((0, 0), |(m, t), (dm, dt)| (m + dm, t + dt));
        let corpus = Corpus {
            memories,
            average_terms: terms as f64 / memories.max(1) as f64,
            containing: words
                .iter()
                .map(|postings| {
                    postings.map_or(0, |p| p.iter().filter(|(i, _)| seen(*i as usize)).count())
                        as u64
                })
                .collect(),
        };
        let scorer = Scorer::new(&corpus);
        // Term at a time, in the query's order: each memory's sum is added up in the order
        // `Scorer::score` adds it, so the scores are the same to the last bit.
        let mut scores = vec![0.0f64; self.memories()];
        let mut matched: Vec<usize> = Vec::new();
        for (j, postings) in words.iter().enumerate() {
            for (i, tf) in postings.iter().flat_map(|p| p.iter()) {
                let i = *i as usize;
                if !seen(i) {
                    continue;
                }
                let part = scorer.term(j, *tf, self.lengths[i]);
                if scores[i] == 0.0 && part > 0.0 {
                    matched.push(i);
                }
                scores[i] += part;
            }
        }
        let scored: Vec<((&str, usize), f64)> = matched
            .into_iter()
            .map(|i| ((&*self.ids[i], i), scores[i]))
            .collect();
        best_first(scored, k)
            .into_iter()
            .map(|((_, i), score)| (i, score))
            .collect()
    }

    /// Roughly what the index holds, in bytes, for the cache's budget.
    pub fn bytes(&self) -> usize {
        let ids: usize = self.ids.iter().map(|id| 2 * (40 + id.len())).sum();
        let words: usize = self.words.keys().map(|w| 64 + w.len()).sum();
        let postings: usize = self.postings.iter().map(|p| 24 + 8 * p.len()).sum();
        let distinct: usize = self.distinct.iter().map(|d| 16 + 4 * d.len()).sum();
        self.vectors.len() * 4 + self.memories() * 12 + ids + words + postings + distinct
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keywords::{self, bm25};
    use crate::memory::Conversation;

    fn entry(id: &str) -> Entry<'_> {
        Entry {
            id,
            scope: Scope::Project,
            conversation: None,
        }
    }

    fn everyone() -> Visibility {
        Visibility { conversation: None }
    }

    const NOTES: [&str; 5] = [
        "redis runs on port 6380",
        "the deploy uses redis sentinel and redis cluster",
        "postgres backups run nightly",
        "deploy on fridays is forbidden",
        "redis",
    ];

    fn indexed(notes: &[&str]) -> SearchIndex {
        let mut index = SearchIndex::new(2);
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
                .into_iter()
                .map(|(i, s)| (index.id(i).to_owned(), s))
                .collect()
        };
        let all: Vec<(&str, &str)> = ["m0", "m1", "m2", "m3", "m4"]
            .into_iter()
            .zip(NOTES)
            .collect();
        assert_eq!(found(&index), by_brute_force(&all, &query));
        assert_eq!(found(&index).len(), 4);
        // Removing moves the last memory into the gap; its postings must follow it.
        assert_eq!(index.remove("m1"), Some(1));
        assert_eq!(index.remove("m1"), None);
        let left: Vec<(&str, &str)> = all.iter().copied().filter(|(id, _)| *id != "m1").collect();
        assert_eq!(found(&index), by_brute_force(&left, &query));
        assert_eq!(index.position("m4"), Some(1));
        assert_eq!(index.memories(), 4);
    }

    #[test]
    fn nearest_and_similarity_follow_a_moved_memory() {
        let mut index = indexed(&NOTES);
        index.remove("m0");
        let best = index.nearest(&[1.0, 4.0], &everyone(), 1);
        assert_eq!(index.id(best[0].0), "m4");
        assert!((best[0].1 - 1.0).abs() < 1e-12);
        assert_eq!(index.nearest(&[1.0], &everyone(), 1), []);
    }

    #[test]
    fn conversation_notes_count_and_match_only_in_their_conversation() {
        let mut index = SearchIndex::new(2);
        index.push(entry("p"), &[1.0, 0.0], &keywords::terms("redis on 6380"));
        index.push(
            Entry {
                id: "c",
                scope: Scope::Conversation,
                conversation: Some("conv-a"),
            },
            &[1.0, 0.0],
            &keywords::terms("redis moved to 6381"),
        );
        let query = keywords::query_terms("redis");
        let mine = Visibility {
            conversation: Some(Conversation::new_unchecked("conv-a".into())),
        };
        let other = Visibility {
            conversation: Some(Conversation::new_unchecked("conv-b".into())),
        };
        assert_eq!(index.keyword_matches(&query, &mine, 10).len(), 2);
        assert_eq!(index.keyword_matches(&query, &other, 10).len(), 1);
        assert_eq!(index.nearest(&[1.0, 0.0], &everyone(), 5).len(), 1);
        assert_eq!(index.nearest(&[1.0, 0.0], &mine, 5).len(), 2);
    }
}
