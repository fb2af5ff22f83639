//! What a search reads, kept in memory for one tenant: each memory's vector (end to end, for
//! the scan kernel), who may see it, and its terms as postings (for each word, the memories
//! holding it and how often). Nearest neighbours are an exact scan; keyword matching reads
//! only the postings of the query's words, so a recall costs the vectors plus the matches,
//! never a pass over every memory's text. Answers are positions, which a store maps back to
//! its memories (`id`); the store keeps the index in step with what it writes (`cache.rs`).

pub mod cache;

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};

use super::{best_first, dot64, scan};
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
    /// Exact, for the similarity a caller sees.
    vectors: Vec<f32>,
    /// The same as 8-bit integers, which a scan reads (`scan::Coarse`).
    coarse: Vec<i8>,
    /// What turns a coarse dot product into a cosine times the query's norm: the vector's
    /// scale over its norm.
    units: Vec<f64>,
    norms: Vec<f32>,
    /// Each vector's sum of squares, as `cosine` adds it up.
    squares: Vec<f64>,
    /// How much of each vector its 8-bit copy misses (`scan::Coarse::rounding`).
    roundings: Vec<f64>,
    /// Terms in each memory, repeats included (BM25's document length).
    lengths: Vec<u32>,
    words: HashMap<Box<str>, u32>,
    /// For each word: (position, how often it occurs there).
    postings: Vec<Vec<(u32, u32)>>,
    /// Each memory's distinct words, to find its postings when it goes.
    distinct: Vec<Box<[u32]>>,
}

