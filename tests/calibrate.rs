//! `mcp-memory calibrate` through the binary, on the OpenAI-compatible path (the test
//! endpoint's deterministic embedder, docs/embeddings.md#test-embedder): the cost said first,
//! the four kinds of error counted over the whole set, and an endpoint that fails ending the
//! run with nothing fitted (docs/models.md, "Calibrating a model"). What the fit is worth
//! for a real model is measured in BENCHMARKS.md, "Issue 62: calibrate".

mod support;

use mcp_memory::calibrate::{measure::Vectors, set};
use support::process;

/// The counts of a section's `all` row, (errors, of), for the fit held out and for the
/// numbers in use, as `calibrate` prints them (`k/n p% (lo-hi%)`).
fn all_row(out: &str, section: &str) -> ((usize, usize), (usize, usize)) {
    let start = (out.find(section)).unwrap_or_else(|| panic!("no {section:?} in\n{out}"));
    let row = (out[start..].lines())
        .find(|l| l.trim_start().starts_with("all "))
        .unwrap();
    let counts: Vec<(usize, usize)> = (row.split_whitespace())
        .filter_map(|w| w.split_once('/'))
        .map(|(k, n)| (k.parse().unwrap(), n.parse().unwrap()))
        .collect();
    (counts[0], counts[1])
}

async fn calibrate(stub: &support::EmbeddingStub) -> (bool, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let env = support::base_env(stub, &dir.path().join("memory.db"));
    let ran = process::command(&env)
        .arg("calibrate")
        .output()
        .await
        .unwrap();
    (
        ran.status.success(),
        String::from_utf8_lossy(&ran.stdout).into_owned(),
        String::from_utf8_lossy(&ran.stderr).into_owned(),
    )
}

#[tokio::test]
async fn the_whole_set_is_embedded_through_the_endpoint_and_every_error_counted() {
    let stub = support::EmbeddingStub::start().await;
    let (ok, out, err) = calibrate(&stub).await;
    assert!(ok, "{out}\n{err}");

    // The cost comes first: every distinct text of the set, one call each.
    let parts = set::parts();
    let (memories, questions) = Vectors::wanted(&parts);
    let first = out.lines().next().unwrap();
    assert!(
        first.starts_with("calibrating openai:fake-64, 64d")
            && first.contains(&format!("{} texts", memories.len() + questions.len())),
        "{first}"
    );
    // Every unanswerable question, repeat and different fact is judged, by the fit held out
    // and by the numbers in use alike; answers are counted where the search found them.
    let count = |f: fn(&set::Part) -> usize| parts.iter().map(f).sum::<usize>();
    let (fitted, in_use) = all_row(&out, "unanswerable questions vouched for");
    assert_eq!(
        (fitted.1, in_use.1),
        (
            count(|p| p.unanswerable.len()),
            count(|p| p.unanswerable.len())
        )
    );
    let (fitted, in_use) = all_row(&out, "repeats stored twice");
    assert_eq!(
        (fitted.1, in_use.1),
        (count(|p| p.repeats.len()), count(|p| p.repeats.len()))
    );
    let (fitted, in_use) = all_row(&out, "different facts refused");
    assert_eq!(
        (fitted.1, in_use.1),
        (count(|p| p.different.len()), count(|p| p.different.len()))
    );
    let (fitted, _) = all_row(&out, "found answers called no match");
    assert!(
        fitted.1 > 0 && fitted.1 <= count(|p| p.questions.len()),
        "{out}"
    );
    // The fit is printed as numbers, and said plainly not to be in use.
    assert!(
        out.contains("the fit, on all 4 parts:\n  label: floor "),
        "{out}"
    );
    assert!(out.contains("the fit is not recorded"), "{out}");
}

#[tokio::test]
async fn an_endpoint_that_fails_stops_the_run_with_nothing_fitted() {
    let stub = support::EmbeddingStub::start().await;
    stub.fail_with(500);
    let (ok, out, err) = calibrate(&stub).await;
    assert!(!ok, "{out}");
    assert!(
        err.contains("calibrate stopped: embedding: the embedding service answered 500")
            && err.contains("nothing was fitted"),
        "{err}"
    );
    assert!(!out.contains("the fit, on all"), "{out}");
}
