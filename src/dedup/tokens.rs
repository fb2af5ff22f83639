//! What a memory says, token by token, for the duplicate rule (docs/ranking.md#same-fact):
//! two texts state the same fact when their content tokens agree in order, or when one is
//! the other with one phrase moved. A content token is anything but an English function
//! word or a Korean particle or ending, with English inflections cut and a few words agents
//! write for the same act read as one, so a changed particle, ending, politeness, spacing,
//! casing, punctuation, contraction, inflection or phrase order leaves the tokens alone,
//! while a changed number, version, name, date, weekday or negation, a swapped role, or any
//! content word swapped for another, changes them. A typo is forgiven only where no value
//! can hide: in a long lowercase English word, and in a Hangul syllable that is no numeral,
//! weekday or negation.

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
/// `배포함`, `배포했음` are `배포`. Each says what it follows (`Ending`). Negation is never
/// an ending here: `않`, `못`, `없` and `안` stay, so `한다` and `하지 않는다` differ. `만`
/// (only, or ten thousand) stays too.
const KOREAN_ENDINGS: &[(&str, Ending)] = &[
    ("에서부터", P),
    ("으로부터", P),
    ("하십시오", L),
    ("으십시오", V),
    ("했습니다", L),
    ("십시오", V),
    ("하세요", L),
    ("으세요", V),
    ("하시오", L),
    ("합니다", L),
    ("됩니다", L),
    ("습니다", V),
    ("입니다", P),
    ("에서는", P),
    ("에서도", P),
    ("으로는", P),
    ("으로도", P),
    ("에게는", P),
    ("까지는", P),
    ("부터는", P),
    ("이라고", P),
    ("이에요", P),
    ("했어요", L),
    ("하지만", L),
    ("이지만", P),
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
    ("이야", P),
    ("이고", P),
    ("이며", P),
    ("이다", P),
    ("예요", P),
    ("해요", L),
    ("돼요", L),
    ("했다", L),
    ("했음", L),
    ("한다", L),
    ("하다", L),
    ("하고", L),
    ("하며", L),
    ("하면", L),
    ("해서", L),
    ("해야", L),
    ("하는", L),
    ("하기", L),
    ("하지", L),
    ("되는", L),
    ("된다", L),
    ("되고", L),
    ("되면", L),
    ("돼서", L),
    ("됐다", L),
    ("됐음", L),
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
    ("함", L),
    ("됨", L),
    ("임", P),
    ("음", V),
    ("다", V),
    ("요", V),
    ("한", L),
    ("할", L),
    ("해", L),
    ("된", L),
    ("될", L),
    ("고", V),
    ("며", V),
    ("면", V),
    ("지", V),
    ("야", V),
];

/// What a Korean ending follows: a noun (a particle, or the copula `이다`), a noun made a
/// verb by `하다` or `되다` (`배포한다`, `배포됐다`), or a verb's or adjective's stem, whose
/// last consonant conjugation changes.
#[derive(Clone, Copy, PartialEq)]
enum Ending {
    Particle,
    LightVerb,
    Predicate,
}
use Ending::{LightVerb as L, Particle as P, Predicate as V};

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

/// What a text says, seen three ways: with Korean particles and endings stripped and English
/// words without their inflections (a changed particle, ending or inflection is the same
/// fact); as written (a typo inside a particle, or a word that spacing split before its
/// ending, is the same fact); and word by word with only predicate endings stripped, where
/// Korean particles and English prepositions still mark who does what to whom, for a phrase
/// moved to another place in the sentence (`one_block_moved`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Said {
    pub stripped: Vec<Token>,
    pub written: Vec<Token>,
    ordered: Vec<String>,
    /// The distinct content words, Korean ones stripped, for `overlap`.
    words: HashSet<String>,
}

