//! A tenant's terms as postings: for each word, the memories holding it and how often.
//! Keyword matching reads only the postings of the query's words, so a recall costs the
//! matches, never a pass over every memory's text.

use std::collections::HashMap;

use super::Position;
use super::audiences::Totals;
use super::bm25::{Corpus, Scorer};

/// A word, interned: its index in `Postings::lists`.
type Word = u32;

/// One memory in a word's list, and how often the word occurs in it.
#[derive(Clone, Copy)]
struct Posting {
    position: Position,
    frequency: u32,
}

#[derive(Default)]
pub struct Postings {
    words: HashMap<Box<str>, Word>,
    lists: Vec<List>,
    /// Words whose last memory went: their numbers, for the next new words.
    free: Vec<Word>,
    /// Terms in each memory, repeats included (BM25's document length), by position.
    lengths: Vec<u32>,
    /// Each memory's distinct words, by position, to find its postings when it goes.
    distinct: Vec<Box<[Word]>>,
    /// What `bytes` reports, kept as memories come and go: the tenant cache weighs an
    /// index after every write, so weighing must not walk it.
    bytes: usize,
}

/// A word's memories, and its spelling, to release the word when its last memory goes: an
/// index under churn (every `replaces`, notes that come and go) keeps only what it holds.
#[derive(Default)]
struct List {
    spelling: Box<str>,
    postings: Vec<Posting>,
}

/// A memory the query's words found, with its BM25 score.
pub struct Scored {
    pub position: Position,
    pub score: f64,
}

impl Postings {
    /// Adds the terms of the memory at `position`, the next one. Its words' numbers are
    /// sorted and counted in runs, so a long memory of many distinct terms (Korean is
    /// indexed by syllable pairs) costs its length, not its length squared; numbers, not
    /// spellings, so a short one costs what a count by search did (`cargo bench --bench
    /// build`, BENCHMARKS.md, "Issue 32: the load benchmark, A/B"). The runs are kept in
    /// place as the memory's distinct words: one allocation a memory.
    pub fn push(&mut self, position: Position, terms: &[String]) {
        self.lengths
            .push(u32::try_from(terms.len()).unwrap_or(u32::MAX));
        let mut words: Vec<Word> = terms.iter().map(|term| self.word(term)).collect();
        words.sort_unstable();
        let mut distinct = 0;
        let mut at = 0;
        while at < words.len() {
            let word = words[at];
            let run = words[at..].iter().take_while(|w| **w == word).count();
            self.lists[word as usize].postings.push(Posting {
                position,
                frequency: u32::try_from(run).unwrap_or(u32::MAX),
            });
            words[distinct] = word;
            distinct += 1;
            at += run;
        }
        words.truncate(distinct);
        self.bytes += memory_bytes(distinct);
        self.distinct.push(words.into_boxed_slice());
    }

    /// The number of `term`, a new one if it is not held.
    fn word(&mut self, term: &str) -> Word {
        if let Some(word) = self.words.get(term) {
            return *word;
        }
        let list = List {
            spelling: term.into(),
            postings: Vec::new(),
        };
        let word = match self.free.pop() {
            Some(word) => {
                self.lists[word as usize] = list;
                word
            }
            None => {
                self.lists.push(list);
                (self.lists.len() - 1) as Word
            }
        };
        self.words.insert(term.into(), word);
        self.bytes += word_bytes(term);
        word
    }

    /// How many terms the memory at `position` has.
    pub fn length(&self, position: Position) -> u32 {
        self.lengths[position.index()]
    }

