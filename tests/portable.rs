//! `mcp-memory export` and `import` through the binary: memories moved SQLite →
//! PostgreSQL → S3 → SQLite answer alike at every stop, an import is idempotent, and a bad
//! file is refused line by line with nothing written.

mod support;

use std::collections::HashMap;

use serde_json::{Value, json};
use support::process::{command, start};
use support::{EmbeddingStub, base_env, postgres_database, s3_store, stored_id};

/// Runs a command of the binary to its end: (exit code, stderr).
async fn run(env: &HashMap<String, String>, args: &[&str]) -> (i32, String) {
    let out = command(env).args(args).output().await.unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What the tools answer, from each caller's view, in one order (recalls count uses, so
/// the order is the same at every stop).
async fn answers(env: &mut HashMap<String, String>) -> Vec<String> {
    let server = start(env).await;
    let mut seen = Vec::new();
    for headers in [
        vec![("x-tenant-id", "acme")],
        vec![("x-tenant-id", "acme"), ("x-conversation-id", "chat:1")],
        vec![("x-tenant-id", "globex")],
    ] {
        seen.push(server.call(&headers, "list_memories", json!({})).await);
        seen.push(server.call(&headers, "memory_stats", json!({})).await);
        let recalled = server
            .call(
                &headers,
                "recall",
                json!({"query": "deploy pipeline releases"}),
            )
            .await;
        // Which memories, in what order, at what confidence.
        let ids: Vec<&str> = recalled
            .match_indices("[id:")
            .map(|(i, _)| &recalled[i..i + 30])
            .collect();
        seen.push(format!(
            "{}\n{}",
            recalled.lines().nth(1).unwrap_or_default(),
            ids.join(" ")
        ));
    }
    assert_eq!(server.terminate().await.code, Some(0));
    seen
}

/// A server's variables with recall by meaning only: S3 has no text index, and the same
/// memories must rank alike wherever they are.
fn env(stub: &EmbeddingStub, db: &std::path::Path) -> HashMap<String, String> {
    let mut env = base_env(stub, db);
    env.insert("RECALL_KEYWORD_WEIGHT".into(), "0".into());
    env
}

#[tokio::test]
async fn memories_move_between_every_backend_and_answer_alike() {
    let stub = EmbeddingStub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut sqlite = env(&stub, &dir.path().join("first.db"));
    let server = start(&mut sqlite).await;
    let acme = [("x-tenant-id", "acme")];
    let thread = [("x-tenant-id", "acme"), ("x-conversation-id", "chat:1")];
    let stale = stored_id(
        &server
            .call(
                &acme,
                "remember",
                json!({"content": "the deploy pipeline releases on fridays"}),
            )
            .await,
    );
    for (headers, args) in [
        (
            &acme[..],
            json!({"content": "the deploy pipeline releases on mondays", "replaces": stale}),
        ),
        (
            &acme[..],
            json!({"content": "builds use cargo nextest", "type": "pattern", "tags": ["ci", "배포"]}),
        ),
        (
            &thread[..],
            json!({"content": "this thread's deploy plan is canary first", "scope": "conversation"}),
        ),
        (
            &acme[..],
            json!({"content": "the release freeze lasts until the audit", "expires_in_days": 30}),
        ),
        (
            &[("x-tenant-id", "globex")][..],
            json!({"content": "globex deploys with argo releases"}),
        ),
    ] {
        let stored = server.call(headers, "remember", args).await;
        assert!(stored.starts_with("[MEMORY] Stored as "), "{stored}");
    }
    server
        .call(
            &acme,
            "recall",
            json!({"query": "deploy pipeline releases"}),
        )
        .await;
    assert_eq!(server.terminate().await.code, Some(0));
    let first = answers(&mut sqlite).await;
    assert!(first[0].starts_with("[MEMORY] 3 memories"), "{}", first[0]);
    assert!(
        first[3].starts_with("[MEMORY] 4 memories"),
        "the thread sees its note: {}",
        first[3]
    );

    let mut postgres = env(&stub, &dir.path().join("unused.db"));
    postgres.insert("DATABASE_URL".into(), postgres_database().await);
    let mut s3 = env(&stub, &dir.path().join("unused.db"));
    s3_store(&mut s3).await;
    let last = env(&stub, &dir.path().join("last.db"));
    let mut from = sqlite;
    for (hop, mut to) in [("postgres", postgres), ("s3", s3), ("sqlite", last)] {
        let file = dir.path().join(format!("to-{hop}.jsonl"));
        let file = file.to_str().unwrap();
        let (code, said) = run(&from, &["export", "--out", file]).await;
        assert_eq!(code, 0, "{hop}: {said}");
        assert!(
            said.contains("exported 5 memories of 2 tenants"),
            "{hop}: {said}"
        );
        let header: Value = serde_json::from_str(
            std::fs::read_to_string(file)
                .unwrap()
                .lines()
                .next()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            (header["format"].as_str(), header["dimension"].as_u64()),
            (Some("mcp-memory/2"), Some(64))
        );
        assert_eq!(header["model"], "openai:fake-64");
        let (code, said) = run(&to, &["import", "--in", file]).await;
        assert_eq!(code, 0, "{hop}: {said}");
        assert!(
            said.contains("imported 5 memories (0 already held)"),
            "{hop}: {said}"
        );
        let (code, said) = run(&to, &["import", "--in", file]).await;
        assert_eq!(code, 0, "{hop}: {said}");
        assert!(
            said.contains("imported 0 memories (5 already held)"),
            "{hop}: {said}"
        );
        assert_eq!(answers(&mut to).await, answers(&mut from).await, "{hop}");
        from = to;
    }
}

#[tokio::test]
async fn a_bad_file_is_refused_by_line_and_field_and_nothing_is_written() {
    let stub = EmbeddingStub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let acme = [("x-tenant-id", "acme")];
    let contents = [
        "the deploy pipeline releases on mondays",
        "builds use cargo nextest",
    ];
    // The lines are checked as an earlier release wrote them, without an end line, so
    // only the lines are wrong; the end line has a test of its own.
    let text = earlier_release(&exported(&stub, dir.path(), &contents).await);
    let lines: Vec<&str> = text.lines().collect();
    let memory: Value = serde_json::from_str(lines[1]).unwrap();
    let with = |field: &str, value: Value| {
        let mut bad = memory.clone();
        bad[field] = value;
        bad.to_string()
    };
    let bad_file = [
        lines[0].to_owned(),
        lines[1].to_owned(),
        with("tenant", json!("acme corp")),
        with("content", json!("x".repeat(32_001))),
        with("embedding", json!("AAAA")),
        with("scope", json!("conversation")),
        with("created", json!("yesterday")),
        with("created", json!("9999-12-31T00:00:00.000Z")),
        with("last_accessed", json!("2999-01-01T00:00:00.000Z")),
        with("id", json!(memory["id"].as_str().unwrap().to_lowercase())),
        lines[1].to_owned(),
        "{\"tenant\": \"acme\"".to_owned(),
    ]
    .join("\n");
    let target_env = base_env(&stub, &dir.path().join("target.db"));
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, bad_file).unwrap();
    let (code, said) = run(&target_env, &["import", "--in", bad.to_str().unwrap()]).await;
    assert_eq!(code, 1, "{said}");
    for expected in [
        "line 3: tenant: the tenant must start with a letter or digit",
        "line 4: `content` is 32001 bytes",
        "line 5: embedding: holds 0.75 values where the header says 64",
        "line 6: conversation: a memory of scope conversation needs its conversation",
        "line 7: created: \"yesterday\" is not an RFC 3339 time",
        "line 8: created: \"9999-12-31T00:00:00.000Z\" is in the future: at most 5 minutes past this machine's clock",
        "line 9: last_accessed: \"2999-01-01T00:00:00.000Z\" is in the future",
        "is not a ULID in upper case",
        "line 11: id: ",
        "is in the file twice",
        "line 12: invalid JSON: EOF while parsing",
        "10 bad lines: nothing was imported",
    ] {
        assert!(said.contains(expected), "{expected} in:\n{said}");
    }
    // Another format, another model: refused whole.
    let other_format = text.replacen("mcp-memory/1", "mcp-memory/9", 1);
    assert_ne!(other_format, text);
    std::fs::write(&bad, &other_format).unwrap();
    let (code, said) = run(&target_env, &["import", "--in", bad.to_str().unwrap()]).await;
    assert_eq!(code, 1);
    assert!(
        said.contains("format \"mcp-memory/9\" is not one this release reads"),
        "{said}"
    );
    let other_model = text.replacen("openai:fake-64", "local:all-MiniLM-L6-v2", 1);
    std::fs::write(&bad, &other_model).unwrap();
    let (code, said) = run(&target_env, &["import", "--in", bad.to_str().unwrap()]).await;
    assert_eq!(code, 1);
    assert!(
        said.contains("holds embeddings of local:all-MiniLM-L6-v2, 64d, but this store embeds with openai:fake-64, 64d")
            && said.contains("--reembed"),
        "{said}"
    );
    let mut target = target_env.clone();
    let server = start(&mut target).await;
    let stats = server.call(&acme, "memory_stats", json!({})).await;
    assert!(
        stats.contains("no memories"),
        "nothing was written: {stats}"
    );
    assert_eq!(server.terminate().await.code, Some(0));
    // With --reembed it is embedded again by the configured model, from standard input.
    let mut import = command(&target_env);
    import
        .args(["import", "--reembed"])
        .stdin(std::process::Stdio::piped());
    let mut child = import.spawn().unwrap();
    use tokio::io::AsyncWriteExt;
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(other_model.as_bytes()).await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains("imported 2 memories (0 already held) from standard input"),
        "{said}"
    );
    let server = start(&mut target).await;
    let recalled = server
        .call(
            &acme,
            "recall",
            json!({"query": "the deploy pipeline releases on mondays"}),
        )
        .await;
    assert!(
        recalled.contains("HIGH CONFIDENCE"),
        "the stub's own vector: {recalled}"
    );
    assert_eq!(server.terminate().await.code, Some(0));
}

