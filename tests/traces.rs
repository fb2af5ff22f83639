//! Traces through the binary (docs/operations.md#traces): an OTLP/HTTP receiver in this
//! process takes what the server sends, and each tool call is one span in the client's trace,
//! with its embedding, search and store calls as children, and nothing a tenant wrote.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use serde_json::{Value, json};
use support::{EmbeddingStub, base_env, process};

/// An OTLP/HTTP (JSON) trace receiver: every span it was sent, and every body as sent.
#[derive(Clone, Default)]
struct Receiver {
    spans: Arc<Mutex<Vec<Value>>>,
    bodies: Arc<Mutex<String>>,
    arrived: Arc<tokio::sync::Notify>,
}

impl Receiver {
    async fn start() -> (Receiver, String) {
        let receiver = Receiver::default();
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(receive))
            .with_state(receiver.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (receiver, url)
    }

    /// The spans received once `done` holds of them, waiting for each export as it comes
    /// (a minute at most: the server exports every 50 ms here).
    async fn spans_when(&self, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let waited = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                let arrived = self.arrived.notified();
                let spans = self.spans.lock().unwrap().clone();
                if done(&spans) {
                    return spans;
                }
                arrived.await;
            }
        });
        waited.await.unwrap_or_else(|_| {
            panic!("the spans never arrived: {:#?}", self.spans.lock().unwrap())
        })
    }
}

async fn receive(State(receiver): State<Receiver>, body: String) -> &'static str {
    let request: Value = serde_json::from_str(&body).unwrap();
    let mut spans = receiver.spans.lock().unwrap();
    for resource in request["resourceSpans"].as_array().unwrap() {
        for scope in resource["scopeSpans"].as_array().unwrap() {
            spans.extend(scope["spans"].as_array().unwrap().iter().cloned());
        }
    }
    receiver.bodies.lock().unwrap().push_str(&body);
    receiver.arrived.notify_waiters();
    "{}"
}

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";
const FACT: &str = "the nightly backup runs at 02:30 on db-west-7";
const QUESTION: &str = "when does the nightly backup run?";

async fn call(url: &str, tool: &str, arguments: Value, traceparent: Option<&str>) -> Value {
    let mut params = json!({"name": tool, "arguments": arguments});
    if let Some(traceparent) = traceparent {
        params["_meta"] = json!({"traceparent": traceparent});
    }
    let message = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let reply = process::rpc(url, &[("x-memory-tenant", "traced")], &message).await;
    assert_eq!(reply["result"]["isError"], false, "{reply}");
    reply
}

fn attribute<'a>(span: &'a Value, key: &str) -> Option<&'a str> {
    (span["attributes"].as_array()?.iter())
        .find(|a| a["key"] == key)
        .and_then(|a| a["value"]["stringValue"].as_str())
}

fn tool_span<'a>(spans: &'a [Value], tool: &str) -> Option<&'a Value> {
    (spans.iter()).find(|s| s["name"] == "tools/call" && attribute(s, "mcp.tool") == Some(tool))
}

fn children<'a>(spans: &'a [Value], parent: &Value) -> Vec<&'a str> {
    let mut names: Vec<&str> = (spans.iter())
        .filter(|s| s["parentSpanId"] == parent["spanId"] && s["traceId"] == parent["traceId"])
        .filter_map(|s| s["name"].as_str())
        .collect();
    names.sort_unstable();
    names
}

#[tokio::test]
async fn each_tool_call_is_a_span_of_the_client_s_trace_with_its_embed_store_and_search() {
    let (receiver, endpoint) = Receiver::start().await;
    let stub = EmbeddingStub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut env = base_env(&stub, &dir.path().join("memory.db"));
    env.insert("OTEL_EXPORTER_OTLP_ENDPOINT".into(), endpoint);
    env.insert("OTEL_BSP_SCHEDULE_DELAY".into(), "50".into());
    let server = process::start(&mut env).await;

    let traceparent = format!("00-{TRACE}-{CLIENT_SPAN}-01");
    call(
        &server.url,
        "remember",
        json!({"content": FACT}),
        Some(&traceparent),
    )
    .await;
    call(
        &server.url,
        "recall",
        json!({"query": QUESTION}),
        Some(&traceparent),
    )
    .await;
    // A client that sends no trace gets a trace of its own.
    call(&server.url, "list_memories", json!({}), None).await;

    let all_there = |spans: &[Value]| {
        ["remember", "recall", "list_memories"].iter().all(|tool| {
            tool_span(spans, tool).is_some_and(|span| !children(spans, span).is_empty())
        }) && spans.len() >= 8
    };
    let spans = receiver.spans_when(all_there).await;

    let recall = tool_span(&spans, "recall").unwrap();
    assert_eq!(recall["traceId"], TRACE);
    assert_eq!(recall["parentSpanId"], CLIENT_SPAN);
    assert_eq!(recall["kind"], 2, "a server span: {recall}");
    assert_eq!(
        children(&spans, recall),
        ["embed", "search", "store.record_access"]
    );

    let remember = tool_span(&spans, "remember").unwrap();
    assert_eq!(remember["traceId"], TRACE);
    assert_eq!(remember["parentSpanId"], CLIENT_SPAN);
    assert_eq!(children(&spans, remember), ["embed", "store.remember"]);

    let listing = tool_span(&spans, "list_memories").unwrap();
    assert_ne!(listing["traceId"], TRACE);
    assert!(
        listing["parentSpanId"]
            .as_str()
            .unwrap_or_default()
            .is_empty(),
        "{listing}"
    );
    assert_eq!(children(&spans, listing), ["store.list"]);

    // What a tenant wrote or asked never leaves in a span.
    let sent = receiver.bodies.lock().unwrap().clone();
    for private in [FACT, QUESTION, "traced", "02:30"] {
        assert!(!sent.contains(private), "a span carries {private:?}");
    }
}
