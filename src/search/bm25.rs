//! BM25, the score of a memory for a query's words, beside the postings it reads
//! (`postings.rs`), as tantivy keeps `query/bm25.rs`. Lucene's non-negative idf.

/// BM25's term-frequency saturation (the usual value) and length normalisation, lower
/// than the usual 0.75: memories are short notes, and on LoCoMo 0.3 recalled more
/// (BENCHMARKS.md).
const K1: f64 = 1.2;
const B: f64 = 0.3;

/// What BM25 needs to know about the memories a caller can see.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Corpus {
    pub memories: u64,
    pub average_terms: f64,
    /// How many of those memories contain each query term, in the query's order.
    pub containing: Vec<u64>,
}

impl Corpus {
    /// Each query term's idf, in the query's order: how rare it is among the memories
    /// (the most for a term no memory holds).
    pub fn idf(&self) -> Vec<f64> {
        (self.containing.iter())
            .map(|containing| {
                let n = *containing as f64;
                (1.0 + (self.memories as f64 - n + 0.5) / (n + 0.5)).ln()
            })
            .collect()
    }
}

/// The BM25 score of a memory with `terms` for `query` (Lucene's non-negative idf). Terms
/// are words, or any stand-in for them that compares alike (a store's interned ids).
pub fn bm25<T: PartialEq>(query: &[T], terms: &[T], corpus: &Corpus) -> f64 {
    Scorer::new(corpus).score(query, terms)
}

/// BM25 for many memories against one corpus: each query term's idf is worked out once.
pub struct Scorer<'a> {
    corpus: &'a Corpus,
    idf: Vec<f64>,
}

impl<'a> Scorer<'a> {
    pub fn new(corpus: &'a Corpus) -> Self {
        Scorer {
            corpus,
            idf: corpus.idf(),
        }
    }

    pub fn score<T: PartialEq>(&self, query: &[T], terms: &[T]) -> f64 {
        let length = terms.len() as u32;
        (0..query.len().min(self.idf.len()))
            .map(|j| {
                let tf = terms.iter().filter(|t| **t == query[j]).count() as u32;
                if tf == 0 {
                    return 0.0;
                }
                self.term(j, tf, length)
            })
            .sum()
    }

    /// What the `j`-th query term adds to the score of a memory of `length` terms holding
    /// it `tf` times.
    pub fn term(&self, j: usize, tf: u32, length: u32) -> f64 {
        let norm = K1 * (1.0 - B + B * f64::from(length) / self.corpus.average_terms.max(1.0));
        let tf = f64::from(tf);
        self.idf[j] * tf * (K1 + 1.0) / (tf + norm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::terms::{query_terms, terms as t};

    #[test]
    fn bm25_prefers_rare_terms_and_short_memories() {
        let corpus = Corpus {
            memories: 100,
            average_terms: 10.0,
            containing: vec![2, 60],
        };
        let q = query_terms("pgvector database");
        assert_eq!(q, ["pgvector", "databas"]);
        let rare = bm25(&q, &t("pgvector is installed"), &corpus);
        let common = bm25(&q, &t("the database is installed"), &corpus);
        assert!(rare > common && common > 0.0, "{rare} {common}");
        let long = t(&format!("pgvector {}", "filler ".repeat(40)));
        assert!(bm25(&q, &long, &corpus) < rare);
        assert_eq!(bm25(&q, &t("nothing shared"), &corpus), 0.0);
    }
}