/// What `text` says.
pub fn said(text: &str) -> Said {
    let spelled = spelled(text);
    let mut words = HashSet::new();
    let stripped = content(&spelled, true, &mut words);
    Said {
        stripped,
        written: content(&spelled, false, &mut HashSet::new()),
        ordered: ordered(&spelled),
        words,
    }
}

/// Whether `a` and `b` say the same fact.
pub fn agree(a: &Said, b: &Said) -> bool {
    agree_tokens(&a.stripped, &b.stripped)
        || agree_tokens(&a.written, &b.written)
        || one_block_moved(&a.ordered, &b.ordered)
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

/// `won't` is `will not`, `shan't` is `shall not`.
fn spelled_out(stem: &str) -> &str {
    match stem.to_lowercase().as_str() {
        "won" => "will",
        "shan" => "shall",
        _ => stem,
    }
}

/// `text` with contractions spelled out and clitics (`'s`, `'re`, …) dropped.
fn spelled(text: &str) -> String {
    let spelled = NOT.replace_all(text, |c: &regex::Captures| match (c.get(1), c.get(2)) {
        (Some(stem), _) | (_, Some(stem)) => format!("{} not", spelled_out(stem.as_str())),
        _ => " not".to_owned(),
    });
    CLITIC.replace_all(&spelled, "").into_owned()
}

/// The content tokens of `spelled` (a text as `spelled` leaves it), in order, Korean words
/// without their endings and English words without their inflections when `strip`; each
/// content word also goes into `words`.
fn content(spelled: &str, strip: bool, words: &mut HashSet<String>) -> Vec<Token> {
    let mut tokens: Vec<Token> = Vec::new();
    // Whether the last token is a Korean run the next Korean word joins.
    let mut korean_open = false;
    // The Korean word just before, as written, if the last piece was one.
    let mut previous: Option<&str> = None;
    // A short negation (`안 잡는다`) waiting for its verb, to read as the long one
    // (`잡지 않는다`); a verb that is all ending (`안 함`) leaves it to the next piece.
    let mut negation: Option<&str> = None;
    for piece in PIECES.find_iter(spelled) {
        let raw = piece.as_str();
        let first = raw.chars().next().unwrap_or(' ');
        let before = previous.take();
        if !is_hangul(first)
            && let Some(negation) = negation.take()
        {
            push_korean(
                &mut tokens,
                &mut korean_open,
                long_negation(negation).into(),
            );
        }
        if first.is_numeric() {
            let number = raw.replace(',', "").to_lowercase();
            words.insert(number.clone());
            tokens.push(Token::Number(number));
            korean_open = false;
        } else if is_hangul(first) {
            previous = Some(raw);
            if strip && SHORT_NEGATIONS.contains(&raw) {
                if let Some(negation) = negation.replace(raw) {
                    push_korean(
                        &mut tokens,
                        &mut korean_open,
                        long_negation(negation).into(),
                    );
                }
                continue;
            }
            let word = if strip {
                stem(raw, sentence_end(&spelled[piece.end()..]))
            } else {
                raw.to_owned()
            };
            if word.is_empty() || (strip && before.is_some_and(|b| auxiliary(b, raw, &word))) {
                continue;
            }
            words.insert(word.clone());
            push_korean(&mut tokens, &mut korean_open, word);
            if let Some(negation) = negation.take() {
                push_korean(
                    &mut tokens,
                    &mut korean_open,
                    long_negation(negation).to_owned(),
                );
            }
        } else {
            korean_open = false;
            let lower = raw.to_lowercase();
            if FUNCTION_WORDS.contains(&lower.as_str()) {
                continue;
            }
            let capitals_inside = raw.chars().skip(1).any(char::is_uppercase);
            let value = VALUE_WORDS.contains(&lower.as_str());
            let lower = if strip && !capitals_inside && !value {
                english_stem(&lower)
            } else {
                lower
            };
            words.insert(lower.clone());
            let typo_prone = lower.chars().count() >= TYPO_MIN_CHARS && !capitals_inside && !value;
            tokens.push(if typo_prone {
                Token::Word(lower)
            } else {
                Token::Exact(lower)
            });
        }
    }
    if let Some(negation) = negation {
        push_korean(
            &mut tokens,
            &mut korean_open,
            long_negation(negation).into(),
        );
    }
    tokens
}

/// Whether a word followed by `rest` ends its sentence.
fn sentence_end(rest: &str) -> bool {
    let rest = rest.trim_start_matches([' ', '\t']);
    rest.is_empty() || rest.starts_with(['.', '!', '?', '\n', '\r'])
}

/// A Korean word joins the run before it, so spacing does not count.
fn push_korean(tokens: &mut Vec<Token>, korean_open: &mut bool, word: String) {
    match tokens.last_mut() {
        Some(Token::Hangul(run)) if *korean_open => run.push_str(&word),
        _ => tokens.push(Token::Hangul(word)),
    }
    *korean_open = true;
}

/// Korean negates a verb two ways that say the same: before it (`안 잡는다`, `못 간다`) or
/// after it (`잡지 않는다`, `가지 못한다`), which is how the stripped tokens read both.
const SHORT_NEGATIONS: &[&str] = &["안", "못"];

fn long_negation(short: &str) -> &'static str {
    if short == "못" { "못" } else { "않" }
}

