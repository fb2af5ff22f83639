//! The AWS build while AWS fails (docs/operations.md#retries): the emulator answers the
//! calls it is told to fail (`POST /_fake/faults`) as each service fails them, and the
//! server must absorb a passing failure, name a lasting one in a tool error, and never
//! leave half a memory. Faults are the emulator's, shared by everything it serves, so
//! these tests take turns.

mod support;

use std::collections::HashMap;

use serde_json::{Value, json};
use support::aws::{buckets, endpoint};
use support::process::{Running, start};

const ACME: &[(&str, &str)] = &[("x-tenant-id", "acme")];
const WIDTH: usize = 256;

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The AWS image's server on new buckets, embedding with Titan.
async fn server() -> Running {
    start(&mut env().await).await
}

/// What the AWS image's server is started with, on new buckets.
async fn env() -> HashMap<String, String> {
    let (vector_bucket, state_bucket) = buckets(WIDTH).await;
    support::aws::pod_env(&vector_bucket, &state_bucket, WIDTH)
}

/// The faults the emulator has still to answer with, after adding `fault`.
async fn faults(method: reqwest::Method, fault: &Value) -> Vec<Value> {
    let answer: Value = reqwest::Client::new()
        .request(method, format!("{}/_fake/faults", endpoint()))
        .json(fault)
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap()
        .json()
        .await
        .unwrap();
    answer["faults"].as_array().cloned().unwrap_or_default()
}

/// Fails the next `times` calls of `operation` (s3: an HTTP method) with `status` `code`.
async fn fail(service: &str, operation: &str, status: u16, code: &str, times: u32) {
    let fault = json!({"service": service, "operation": operation, "status": status,
                       "code": code, "times": times});
    faults(reqwest::Method::POST, &fault).await;
}

/// How many injected failures are still to come (a fault that fails nothing reads them).
async fn still_to_fail() -> usize {
    let nothing = json!({"service": "none", "times": 0});
    (faults(reqwest::Method::POST, &nothing).await.iter())
        .map(|f| f["times"].as_u64().unwrap_or(0) as usize)
        .sum()
}

async fn clear() {
    faults(reqwest::Method::DELETE, &json!({})).await;
}

fn id_in(text: &str) -> String {
    let start = text.find("[id:").unwrap() + 4;
    text[start..start + 26].to_owned()
}

/// Two failures in a row of any call the tools make, throttling or transient, cost the
/// agent nothing: the SDK's retries absorb them, and each was really met.
#[tokio::test]
async fn two_failures_of_every_call_are_absorbed() {
    let _turn = ONE_AT_A_TIME.lock().await;
    clear().await;
    let server = server().await;
    let mut n = 0;
    let mut remember = async |server: &Running| {
        n += 1;
        let fact = format!("fact {n}: the deploy of service number {n} goes through argo");
        let (text, is_error) = server
            .call_tool(ACME, "remember", json!({"content": fact}))
            .await;
        assert!(
            !is_error && text.starts_with("[MEMORY] Stored as "),
            "{text}"
        );
        id_in(&text)
    };
    // The index is read once, at the first use.
    fail(
        "s3vectors",
        "GetIndex",
        503,
        "ServiceUnavailableException",
        2,
    )
    .await;
    remember(&server).await;
    assert_eq!(still_to_fail().await, 0);
    let writes = [
        ("bedrock", "InvokeModel", 429, "ThrottlingException"),
        ("s3vectors", "QueryVectors", 429, "TooManyRequestsException"),
        (
            "s3vectors",
            "PutVectors",
            503,
            "ServiceUnavailableException",
        ),
        ("s3", "PUT", 503, "SlowDown"),
    ];
    for (service, operation, status, code) in writes {
        fail(service, operation, status, code, 2).await;
        remember(&server).await;
        assert_eq!(still_to_fail().await, 0, "{service} {operation}");
    }
    let reads = [
        (
            "s3vectors",
            "QueryVectors",
            503,
            "ServiceUnavailableException",
            "recall",
            "argo",
        ),
        (
            "s3vectors",
            "GetVectors",
            500,
            "InternalServerException",
            "list_memories",
            "argo",
        ),
        ("s3", "GET", 503, "SlowDown", "list_memories", "argo"),
        (
            "s3",
            "GET",
            500,
            "InternalError",
            "memory_stats",
            "5 memories",
        ),
    ];
    for (service, operation, status, code, tool, answer) in reads {
        fail(service, operation, status, code, 2).await;
        let args = if tool == "recall" {
            json!({"query": "how does the deploy of service number 2 go"})
        } else {
            json!({})
        };
        let (text, is_error) = server.call_tool(ACME, tool, args).await;
        assert!(!is_error && text.contains(answer), "{tool}: {text}");
        assert_eq!(still_to_fail().await, 0, "{service} {operation}");
    }
    let forgotten = [
        (
            "s3vectors",
            "DeleteVectors",
            429,
            "TooManyRequestsException",
        ),
        // DeleteObjects, a POST.
        ("s3", "POST", 503, "SlowDown"),
    ];
    for (service, operation, status, code) in forgotten {
        let id = remember(&server).await;
        fail(service, operation, status, code, 2).await;
        let (text, is_error) = server.call_tool(ACME, "forget", json!({"id": id})).await;
        assert!(!is_error && text.starts_with("[MEMORY] Deleted "), "{text}");
        assert_eq!(still_to_fail().await, 0, "{service} {operation}");
        let listed = server.call(ACME, "list_memories", json!({})).await;
        assert!(!listed.contains(&id), "{listed}");
    }
    server.terminate().await;
}

