//! `mcp-memory calibrate` through the binary, on the OpenAI-compatible path (the test
//! endpoint's deterministic embedder, docs/embeddings.md#test-embedder): the cost said first,
//! the four kinds of error counted over the whole set, the fit recorded in the store and
//! judged by, and said, by a server started after it, and an endpoint that fails ending the
//! run with nothing fitted (docs/models.md, "Calibrating a model"). What the fit is worth
//! for a real model is measured in BENCHMARKS.md, "Issue 62: calibrate".

mod support;

use mcp_memory::calibrate::{measure::Vectors, set};
use serde_json::{Value, json};
use support::process;

const ACME: &[(&str, &str)] = &[("x-tenant-id", "acme")];

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
    calibrate_with(&env, &[]).await
}

async fn calibrate_with(
    env: &std::collections::HashMap<String, String>,
    args: &[&str],
) -> (bool, String, String) {
    let ran = process::command(env)
        .arg("calibrate")
        .args(args)
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
    // The fit is printed as numbers, and where it was recorded.
    assert!(
        out.contains("the fit, on all 4 parts:\n  label: floor "),
        "{out}"
    );
    assert!(
        out.contains("\nrecorded in sqlite at ") && out.contains(" for openai:fake-64, 64d"),
        "{out}"
    );
}

/// `memory_stats`' structured result (from the protocol version that has them).
async fn stats(server: &process::Running) -> Value {
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "memory_stats", "arguments": {}}});
    let headers = [ACME[0], ("mcp-protocol-version", "2025-06-18")];
    let reply = process::rpc(&server.url, &headers, &call).await;
    reply["result"]["structuredContent"].clone()
}