/// `spelled` word by word for `one_block_moved`: numbers, English words without their
/// inflections (prepositions kept, articles dropped), and Korean words with a predicate's
/// ending stripped but a noun's particle kept, since the particle says the noun's role.
fn ordered(spelled: &str) -> Vec<String> {
    PIECES
        .find_iter(spelled)
        .filter_map(|piece| {
            let raw = piece.as_str();
            let first = raw.chars().next().unwrap_or(' ');
            if first.is_numeric() {
                Some(raw.replace(',', ""))
            } else if is_hangul(first) {
                let word = match ending(raw) {
                    Some((stem, Ending::Predicate)) => korean_synonym(predicate_stem(stem)),
                    Some((noun, Ending::LightVerb)) => korean_synonym(noun.to_owned()),
                    _ => raw.to_owned(),
                };
                (!word.is_empty()).then_some(word)
            } else {
                let lower = raw.to_lowercase();
                (!ARTICLES.contains(&lower.as_str())).then(|| english_stem(&lower))
            }
        })
        .collect()
}

const ARTICLES: &[&str] = &["a", "an", "the"];

/// Words that make the order of a sentence part of its fact: what comes first, and what a
/// negation covers. A moved phrase never gives them another neighbour (`one_block_moved`).
const ORDER_WORDS: &[&str] = &[
    "before", "after", "then", "until", "till", "since", "first", "last", "prior", "follow",
    "precede", "not", "never", "no", "without", "except", "unless", "instead",
];
const KOREAN_ORDER_WORDS: &[&str] = &[
    "전", "후", "뒤", "다음", "먼저", "나중", "이전", "이후", "안", "않", "못", "없", "말",
];

/// Whether `b` is `a` with one phrase moved (`In CI, run the tests` / `Run the tests in CI`;
/// `A는 B를 쓰고 C는 걷어냈다` / `C는 걷어냈고 A는 B를 쓴다`): the same words, and where
/// they differ, the one is the other with its two parts swapped. Two single words swapped
/// (`A B` / `B A`) is not enough. A word of order or negation may be inside a part, where
/// its neighbours stay (`On Fridays, do not deploy` / `Do not deploy on Fridays`), never at
/// a part's edge, where the move would give it another (`Run tests, not lint` / `Do not run
/// tests, lint`; `Before the build, lint` / `Lint before the build`).
fn one_block_moved(a: &[String], b: &[String]) -> bool {
    if a.len() != b.len() || a.len() < 3 || a == b {
        return false;
    }
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suffix = (a[prefix..].iter().rev().zip(b[prefix..].iter().rev()))
        .take_while(|(x, y)| x == y)
        .count();
    let (end, n) = (a.len() - suffix, a.len() - suffix - prefix);
    // The words beside the parts: the one before them and the one after.
    let beside = [prefix.checked_sub(1).map(|i| &a[i]), a.get(end)];
    if beside.into_iter().flatten().any(|w| ordering(w)) {
        return false;
    }
    let (a, b) = (&a[prefix..end], &b[prefix..end]);
    (1..n).any(|k| {
        let edges = [&a[0], &a[k - 1], &a[k], &a[n - 1]];
        (k >= 2 || n - k >= 2)
            && a[k..] == b[..n - k]
            && a[..k] == b[n - k..]
            && !edges.into_iter().any(|w| ordering(w))
    })
}