/// The export of a SQLite store in `dir` that holds `contents`, remembered by acme.
async fn exported(stub: &EmbeddingStub, dir: &std::path::Path, contents: &[&str]) -> String {
    let mut source = base_env(stub, &dir.join("source.db"));
    let server = start(&mut source).await;
    for content in contents {
        let stored = (server.call(
            &[("x-tenant-id", "acme")],
            "remember",
            json!({"content": content}),
        ))
        .await;
        assert!(stored.starts_with("[MEMORY] Stored as "), "{stored}");
    }
    assert_eq!(server.terminate().await.code, Some(0));
    let good = dir.join("good.jsonl");
    let (code, said) = run(&source, &["export", "--out", good.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{said}");
    std::fs::read_to_string(&good).unwrap()
}

/// An export as an earlier release wrote it: format 1, without the end line.
fn earlier_release(export: &str) -> String {
    let mut lines: Vec<&str> = export.lines().collect();
    assert!(lines.pop().unwrap().starts_with("{\"end\":"));
    let joined = lines.join("\n") + "\n";
    assert!(joined.contains("\"format\":\"mcp-memory/2\""));
    joined.replacen("mcp-memory/2", "mcp-memory/1", 1)
}

#[tokio::test]
async fn an_export_cut_short_or_changed_is_refused_by_its_end_line() {
    use sha2::Digest;
    let stub = EmbeddingStub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let acme = [("x-tenant-id", "acme")];
    let contents = [
        "the deploy pipeline releases on mondays",
        "builds use cargo nextest",
        "the staging database is restored every night",
    ];
    let text = exported(&stub, dir.path(), &contents).await;
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "a header, three memories and the end");
    // The end counts the memories and hashes every byte before it, as sha256sum would.
    let end: Value = serde_json::from_str(lines[4]).unwrap();
    let before_end: String = lines[..4].iter().map(|l| format!("{l}\n")).collect();
    let sha: String = sha2::Sha256::digest(before_end.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(end, json!({"end": {"memories": 3, "sha256": sha}}));

    let target = base_env(&stub, &dir.path().join("target.db"));
    let file = dir.path().join("changed.jsonl");
    let import = |content: String| {
        std::fs::write(&file, content).unwrap();
        let target = target.clone();
        let file = file.clone();
        async move { run(&target, &["import", "--in", file.to_str().unwrap()]).await }
    };
    let with = |kept: &[usize]| {
        kept.iter()
            .map(|&i| format!("{}\n", lines[i]))
            .collect::<String>()
    };
    for (content, refusal) in [
        (
            with(&[0, 1, 2, 3]),
            "the file ends at line 4 without the export's end line (its count and checksum): \
             it was cut short after 3 memories",
        ),
        (
            with(&[0, 1]),
            "the file ends at line 2 without the export's end line (its count and checksum): \
             it was cut short after 1 memory",
        ),
        (
            with(&[0, 1, 3, 4]),
            "line 4: the export's end counts 3 memories, but 2 lines come before it: the file \
             lost lines",
        ),
        (
            with(&[0, 1, 2, 3, 4]).replacen("mondays", "fridays", 1),
            "line 5: the checksum of the export's end does not match the lines before it",
        ),
        (
            with(&[0, 1, 2, 3, 4, 1]),
            "line 6: comes after the export's end (line 5)",
        ),
    ] {
        let (code, said) = import(content).await;
        assert_eq!(code, 1, "{said}");
        assert!(said.contains(refusal), "{refusal} in:\n{said}");
        assert!(said.contains("nothing was imported"), "{said}");
    }
    let mut target_env = target.clone();
    let server = start(&mut target_env).await;
    let stats = server.call(&acme, "memory_stats", json!({})).await;
    assert!(
        stats.contains("no memories"),
        "nothing was written: {stats}"
    );
    assert_eq!(server.terminate().await.code, Some(0));
    // The whole file, and an earlier release's file without an end, are imported.
    let (code, said) = import(text.clone()).await;
    assert_eq!(code, 0, "{said}");
    assert!(
        said.contains("imported 3 memories (0 already held)"),
        "{said}"
    );
    let (code, said) = import(earlier_release(&text)).await;
    assert_eq!(code, 0, "{said}");
    assert!(
        said.contains("imported 0 memories (3 already held)"),
        "{said}"
    );
    assert!(said.contains("has no end line"), "{said}");
}

/// Lists and counts from each caller's view: what no re-embedding may change.
async fn held(server: &support::process::Running) -> Vec<String> {
    let mut seen = Vec::new();
    for headers in [
        vec![("x-tenant-id", "acme")],
        vec![("x-tenant-id", "acme"), ("x-conversation-id", "chat:1")],
        vec![("x-tenant-id", "globex")],
    ] {
        seen.push(server.call(&headers, "list_memories", json!({})).await);
        seen.push(server.call(&headers, "memory_stats", json!({})).await);
    }
    seen
}

#[tokio::test]
async fn reembed_moves_each_store_to_another_model_under_a_running_server() {
    let stub = EmbeddingStub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let acme = [("x-tenant-id", "acme")];
    let thread = [("x-tenant-id", "acme"), ("x-conversation-id", "chat:1")];
    let help = (command(&env(&stub, &dir.path().join("help.db"))).args(["reembed", "--help"]))
        .output()
        .await
        .unwrap();
    let usage = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.status.success() && usage.contains("--to-index <INDEX>"),
        "{usage}"
    );
    for store in ["sqlite", "postgres", "s3"] {
        let mut old = env(&stub, &dir.path().join(format!("{store}.db")));
        match store {
            "postgres" => {
                old.insert("DATABASE_URL".into(), postgres_database().await);
            }
            "s3" => s3_store(&mut old).await,
            _ => {}
        }
        let server = start(&mut old).await;
        let deploy = stored_id(
            &server
                .call(
                    &acme,
                    "remember",
                    json!({"content": "the deploy pipeline releases on fridays"}),
                )
                .await,
        );
        for (headers, args) in [
            (
                &acme[..],
                json!({"content": "builds use cargo nextest", "type": "pattern"}),
            ),
            (
                &thread[..],
                json!({"content": "this thread's plan is canary first", "scope": "conversation"}),
            ),
            (
                &[("x-tenant-id", "globex")][..],
                json!({"content": "globex deploys with argo"}),
            ),
        ] {
            let stored = server.call(headers, "remember", args).await;
            assert!(
                stored.starts_with("[MEMORY] Stored as "),
                "{store}: {stored}"
            );
        }
        let before = held(&server).await;

        // The same configuration with another model, while the server runs.
        let mut new = old.clone();
        new.insert("EMBEDDING_MODEL".into(), "fake-96".into());
        new.insert("EMBEDDING_DIM".into(), "96".into());
        let args: &[&str] = match store {
            "s3" => &["reembed", "--to-index", "wider"],
            _ => &["reembed"],
        };
        let (code, said) = run(&new, args).await;
        assert_eq!(code, 0, "{store}: {said}");
        assert!(said.contains("re-embedded 4 memories"), "{store}: {said}");
        assert!(
            said.contains("from openai:fake-64, 64d to openai:fake-96, 96d"),
            "{store}: {said}"
        );
        // A fit belongs to the model it was made for: the command asks for a new one.
        assert!(
            said.contains("no calibration is recorded for openai:fake-96, 96d on this store: run `mcp-memory calibrate`"),
            "{store}: {said}"
        );
        let recall = json!({"query": "deploy pipeline releases"});
        let (text, failed) = server.call_tool(&acme, "recall", recall.clone()).await;
        if store == "s3" {
            // The old index serves on until the servers are moved to the new one.
            assert!(said.contains("now set VECTOR_INDEX=wider"), "{said}");
            assert!(!failed && text.contains(&deploy), "{text}");
            new.insert("VECTOR_INDEX".into(), "wider".into());
        } else {
            // Switched: the old model's server refuses, naming both models and the fix.
            assert!(failed, "{store}: {text}");
            assert!(
                text.contains("openai:fake-96, 96d") && text.contains("openai:fake-64, 64d"),
                "{store}: {text}"
            );
            assert!(text.contains("`mcp-memory reembed`"), "{store}: {text}");
            let (code, said) = run(&new, &["reembed"]).await;
            assert_eq!(code, 0, "{store}: {said}");
            assert!(said.contains("nothing to do"), "{store}: {said}");
            let (code, said) = run(&new, &["reembed", "--to-index", "wider"]).await;
            assert_ne!(code, 0, "{store}: {said}");
            assert!(
                said.contains("--to-index is for S3 Vectors"),
                "{store}: {said}"
            );
        }
        assert_eq!(server.terminate().await.code, Some(0));

        // A server of the new model holds the same memories, and finds by the new vectors.
        let renewed = start(&mut new).await;
        // memory_stats names the model its numbers are for: now the new one.
        let before: Vec<String> = (before.iter())
            .map(|text| text.replace("openai:fake-64", "openai:fake-96"))
            .collect();
        assert_eq!(held(&renewed).await, before, "{store}");
        let (text, failed) = renewed.call_tool(&acme, "recall", recall).await;
        assert!(!failed, "{store}: {text}");
        let first = text
            .match_indices("[id:")
            .next()
            .map(|(i, _)| &text[i + 4..i + 30]);
        assert_eq!(first, Some(deploy.as_str()), "{store}: {text}");
        assert_eq!(renewed.terminate().await.code, Some(0));
    }
}

/// The count of a memory's uses saturates at 2^53 on every store, and an import that says
/// more is refused by name: a count one use short of it (`import`), then three recalls, still
/// lists, exports and, after a restart, recalls and remembers (SQLite once made the sum a
/// REAL its reader refused, which failed the whole tenant).
#[tokio::test]
async fn a_count_of_uses_saturates_and_an_import_past_it_is_refused_on_every_store() {
    const MOST: u64 = 1 << 53;
    let stub = EmbeddingStub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let acme = [("x-tenant-id", "acme")];
    let content = "the deploy pipeline releases on mondays";
    // Edited by hand, so written as an earlier release's format, which has no end line.
    let text = earlier_release(&exported(&stub, dir.path(), &[content]).await);
    let lines: Vec<&str> = text.lines().collect();
    let with_uses = |uses: u64| {
        let mut memory: Value = serde_json::from_str(lines[1]).unwrap();
        memory["access_count"] = json!(uses);
        let file = dir.path().join(format!("uses-{uses}.jsonl"));
        std::fs::write(&file, format!("{}\n{memory}\n", lines[0])).unwrap();
        file.to_str().unwrap().to_owned()
    };
    let (too_many, almost) = (with_uses(MOST + 1), with_uses(MOST - 1));

    let sqlite = env(&stub, &dir.path().join("target.db"));
    let mut postgres = env(&stub, &dir.path().join("unused.db"));
    postgres.insert("DATABASE_URL".into(), postgres_database().await);
    let mut s3 = env(&stub, &dir.path().join("unused.db"));
    s3_store(&mut s3).await;
    for (store, mut target) in [("sqlite", sqlite), ("postgres", postgres), ("s3", s3)] {
        let (code, said) = run(&target, &["import", "--in", &too_many]).await;
        assert_eq!(code, 1, "{store}: {said}");
        assert!(
            said.contains(&format!("line 2: access_count: must be at most {MOST}"))
                && said.contains("nothing was imported"),
            "{store}: {said}"
        );
        let (code, said) = run(&target, &["import", "--in", &almost]).await;
        assert_eq!(code, 0, "{store}: {said}");
        let server = start(&mut target).await;
        for _ in 0..3 {
            let recalled = (server.call(&acme, "recall", json!({"query": content}))).await;
            assert!(recalled.contains(content), "{store}: {recalled}");
        }
        let listed = server.call(&acme, "list_memories", json!({})).await;
        assert!(listed.contains(content), "{store}: {listed}");
        assert_eq!(server.terminate().await.code, Some(0), "{store}");
        let out = dir.path().join(format!("back-from-{store}.jsonl"));
        let (code, said) = run(&target, &["export", "--out", out.to_str().unwrap()]).await;
        assert_eq!(code, 0, "{store}: {said}");
        let back = std::fs::read_to_string(&out).unwrap();
        let memory: Value = serde_json::from_str(back.lines().nth(1).unwrap()).unwrap();
        assert_eq!(memory["access_count"], json!(MOST), "{store}: saturated");
        // After a restart the tenant still recalls and remembers.
        let server = start(&mut target).await;
        let recalled = (server.call(&acme, "recall", json!({"query": content}))).await;
        assert!(recalled.contains(content), "{store}: {recalled}");
        let stored =
            (server.call(&acme, "remember", json!({"content": "builds use nextest"}))).await;
        assert!(
            stored.starts_with("[MEMORY] Stored as "),
            "{store}: {stored}"
        );
        assert_eq!(server.terminate().await.code, Some(0), "{store}");
    }
}