#[tokio::test]
async fn the_fit_is_recorded_and_a_server_started_after_judges_by_it() {
    recorded_and_judged_by("sqlite").await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn replicas_on_postgresql_judge_by_the_fit_recorded() {
    recorded_and_judged_by("postgres").await;
}

#[cfg(feature = "s3")]
#[tokio::test]
async fn servers_on_s3_judge_by_the_fit_recorded() {
    recorded_and_judged_by("s3").await;
}

/// On `store`: a server started before `calibrate` says its model is not calibrated, at
/// start, in `memory_stats` and in recall's label; `calibrate` (after a dry run that records
/// nothing, on SQLite) records the fit; a server started after judges by it and says so,
/// with the held-out rates `calibrate` printed; the one started before keeps its numbers.
async fn recorded_and_judged_by(store: &str) {
    let stub = support::EmbeddingStub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut env = support::base_env(&stub, &dir.path().join("memory.db"));
    match store {
        "postgres" => {
            env.insert("DATABASE_URL".into(), support::postgres_database().await);
        }
        "s3" => support::s3_store(&mut env).await,
        _ => {}
    }
    // The fit's own floor, not the one the tests usually configure.
    env.remove("RECALL_MIN_SIMILARITY");
    let before = process::start(&mut env).await;
    let stored = (before.call(
        ACME,
        "remember",
        json!({"content": "deploys go out on fridays"}),
    ))
    .await;
    assert!(stored.starts_with("[MEMORY] Stored as "), "{stored}");
    let question = json!({"query": "when do deploys go out on fridays"});
    let guessed = before.call(ACME, "recall", question.clone()).await;
    assert!(guessed.contains("never calibrated"), "{guessed}");
    let none = stats(&before).await;
    assert_eq!(none["calibration"]["by"], "none", "{none}");
    assert_eq!(none["calibration"]["model"], "openai:fake-64");
    assert!(none["calibration"]["expected"].is_null(), "{none}");

    let today = || mcp_memory::memory::iso(mcp_memory::memory::now_ms())[..10].to_owned();
    // Both days, should the run cross midnight.
    let mut days = vec![today()];
    if store == "sqlite" {
        // A dry run prints the fit and records nothing (the server after would say so).
        let (ok, out, err) = calibrate_with(&env, &["--dry-run"]).await;
        assert!(
            ok && out.contains("not recorded (--dry-run)"),
            "{out}\n{err}"
        );
    }
    let (ok, out, err) = calibrate_with(&env, &[]).await;
    assert!(ok, "{out}\n{err}");
    days.push(today());
    assert!(
        out.contains("the numbers in use now (openai:fake-64 is not calibrated"),
        "{out}"
    );
    let held_out = |section| {
        let ((errors, of), _) = all_row(&out, section);
        json!({"errors": errors, "of": of})
    };

    // A server started now judges by the fit and says so; the one started before keeps
    // its numbers until it restarts.
    let after = process::start(&mut env).await;
    let fitted = stats(&after).await;
    let calibration = &fitted["calibration"];
    assert_eq!(calibration["by"], "calibrate", "{store}: {fitted}");
    let expected = &calibration["expected"];
    for (key, section) in [
        ("foundCalledNoMatch", "found answers called no match"),
        ("unanswerableVouched", "unanswerable questions vouched for"),
        ("repeatsStoredTwice", "repeats stored twice"),
        ("differentRefused", "different facts refused"),
    ] {
        assert_eq!(expected[key], held_out(section), "{key}: {fitted}\n{out}");
    }
    let at = calibration["at"].as_str().unwrap();
    let day = (days.iter()).find(|d| at.starts_with(d.as_str()));
    let day = day.unwrap_or_else(|| panic!("{at} is not one of {days:?}"));
    let judged = after.call(ACME, "recall", question.clone()).await;
    assert!(!judged.contains("never calibrated"), "{judged}");
    assert_eq!(stats(&before).await["calibration"]["by"], "none");

    let after = after.terminate().await;
    let said = after.stdout.join("\n");
    assert!(
        said.contains(&format!(
            "calibration: openai:fake-64 calibrated on {day} by `mcp-memory calibrate`"
        )),
        "{said}"
    );
    let before = before.terminate().await;
    let said = before.stdout.join("\n");
    assert!(
        said.contains("calibration: openai:fake-64 is not calibrated"),
        "{said}"
    );
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

/// docs/embeddings.md#prompts: `calibrate` measures the model as its prompts make it: every
/// text goes to the endpoint after its prompt, and the fit is recorded for the model with
/// those prompts, which a server of the same model without them is not judged by.
#[tokio::test]
async fn a_fit_is_for_the_prompts_it_was_measured_with() {
    let stub = support::EmbeddingStub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let plain = support::base_env(&stub, &dir.path().join("memory.db"));
    let mut prompted = plain.clone();
    prompted.insert("EMBEDDING_QUERY_PROMPT".into(), "query: ".into());
    prompted.insert("EMBEDDING_DOCUMENT_PROMPT".into(), "passage: ".into());
    let (ok, out, err) = calibrate_with(&prompted, &[]).await;
    assert!(ok, "{out}\n{err}");
    let model = r#"openai:fake-64 with prompts query "query: " and document "passage: ""#;
    assert!(
        out.starts_with(&format!("calibrating {model}, 64d"))
            && out.contains(&format!(" for {model}, 64d")),
        "{out}"
    );
    let seen = stub.seen();
    assert!(
        !seen.is_empty()
            && (seen.iter()).all(|t| t.starts_with("query: ") || t.starts_with("passage: ")),
        "{:?}",
        &seen[..seen.len().min(5)]
    );
    assert!(seen.iter().any(|t| t.starts_with("query: ")));
    assert!(seen.iter().any(|t| t.starts_with("passage: ")));

    let mut env = prompted.clone();
    let server = process::start(&mut env).await;
    assert_eq!(stats(&server).await["calibration"]["by"], "calibrate");
    drop(server);
    let mut env = plain.clone();
    let server = process::start(&mut env).await;
    let calibration = &stats(&server).await["calibration"];
    assert_eq!(
        (&calibration["model"], &calibration["by"]),
        (&json!("openai:fake-64"), &json!("none"))
    );
    // Its memories are vectors without the prompts: the prompted model may not mix its own in.
    server
        .call(
            ACME,
            "remember",
            json!({"content": "Deploys go out on Fridays"}),
        )
        .await;
    drop(server);
    let (ok, out, err) = calibrate_with(&prompted, &["--dry-run"]).await;
    assert!(
        !ok && err.contains(&format!(
            "holds embeddings of openai:fake-64, 64d, but this server embeds with {model}, 64d"
        )),
        "{out}\n{err}"
    );
}