/// Whether a word says order or negation (`ORDER_WORDS`, `KOREAN_ORDER_WORDS`, with or
/// without its ending).
fn ordering(word: &str) -> bool {
    let mut bare = vec![word];
    while let Some((rest, _)) = bare.last().and_then(|w| ending(w))
        && !rest.is_empty()
        && bare.len() < 3
    {
        bare.push(rest);
    }
    ORDER_WORDS.iter().any(|o| inflection_cut(o) == word)
        || bare.iter().any(|b| KOREAN_ORDER_WORDS.contains(b))
}

/// The English words an agent writes for the same act, each read as the first of its row.
const SYNONYMS: &[&[&str]] = &[
    &["use", "utilize", "utilise", "employ", "rely"],
    &["store", "save", "keep", "kept", "retain"],
    &["pin", "lock"],
    &["prefer", "like"],
    &["large", "big"],
    &["every", "all", "each"],
];

/// An English word without its inflection, then the first of its row of `SYNONYMS`:
/// `uses`, `used`, `using` and `utilized` are all `us`, `pinned` and `locked` are `pin`.
fn english_stem(word: &str) -> String {
    let stem = inflection_cut(word);
    SYNONYMS
        .iter()
        .find(|row| row.iter().any(|s| inflection_cut(s) == stem))
        .map_or(stem, |row| inflection_cut(row[0]))
}

/// A light stemmer for the inflections a repeat changes: a plural or a verb's `-s`,
/// `-es`, `-ies`, `-ed`, `-ing` cut, a doubled consonant left by the cut undoubled
/// (`pinned`), and a final `e` dropped so `use` meets `using`. It never makes `not`.
fn inflection_cut(word: &str) -> String {
    let vowel = |s: &str| s.contains(['a', 'e', 'i', 'o', 'u', 'y']);
    let cut = if let Some(base) = word.strip_suffix("ies").filter(|b| b.len() >= 2) {
        Some(format!("{base}y"))
    } else if let Some(base) = word
        .strip_suffix("ing")
        .filter(|b| b.len() >= 2 && vowel(b))
    {
        Some(base.to_owned())
    } else if let Some(base) =
        (word.strip_suffix("ed")).filter(|b| b.len() >= 2 && vowel(b) && !word.ends_with("eed"))
    {
        Some(base.to_owned())
    } else if let Some(base) = (word.strip_suffix("es")).filter(|b| {
        b.len() >= 2
            && ["s", "x", "z", "o", "ch", "sh"]
                .iter()
                .any(|e| b.ends_with(e))
    }) {
        Some(base.to_owned())
    } else {
        (word.strip_suffix('s'))
            .filter(|b| b.len() >= 2 && !b.ends_with(['s', 'u', 'i']))
            .map(str::to_owned)
    };
    let mut stem = cut.clone().unwrap_or_else(|| word.to_owned());
    let bytes = stem.as_bytes();
    if cut.is_some()
        && bytes.len() >= 3
        && bytes[bytes.len() - 1] == bytes[bytes.len() - 2]
        && !b"lsfz".contains(&bytes[bytes.len() - 1])
    {
        stem.pop();
    }
    if stem.len() >= 3 && stem.ends_with('e') && stem != "note" {
        stem.pop();
    }
    stem
}

