//! Texts longer than a model reads (docs/embeddings.md#long-texts). A memory may hold
//! 32,000 bytes, more than Titan's 8,192 tokens once it is Korean, more than every local
//! model's window and many self-hosted models' in any language, and a limit of the embedder
//! must never refuse a memory within the documented ones nor drop its end. So a text that
//! may not fit is cut into windows that do, at spaces (`cut_by`), each is embedded, and the
//! vectors are pooled into one (`pool`): their mean weighted by each window's length,
//! normalised, as mean pooling over the whole text would weigh them. Pooling was measured
//! against keeping the first window (BENCHMARKS.md, "Issue 61: long memories, and a store
//! that is down"). A text that fits is embedded as it is, so every short text keeps the
//! vector it had. The local models cut by their own tokenizer (`super::local`); the remote
//! ones are wrapped in `Windowed`.
//!
//! How many tokens a text makes at a remote model is not known here (Titan's tokenizer is
//! not published; an OpenAI-compatible server may run any), so `tokens` counts at least as
//! many as a subword tokenizer makes of most text, and a window the service still refuses as
//! too long is cut in two and tried again.

use std::sync::Arc;

use async_trait::async_trait;
use futures_util::{StreamExt, TryStreamExt};

use super::{EmbedError, Embedder};

/// How many times a window the service refuses may be cut in two: to 1/64 of it at the least.
const HALVINGS: u32 = 6;

/// What one call of the model reads at the most.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    pub tokens: usize,
    pub chars: usize,
}

impl Window {
    /// Titan text v2: 8,192 tokens and 50,000 characters.
    pub const TITAN: Window = Window {
        tokens: 8_192,
        chars: 50_000,
    };

    /// Whether `text` fits, its tokens counted by [`tokens`].
    fn holds(&self, text: &str) -> bool {
        tokens(text) <= self.tokens && text.chars().nth(self.chars).is_none()
    }
}

/// How many tokens `text` makes at the least in a subword tokenizer, counted so as to make
/// more rather than fewer: one a Hangul, kana or CJK character, one a run of up to four
/// letters or three digits, one any other sign.
pub fn tokens(text: &str) -> usize {
    let mut counter = Counter::default();
    text.chars().map(|c| counter.add(c)).sum()
}

#[derive(Default)]
struct Counter {
    /// The run under way: letters (`true`) or digits, and its length.
    run: Option<(bool, usize)>,
}

impl Counter {
    /// The tokens `c` starts: 0 or 1.
    fn add(&mut self, c: char) -> usize {
        if is_syllabic(c) || !(c.is_alphanumeric() || c.is_whitespace()) {
            self.run = None;
            return 1;
        }
        if c.is_whitespace() {
            self.run = None;
            return 0;
        }
        let (letter, longest) = if c.is_numeric() {
            (false, 3)
        } else {
            (true, 4)
        };
        match &mut self.run {
            Some((kind, length)) if *kind == letter && *length < longest => {
                *length += 1;
                0
            }
            _ => {
                self.run = Some((letter, 1));
                1
            }
        }
    }
}

/// Hangul (syllables and letters), kana, and CJK ideographs: about a token each.
fn is_syllabic(c: char) -> bool {
    matches!(c,
        '\u{1100}'..='\u{11ff}' | '\u{3040}'..='\u{30ff}' | '\u{3130}'..='\u{318f}'
        | '\u{3400}'..='\u{9fff}' | '\u{ac00}'..='\u{d7af}' | '\u{f900}'..='\u{faff}')
}

/// `text` in pieces that each fit `window`, cut at spaces where one falls in the piece, in
/// order; the text itself when it fits.
pub fn cut(text: &str, window: Window) -> Vec<&str> {
    cut_by(text, |piece| window.holds(piece))
}

/// `text` in pieces for which `fits` holds, each the longest start of what is left that
/// ends at a word's end (inside the first word, at a character, when no whole word fits),
/// in order, trimmed; the text itself when it fits. `fits` must hold for every start of a
/// text it holds for, as a count of tokens does: a model's own tokenizer
/// (`super::local`) or the estimate above.
pub fn cut_by(text: &str, fits: impl Fn(&str) -> bool) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let end = longest_start(rest, &fits);
        pieces.push(rest[..end].trim_end());
        rest = rest[end..].trim_start();
    }
    pieces
}

