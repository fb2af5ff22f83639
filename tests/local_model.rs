//! The in-process embedder with the real all-MiniLM-L6-v2 model (fetched by `make models`,
//! or from MCP_MEMORY_TEST_MODEL): reference vectors from an independent numpy
//! implementation (bench/reference_embed.py), batching, long texts, refusals of a bad model
//! directory, and recall end to end through the binary.

mod support;

use std::path::PathBuf;

use mcp_memory::embed::Embedder;
use mcp_memory::embed::local::LocalEmbedder;
use serde_json::Value;

fn model_dir() -> PathBuf {
    support::model_dir("MCP_MEMORY_TEST_MODEL", "all-MiniLM-L6-v2")
}

fn load() -> LocalEmbedder {
    support::load_model(&model_dir())
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[tokio::test]
async fn vectors_match_the_independent_reference() {
    let embedder = load();
    assert_eq!(embedder.dimension(), 384);
    let fixture: Value =
        serde_json::from_str(include_str!("fixtures/minilm_reference.json")).unwrap();
    for sentence in fixture["sentences"].as_array().unwrap() {
        let text = sentence["text"].as_str().unwrap();
        let ours = embedder.embed(text).await.unwrap();
        let reference: Vec<f64> = sentence["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        support::within(text, &ours, &reference, 1e-5);
    }
}

/// With `EMBEDDING_PRECISION=int8` (docs/models.md, "int8 products") every vector of the
/// fixture stays within a cosine of 0.998 of the reference.
#[tokio::test]
async fn int8_products_stay_close_to_the_reference() {
    let embedder = support::load_int8(&model_dir());
    let fixture: Value =
        serde_json::from_str(include_str!("fixtures/minilm_reference.json")).unwrap();
    let mut worst = 1.0f64;
    for sentence in fixture["sentences"].as_array().unwrap() {
        let text = sentence["text"].as_str().unwrap();
        let reference: Vec<f64> = (sentence["embedding"].as_array().unwrap().iter())
            .map(|v| v.as_f64().unwrap())
            .collect();
        let ours = embedder.embed(text).await.unwrap();
        worst = worst.min(support::close_in_int8(text, &ours, &reference));
    }
    eprintln!("smallest cosine to the reference: {worst}");
}

/// int8 loads on a kernel whose VNNI this CPU has (AVX-512 VNNI for avx512, AVX-VNNI for
/// avx2) and on the portable one, and is refused on any other, naming what is missing, rather
/// than run slower than f32.
#[test]
fn int8_is_refused_where_it_would_be_slower() {
    #[cfg(target_arch = "x86_64")]
    let vnni = (
        std::arch::is_x86_feature_detected!("avx512vnni"),
        std::arch::is_x86_feature_detected!("avxvnni"),
    );
    #[cfg(not(target_arch = "x86_64"))]
    let vnni = (false, false);
    for kernel in mcp_memory_encoder::Kernel::available() {
        let (runs, missing) = match kernel.name() {
            "avx512" => (vnni.0, "AVX-512 VNNI"),
            "avx2" => (vnni.1, "AVX-VNNI"),
            _ => (true, ""),
        };
        let loaded = LocalEmbedder::load_on(
            &model_dir(),
            None,
            kernel,
            mcp_memory_encoder::Precision::Int8,
        );
        match loaded {
            Ok(_) => assert!(runs, "{} ran int8 without {missing}", kernel.name()),
            Err(e) => assert!(
                !runs
                    && e.starts_with(&format!(
                        "EMBEDDING_PRECISION: int8 products need {missing} for the {} kernel",
                        kernel.name()
                    )),
                "{}: {e}",
                kernel.name()
            ),
        }
    }
}

#[tokio::test]
async fn a_paraphrase_scores_clearly_above_an_unrelated_text() {
    let embedder = load();
    let fact = embedder
        .embed("The deploy pipeline uses blue-green releases on EKS.")
        .await
        .unwrap();
    let paraphrase = embedder
        .embed("How do we ship releases to production?")
        .await
        .unwrap();
    let unrelated = embedder
        .embed("My grandmother grows tomatoes in her garden.")
        .await
        .unwrap();
    let (close, far) = (cosine(&fact, &paraphrase), cosine(&fact, &unrelated));
    assert!(close > far + 0.2, "paraphrase {close}, unrelated {far}");
    let norm = cosine(&fact, &fact);
    assert!((norm - 1.0).abs() < 1e-5, "not unit length: {norm}");
}

#[tokio::test]
async fn a_batch_gives_the_same_vectors_as_one_at_a_time() {
    let embedder = load();
    let texts = [
        "short",
        "a somewhat longer sentence about database backups every night",
        "배포는 금요일마다 진행한다",
        "",
    ];
    support::batch_matches_one_at_a_time(&embedder, &texts).await;
}

/// A text past the model's window is read whole, in windows (docs/embeddings.md#long-texts):
/// of two long memories alike but for their last sentence, a question about one's last
/// sentence finds that one, where truncation gave the two one vector.
#[tokio::test]
async fn long_inputs_are_read_to_their_end_not_refused() {
    let embedder = load();
    let long = "the staging cluster is rebuilt every sunday night ".repeat(400);
    let payments = format!("{long} the payment gateway timeout is forty five seconds");
    let logs = format!("{long} audit logs are kept for ninety days then deleted");
    let (payments, logs) = (
        embedder.embed(&payments).await.unwrap(),
        embedder.embed(&logs).await.unwrap(),
    );
    assert_eq!(payments.len(), 384);
    let asked = embedder
        .embed_query("what is the payment gateway timeout?")
        .await
        .unwrap();
    let (right, wrong) = (cosine(&asked, &payments), cosine(&asked, &logs));
    assert!(
        right > wrong,
        "the tail's memory {right}, the other {wrong}"
    );
}

#[test]
fn a_bad_model_directory_is_refused_naming_the_file() {
    let empty = tempfile::tempdir().unwrap();
    let err = LocalEmbedder::load(empty.path(), None).err().unwrap();
    assert!(err.contains("config.json"), "{err}");

    let broken = tempfile::tempdir().unwrap();
    for file in ["config.json", "model.safetensors"] {
        std::fs::copy(model_dir().join(file), broken.path().join(file)).unwrap();
    }
    std::fs::write(broken.path().join("tokenizer.json"), "{not json").unwrap();
    let err = LocalEmbedder::load(broken.path(), None).err().unwrap();
    assert!(err.contains("tokenizer.json"), "{err}");

    std::fs::copy(
        model_dir().join("tokenizer.json"),
        broken.path().join("tokenizer.json"),
    )
    .unwrap();
    std::fs::write(broken.path().join("model.safetensors"), b"truncated").unwrap();
    let err = LocalEmbedder::load(broken.path(), None).err().unwrap();
    assert!(err.contains("model.safetensors"), "{err}");

    let err = LocalEmbedder::load(&model_dir(), Some(768)).err().unwrap();
    assert!(
        err.contains("EMBEDDING_DIM is 768") && err.contains("384"),
        "{err}"
    );
}

/// Through the real binary, as `make run` starts it: facts come back for questions
/// phrased differently, and a question about nothing stored gets no match.
#[tokio::test]
async fn recall_by_paraphrase_end_to_end() {
    use std::process::Stdio;
    use tokio::process::Command;

    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = Command::new(env!("CARGO_BIN_EXE_mcp-memory"))
        .env_clear()
        .env("PORT", port.to_string())
        .env("HOST", "127.0.0.1")
        .env(
            "DATABASE_URL",
            format!("sqlite:{}", dir.path().join("memory.db").display()),
        )
        .env("EMBEDDING_PROVIDER", "local")
        .env("EMBEDDING_MODEL", model_dir())
        // The burst below is 600 connections at once, about the model's queue, not the cap
        // on connections (tests/bounds.rs).
        .env("MCP_MAX_CONNECTIONS", "1000")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let mut healthy = false;
    // Up to a minute: loading the model on a loaded machine takes a while.
    for _ in 0..2400 {
        if client
            .get(format!("{url}/health"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
        {
            healthy = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(healthy, "the server never became healthy");
    let call = |tool: &'static str, args: Value| {
        let client = client.clone();
        let url = url.clone();
        async move {
            let reply: Value = client
                .post(format!("{url}/mcp"))
                .header("x-tenant-id", "local-e2e")
                .json(
                    &serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                          "params": {"name": tool, "arguments": args}}),
                )
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            reply["result"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    let facts = support::PARAPHRASES;
    for (fact, _) in facts {
        let stored = call("remember", serde_json::json!({"content": fact})).await;
        assert!(stored.starts_with("[MEMORY] Stored as "), "{stored}");
    }
    for (fact, question) in facts {
        let answer = call("recall", serde_json::json!({"query": question})).await;
        let first = answer
            .split("\n1. ")
            .nth(1)
            .unwrap_or_else(|| panic!("no result for {question:?}: {answer}"));
        assert!(
            first.contains(fact),
            "{question:?} did not rank its fact first:\n{answer}"
        );
    }
    let unrelated = call(
        "recall",
        serde_json::json!({"query": "What is a good recipe for banana bread?"}),
    )
    .await;
    assert!(unrelated.contains("NO CONFIDENT MATCH"), "{unrelated}");

    // A burst far past what the model's queue holds (256 texts): any overflow is told at
    // once that the model is busy, every other call is answered, and the server goes on.
    // (Whether the queue fills depends on how fast this client sends; the overflow itself
    // is tested by events in src/embed/local.rs.)
    let burst: Vec<_> = (0..600)
        .map(|n| {
            let query = format!(
                "question {n} about deploys, {}",
                "releases and rollbacks ".repeat(12)
            );
            tokio::spawn(call("recall", serde_json::json!({"query": query})))
        })
        .collect();
    let mut busy = 0;
    for answer in burst {
        let answer = answer.await.unwrap();
        if answer.contains("the embedding model is busy") {
            assert!(answer.contains("try again"), "{answer}");
            busy += 1;
        } else {
            assert!(answer.starts_with("[MEMORY]"), "{answer}");
        }
    }
    assert!(busy < 600, "{busy} of 600 were refused as busy");
    eprintln!("{busy} of 600 were refused as busy");
    let after = call(
        "recall",
        serde_json::json!({"query": "What command runs the tests?"}),
    )
    .await;
    assert!(after.contains("make test"), "{after}");
    server.kill().await.unwrap();
}

/// A model that records instructions (sentence-transformers' `prompts`, as e5's
/// `query: ` and `passage: `) gets them before each query and each memory.
#[tokio::test]
async fn a_model_with_prompts_puts_them_before_queries_and_passages() {
    let prompted = tempfile::tempdir().unwrap();
    // The model's files, but its own sentence-transformers configuration (written, never
    // through a link into the model).
    let own = "config_sentence_transformers.json";
    for entry in std::fs::read_dir(model_dir()).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() != own {
            std::os::unix::fs::symlink(entry.path(), prompted.path().join(entry.file_name()))
                .unwrap();
        }
    }
    std::fs::write(
        prompted.path().join(own),
        r#"{"prompts": {"query": "query: ", "passage": "passage: "}, "default_prompt_name": null}"#,
    )
    .unwrap();
    let with = LocalEmbedder::load(prompted.path(), None).unwrap();
    assert_eq!(with.prompts().query, "query: ");
    let plain = load();
    assert!(plain.prompts().query.is_empty() && plain.prompts().document.is_empty());
    let text = "the deploy pipeline uses blue-green releases";
    let query = with.embed_query(text).await.unwrap();
    let passage = with.embed(text).await.unwrap();
    assert_eq!(query, plain.embed(&format!("query: {text}")).await.unwrap());
    assert_eq!(
        passage,
        plain.embed(&format!("passage: {text}")).await.unwrap()
    );
    assert_ne!(query, passage);
    // Without prompts a query and a passage are the same text.
    assert_eq!(
        plain.embed_query(text).await.unwrap(),
        plain.embed(text).await.unwrap()
    );
}
