//! The token half of `remember`'s duplicate rule (docs/ranking.md#same-fact) on every quality
//! set, no model needed: a pair the tokens call different is stored twice or kept whatever the
//! model's similarity, so this bounds what any model's rule can do.
//!
//!     cargo bench --bench repeats [-- LOCOMO_FILE]
//!
//! Counts, and writes to `bench/results/repeats.json`: the calibration set's repeats the tokens
//! read as repeats and different facts they tell apart, by part and by rewording; the same for
//! the multilingual set's pairs (`bench/korean_recall.json`); and the pairs of memories each
//! set stores (its facts, its memories, LoCoMo dev's turns as `bench/locomo.rs` stores them,
//! default ../shared/data/locomo-dev.json) that the tokens would read as one another's repeat.

mod sets;

use std::collections::BTreeMap;

use mcp_memory::calibrate::set;
use mcp_memory::dedup::tokens::{agree, said};
use serde_json::{Value, json};

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let locomo = args
        .first()
        .map_or("../shared/data/locomo-dev.json", String::as_str);
    let same = |a: &str, b: &str| agree(&said(a), &said(b));

    let mut by_part = serde_json::Map::new();
    let mut by_kind: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut missed = Vec::new();
    let mut stored_pairs = serde_json::Map::new();
    for part in set::parts() {
        let text = |id: &str| part.memory(id).map_or(id.to_owned(), |m| m.text.clone());
        let read = part
            .repeats
            .iter()
            .filter(|r| {
                let repeat = same(&text(&r.stored), &r.repeat);
                let kind = by_kind.entry(format!("{:?}", r.kind)).or_default();
                kind.0 += usize::from(repeat);
                kind.1 += 1;
                if !repeat {
                    missed.push(format!("{} ({:?})", r.id, r.kind));
                }
                repeat
            })
            .count();
        let apart = (part.different.iter())
            .filter(|d| !same(&text(&d.stored), &d.other))
            .count();
        println!(
            "calibration {:<5}: repeats read as repeats {read}/{}, different facts told apart {apart}/{}",
            part.name,
            part.repeats.len(),
            part.different.len()
        );
        by_part.insert(
            part.name.into(),
            json!({"repeats": [read, part.repeats.len()], "different_apart": [apart, part.different.len()]}),
        );
        let memories: Vec<String> = part.memories.iter().map(|m| m.text.clone()).collect();
        stored_pairs.insert(
            format!("calibration {}", part.name),
            pairs(&memories).into(),
        );
    }
    for (kind, (read, all)) in &by_kind {
        println!("  {kind:<12} {read}/{all}");
    }
    println!("  missed: {}", missed.join(", "));

    let multilingual: Value =
        serde_json::from_str(include_str!("korean_recall.json")).expect("the set parses");
    let (mut repeats, mut read, mut different, mut apart) = (0, 0, 0, 0);
    for pair in multilingual["pairs"].as_array().into_iter().flatten() {
        let is_same = same(
            pair["first"].as_str().unwrap_or_default(),
            pair["second"].as_str().unwrap_or_default(),
        );
        if pair["kind"] == "different" {
            different += 1;
            apart += usize::from(!is_same);
        } else {
            repeats += 1;
            read += usize::from(is_same);
        }
    }
    println!(
        "multilingual set pairs: repeats read as repeats {read}/{repeats}, different facts told apart {apart}/{different}"
    );
    let facts: Vec<String> = (multilingual["facts"].as_array().into_iter().flatten())
        .filter_map(|f| f["text"].as_str().map(str::to_owned))
        .collect();
    stored_pairs.insert("multilingual facts".into(), pairs(&facts).into());

    match std::fs::read(locomo) {
        Ok(bytes) => {
            let data: Vec<Value> = serde_json::from_slice(&bytes).expect("LoCoMo parses");
            for sample in &data {
                let turns: Vec<String> = sets::locomo_turns(&sample["conversation"])
                    .into_iter()
                    .map(|(_, text)| text)
                    .collect();
                let id = sample["sample_id"].as_str().unwrap_or("?");
                stored_pairs.insert(format!("locomo {id}"), pairs(&turns).into());
            }
        }
        Err(e) => println!("LoCoMo not read ({locomo}: {e}): its turns are not checked"),
    }
    for (set, n) in &stored_pairs {
        println!("pairs of stored memories read as repeats, {set}: {n}");
    }

    let out = json!({
        "calibration": by_part,
        "calibration_by_rewording": by_kind,
        "calibration_missed": missed,
        "multilingual_pairs": {"repeats": [read, repeats], "different_apart": [apart, different]},
        "stored_pairs_read_as_repeats": stored_pairs,
    });
    let path = "bench/results/repeats.json";
    std::fs::write(
        path,
        serde_json::to_string_pretty(&out).expect("json") + "\n",
    )
    .expect("bench/results is writable");
    println!("written to {path}");
}

/// How many pairs of `texts` the tokens read as the same fact.
fn pairs(texts: &[String]) -> usize {
    let said: Vec<_> = texts.iter().map(|t| said(t)).collect();
    (0..said.len())
        .map(|i| {
            (i + 1..said.len())
                .filter(|&j| agree(&said[i], &said[j]))
                .count()
        })
        .sum()
}