/// The length in bytes of the longest start of `text` that `fits`, ending at a word's end
/// when one does, else inside the first word; at least one character.
fn longest_start(text: &str, fits: &impl Fn(&str) -> bool) -> usize {
    if fits(text) {
        return text.len();
    }
    let mut word_ends = Vec::new();
    let mut in_word = false;
    for (at, c) in text.char_indices() {
        if c.is_whitespace() && in_word {
            word_ends.push(at);
        }
        in_word = !c.is_whitespace();
    }
    let words = holding(&word_ends, |&end| fits(&text[..end]));
    if words > 0 {
        return word_ends[words - 1];
    }
    let char_ends: Vec<usize> = text
        .char_indices()
        .map(|(at, c)| at + c.len_utf8())
        .collect();
    char_ends[holding(&char_ends, |&end| fits(&text[..end])).max(1) - 1]
}

/// How many of `items` hold from the first, when they hold up to a point and not after:
/// found by doubling, then halving, so that the probes cost about what the answer spans,
/// not the whole text (a probe may run a tokenizer over the start it names).
fn holding<T>(items: &[T], holds: impl Fn(&T) -> bool) -> usize {
    let (mut known, mut next) = (0, 1);
    while next <= items.len() && holds(&items[next - 1]) {
        known = next;
        next *= 2;
    }
    known + items[known..next.min(items.len())].partition_point(holds)
}

/// One vector for `pieces`: their mean weighted by `weights`, normalised.
pub fn pool(vectors: &[Vec<f32>], weights: &[usize]) -> Vec<f32> {
    let width = vectors.first().map_or(0, Vec::len);
    let mut sum = vec![0f64; width];
    for (vector, weight) in vectors.iter().zip(weights) {
        for (s, x) in sum.iter_mut().zip(vector) {
            *s += f64::from(*x) * (*weight).max(1) as f64;
        }
    }
    let norm = sum.iter().map(|x| x * x).sum::<f64>().sqrt();
    let norm = if norm > 0.0 { norm } else { 1.0 };
    sum.iter().map(|x| (x / norm) as f32).collect()
}

/// The service's answer that a text was longer than it reads: Titan's `ValidationException`
/// (too many tokens, or characters), or an OpenAI-compatible server's 400, 413 or 422
/// that says so (OpenAI: "maximum context length"; text-embeddings-inference: "must have
/// less than 512 tokens"; vLLM alike).
fn too_long(e: &EmbedError) -> bool {
    let says = |text: &str| {
        let text = text.to_lowercase();
        [
            "token",
            "too long",
            "context length",
            "longer than",
            "input length",
        ]
        .iter()
        .any(|w| text.contains(w))
    };
    match e {
        EmbedError::Bedrock(message) => message.starts_with("ValidationException") && says(message),
        EmbedError::Status {
            status: 400 | 413 | 422,
            body: Some(body),
        } => says(body),
        _ => false,
    }
}

/// A remote embedder that takes texts of any length (module doc).
pub struct Windowed {
    inner: Arc<dyn Embedder>,
    window: Window,
}

impl Windowed {
    pub fn new(inner: Arc<dyn Embedder>, window: Window) -> Windowed {
        Windowed { inner, window }
    }

    async fn embed_as(&self, text: &str, query: bool) -> Result<Vec<f32>, EmbedError> {
        let pieces = cut(text, self.window);
        // One piece is the whole text: sent as it was given (blank text too, for the
        // service to answer).
        if pieces.len() <= 1 {
            return self.piece(text, query, HALVINGS).await;
        }
        // No more pieces at once than the service takes: a piece waiting for its turn
        // spends its own timeout waiting.
        let at_once = self.inner.at_once().unwrap_or(pieces.len()).max(1);
        let embedding: Vec<_> = (pieces.iter())
            .map(|p| self.piece(p, query, HALVINGS))
            .collect();
        let vectors: Vec<Vec<f32>> = futures_util::stream::iter(embedding)
            .buffered(at_once)
            .try_collect()
            .await?;
        let weights: Vec<usize> = pieces.iter().map(|p| tokens(p)).collect();
        Ok(pool(&vectors, &weights))
    }