    /// Removes the memory at `gone`; the last one (at `last`) takes its place. A word left
    /// with no memory is released.
    pub fn swap_remove(&mut self, gone: Position, last: Position) {
        self.bytes -= memory_bytes(self.distinct[gone.index()].len());
        let words = self.distinct.swap_remove(gone.index());
        for word in &words {
            let list = &mut self.lists[*word as usize];
            if let Some(at) = list.postings.iter().position(|p| p.position == gone) {
                list.postings.swap_remove(at);
            }
            if list.postings.is_empty() {
                let List { spelling, .. } = std::mem::take(list);
                self.words.remove(&spelling);
                self.bytes -= word_bytes(&spelling);
                self.free.push(*word);
            } else if list.postings.capacity() > 4 * list.postings.len().max(4) {
                list.postings.shrink_to_fit();
            }
        }
        if gone != last {
            // The last memory's words are now at `gone`, where `swap_remove` moved them.
            for word in &self.distinct[gone.index()] {
                if let Some(posting) = self.lists[*word as usize]
                    .postings
                    .iter_mut()
                    .find(|p| p.position == last)
                {
                    posting.position = gone;
                }
            }
        }
        self.lengths.swap_remove(gone.index());
    }

    /// How many words it holds.
    #[cfg(test)]
    pub fn words(&self) -> usize {
        self.words.len()
    }

    /// The memories `seen` accepts that hold a word of `query` (distinct terms) and can be
    /// among its `k` best by BM25 over `visible`, the corpus of what the caller can see:
    /// every one scoring at least the k-th best, in no order; and each query term's idf
    /// over `visible`.
    pub fn best(
        &self,
        query: &[String],
        seen: impl Fn(usize) -> bool,
        visible: Totals,
        k: usize,
    ) -> (Vec<Scored>, Vec<f64>) {
        let lists: Vec<Option<&Vec<Posting>>> = query
            .iter()
            .map(|t| (self.words.get(t.as_str())).map(|w| &self.lists[*w as usize].postings))
            .collect();
        let corpus = Corpus {
            memories: visible.memories,
            average_terms: visible.terms as f64 / visible.memories.max(1) as f64,
            containing: lists
                .iter()
                .map(|list| {
                    list.map_or(0, |l| l.iter().filter(|p| seen(p.position.index())).count()) as u64
                })
                .collect(),
        };
        let idf = corpus.idf();
        if lists.iter().all(Option::is_none) {
            return (Vec::new(), idf);
        }
        let scorer = Scorer::new(&corpus);
        // Term at a time, in the query's order: each memory's sum is added up in the order
        // `Scorer::score` adds it, so the scores are the same to the last bit.
        let mut scores = vec![0.0f64; self.lengths.len()];
        let mut matched: Vec<usize> = Vec::new();
        for (j, list) in lists.iter().enumerate() {
            for posting in list.iter().flat_map(|l| l.iter()) {
                let i = posting.position.index();
                if !seen(i) {
                    continue;
                }
                let part = scorer.term(j, posting.frequency, self.lengths[i]);
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
        let scored = (matched.into_iter())
            .map(|i| Scored {
                position: Position::at(i),
                score: scores[i],
            })
            .collect();
        (scored, idf)
    }

    /// Roughly what the postings hold, in bytes: words, lists and each memory's distinct
    /// words (lengths are counted with the memory, in `SearchIndex::bytes`).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// `bytes` counted the long way, to check the running count.
    #[cfg(test)]
    pub fn recount(&self) -> usize {
        let words: usize = self.words.keys().map(|w| word_bytes(w)).sum();
        let lists: usize = (self.lists.iter())
            .map(|l| POSTING_BYTES * l.postings.len())
            .sum();
        let distinct: usize = self.distinct.iter().map(|d| 16 + 4 * d.len()).sum();
        words + lists + distinct
    }
}

/// A word's entry in the map, and its list's header with its spelling; a posting; what a
/// memory of `distinct` words adds besides new words: a posting in each list, and its list
/// of words.
const WORD_BYTES: usize = 64;
const LIST_BYTES: usize = 40;
const POSTING_BYTES: usize = 8;

fn word_bytes(spelling: &str) -> usize {
    WORD_BYTES + LIST_BYTES + 2 * spelling.len()
}

fn memory_bytes(distinct: usize) -> usize {
    distinct * POSTING_BYTES + 16 + 4 * distinct
}