fn is_hangul(c: char) -> bool {
    ('\u{AC00}'..='\u{D7A3}').contains(&c)
}

/// A Hangul syllable's three letters by their indices: initial, vowel, final (0: none).
fn jamo(c: char) -> (u32, u32, u32) {
    let code = c as u32 - 0xAC00;
    (code / 588, code % 588 / 28, code % 28)
}

/// The ending of `word` that fits first, with what is left of the word.
fn ending(word: &str) -> Option<(&str, Ending)> {
    KOREAN_ENDINGS
        .iter()
        .find_map(|(ending, kind)| Some((word.strip_suffix(ending)?, *kind)))
}

/// A Korean word reduced to what no particle, ending or conjugation changes. After a
/// particle (a copula, `이다`, `입니다`, is one) the word is a noun and stays as it is; after
/// a predicate's ending it is a stem (`predicate_stem`). A word with neither is left alone
/// unless its end is an ending fused into it: a vowel fused with `-아`/`-어` (`봐`, `줘`),
/// the informal `-아`/`-어` after a consonant (`돌아`, `받아`), or, ending a sentence, a
/// note's nominal `-ㅁ` (`둠`). A word that is nothing but an ending (a spaced-off `한다`)
/// is empty.
fn stem(word: &str, sentence_end: bool) -> String {
    if ["거", "게", "건", "걸"].contains(&word) {
        // `것` as spoken: `게` is `것이` run together, `건` `것은`, `걸` `것을`.
        return "것".to_owned();
    }
    let stem = match ending(word) {
        Some((noun, Ending::Particle | Ending::LightVerb)) => noun.to_owned(),
        Some((stem, Ending::Predicate)) => predicate_stem(stem),
        None => match informal(word) {
            Some(stem) => predicate_stem(stem),
            None => bare(word, sentence_end),
        },
    };
    korean_synonym(stem)
}

/// A predicate's stem as conjugation leaves it, so every form of one verb meets: without
/// the final consonant of its last syllable, which is often an ending fused into it
/// (`만든다`, `만듭니다` → `만드`; `둔다` → `두`), or else with a vowel fused with `-아`/`-어`
/// taken apart (`봐요` → `보`, `줘요` → `주`, `켜요` → `키`); then without a last `이`
/// (`붙입니다`, `붙인다`, `붙여` → `붙`). Guarded syllables (`GUARDED`) stay as written:
/// `삼` and `사` are 3 and 4.
fn predicate_stem(stem: &str) -> String {
    let mut syllables: Vec<char> = stem.chars().collect();
    let single = syllables.len() == 1;
    let Some(last) = syllables.last_mut() else {
        return String::new();
    };
    if !is_hangul(*last) || GUARDED.contains(*last) {
        return stem.to_owned();
    }
    let (initial, vowel, consonant) = jamo(*last);
    // A stem of one syllable keeps a final that is its own (`막`, `맡`, `많`, `있` stay
    // apart) and loses one an ending put there (`ㄴ`, `ㄹ`, `ㅁ`, `ㅂ`: `둔`, `둘`, `둠`, `둡`).
    if single && ![0, FINAL_N, FINAL_L, FINAL_M, FINAL_B].contains(&consonant) {
        return stem.to_owned();
    }
    let vowel = match vowel {
        _ if consonant != 0 => vowel,
        VOWEL_WA => VOWEL_O,
        VOWEL_WAE => VOWEL_OE,
        VOWEL_WEO => VOWEL_U,
        VOWEL_YEO => VOWEL_I,
        other => other,
    };
    *last = char::from_u32(0xAC00 + initial * 588 + vowel * 28).unwrap_or(*last);
    if let [.., before, '이'] = syllables[..]
        && is_hangul(before)
        && !GUARDED.contains(before)
    {
        syllables.pop();
    }
    syllables.into_iter().collect()
}

