//! Measuring the confidence label and the duplicate rule for whatever model embeds
//! (docs/models.md, "Calibrating a model"): the calibration set the project wrote and ships
//! (`set`, calibration/README.md), what the configured model makes of it (`measure`), every
//! number fitted to that by leaving one part out at a time (`fit`), and what is printed
//! (`report`). `mcp-memory calibrate` is `run`.

pub mod fit;
pub mod measure;
pub mod report;
pub mod set;

use std::process::ExitCode;

use crate::config::Variables;
use crate::embed::{Fit, window};
use crate::memory::now_ms;
use crate::portable::{self, Embedding, progress::Progress};

/// `mcp-memory calibrate`: the set embedded by the configured embedder, its cost said
/// first; the fit, and the errors it makes on parts it was not fitted on beside those of
/// the numbers in use, printed; then, unless `dry_run`, the fit recorded in the store for
/// every process started on it after.
pub async fn run(variables: Variables, dry_run: bool) -> ExitCode {
    let (config, embedder, store) = match portable::opened(variables).await {
        Ok(opened) => opened,
        Err(code) => return code,
    };
    let model = embedder.model();
    let in_use = match crate::store::judged(&*store, &config.numbers, &model).await {
        Ok(judged) => judged,
        Err(refused) => {
            eprintln!("calibrate stopped: {refused}; nothing was fitted");
            return ExitCode::FAILURE;
        }
    };
    let parts = set::parts();
    let (memories, questions) = measure::Vectors::wanted(&parts);
    let texts = memories.len() + questions.len();
    let tokens: usize = (memories.iter().chain(&questions))
        .map(|t| window::tokens(t))
        .sum();
    println!(
        "calibrating {} on the calibration set (calibration/README.md): {texts} texts, one call \
         each (more for a text longer than the model reads at once), at most about {tokens} tokens",
        embedder.describe()
    );
    let mut progress = Progress::of("texts", "embedded", Some(texts as u64));
    let mut vectors = measure::Vectors::default();
    for (kind, texts) in [(Embedding::Memory, memories), (Embedding::Query, questions)] {
        let embedded =
            portable::embed_all(&embedder, texts.clone(), kind, || progress.add(1)).await;
        let embedded = match embedded {
            Ok(embedded) => embedded,
            Err(why) => {
                progress.finish();
                eprintln!("calibrate stopped: {why}; nothing was fitted");
                return ExitCode::FAILURE;
            }
        };
        let into = match kind {
            Embedding::Memory => &mut vectors.memories,
            Embedding::Query => &mut vectors.questions,
        };
        into.extend(texts.into_iter().zip(embedded));
    }
    let took = progress.finish();
    let now = now_ms();
    let weight = config.keyword_weight;
    let observed = measure::observe(&parts, &vectors, weight, now);
    let fit::Calibrated {
        calibration: whole,
        held_out,
        separable,
    } = fit::calibrate(&observed, weight, now);
    let in_use_errors = fit::errors(
        &observed,
        |_| true,
        in_use.thresholds,
        in_use.duplicates,
        weight,
        now,
    );
    println!("embedded in {:.1} s", took.as_secs_f64());
    println!("\nthe fit, on all {} parts:", observed.parts);
    print!("{}", report::numbers(whole.thresholds(), whole.duplicates));
    if !separable {
        println!(
            "  inseparable: on parts it was not fitted on, no word weight and threshold told this \
             model's found answers from unanswerable questions better than never abstaining, so \
             it gets no abstention: every shown result is vouched for"
        );
    }
    println!("  as code: {}", report::as_code(whole));
    println!(
        "\nthe numbers in use now ({}):",
        in_use.calibrated.describe(&model.name)
    );
    print!("{}", report::numbers(in_use.thresholds, in_use.duplicates));
    println!(
        "\nerrors, as counts, rates and 95% intervals: the fit's on each part when fitted on the \
         other {} (leave one part out), beside those of the numbers in use on every part:\n",
        observed.parts - 1
    );
    print!("{}", report::table(&held_out, &in_use_errors));
    if config.numbers.floor.is_some() || config.numbers.high.is_some() {
        println!(
            "\nRECALL_MIN_SIMILARITY or RECALL_HIGH_SIMILARITY is set: it replaces the fit's \
             floor or high similarity wherever it is set, as it replaces any model's"
        );
    }
    if dry_run {
        println!("\nnot recorded (--dry-run): servers go on using the numbers in use");
        return ExitCode::SUCCESS;
    }
    let fit = Fit {
        model: model.name.clone(),
        dimension: model.dimension,
        at: now,
        calibration: whole,
        expected: held_out.expected(),
    };
    if let Err(e) = store.record_calibration(&fit).await {
        eprintln!("calibrate could not record the fit: {e}");
        return ExitCode::FAILURE;
    }
    store.close().await;
    println!(
        "\nrecorded in {} for {}: every server started on this store from now on judges by it; \
         one already running does from its next start",
        store.describe(),
        model
    );
    ExitCode::SUCCESS
}
