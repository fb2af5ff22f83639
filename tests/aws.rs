//! The AWS build as it runs on EKS, against the local emulator that `make test` starts:
//! S3 Vectors and the state bucket for memories, Titan for embeddings, a knowledge base
//! for `search_docs`, and the counters' final flush on SIGTERM.

mod support;

use std::collections::HashMap;

use serde_json::{Value, json};
use support::aws::{buckets, endpoint, s3};
use support::process::start;

const ACME: &[(&str, &str)] = &[("x-tenant-id", "acme")];
const WIDTH: usize = 256;

fn aws_env(vector_bucket: &str, state_bucket: &str) -> HashMap<String, String> {
    support::aws::pod_env(vector_bucket, state_bucket, WIDTH)
}

fn id_in(text: &str) -> String {
    let start = text.find("[id:").unwrap() + 4;
    text[start..start + 26].to_owned()
}

#[tokio::test]
async fn the_aws_build_serves_every_tool_and_flushes_counters_on_the_way_out() {
    let (vector_bucket, state_bucket) = buckets(WIDTH).await;
    let kb = format!("KB{:08}", mcp_memory::memory::now_ms() % 100_000_000);
    let long = format!(
        "Refund policy. {}",
        "Refunds are reviewed by billing. ".repeat(80)
    );
    let documents = json!({"documents": [
        {"text": "Refunds take 5 business days", "uri": "s3://docs/refunds.md"},
        {"text": long, "uri": "s3://docs/policy.md"},
    ]});
    reqwest::Client::new()
        .put(format!("{}/_fake/knowledgebases/{kb}", endpoint()))
        .json(&documents)
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap();
    let mut env = aws_env(&vector_bucket, &state_bucket);
    env.insert("KNOWLEDGE_BASE_ID".into(), kb);
    let server = start(&mut env).await;
    assert_eq!(
        server.tool_names().await,
        [
            "recall",
            "remember",
            "list_memories",
            "forget",
            "memory_stats",
            "search_docs"
        ]
    );

    let stored = server
        .call(
            ACME,
            "remember",
            json!({"content": "deploys go through argo cd on the staging cluster"}),
        )
        .await;
    assert!(stored.starts_with("[MEMORY] Stored as "), "{stored}");
    server
        .call(
            ACME,
            "remember",
            json!({"content": "lunch is at noon on fridays", "type": "reference"}),
        )
        .await;
    let again = server
        .call(
            ACME,
            "remember",
            json!({"content": "deploys go through argo cd on the staging cluster"}),
        )
        .await;
    assert!(again.starts_with("[MEMORY] Already known"), "{again}");

    let recalled = server
        .call(
            ACME,
            "recall",
            json!({"query": "how do deploys go to the staging cluster"}),
        )
        .await;
    assert!(recalled.contains("argo cd"), "{recalled}");
    assert!(!recalled.contains("lunch"), "{recalled}");
    let listed = server.call(ACME, "list_memories", json!({})).await;
    assert!(listed.starts_with("[MEMORY] 2 memories"), "{listed}");
    assert!(
        listed.find("lunch").unwrap() < listed.find("argo").unwrap(),
        "newest first: {listed}"
    );
    assert_eq!(
        server
            .call(ACME, "memory_stats", json!({}))
            .await
            .lines()
            .next()
            .unwrap(),
        "[MEMORY] 2 memories for this project (project: 1, reference: 1)."
    );
    let other = server
        .call(&[("x-tenant-id", "globex")], "memory_stats", json!({}))
        .await;
    assert_eq!(
        other.lines().next().unwrap(),
        "[MEMORY] This project has no memories yet."
    );

    let docs = server
        .call(
            ACME,
            "search_docs",
            json!({"query": "how long do refunds take"}),
        )
        .await;
    assert!(docs.starts_with("[DOCS] 2 excerpts matched"), "{docs}");
    assert!(docs.contains("source: s3://docs/refunds.md"), "{docs}");
    assert!(
        docs.contains("… (truncated — read the source document for the rest)"),
        "{docs}"
    );
    let (no_tenant, is_error) = server
        .call_tool(&[], "search_docs", json!({"query": "refunds"}))
        .await;
    assert!(
        is_error && no_tenant.contains("x-memory-tenant"),
        "{no_tenant}"
    );

    let lunch = id_in(&listed[..listed.find("argo").unwrap()]);
    assert_eq!(
        server.call(ACME, "forget", json!({"id": lunch})).await,
        format!("[MEMORY] Deleted {lunch}.")
    );
    assert_eq!(
        server
            .call(ACME, "memory_stats", json!({}))
            .await
            .lines()
            .next()
            .unwrap(),
        "[MEMORY] 1 memory for this project (project: 1)."
    );

    let exited = server.terminate().await;
    assert_eq!(exited.code, Some(0), "{}", exited.stderr);
    // Two uses of the argo memory (the recall, and the repeat that was already known) were
    // only in the pod's memory until the final flush.
    let shards = s3()
        .await
        .list_objects_v2()
        .bucket(&state_bucket)
        .prefix("stats/acme/shard/")
        .send()
        .await
        .unwrap();
    let keys: Vec<&str> = shards.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let body = s3()
        .await
        .get_object()
        .bucket(&state_bucket)
        .key(keys[0])
        .send()
        .await
        .unwrap()
        .body
        .collect()
        .await
        .unwrap()
        .into_bytes();
    let counts: Value = serde_json::from_slice(&body).unwrap();
    let uses: u64 = counts
        .as_object()
        .unwrap()
        .values()
        .map(|c| c["access"].as_u64().unwrap())
        .sum();
    assert_eq!(uses, 2, "{counts}");
}