/// The informal ending `-아`/`-어` after a stem that ends in a consonant (`돌아`, `받아`,
/// `있어`, `않아`): what is left, unless it is a numeral (`영어` is English, not zero).
fn informal(word: &str) -> Option<&str> {
    let stem = word
        .strip_suffix('아')
        .or_else(|| word.strip_suffix('어'))?;
    let before = stem.chars().last()?;
    let numeral = GUARDED.contains(before) && !"않없".contains(before);
    (is_hangul(before) && jamo(before).2 != 0 && !numeral).then_some(stem)
}

/// A word with no ending of the list: a verb's `-아`/`-어` fused into its last vowel
/// (`봐`, `줘`, `돼`), or a note's nominal `-ㅁ` ending a sentence (`둠`, `씀`), is a
/// predicate's form; anything else is a noun, as written.
fn bare(word: &str, sentence_end: bool) -> String {
    let Some(last) = word
        .chars()
        .last()
        .filter(|&c| is_hangul(c) && !GUARDED.contains(c))
    else {
        return word.to_owned();
    };
    let (_, vowel, consonant) = jamo(last);
    let fused = consonant == 0 && [VOWEL_WA, VOWEL_WAE, VOWEL_WEO].contains(&vowel);
    if fused || (sentence_end && consonant == FINAL_M) {
        predicate_stem(word)
    } else {
        word.to_owned()
    }
}

/// Verbs an agent writes for the same act, as `stem` leaves them (a noun before a particle
/// or copula, a stem after an ending), each read as the first of its row: using
/// (`사용`, `이용`, `쓰다`, `활용`), preferring (`선호`, `좋아하다`), keeping (`보관`,
/// `유지`, `저장`), and `이메일` / `메일`.
const KOREAN_SYNONYMS: &[&[&str]] = &[
    &["사용", "이용", "쓰", "활용"],
    &["선호", "좋아"],
    &["보관", "유지", "저장"],
    &["이메일", "메일"],
];

fn korean_synonym(stem: String) -> String {
    KOREAN_SYNONYMS
        .iter()
        .find(|row| row.contains(&stem.as_str()))
        .map_or(stem, |row| row[0].to_owned())
}

/// Whether a Korean word is the auxiliary `주다` or `드리다` after a verb's `-아`/`-어` form,
/// which only makes a request politer (`물어봐` / `물어봐 주세요`). A bare `주` (a week)
/// is never one.
fn auxiliary(before: &str, raw: &str, stem: &str) -> bool {
    let connective = before.chars().last().is_some_and(|c| {
        is_hangul(c)
            && jamo(c).2 == 0
            && [VOWEL_A, VOWEL_EO, VOWEL_WA, VOWEL_WEO, VOWEL_YEO, VOWEL_AE].contains(&jamo(c).1)
    });
    connective && raw != stem && matches!(stem, "주" | "드리")
}

/// Hangul's medial vowels by their index in a syllable's code: `ㅗ` with `-아` fuses into
/// `ㅘ`, `ㅚ` with `-어` into `ㅙ`, `ㅜ` with `-어` into `ㅝ`, `ㅣ` with `-어` into `ㅕ`.
const VOWEL_A: u32 = 0;
const VOWEL_AE: u32 = 1;
const VOWEL_EO: u32 = 4;
const VOWEL_YEO: u32 = 6;
const VOWEL_WA: u32 = 9;
const VOWEL_O: u32 = 8;
const VOWEL_WAE: u32 = 10;
const VOWEL_OE: u32 = 11;
const VOWEL_WEO: u32 = 14;
const VOWEL_U: u32 = 13;
const VOWEL_I: u32 = 20;
/// Final consonants by their index in a syllable's code.
const FINAL_M: u32 = 16;
const FINAL_N: u32 = 4;
const FINAL_L: u32 = 8;
const FINAL_B: u32 = 17;

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
    let ((p, q, r), (x, y, z)) = (jamo(a[i]), jamo(b[i]));
    usize::from(p != x) + usize::from(q != y) + usize::from(r != z) == 1
}