/// A service that keeps failing is a tool error that names it, the call ends, and the
/// next call after it recovers succeeds by itself.
#[tokio::test]
async fn a_service_that_keeps_failing_is_named_and_recovered_from() {
    let _turn = ONE_AT_A_TIME.lock().await;
    clear().await;
    let server = server().await;
    let stored = server
        .call(
            ACME,
            "remember",
            json!({"content": "the build cache lives on the nfs share"}),
        )
        .await;
    assert!(stored.starts_with("[MEMORY] Stored as "), "{stored}");
    fail(
        "s3vectors",
        "QueryVectors",
        503,
        "ServiceUnavailableException",
        1000,
    )
    .await;
    let (text, is_error) = server
        .call_tool(ACME, "recall", json!({"query": "where is the build cache"}))
        .await;
    assert!(is_error, "{text}");
    assert!(
        text.contains("S3 Vectors QueryVectors failed — ServiceUnavailableException"),
        "{text}"
    );
    clear().await;
    let recalled = server
        .call(ACME, "recall", json!({"query": "where is the build cache"}))
        .await;
    assert!(recalled.contains("nfs share"), "{recalled}");
    server.terminate().await;
}

/// When the index key cannot be written after the vector was, the vector is taken back:
/// the memory is neither listed nor recalled nor counted as a repeat, and the agent's
/// retry stores it.
#[tokio::test]
async fn a_memory_whose_index_key_fails_is_taken_back_whole() {
    let _turn = ONE_AT_A_TIME.lock().await;
    clear().await;
    let server = server().await;
    let first = server
        .call(
            ACME,
            "remember",
            json!({"content": "the staging database is postgres 18"}),
        )
        .await;
    assert!(first.starts_with("[MEMORY] Stored as "), "{first}");
    // Every PutObject fails from here: the model is recorded and counters flush hourly,
    // so the next one is the new memory's index key.
    fail("s3", "PUT", 500, "InternalError", 1000).await;
    let fact = json!({"content": "the release branch is cut every second tuesday"});
    let (text, is_error) = server.call_tool(ACME, "remember", fact.clone()).await;
    assert!(is_error, "{text}");
    assert!(
        text.contains("S3 PutObject failed — InternalError"),
        "{text}"
    );
    clear().await;
    let listed = server.call(ACME, "list_memories", json!({})).await;
    assert!(
        listed.starts_with("[MEMORY] 1 memor") && !listed.contains("tuesday"),
        "{listed}"
    );
    let recalled = server
        .call(
            ACME,
            "recall",
            json!({"query": "when is the release branch cut"}),
        )
        .await;
    assert!(!recalled.contains("tuesday"), "{recalled}");
    let again = server.call(ACME, "remember", fact).await;
    assert!(again.starts_with("[MEMORY] Stored as "), "{again}");
    server.terminate().await;
}

/// AWS out of reach (nothing listens where its endpoint is): every call is a tool error
/// naming the service within seconds, not a wait for the call's deadline.
#[tokio::test]
async fn aws_out_of_reach_is_a_quick_tool_error() {
    let mut env = env().await;
    let nowhere = format!("http://127.0.0.1:{}", support::process::free_port());
    env.insert("AWS_ENDPOINT_URL".into(), nowhere);
    let server = start(&mut env).await;
    let calls = [
        ("remember", json!({"content": "the cache is warmed at six"})),
        ("recall", json!({"query": "when is the cache warmed"})),
        ("list_memories", json!({})),
        ("memory_stats", json!({})),
    ];
    for (tool, args) in calls {
        let asked = std::time::Instant::now();
        let (text, is_error) = server.call_tool(ACME, tool, args).await;
        let took = asked.elapsed();
        assert!(is_error, "{tool}: {text}");
        assert!(
            ["Bedrock", "S3 ", "S3:"].iter().any(|s| text.contains(s)),
            "{tool}: {text}"
        );
        // Three attempts with their waits: under 2 s; 5 s leaves room for a loaded machine.
        assert!(
            took < std::time::Duration::from_secs(5),
            "{tool} answered after {took:?}"
        );
    }
    server.terminate().await;
}
