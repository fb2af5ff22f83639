//! `mcp-memory reembed`: every memory of the configured store embedded again with the
//! configured embedder, a page at a time, while servers keep answering
//! (docs/stores.md#reembed). The store keeps each page's vectors apart until the switch
//! (`store/reembed.rs`), so a run that stops loses nothing: the next one goes on.

use std::process::ExitCode;

use super::progress::Progress;
use crate::config::Variables;
use crate::embed::Calibrated;
use crate::store::reembed::{self, Reembedding, Switched};

/// Memories read, embedded and kept at a time.
const PAGE: usize = 256;
/// Passes over the store before giving up on servers that write faster than this catches
/// up; what was embedded is kept.
const PASSES: usize = 10;

pub async fn run(variables: Variables, to_index: Option<String>) -> ExitCode {
    let (config, embedder) = match super::configured(variables) {
        Ok(configured) => configured,
        Err(code) => return code,
    };
    let store = match reembed::open(&config.store, to_index.as_deref()).await {
        Ok(store) => store,
        Err(e) => {
            eprintln!("storage error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let to = embedder.model();
    let plan = match store.begin(&to).await {
        Ok(plan) => plan,
        Err(e) => {
            eprintln!("reembed could not start: {e}");
            return ExitCode::FAILURE;
        }
    };
    if plan.recorded.as_ref() == Some(&to) && to_index.is_none() {
        eprintln!(
            "{} already holds embeddings of {to}: nothing to do",
            store.describe()
        );
        return ExitCode::SUCCESS;
    }
    let mut progress = Progress::new("re-embedded", plan.total);
    progress.resume(plan.staged);
    let (embedded, switch) = match passes(&*store, &embedder, &to, &mut progress).await {
        Ok(done) => done,
        Err(why) => {
            progress.finish();
            eprintln!(
                "reembed stopped: {why}. The vectors made so far are kept; running the same \
                 command again goes on from there, and servers still use the old ones."
            );
            return ExitCode::FAILURE;
        }
    };
    let took = progress.finish();
    let from = match &plan.recorded {
        Some(model) => model.to_string(),
        None => "an unrecorded model".into(),
    };
    eprintln!(
        "re-embedded {embedded} memories ({} from an earlier run) of {} from {from} to {to} in \
         {:.1} s (the switch took {:.1} s)",
        plan.staged,
        store.describe(),
        took.as_secs_f64(),
        switch.as_secs_f64()
    );
    match store.afterwards() {
        Some(change) => eprintln!("now set {change}"),
        None => eprintln!(
            "servers configured with {from} now refuse to search or write, naming the models: \
             restart them with this configuration"
        ),
    }
    // A fit belongs to the model it was made for (docs/models.md, "The fit, recorded").
    let meanwhile = match config.numbers.judged(None).calibrated {
        Calibrated::Shipped => "the numbers the project measured for it",
        _ => "numbers nobody measured for it, and say so",
    };
    eprintln!(
        "no calibration is recorded for {to} on this store: run `mcp-memory calibrate` with this \
         configuration to fit the confidence label and the duplicate check to it; until then \
         servers judge by {meanwhile}"
    );
    ExitCode::SUCCESS
}

/// Embeds every memory still without a new vector, then switches; memories written
/// meanwhile make another pass. How many memories were embedded, and how long the switch
/// that ended it took.
async fn passes(
    store: &dyn Reembedding,
    embedder: &std::sync::Arc<dyn crate::embed::Embedder>,
    to: &crate::memory::Model,
    progress: &mut Progress,
) -> Result<(u64, std::time::Duration), String> {
    let mut embedded = 0;
    for _ in 0..PASSES {
        let mut from: Option<String> = None;
        loop {
            let page = (store.pending(from.as_deref(), PAGE).await).map_err(|e| e.to_string())?;
            let (keys, texts): (Vec<String>, Vec<String>) = (page.memories.into_iter())
                .map(|m| (m.key, m.content))
                .unzip();
            if !keys.is_empty() {
                let vectors =
                    super::embed_all(embedder, texts, super::Embedding::Memory, || {}).await?;
                let staged: Vec<(String, Vec<f32>)> = keys.into_iter().zip(vectors).collect();
                store.stage(&staged).await.map_err(|e| e.to_string())?;
                embedded += staged.len() as u64;
                progress.add(staged.len() as u64);
            }
            match page.next {
                Some(next) => from = Some(next),
                None => break,
            }
        }
        let began = std::time::Instant::now();
        match store.switch(to).await.map_err(|e| e.to_string())? {
            Switched::Done => return Ok((embedded, began.elapsed())),
            Switched::Behind(_) => continue,
        }
    }
    Err(format!(
        "servers kept writing memories faster than {PASSES} passes caught up with"
    ))
}
