//! What a memory says, token by token, for the duplicate rule (docs/ranking.md#same-fact):
//! two texts state the same fact when their content tokens agree in order. A content
//! token is anything but an English function word or a Korean particle or ending, so a
//! changed particle, ending, spacing, casing, punctuation or contraction leaves the tokens
//! alone, while a changed number, version, name, date, weekday or negation, or any content
//! word swapped for another, changes them. A typo is forgiven only where no value can hide:
//! in a long lowercase English word, and in a Hangul syllable that is no numeral, weekday or
//! negation.

use std::collections::HashSet;
use std::sync::LazyLock;

use regex::Regex;

/// A number (with its decimal or version dots: `2.1`, `10.0.0.1`), a run of Hangul
/// syllables, or a run of other letters: scripts are split apart, so `A100` is `a` and
/// `100`, `3시` is `3` and `시`.
static PIECES: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\p{N}+(?:[.,]\p{N}+)*|[\u{AC00}-\u{D7A3}]+|[\p{L}\p{M}&&[^\u{AC00}-\u{D7A3}]]+")
        .expect("static regex")
});
/// English contractions, spelled out so `don't` and `do not` are the same tokens.
static NOT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(can|won|shan)['’]t\b|n['’]t\b|\b(can)not\b").expect("static regex")
});
static CLITIC: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)['’](s|re|ve|ll|d|m)\b").expect("static regex"));

/// English words that carry no fact of their own: articles, pronouns, the copula and the
/// auxiliaries `do` and `have`, and the commonest prepositions. Modals (`must`, `may`),
/// `not`, `never`, `always`, `only`, `before` and `after` are content.
const FUNCTION_WORDS: &[&str] = &[
    "a", "am", "an", "and", "are", "as", "at", "be", "been", "being", "by", "did", "do", "does",
    "for", "had", "has", "have", "he", "her", "his", "i", "in", "is", "it", "its", "me", "my",
    "of", "on", "our", "she", "that", "the", "their", "them", "there", "these", "they", "this",
    "those", "to", "us", "was", "we", "were", "with", "you", "your",
];

/// Korean particles and predicate endings, stripped from the end of a word (the first that
/// fits, so longer ones come first): `배포는`, `배포를`, `배포에서는` are `배포`; `배포한다`,
/// `배포함`, `배포했음` are `배포`. Negation is never an ending here: `않`, `못`, `없` and `안`
/// stay, so `한다` and `하지 않는다` differ. `만` (only, or ten thousand) stays too.
const KOREAN_ENDINGS: &[(&str, Ending)] = &[
    ("에서부터", P),
    ("으로부터", P),
    ("하십시오", V),
    ("으십시오", V),
    ("했습니다", V),
    ("십시오", V),
    ("하세요", V),
    ("으세요", V),
    ("하시오", V),
    ("합니다", V),
    ("됩니다", V),
    ("습니다", V),
    ("입니다", V),
    ("에서는", P),
    ("에서도", P),
    ("으로는", P),
    ("으로도", P),
    ("에게는", P),
    ("까지는", P),
    ("부터는", P),
    ("이라고", P),
    ("이에요", V),
    ("했어요", V),
    ("하지만", V),
    ("이지만", V),
    ("에서", P),
    ("에게", P),
    ("한테", P),
    ("으로", P),
    ("로는", P),
    ("로도", P),
    ("에는", P),
    ("에도", P),
    ("까지", P),
    ("부터", P),
    ("보다", P),
    ("처럼", P),
    ("이랑", P),
    ("이나", P),
    ("라고", P),
    ("이라", P),
    ("이고", V),
    ("이며", V),
    ("이다", V),
    ("예요", V),
    ("해요", V),
    ("돼요", V),
    ("했다", V),
    ("했음", V),
    ("한다", V),
    ("하다", V),
    ("하고", V),
    ("하며", V),
    ("하면", V),
    ("해서", V),
    ("해야", V),
    ("하는", V),
    ("하기", V),
    ("하지", V),
    ("되는", V),
    ("된다", V),
    ("되고", V),
    ("되면", V),
    ("돼서", V),
    ("됐다", V),
    ("됐음", V),
    ("는다", V),
    ("어요", V),
    ("아요", V),
    ("세요", V),
    ("니다", V),
    ("은", P),
    ("는", P),
    ("이", P),
    ("가", P),
    ("을", P),
    ("를", P),
    ("에", P),
    ("의", P),
    ("로", P),
    ("와", P),
    ("과", P),
    ("도", P),
    ("랑", P),
    ("나", P),
    ("께", P),
    ("함", V),
    ("됨", V),
    ("임", V),
    ("음", V),
    ("다", V),
    ("요", V),
    ("한", V),
    ("할", V),
    ("해", V),
    ("된", V),
    ("될", V),
    ("고", V),
    ("며", V),
    ("면", V),
    ("지", V),
];

/// What a Korean ending follows: a noun (a particle) or a verb's or adjective's stem, whose
/// last consonant conjugation changes.
#[derive(Clone, Copy, PartialEq)]
enum Ending {
    Particle,
    Predicate,
}
use Ending::{Particle as P, Predicate as V};

/// Hangul syllables in which one changed letter can be a changed value: numerals (`세`/`네`,
/// `삼`/`사`, `반`), weekdays (`월`/`일`), day counts, negation, and more or less (`더`/`덜`).
/// A typo is never forgiven in them.
const GUARDED: &str = "일이삼사오육칠팔구십백천만억영공한두세네셋넷둘다섯여곱덟아홉열스물서른마흔쉰\
                       하루틀흘나닷새엿레월화수목금토첫째안않못없말더덜반";

/// English words whose every letter counts: a weekday, a month, a number word (`Tuesday`
/// and `Thursday` are two letters apart, `eight` and `fight` one).
const VALUE_WORDS: &[&str] = &[
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
    "january",
    "february",
    "march",
    "april",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "twenty",
    "thirty",
    "forty",
    "fifty",
    "hundred",
    "thousand",
    "million",
    "first",
    "second",
    "third",
    "fourth",
    "fifth",
    "once",
    "twice",
];

/// A word this long may carry a one-letter typo and still be the same word.
const TYPO_MIN_CHARS: usize = 5;

/// A token as the rule compares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
    /// A number as written, commas between digits dropped (`1,000` is `1000`).
    Number(String),
    /// A lowercase run of letters that a typo may have touched: long, written all in
    /// lowercase or with a capital first letter only, and not a value word.
    Word(String),
    /// Compared to the letter: short words, identifiers written with capitals inside
    /// (`MySQL`, `MSSQL`), value words.
    Exact(String),
    /// Adjacent Korean words joined, so spacing does not count.
    Hangul(String),
}

