//! What `calibrate` prints: the numbers, and the errors they make by pair of scripts, each
//! as a count, a rate and its 95 % interval, beside those of the numbers in use.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use super::fit::{Errors, wilson};
use super::set::Script as Written;
use crate::dedup::Rule;
use crate::embed::Calibration;
use crate::ranking::Thresholds;

/// The label's and the duplicate rule's numbers, one line each.
pub fn numbers(thresholds: Thresholds, rule: Rule) -> String {
    let abstention = match thresholds.abstention {
        Some(a) => format!("similarity + {:.2} x words >= {:.3}", a.words, a.threshold),
        None => "none".to_owned(),
    };
    format!(
        "  label: floor {:.3}, high {:.3}, baseline {:.3}, abstention {abstention}, reads across \
         scripts {}\n  duplicate rule: repeat {:.3}, Hangul repeat {:.3}, similar {:.3}\n",
        thresholds.floor,
        thresholds.high,
        thresholds.baseline,
        if thresholds.reads_across_scripts {
            "yes"
        } else {
            "no"
        },
        rule.repeat,
        rule.hangul_repeat,
        rule.similar,
    )
}

/// The fit as it would be written into `crate::embed::settings` (`LocalModel::KNOWN`).
pub fn as_code(c: Calibration) -> String {
    let abstention = match c.abstention {
        Some(a) => format!(
            "Some(Abstention {{ words: {:?}, threshold: {:.3} }})",
            a.words, a.threshold
        ),
        None => "None".to_owned(),
    };
    format!(
        "Calibration {{ floor: {:.3}, high: Some({:.3}), baseline: {:.3}, duplicates: Rule {{ \
         repeat: {:.3}, hangul_repeat: {:.3}, similar: {:.3} }}, abstention: {abstention}, \
         reads_across_scripts: {} }}",
        c.floor,
        c.high.unwrap_or(c.floor),
        c.baseline,
        c.duplicates.repeat,
        c.duplicates.hangul_repeat,
        c.duplicates.similar,
        c.reads_across_scripts,
    )
}

/// `k` of `n` as `k/n  p% (lo–hi%)`.
fn rate(k: usize, n: usize) -> String {
    if n == 0 {
        return "-".to_owned();
    }
    let (lo, hi) = wilson(k, n);
    format!(
        "{k}/{n} {:.0}% ({:.0}-{:.0}%)",
        100.0 * k as f64 / n as f64,
        100.0 * lo,
        100.0 * hi
    )
}

fn name(script: Written) -> &'static str {
    match script {
        Written::Ko => "ko",
        Written::En => "en",
        Written::Mixed => "mixed",
    }
}

/// The two label errors by (question, memory) and the two duplicate errors by script, for
/// two sets of numbers side by side: `fitted` (each part by a fit on the others) and `in_use`.
pub fn table(fitted: &Errors, in_use: &Errors) -> String {
    let pair = |(q, m): (Written, Written)| format!("{}->{}", name(q), name(m));
    let script = |s: Written| name(s).to_owned();
    let mut out = String::new();
    section(
        &mut out,
        "found answers called no match (question->memory)",
        &fitted.found,
        &in_use.found,
        pair,
    );
    section(
        &mut out,
        "unanswerable questions vouched for (HIGH or MEDIUM)",
        &fitted.unanswerable,
        &in_use.unanswerable,
        pair,
    );
    section(
        &mut out,
        "repeats stored twice",
        &fitted.repeats,
        &in_use.repeats,
        script,
    );
    section(
        &mut out,
        "different facts refused",
        &fitted.different,
        &in_use.different,
        script,
    );
    out
}

fn section<K: Ord + Copy>(
    out: &mut String,
    title: &str,
    fitted: &BTreeMap<K, (usize, usize)>,
    in_use: &BTreeMap<K, (usize, usize)>,
    name: impl Fn(K) -> String,
) {
    let _ = writeln!(
        out,
        "{title}:\n  {:<12} {:<24} {:<24}",
        "", "fitted, held out", "in use now"
    );
    let keys: BTreeSet<K> = fitted.keys().chain(in_use.keys()).copied().collect();
    let counts = |of: &BTreeMap<K, (usize, usize)>, key| of.get(&key).copied().unwrap_or_default();
    for key in keys {
        let ((n1, k1), (n2, k2)) = (counts(fitted, key), counts(in_use, key));
        let _ = writeln!(
            out,
            "  {:<12} {:<24} {:<24}",
            name(key),
            rate(k1, n1),
            rate(k2, n2)
        );
    }
    let ((n1, k1), (n2, k2)) = (Errors::total(fitted), Errors::total(in_use));
    let _ = writeln!(
        out,
        "  {:<12} {:<24} {:<24}",
        "all",
        rate(k1, n1),
        rate(k2, n2)
    );
}