    /// One piece's vector; one the service refuses as too long is cut in two, each half
    /// embedded, and the two pooled.
    async fn piece(&self, text: &str, query: bool, halvings: u32) -> Result<Vec<f32>, EmbedError> {
        let embedded = if query {
            self.inner.embed_query(text).await
        } else {
            self.inner.embed(text).await
        };
        match embedded {
            Err(e) if halvings > 0 && too_long(&e) => {
                let half = Window {
                    tokens: (tokens(text) / 2).max(1),
                    chars: (text.chars().count() / 2).max(1),
                };
                let (first, rest) = text.split_at(longest_start(text, &|p| half.holds(p)));
                let (first, rest) = (first.trim(), rest.trim());
                if first.is_empty() || rest.is_empty() {
                    return Err(e);
                }
                let (a, b) = futures_util::future::try_join(
                    Box::pin(self.piece(first, query, halvings - 1)),
                    Box::pin(self.piece(rest, query, halvings - 1)),
                )
                .await?;
                Ok(pool(&[a, b], &[tokens(first), tokens(rest)]))
            }
            other => other,
        }
    }
}

#[async_trait]
impl Embedder for Windowed {
    async fn embed(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.embed_as(text, false).await
    }

    async fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.embed_as(text, true).await
    }

    fn model(&self) -> crate::memory::Model {
        self.inner.model()
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn at_once(&self) -> Option<usize> {
        self.inner.at_once()
    }

    fn health(&self) -> Result<(), String> {
        self.inner.health()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn tokens_are_counted_as_a_subword_tokenizer_makes_them_at_the_least() {
        assert_eq!(tokens(""), 0);
        assert_eq!(tokens("deploy"), 2); // deplo + y
        assert_eq!(tokens("a b"), 2);
        assert_eq!(tokens("2026-12-07"), 6); // 202 6 - 12 - 07
        assert_eq!(tokens("배포는 금요일"), 6);
        assert_eq!(tokens("v2.3"), 4);
    }

    #[test]
    fn a_long_text_is_cut_at_spaces_into_windows_that_fit_and_lose_nothing() {
        let window = Window {
            tokens: 10,
            chars: 1_000,
        };
        let text =
            "one two three four five six seven eight nine ten eleven twelve 배포는 금요일에 한다";
        let pieces = cut(text, window);
        assert!(pieces.len() > 1, "{pieces:?}");
        for piece in &pieces {
            assert!(tokens(piece) <= window.tokens, "{piece:?}");
            assert_eq!(piece.trim(), *piece);
        }
        assert_eq!(pieces.join(" "), text);
        assert_eq!(cut("fits", window), ["fits"]);
        // No space at all: cut between characters.
        let solid = "가".repeat(25);
        let pieces = cut(&solid, window);
        assert_eq!(pieces.concat(), solid);
        assert!(pieces.iter().all(|p| tokens(p) <= window.tokens));
        // Characters are a limit of their own.
        let chars = Window {
            tokens: 1_000,
            chars: 8,
        };
        assert!(
            cut("abcdefghijklmnop", chars)
                .iter()
                .all(|p| p.chars().count() <= 8)
        );
    }

    proptest::proptest! {
        /// Cut by any measure that grows with the text (here a model whose tokens are
        /// three bytes of a word), every piece fits, none could have taken more, and
        /// between them there is only the text's own space.
        #[test]
        fn pieces_fit_are_as_long_as_they_can_be_and_lose_nothing(
            text in "[a-z가-힣 ]{0,200}",
            most in 1usize..40,
        ) {
            let count = |t: &str| -> usize {
                t.split_whitespace().map(|w| w.len().div_ceil(3)).sum()
            };
            let pieces = cut_by(&text, |t| count(t) <= most);
            let at = |piece: &str| piece.as_ptr() as usize - text.as_ptr() as usize;
            let mut covered = text.len() - text.trim_start().len();
            for piece in &pieces {
                proptest::prop_assert!(!piece.is_empty() && count(piece) <= most);
                proptest::prop_assert!(text[covered..at(piece)].trim().is_empty(), "a gap");
                covered = at(piece) + piece.len();
                let after = &text[covered..];
                // One more word, or one more character of a word cut inside, is too much.
                let more = match after.chars().next() {
                    None => continue,
                    Some(c) if !c.is_whitespace() => c.len_utf8(),
                    Some(_) => {
                        let next = after.trim_start();
                        after.len() - next.len()
                            + next.find(char::is_whitespace).unwrap_or(next.len())
                    }
                };
                if !after.trim().is_empty() {
                    proptest::prop_assert!(count(&text[at(piece)..covered + more]) > most);
                }
            }
            proptest::prop_assert!(text[covered..].trim().is_empty(), "the end is kept");
        }
    }

    #[test]
    fn pooling_weighs_windows_by_length_and_normalises() {
        let pooled = pool(&[vec![1.0, 0.0], vec![0.0, 1.0]], &[3, 1]);
        let norm = (pooled[0] * pooled[0] + pooled[1] * pooled[1]).sqrt();
        assert!((norm - 1.0).abs() < 1e-6);
        assert!((pooled[0] / pooled[1] - 3.0).abs() < 1e-5);
    }

    /// An embedder that refuses, as Titan does, a text of more than `cap` tokens, and
    /// records the texts it embedded.
    struct Capped {
        cap: usize,
        seen: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl Embedder for Capped {
        async fn embed(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
            let count = tokens(text) * 2; // a tokenizer that makes twice what is counted
            if count > self.cap {
                return Err(EmbedError::Bedrock(format!(
                    "ValidationException: Too many input tokens. Max input tokens: {}, \
                     request input token count: {count}",
                    self.cap
                )));
            }
            self.seen.lock().unwrap().push(text.to_owned());
            Ok(vec![1.0, count as f32])
        }

        fn model(&self) -> crate::memory::Model {
            crate::memory::Model {
                name: "test:capped".into(),
                dimension: 2,
            }
        }
    }

    #[tokio::test]
    async fn a_window_the_service_refuses_is_halved_until_it_is_taken() {
        let capped = Arc::new(Capped {
            cap: 20,
            seen: Mutex::default(),
        });
        let windowed = Windowed::new(
            capped.clone(),
            Window {
                tokens: 20,
                chars: 1_000,
            },
        );
        let text = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi";
        let vector = windowed.embed(text).await.unwrap();
        assert!((vector.iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-5);
        let seen = capped.seen.lock().unwrap().clone();
        assert_eq!(seen.join(" "), text, "every word embedded once, in order");
        assert!(seen.iter().all(|t| tokens(t) * 2 <= 20), "{seen:?}");
        // Short texts go through untouched, spaces and all.
        capped.seen.lock().unwrap().clear();
        windowed.embed(" short ").await.unwrap();
        assert_eq!(*capped.seen.lock().unwrap(), [" short "]);
    }

    #[tokio::test]
    async fn other_failures_are_not_retried() {
        struct Down;
        #[async_trait]
        impl Embedder for Down {
            async fn embed(&self, _: &str) -> Result<Vec<f32>, EmbedError> {
                Err(EmbedError::Status {
                    status: 400,
                    body: Some("invalid model".into()),
                })
            }
            fn model(&self) -> crate::memory::Model {
                crate::memory::Model {
                    name: "test:down".into(),
                    dimension: 2,
                }
            }
        }
        let windowed = Windowed::new(Arc::new(Down), Window::TITAN);
        let e = windowed.embed("anything").await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "the embedding service answered 400: invalid model"
        );
    }

    #[tokio::test]
    async fn no_more_windows_go_at_once_than_the_service_takes() {
        let turns = Arc::new(crate::embed::Turns::new(2));
        let small = Window {
            tokens: 3,
            chars: 1_000,
        };
        let windowed = Windowed::new(turns.clone(), small);
        let text = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi";
        assert!(cut(text, small).len() > 4);
        windowed.embed(text).await.unwrap();
        let most = turns.most.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(
            most, 2,
            "windows wait in the decorator, not in the service's queue"
        );
    }
}