#[tokio::test]
async fn without_a_knowledge_base_search_docs_does_not_exist() {
    let (vector_bucket, state_bucket) = buckets(WIDTH).await;
    let server = start(&mut aws_env(&vector_bucket, &state_bucket)).await;
    assert!(
        !server
            .tool_names()
            .await
            .contains(&"search_docs".to_owned())
    );
    let (text, is_error) = server
        .call_tool(ACME, "search_docs", json!({"query": "refunds"}))
        .await;
    assert!(is_error);
    assert_eq!(text, "Error: unknown tool \"search_docs\".");
    server.terminate().await;
}

#[tokio::test]
async fn an_index_of_another_width_is_a_tool_error_and_the_server_carries_on() {
    let (vector_bucket, state_bucket) = buckets(512).await;
    let server = start(&mut aws_env(&vector_bucket, &state_bucket)).await;
    let (text, is_error) = server
        .call_tool(
            ACME,
            "remember",
            json!({"content": "the index is 512 wide"}),
        )
        .await;
    assert!(is_error, "{text}");
    assert!(
        text.starts_with("Error: the memory store could not complete this request — S3 Vectors"),
        "{text}"
    );
    assert_eq!(
        server
            .call(ACME, "memory_stats", json!({}))
            .await
            .lines()
            .next()
            .unwrap(),
        "[MEMORY] This project has no memories yet."
    );
    let exited = server.terminate().await;
    assert_eq!(exited.code, Some(0));
    assert!(
        exited.stderr.contains("\"event\":\"tool_failed\""),
        "{}",
        exited.stderr
    );
    assert!(
        !exited.stderr.contains("512 wide"),
        "memory content is never logged"
    );
}

/// One tenant's 300 memories on a subject crowd the index every tenant shares, and another
/// tenant's one memory on it is still recalled and its repeat known (docs/stores.md#index-modes).
/// On a CLASSIC index, a query that did not ask for ENHANCED would see only the nearest
/// part of the whole index, all of it the crowd's, and answer that nothing is stored.
#[tokio::test]
async fn a_small_tenant_beside_a_crowd_is_recalled_and_its_repeat_known() {
    let (vector_bucket, state_bucket) = buckets(WIDTH).await;
    let server = std::sync::Arc::new(start(&mut aws_env(&vector_bucket, &state_bucket)).await);
    let crowd: &[(&str, &str)] = &[("x-tenant-id", "crowd")];
    let small: &[(&str, &str)] = &[("x-tenant-id", "small")];
    let writers = (0..4).map(|w| {
        let server = std::sync::Arc::clone(&server);
        tokio::spawn(async move {
            for n in (100 + w..400).step_by(4) {
                let fact = format!("the deploy pipeline runs on the cluster number {n}");
                let stored = server
                    .call(crowd, "remember", json!({"content": fact}))
                    .await;
                assert!(stored.starts_with("[MEMORY] Stored as "), "{stored}");
            }
        })
    });
    for writer in writers.collect::<Vec<_>>() {
        writer.await.unwrap();
    }
    let fact =
        "our small team's deploy pipeline runs on the green cluster after the nightly freeze";
    let stored = server
        .call(small, "remember", json!({"content": fact}))
        .await;
    assert!(stored.starts_with("[MEMORY] Stored as "), "{stored}");
    let recalled = server
        .call(
            small,
            "recall",
            json!({"query": "the deploy pipeline runs on the cluster"}),
        )
        .await;
    assert!(recalled.contains("green cluster"), "{recalled}");
    assert!(
        !recalled.contains("number"),
        "another tenant's memory: {recalled}"
    );
    let again = server
        .call(small, "remember", json!({"content": fact}))
        .await;
    assert!(again.starts_with("[MEMORY] Already known"), "{again}");
    let stats = server.call(crowd, "memory_stats", json!({})).await;
    assert!(stats.starts_with("[MEMORY] 300 memories"), "{stats}");
    let server = std::sync::Arc::try_unwrap(server).ok().unwrap();
    assert_eq!(server.terminate().await.code, Some(0));
}

/// A Korean memory of 30,000 bytes, about 9,500 of Titan's tokens where it reads 8,192, is
/// stored, not refused, and found by a question about its last paragraph: Titan embeds it
/// in windows pooled into one vector (docs/embeddings.md#long-texts).
#[tokio::test]
async fn a_long_korean_memory_is_stored_on_titan_and_found_by_its_tail() {
    let (vector_bucket, state_bucket) = buckets(WIDTH).await;
    let server = start(&mut aws_env(&vector_bucket, &state_bucket)).await;
    let fact = "환불 배치는 자정 전후 한 시간 동안 절대 돌리지 않는다";
    let memory = support::long_korean(fact, 30_000);
    assert!(mcp_memory::embed::window::tokens(&memory) > 8_192);
    let stored = server
        .call(ACME, "remember", json!({"content": memory}))
        .await;
    assert!(stored.starts_with("[MEMORY] Stored as "), "{stored}");
    let id = id_in(&format!("[id:{}", &stored["[MEMORY] Stored as ".len()..]));
    server
        .call(
            ACME,
            "remember",
            json!({"content": "deploys go through argo cd"}),
        )
        .await;
    let recalled = server
        .call(
            ACME,
            "recall",
            json!({"query": "환불 배치는 언제 돌리지 않는다"}),
        )
        .await;
    assert!(support::top_hit(&recalled).contains(&id), "{recalled}");
    assert_eq!(server.terminate().await.code, Some(0));
}