impl Token {
    fn text(&self) -> &str {
        match self {
            Token::Number(t) | Token::Word(t) | Token::Exact(t) | Token::Hangul(t) => t,
        }
    }
}

/// What a text says, seen two ways: with Korean particles and endings stripped (a changed
/// particle or ending is the same fact), and as written (a typo inside a particle, or a
/// word that spacing split before its ending, is the same fact).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Said {
    pub stripped: Vec<Token>,
    pub written: Vec<Token>,
    /// The distinct content words, Korean ones stripped, for `overlap`.
    words: HashSet<String>,
}

/// What `text` says.
pub fn said(text: &str) -> Said {
    let mut words = HashSet::new();
    let stripped = content(text, true, &mut words);
    Said {
        stripped,
        written: content(text, false, &mut HashSet::new()),
        words,
    }
}

/// Whether `a` and `b` say the same fact.
pub fn agree(a: &Said, b: &Said) -> bool {
    agree_tokens(&a.stripped, &b.stripped) || agree_tokens(&a.written, &b.written)
}

/// Jaccard similarity of the distinct content tokens: how much of a fact two texts share.
pub fn overlap(a: &Said, b: &Said) -> f64 {
    let (a, b) = (&a.words, &b.words);
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    let shared = a.intersection(b).count();
    shared as f64 / (a.len() + b.len() - shared) as f64
}

/// The content tokens of `text`, in order, Korean words without their endings when
/// `strip`; each content word also goes into `words`.
fn content(text: &str, strip: bool, words: &mut HashSet<String>) -> Vec<Token> {
    let spelled = NOT.replace_all(text, |c: &regex::Captures| match (c.get(1), c.get(2)) {
        (Some(stem), _) | (_, Some(stem)) => format!("{} not", stem.as_str()),
        _ => " not".to_owned(),
    });
    let spelled = CLITIC.replace_all(&spelled, "");
    let mut tokens: Vec<Token> = Vec::new();
    // Whether the last token is a Korean run the next Korean word joins.
    let mut korean_open = false;
    for piece in PIECES.find_iter(&spelled) {
        let raw = piece.as_str();
        let first = raw.chars().next().unwrap_or(' ');
        if first.is_numeric() {
            let number = raw.replace(',', "").to_lowercase();
            words.insert(number.clone());
            tokens.push(Token::Number(number));
            korean_open = false;
        } else if is_hangul(first) {
            let word = if strip { stem(raw) } else { raw.to_owned() };
            if word.is_empty() {
                continue;
            }
            words.insert(word.clone());
            match tokens.last_mut() {
                Some(Token::Hangul(run)) if korean_open => {
                    run.push_str(&word);
                }
                _ => tokens.push(Token::Hangul(word.clone())),
            }
            korean_open = true;
        } else {
            korean_open = false;
            let lower = raw.to_lowercase();
            if FUNCTION_WORDS.contains(&lower.as_str()) {
                continue;
            }
            let capitals_inside = raw.chars().skip(1).any(char::is_uppercase);
            words.insert(lower.clone());
            let typo_prone = lower.chars().count() >= TYPO_MIN_CHARS
                && !capitals_inside
                && !VALUE_WORDS.contains(&lower.as_str());
            tokens.push(if typo_prone {
                Token::Word(lower)
            } else {
                Token::Exact(lower)
            });
        }
    }
    tokens
}

