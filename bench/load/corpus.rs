//! The synthetic memories and questions: words drawn from a 4,000-word vocabulary with a
//! Zipf-like law (a few words are everywhere, most are rare, as in a project's notes), and a
//! marker word that makes every memory unique, so dedup never merges two of them.

const VOCABULARY: usize = 4000;
const SYLLABLES: [&str; 24] = [
    "ka", "lo", "mi", "ren", "tu", "sa", "vek", "no", "pi", "dar", "el", "os", "qua", "zi", "bel",
    "tor", "fin", "gu", "ha", "jo", "wex", "yl", "cru", "mon",
];

/// SplitMix64: deterministic, fast, and enough for picking words.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A uniform float in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub struct Corpus {
    words: Vec<String>,
    /// Cumulative Zipf weights, for drawing a word by rank.
    cumulative: Vec<f64>,
}

impl Corpus {
    pub fn new() -> Corpus {
        let words = (0..VOCABULARY)
            .map(|i| {
                let (a, b, c) = (i % 24, (i / 24) % 24, i / 576);
                format!("{}{}{}", SYLLABLES[a], SYLLABLES[b], SYLLABLES[c % 24])
            })
            .collect();
        let mut total = 0.0;
        let cumulative = (1..=VOCABULARY)
            .map(|rank| {
                total += 1.0 / rank as f64;
                total
            })
            .collect();
        Corpus { words, cumulative }
    }

    fn word(&self, rng: &mut Rng) -> &str {
        let target = rng.unit() * self.cumulative[VOCABULARY - 1];
        let rank = self.cumulative.partition_point(|c| *c < target);
        &self.words[rank.min(VOCABULARY - 1)]
    }

    fn words(&self, rng: &mut Rng, n: usize) -> String {
        (0..n).map(|_| self.word(rng)).collect::<Vec<_>>().join(" ")
    }

    /// A memory of 12–20 words ending in its unique marker.
    pub fn memory(&self, rng: &mut Rng, marker: &str) -> String {
        let n = 12 + rng.below(9);
        format!("{} {marker}", self.words(rng, n))
    }

    /// A question of 3–6 words.
    pub fn question(&self, rng: &mut Rng) -> String {
        let n = 3 + rng.below(4);
        self.words(rng, n)
    }
}
