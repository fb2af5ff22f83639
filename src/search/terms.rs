//! The terms a text is indexed and searched by (docs/ranking.md#recall-by-words). Terms
//! are made here, not by a database's text parser, so every store and every script index
//! the same words:
//!
//! - words are runs of Unicode letters and digits, lowercased; English words are reduced
//!   to their stem (`deploys`, `deployed` → `deploy`) and common function words dropped;
//! - Hangul, kana and CJK ideographs are indexed as overlapping pairs of characters, so
//!   `배포` finds `배포는` and `배포를` without a dictionary;
//! - an identifier joined by `_`, `-`, `.` or `/` (`ERR_SSL_PROTOCOL`, `v1.2.3`) is also
//!   kept whole, so naming it exactly outranks sharing one of its parts.

use std::collections::HashSet;
use std::sync::LazyLock;

use regex::Regex;
use rust_stemmers::{Algorithm, Stemmer};

static TOKENS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"[\p{L}\p{N}]+(?:[_\-./][\p{L}\p{N}]+)*").expect("static regex"));
static WORDS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"[\p{L}\p{N}]+").expect("static regex"));
static ENGLISH: LazyLock<Stemmer> = LazyLock::new(|| Stemmer::create(Algorithm::English));

/// Words too common in English questions and notes to say what a text is about.
const STOPWORDS: &[&str] = &[
    "a", "about", "after", "again", "all", "also", "am", "an", "and", "any", "are", "as", "at",
    "be", "been", "before", "being", "both", "but", "by", "can", "could", "did", "do", "does",
    "doing", "done", "down", "during", "each", "few", "for", "from", "get", "got", "had", "has",
    "have", "having", "he", "her", "here", "hers", "herself", "him", "himself", "his", "how", "i",
    "if", "in", "into", "is", "it", "its", "itself", "just", "me", "more", "most", "my", "myself",
    "no", "nor", "not", "now", "of", "off", "on", "once", "only", "or", "other", "our", "ours",
    "out", "over", "own", "same", "she", "should", "so", "some", "such", "than", "that", "the",
    "their", "theirs", "them", "then", "there", "these", "they", "this", "those", "through", "to",
    "too", "under", "until", "up", "us", "very", "was", "we", "were", "what", "when", "where",
    "which", "while", "who", "whom", "why", "will", "with", "would", "you", "your", "yours",
    "yourself",
];
static STOPWORD_SET: LazyLock<HashSet<&'static str>> =
    LazyLock::new(|| STOPWORDS.iter().copied().collect());

/// Scripts written without spaces between words, or with particles glued to them.
fn is_cjk(c: char) -> bool {
    matches!(c,
        '\u{1100}'..='\u{11FF}' | '\u{3130}'..='\u{318F}' | '\u{AC00}'..='\u{D7AF}' // Hangul
        | '\u{3040}'..='\u{30FF}' // kana
        | '\u{3400}'..='\u{4DBF}' | '\u{4E00}'..='\u{9FFF}' | '\u{F900}'..='\u{FAFF}') // CJK
}

fn push_word(word: &str, out: &mut Vec<String>) {
    if STOPWORD_SET.contains(word) {
        return;
    }
    if word.bytes().all(|b| b.is_ascii_lowercase()) {
        out.push(ENGLISH.stem(word).into_owned());
    } else {
        out.push(word.to_owned());
    }
}

/// Runs of CJK characters become overlapping pairs (a lone character stays itself);
/// everything else is a word.
fn push_run(run: &str, out: &mut Vec<String>) {
    let chars: Vec<char> = run.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let cjk = is_cjk(chars[i]);
        let start = i;
        while i < chars.len() && is_cjk(chars[i]) == cjk {
            i += 1;
        }
        let part = &chars[start..i];
        if !cjk {
            push_word(&part.iter().collect::<String>(), out);
        } else if part.len() == 1 {
            out.push(part[0].to_string());
        } else {
            out.extend(part.windows(2).map(|pair| pair.iter().collect::<String>()));
        }
    }
}

/// The terms `text` is indexed by, in order and with repeats (their count is the BM25
/// term frequency).
pub fn terms(text: &str) -> Vec<String> {
    let lower = text.to_lowercase();
    let mut out = Vec::new();
    for token in TOKENS.find_iter(&lower).map(|m| m.as_str()) {
        let mut words = WORDS.find_iter(token).peekable();
        let first = words.next().map(|m| m.as_str());
        if words.peek().is_some() {
            out.push(token.to_owned());
        }
        for word in first.into_iter().chain(words.map(|m| m.as_str())) {
            push_run(word, &mut out);
        }
    }
    out
}

/// The distinct terms a query searches for; empty when it has nothing but common words.
pub fn query_terms(query: &str) -> Vec<String> {
    let mut seen = HashSet::new();
    terms(query)
        .into_iter()
        .filter(|t| seen.insert(t.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(text: &str) -> Vec<String> {
        terms(text)
    }

    #[test]
    fn english_words_are_stemmed_and_common_words_dropped() {
        assert_eq!(
            t("The deploys were deployed by Deploying"),
            ["deploy", "deploy", "deploy"]
        );
        assert_eq!(
            query_terms("What did Caroline research?"),
            ["carolin", "research"]
        );
        assert!(query_terms("what is it that you were doing there").is_empty());
    }

    #[test]
    fn identifiers_are_kept_whole_as_well_as_in_parts() {
        assert_eq!(
            t("ERR_SSL_PROTOCOL"),
            ["err_ssl_protocol", "err", "ssl", "protocol"]
        );
        assert_eq!(t("pgvector 0.8.6"), ["pgvector", "0.8.6", "0", "8", "6"]);
        assert_eq!(t("a/b"), ["a/b", "b"]);
    }

    #[test]
    fn korean_and_chinese_match_by_character_pairs() {
        assert_eq!(t("배포는 금요일"), ["배포", "포는", "금요", "요일"]);
        let stored = t("배포는 금요일에 한다");
        assert!(query_terms("배포 일정").iter().any(|q| stored.contains(q)));
        assert_eq!(t("部署"), ["部署"]);
        assert_eq!(t("한"), ["한"]);
        assert_eq!(t("Rust와"), ["rust", "와"]);
    }

    proptest::proptest! {
        /// Any text: terms are non-empty, lowercase and free of separators; a text joined
        /// from two parts by a space has the terms of both, in order; query terms are the
        /// distinct terms.
        #[test]
        fn terms_of_any_text_are_clean_and_compose(a in "\\PC{0,60}", b in "\\PC{0,60}") {
            let (ta, tb) = (terms(&a), terms(&b));
            for term in ta.iter().chain(&tb) {
                proptest::prop_assert!(!term.is_empty());
                proptest::prop_assert!(!term.chars().any(char::is_whitespace), "{:?}", term);
                proptest::prop_assert_eq!(term, &term.to_lowercase());
            }
            let joined = terms(&format!("{a} {b}"));
            proptest::prop_assert_eq!(joined, [ta.clone(), tb].concat());
            let distinct = query_terms(&a);
            proptest::prop_assert_eq!(distinct.len(), distinct.iter().collect::<HashSet<_>>().len());
            proptest::prop_assert!(distinct.iter().all(|q| ta.contains(q)));
        }
    }
}