/// A keyword match: its position, its exact similarity to the query, and its BM25 score.
pub type WordMatch = (usize, f64, f64);

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
            coarse: Vec::new(),
            units: Vec::new(),
            norms: Vec::new(),
            squares: Vec::new(),
            roundings: Vec::new(),
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
        let start = self.vectors.len();
        self.vectors.extend(vector.iter().take(self.width));
        self.vectors.resize(start + self.width, 0.0);
        let stored = &self.vectors[start..];
        let comparable = vector.len() == self.width;
        let sum = squares(stored);
        let length = sum.sqrt();
        let coarse = scan::Coarse::row(stored, length);
        self.coarse.extend(&coarse.values);
        self.norms
            .push(if comparable { length as f32 } else { 0.0 });
        self.squares.push(sum);
        self.units.push(if comparable {
            f64::from(coarse.scale) / length
        } else {
            0.0
        });
        self.roundings.push(coarse.rounding);
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
            let (from, to) = (
                last * self.width..(last + 1) * self.width,
                gone * self.width,
            );
            self.vectors.copy_within(from.clone(), to);
            self.coarse.copy_within(from, to);
        }
        self.vectors.truncate(last * self.width);
        self.coarse.truncate(last * self.width);
        self.ids.swap_remove(gone);
        self.audiences.swap_remove(gone);
        self.units.swap_remove(gone);
        self.norms.swap_remove(gone);
        self.squares.swap_remove(gone);
        self.roundings.swap_remove(gone);
        self.lengths.swap_remove(gone);
        self.distinct.swap_remove(gone);
        Some(gone)
    }

    /// The audience of the request's conversation, if any memory has it.
    fn audience_of(&self, visibility: &Visibility) -> Option<Audience> {
        visibility
            .conversation
            .as_ref()
            .and_then(|c| self.conversations.get(c.as_str()).copied())
    }

    /// Whether a request with `visibility` may see the memory at each position.
    fn seen_by(&self, visibility: &Visibility) -> impl Fn(usize) -> bool + '_ {
        let mine = self.audience_of(visibility);
        move |position| {
            let audience = self.audiences[position];
            audience == PROJECT || Some(audience) == mine
        }
    }

    /// The exact cosine similarity of `query` to the memory at `position`: `cosine`'s
    /// answer to the last bit.
    pub fn similarity(&self, position: usize, query: &[f32]) -> f64 {
        self.exact(position, query, squares(query))
    }

    /// `similarity` of each of `positions`, in order. The vectors are scattered through
    /// memory: each is asked for a few ahead of its turn, so their reads overlap instead of
    /// each waiting on the last.
    fn exact_all(&self, positions: &[usize], query: &[f32]) -> Vec<f64> {
        const AHEAD: usize = 4;
        let query_squares = squares(query);
        for i in positions.iter().take(AHEAD) {
            self.prefetch(*i);
        }
        (0..positions.len())
            .map(|j| {
                if let Some(ahead) = positions.get(j + AHEAD) {
                    self.prefetch(*ahead);
                }
                self.exact(positions[j], query, query_squares)
            })
            .collect()
    }

    /// Asks the CPU to bring the vector at `position` into its cache; a hint, nothing more.
    fn prefetch(&self, position: usize) {
        #[cfg(target_arch = "x86_64")]
        if let Some(vector) = self
            .vectors
            .get(position * self.width..(position + 1) * self.width)
        {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            // Every 64-byte line of the vector.
            for line in vector.chunks(16) {
                // SAFETY: a prefetch never faults; the address is inside `vectors` anyway.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast()) };
            }
        }
    }

    /// `similarity`, with the query's sum of squares worked out once.
    fn exact(&self, position: usize, query: &[f32], query_squares: f64) -> f64 {
        // Norm 0: a zero vector or one of another width, both 0 to `cosine` too.
        if self.norms[position] == 0.0 || query_squares == 0.0 || query.len() != self.width {
            return 0.0;
        }
        let vector = &self.vectors[position * self.width..(position + 1) * self.width];
        dot64(query, vector) / (query_squares.sqrt() * self.squares[position].sqrt())
    }

    /// Up to `k` visible memories nearest to `query`, most similar first, with their exact
    /// cosine similarity. The coarse scan gives each memory an interval its exact similarity
    /// lies in; only those whose interval reaches the k-th best lower end can be among the
    /// k nearest, and only they are scored exactly.
    pub fn nearest(&self, query: &[f32], visibility: &Visibility, k: usize) -> Vec<(usize, f64)> {
        if query.len() != self.width || k == 0 {
            return Vec::new();
        }
        let seen = self.seen_by(visibility);
        let query_squares = squares(query);
        // In f64: the product of two f32 norms can leave f32's range.
        let query_norm = query_squares.sqrt();
        let coarse_query = scan::Coarse::query(query, query_norm);
        let per_query = f64::from(coarse_query.scale) / query_norm;
        let mut dots = Vec::new();
        scan::dot_all(&self.coarse, &coarse_query.values, &mut dots);
        // A memory's coarse cosine and how far the exact one can be from it, from its dot
        // product, unit and rounding; both passes below use it, so they agree to the bit.
        let estimate = |dot: i32, unit: f64, rounding: f64| {
            (
                f64::from(dot) * unit * per_query,
                scan::radius(rounding, coarse_query.rounding),
            )
        };
        // Every upper end first, in plain arithmetic the compiler vectorises; a NaN (a
        // query of zeros) is never below anything, so it is kept.
        let highs: Vec<f64> = (dots.iter().zip(&self.units).zip(&self.roundings))
            .map(|((dot, unit), rounding)| {
                let (cosine, radius) = estimate(*dot, *unit, *rounding);
                cosine + radius
            })
            .collect();
        // The least of the k best lower ends so far: it only rises, and a memory whose upper
        // end is below it can never be among the k. Intervals are worked out in full only
        // for the memories that reach it (a zero vector, or a query of zeros, gets no finite
        // interval and is always scored).
        let mut best: BinaryHeap<Reverse<Low>> = BinaryHeap::with_capacity(k + 1);
        let mut floor = f64::NEG_INFINITY;
        let mut reaching: Vec<(usize, f64)> = Vec::new();
        for (i, high) in highs.iter().enumerate() {
            if *high < floor || !seen(i) {
                continue;
            }
            let (cosine, radius) = estimate(dots[i], self.units[i], self.roundings[i]);
            let (low, high) = if cosine.is_finite() && radius.is_finite() {
                (cosine - radius, cosine + radius)
            } else {
                (f64::NEG_INFINITY, f64::INFINITY)
            };
            reaching.push((i, high));
            if best.len() < k {
                best.push(Reverse(Low(low)));
            } else if low > floor
                && let Some(mut least) = best.peek_mut()
            {
                *least = Reverse(Low(low));
            } else {
                continue;
            }
            if best.len() == k {
                floor = best.peek().map_or(floor, |least| least.0.0);
            }
        }
        let candidates: Vec<usize> = (reaching.into_iter())
            .filter(|(_, high)| *high >= floor)
            .map(|(i, _)| i)
            .collect();
        let similarities = self.exact_all(&candidates, query);
        let mut nearest: Vec<(usize, f64)> = candidates.into_iter().zip(similarities).collect();
        // Equal similarities in position order, so the answer does not depend on the sort.
        nearest.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        nearest.truncate(k);
        nearest
    }

    /// A recall's two searches (`MemoryStore::candidates`): the `k` nearest to `query`, and
    /// `keyword_hits`. A memory found both ways is scored exactly once.
    pub fn candidates(
        &self,
        query: &[f32],
        terms: &[String],
        visibility: &Visibility,
        k: usize,
    ) -> (Vec<(usize, f64)>, Vec<WordMatch>) {
        let nearest = self.nearest(query, visibility, k);
        let matches = self.keyword_matches(terms, visibility, k);
        let by_words = self.with_similarity(matches, query, nearest.clone());
        (nearest, by_words)
    }

    /// The `k` best keyword matches (`keyword_matches`), each with its exact similarity to
    /// `query`.
    pub fn keyword_hits(
        &self,
        terms: &[String],
        query: &[f32],
        visibility: &Visibility,
        k: usize,
    ) -> Vec<WordMatch> {
        let matches = self.keyword_matches(terms, visibility, k);
        self.with_similarity(matches, query, Vec::new())
    }

    /// `matches` with each one's similarity: from `known` (position, similarity) when it
    /// is there, scored now otherwise.
    fn with_similarity(
        &self,
        matches: Vec<(usize, f64)>,
        query: &[f32],
        mut known: Vec<(usize, f64)>,
    ) -> Vec<WordMatch> {
        known.sort_unstable_by_key(|(i, _)| *i);
        let unknown: Vec<usize> = (matches.iter())
            .map(|(i, _)| *i)
            .filter(|i| known.binary_search_by_key(i, |(p, _)| *p).is_err())
            .collect();
        let scored = self.exact_all(&unknown, query);
        known.extend(unknown.into_iter().zip(scored));
        known.sort_unstable_by_key(|(i, _)| *i);
        (matches.into_iter())
            .map(|(i, score)| (i, known[known.partition_point(|(p, _)| *p < i)].1, score))
            .collect()
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
        let (memories, terms) = [Some(PROJECT), self.audience_of(visibility)]
            .into_iter()
            .flatten()
            .filter_map(|a| self.totals.get(&a))
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
        // A common word matches most of a tenant: the k-th best score, found among bare
        // numbers, leaves only the few memories that can rank for the id order to sort.
        if matched.len() > k && k > 0 {
            let mut best: Vec<f64> = matched.iter().map(|i| scores[*i]).collect();
            let (_, kth, _) = best.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
            let kth = *kth;
            matched.retain(|i| scores[*i] >= kth);
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
        self.vectors.len() * 5 + self.memories() * 40 + ids + words + postings + distinct
    }
}

/// A lower end of an interval, ordered by `f64::total_cmp`, for a heap.
struct Low(f64);

impl Ord for Low {
    fn cmp(&self, other: &Low) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl PartialOrd for Low {
    fn partial_cmp(&self, other: &Low) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Low {
    fn eq(&self, other: &Low) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Low {}

/// The sum of squares of `v`, as `cosine` adds it up.
fn squares(v: &[f32]) -> f64 {
    dot64(v, v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keywords::{self, bm25};
    use crate::memory::Conversation;
    use crate::store::cosine;

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

    #[test]
    fn nearest_is_the_exact_top_k_by_cosine() {
        let width = 48;
        let mut next = noise(7);
        let mut index = SearchIndex::new(width);
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
            };
            index.push(entry, &v, &[]);
            stored.push((id, v, private));
        }
        for (round, k) in [1, 5, 30, 100, 700].into_iter().enumerate() {
            let query: Vec<f32> = base.iter().map(|b| b + 0.01 * next()).collect();
            let mine = Visibility {
                conversation: (round % 2 == 0)
                    .then(|| Conversation::new_unchecked("conv-a".into())),
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
                .map(|(i, s)| (index.id(i), s))
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