fn is_hangul(c: char) -> bool {
    ('\u{AC00}'..='\u{D7A3}').contains(&c)
}

/// A Korean word without its particle or ending and, after a predicate's ending, with the
/// stem's last syllable as conjugation leaves it alone: without the final consonant of a
/// stem of two syllables or more (`만든다`, `만듭니다`, `만들어요` are all `만드`), and
/// with a vowel that fused with the ending (`-아요`, `-어요`) taken apart (`봐요` is `보`,
/// `줘요` is `주`, `돼요` is `되`). A word that is nothing but an ending (a spaced-off
/// `한다`) is empty. One-syllable stems keep their consonant, and guarded syllables
/// (`GUARDED`) stay as written: `삼` and `사` are 3 and 4.
fn stem(word: &str) -> String {
    let (stem, ending) = KOREAN_ENDINGS
        .iter()
        .find_map(|(ending, kind)| Some((word.strip_suffix(ending)?, Some(*kind))))
        .unwrap_or((word, None));
    let mut syllables: Vec<char> = stem.chars().collect();
    let several = syllables.len() >= 2;
    if ending == Some(Ending::Predicate)
        && let Some(last) = syllables.last_mut()
    {
        let code = *last as u32 - 0xAC00;
        let (initial, mut vowel, mut last_consonant) = (code / 588, code % 588 / 28, code % 28);
        if several {
            last_consonant = 0;
        }
        if !GUARDED.contains(*last) {
            vowel = match vowel {
                VOWEL_WA => VOWEL_O,
                VOWEL_WAE => VOWEL_OE,
                VOWEL_WEO => VOWEL_U,
                other => other,
            };
        }
        *last =
            char::from_u32(0xAC00 + initial * 588 + vowel * 28 + last_consonant).unwrap_or(*last);
    }
    syllables.into_iter().collect()
}

/// Hangul's medial vowels by their index in a syllable's code: `ㅗ` with `-아` fuses into
/// `ㅘ`, `ㅚ` with `-어` into `ㅙ`, `ㅜ` with `-어` into `ㅝ`.
const VOWEL_WA: u32 = 9;
const VOWEL_O: u32 = 8;
const VOWEL_WAE: u32 = 10;
const VOWEL_OE: u32 = 11;
const VOWEL_WEO: u32 = 14;
const VOWEL_U: u32 = 13;

/// Whether `a` and `b` are the same tokens in the same order, forgiving one typo in each
/// typo-prone English word and one changed letter in each unguarded Korean run.
fn agree_tokens(a: &[Token], b: &[Token]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|pair| match pair {
            (Token::Word(x), Token::Word(y)) => x == y || one_typo_apart(x, y),
            (Token::Hangul(x), Token::Hangul(y)) => x == y || one_letter_apart(x, y),
            // `MySQL` and `mysql` are one word written two ways.
            (x, y) => x.text() == y.text(),
        })
}

/// Damerau–Levenshtein distance of exactly 1 (optimal string alignment).
fn one_typo_apart(a: &str, b: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    if a.len().abs_diff(b.len()) > 1 {
        return false;
    }
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let (a, b) = (&a[prefix..], &b[prefix..]);
    let suffix = (a.iter().rev().zip(b.iter().rev()))
        .take_while(|(x, y)| x == y)
        .count();
    let (a, b) = (&a[..a.len() - suffix], &b[..b.len() - suffix]);
    match (a.len(), b.len()) {
        (0, 1) | (1, 0) | (1, 1) => true,
        (2, 2) => a[0] == b[1] && a[1] == b[0],
        _ => false,
    }
}

/// Two Korean runs alike but for one syllable, unguarded in both, that differs in one of
/// its letters (initial, vowel or final: `배포`/`베포`, `에서`/`애서`).
fn one_letter_apart(a: &str, b: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    if a.len() != b.len() {
        return false;
    }
    let mut differing = (0..a.len()).filter(|&i| a[i] != b[i]);
    let (Some(i), None) = (differing.next(), differing.next()) else {
        return false;
    };
    let guarded = |c: char| GUARDED.contains(c);
    if guarded(a[i]) || guarded(b[i]) || !is_hangul(a[i]) || !is_hangul(b[i]) {
        return false;
    }
    let letters = |c: char| {
        let code = c as u32 - 0xAC00;
        [code / 588, code % 588 / 28, code % 28]
    };
    let (x, y) = (letters(a[i]), letters(b[i]));
    x.iter().zip(&y).filter(|(p, q)| p != q).count() == 1
}
