//! The default in-process model, multilingual-e5-small (fetched by `make model`, or from
//! MCP_MEMORY_TEST_E5_MODEL): its vectors against the independent numpy implementation
//! (bench/reference_embed.py), its prompts and its window, and Korean recall end to end
//! through the binary with the model's own thresholds.

mod support;

use std::collections::HashMap;
use std::path::PathBuf;

use mcp_memory::embed::Embedder;
use mcp_memory::embed::languages::Languages;
use mcp_memory::embed::local::LocalEmbedder;
use serde_json::{Value, json};
use support::process;

fn model_dir() -> PathBuf {
    support::model_dir("MCP_MEMORY_TEST_E5_MODEL", "multilingual-e5-small")
}

fn load() -> LocalEmbedder {
    support::load_model(&model_dir())
}

/// The model's window: a text of more tokens is read in windows.
const WINDOW: usize = 512;

/// Every passage and query of the fixture within 1e-6 of the numpy float64 forward in every
/// component (1.1e-7 here); the long one, which the reference truncated to the window, by
/// the encoder on the reference's 512 ids (`support::encode_ids`).
#[tokio::test]
async fn vectors_match_the_independent_reference() {
    let embedder = load();
    assert_eq!(embedder.dimension(), 384);
    assert_eq!(embedder.prompts().query, "query: ");
    assert_eq!(embedder.prompts().document, "passage: ");
    let fixture: Value = serde_json::from_str(include_str!("fixtures/e5_reference.json")).unwrap();
    let mut worst = 0.0f64;
    for sentence in fixture["sentences"].as_array().unwrap() {
        let text = sentence["text"].as_str().unwrap();
        let ids = support::ids(sentence);
        let ours = if ids.len() >= WINDOW {
            support::encode_ids(&model_dir(), mcp_memory_encoder::Precision::F32, &ids)
        } else if sentence["query"] == true {
            embedder.embed_query(text).await.unwrap()
        } else {
            embedder.embed(text).await.unwrap()
        };
        let mut reference: Vec<f64> = (sentence["embedding"].as_array().unwrap().iter())
            .map(|v| v.as_f64().unwrap())
            .collect();
        if sentence["query"] == true {
            // A query is levelled across languages after the model (docs/models.md,
            // "Recall across languages"): the reference is levelled the same way.
            let mut levelled: Vec<f32> = reference.iter().map(|v| *v as f32).collect();
            Languages::E5_SMALL.level(&mut levelled);
            reference = levelled.into_iter().map(f64::from).collect();
        }
        worst = worst.max(support::within(text, &ours, &reference, 1e-6));
    }
    eprintln!("largest difference from the reference: {worst:e}");
}

/// With `EMBEDDING_PRECISION=int8` (docs/models.md, "int8 products") every vector of the
/// fixture stays within a cosine of 0.998 of the float64 reference, passages and queries, the
/// 512-token one included; the default (above) is the reference's to 1e-6.
#[tokio::test]
async fn int8_products_stay_close_to_the_reference() {
    let embedder = support::load_int8(&model_dir());
    let fixture: Value = serde_json::from_str(include_str!("fixtures/e5_reference.json")).unwrap();
    let mut worst = 1.0f64;
    for sentence in fixture["sentences"].as_array().unwrap() {
        let text = sentence["text"].as_str().unwrap();
        let mut reference: Vec<f32> = (sentence["embedding"].as_array().unwrap().iter())
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        let ids = support::ids(sentence);
        let ours = if ids.len() >= WINDOW {
            support::encode_ids(&model_dir(), mcp_memory_encoder::Precision::Int8, &ids)
        } else if sentence["query"] == true {
            Languages::E5_SMALL.level(&mut reference);
            embedder.embed_query(text).await.unwrap()
        } else {
            embedder.embed(text).await.unwrap()
        };
        let reference: Vec<f64> = reference.iter().map(|v| f64::from(*v)).collect();
        worst = worst.min(support::close_in_int8(text, &ours, &reference));
    }
    eprintln!("smallest cosine to the reference: {worst}");
}

/// A text past the 512-token window is read whole, in windows (docs/embeddings.md#long-texts):
/// of two long memories alike but for their last sentence, a question about one's last
/// sentence finds that one, where truncation gave the two one vector.
#[tokio::test]
async fn a_text_past_the_window_is_read_to_its_end() {
    let embedder = load();
    let long = "배포 파이프라인은 main 브랜치에 머지되면 스테이징에 올라간다. ".repeat(120);
    let payments = format!("{long} 결제 서비스의 게이트웨이 타임아웃은 45초로 정했다.");
    let logs = format!("{long} 감사 로그는 90일 동안 보관하고 그 뒤에 지운다.");
    let (payments, logs) = (
        embedder.embed(&payments).await.unwrap(),
        embedder.embed(&logs).await.unwrap(),
    );
    let asked = embedder
        .embed_query("결제 게이트웨이 타임아웃은 몇 초야?")
        .await
        .unwrap();
    let (right, wrong) = (
        support::cosine(&asked, &payments),
        support::cosine(&asked, &logs),
    );
    assert!(
        right > wrong,
        "the tail's memory {right}, the other {wrong}"
    );
    let norm = support::cosine(&payments, &payments);
    assert!((norm - 1.0).abs() < 1e-5, "not unit length: {norm}");
}

struct Server {
    running: process::Running,
}

impl Server {
    /// The binary on the SQLite file in `dir`, with the model's own thresholds unless `extra`
    /// sets them.
    async fn start(dir: &std::path::Path, extra: &[(&str, &str)]) -> Server {
        let mut env = support::local_model_env(dir, &model_dir());
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        Server {
            running: process::start(&mut env).await,
        }
    }

    async fn call(&self, tool: &str, args: Value) -> String {
        self.running
            .call(&[("x-tenant-id", "korean-team")], tool, args)
            .await
    }

    /// The first result of recall for `query`, or None when nothing matched.
    async fn first(&self, query: &str) -> Option<String> {
        let answer = self.call("recall", json!({"query": query})).await;
        if answer.contains("NO CONFIDENT MATCH") && !answer.contains("\n1. ") {
            return None;
        }
        answer.split("\n1. ").nth(1).map(str::to_owned)
    }

    /// Asserts that recall for `query` puts `fact` first.
    async fn finds_first(&self, query: &str, fact: &str) {
        let first = self.first(query).await;
        assert!(
            first.as_deref().is_some_and(|f| f.contains(fact)),
            "{query}: {first:?}"
        );
    }
}

/// A store written in f32 is served with `EMBEDDING_PRECISION=int8` as it is (the same
/// model, no re-embedding): the startup line names the products, questions in other words
/// find their facts by meaning, in Korean and in English, and a near-verbatim repeat is still
/// known.
#[tokio::test]
async fn a_store_written_in_f32_is_recalled_in_int8() {
    let dir = tempfile::tempdir().unwrap();
    let exact = Server::start(dir.path(), &[]).await;
    for fact in FACTS {
        let stored = exact.call("remember", json!({"content": fact})).await;
        assert!(stored.starts_with("[MEMORY] Stored as "), "{stored}");
    }
    exact.running.terminate().await;
    let kernel = support::int8_kernel().name();
    let int8 = Server::start(
        dir.path(),
        &[
            ("EMBEDDING_PRECISION", "int8"),
            ("EMBEDDING_KERNEL", kernel),
            ("RECALL_KEYWORD_WEIGHT", "0"),
        ],
    )
    .await;
    for (question, fact) in [
        ("새 버전은 무슨 요일에 내보낼 수 있어?", FACTS[0]),
        ("검증 환경 데이터베이스 접속 암호는 어디 보관돼?", FACTS[1]),
        ("How long do we keep our logs?", FACTS[5]),
    ] {
        int8.finds_first(question, fact).await;
    }
    let repeat = int8
        .call(
            "remember",
            json!({"content": "운영 배포는 매주 화요일 오후에만 하고, 금요일에는 절대 배포하지 않습니다."}),
        )
        .await;
    assert!(repeat.contains("Already known"), "{repeat}");
    let said = int8.running.terminate().await;
    let startup = format!("{kernel} kernel, int8 products");
    assert!(
        said.stdout.iter().any(|l| l.contains(&startup)),
        "no line names {startup}: {:?}",
        said.stdout
    );
}

const FACTS: [&str; 6] = [
    "운영 배포는 매주 화요일 오후에만 하고, 금요일에는 절대 배포하지 않는다.",
    "스테이징 DB 비밀번호는 Vault의 secret/stg/db 경로에 있다.",
    "코드 리뷰는 최소 두 명이 승인해야 main 브랜치에 머지할 수 있다.",
    "장애가 나면 먼저 #incident 채널에 알리고 당번에게 전화한다.",
    "API 버전은 URL 경로에 v1, v2처럼 붙이고 헤더로는 구분하지 않는다.",
    "로그는 Loki로 보내고 30일이 지나면 자동으로 지운다.",
];

/// Korean memories through the binary with e5's default floor (0.78) and HIGH (0.87):
/// found by Korean questions in other words (by meaning alone), by the words they contain
/// (by words alone), and by English questions; a Korean near-verbatim repeat is known.
#[tokio::test]
async fn korean_memories_are_recalled_by_meaning_by_words_and_from_english() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]).await;
    for fact in FACTS {
        let stored = server.call("remember", json!({"content": fact})).await;
        assert!(stored.starts_with("[MEMORY] Stored as "), "{stored}");
    }
    let repeat = server
        .call(
            "remember",
            json!({"content": "운영 배포는 매주 화요일 오후에만 하고, 금요일에는 절대 배포하지 않습니다."}),
        )
        .await;
    assert!(repeat.contains("Already known"), "{repeat}");
    let different = server
        .call(
            "remember",
            json!({"content": "모바일 앱 출시는 앱스토어 심사 때문에 최소 일주일 전에 제출한다."}),
        )
        .await;
    assert!(different.starts_with("[MEMORY] Stored as "), "{different}");
    let hybrid = server
        .call(
            "recall",
            json!({"query": "스테이징 DB 비밀번호 어디 있어?"}),
        )
        .await;
    assert!(hybrid.contains("HIGH CONFIDENCE"), "{hybrid}");
    assert!(
        hybrid.split("\n1. ").nth(1).unwrap().contains(FACTS[1]),
        "{hybrid}"
    );
    drop(server);

    // By meaning alone: questions sharing no word with their fact, in Korean and in English.
    let meaning = Server::start(dir.path(), &[("RECALL_KEYWORD_WEIGHT", "0")]).await;
    let by_meaning = [
        ("새 버전은 무슨 요일에 내보낼 수 있어?", FACTS[0]),
        ("검증 환경 데이터베이스 접속 암호는 어디 보관돼?", FACTS[1]),
        ("서비스가 죽었을 때 제일 먼저 뭘 해야 해?", FACTS[3]),
        (
            "Which day of the week are production releases allowed?",
            FACTS[0],
        ),
        (
            "Who has to approve a pull request before it is merged?",
            FACTS[2],
        ),
        ("How long do we keep our logs?", FACTS[5]),
        ("How do clients pick the API version?", FACTS[4]),
    ];
    for (question, fact) in by_meaning {
        meaning.finds_first(question, fact).await;
    }
    // e5 puts unrelated text close too (docs/guide.md#recall-threshold): a far subject.
    let unrelated = meaning
        .call(
            "recall",
            json!({"query": "Who won the football world cup in 1998?"}),
        )
        .await;
    assert!(unrelated.contains("NO CONFIDENT MATCH"), "{unrelated}");
    drop(meaning);

    // By words alone: a floor no meaning reaches leaves only what shares the query's words
    // (Hangul is indexed as character pairs, so a particle does not hide a word).
    let words = Server::start(dir.path(), &[("RECALL_MIN_SIMILARITY", "0.99")]).await;
    words.finds_first("당번 전화번호", FACTS[3]).await;
    words.finds_first("로그 보관", FACTS[5]).await;
    assert_eq!(
        words
            .first("Which day of the week are production releases allowed?")
            .await,
        None
    );
}

/// With nothing configured but the tenant, `mcp-memory stdio` keeps its file and looks for
/// the default model, multilingual-e5-small, in the user's data directory; a missing model is
/// refused with the command that fetches it, and once it is there the process serves from any
/// working directory.
#[tokio::test]
async fn stdio_needs_no_configuration_but_the_tenant() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    use tokio::process::Command;

    let data = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let stdio = || {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mcp-memory"));
        command
            .arg("stdio")
            .env_clear()
            .env("HOME", data.path())
            .env("XDG_DATA_HOME", data.path().join("share"))
            .env("MEMORY_TENANT", "zero-setup")
            .current_dir(elsewhere.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        command
    };
    let home = data.path().join("share/mcp-memory");
    let wanted = home.join("models/multilingual-e5-small");
    let refused = stdio().output().await.unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "mcp-memory model fetch multilingual-e5-small --dir {}",
            wanted.display()
        )),
        "{said}"
    );
    assert!(refused.stdout.is_empty());

    std::fs::create_dir_all(wanted.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(model_dir(), &wanted).unwrap();
    let mut child = stdio().spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    for (id, content) in [(1, "the staging cluster is called blue-lagoon")] {
        let call = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "remember", "arguments": {"content": content}}});
        stdin
            .write_all(format!("{call}\n").as_bytes())
            .await
            .unwrap();
    }
    let answer: Value = serde_json::from_str(&stdout.next_line().await.unwrap().unwrap()).unwrap();
    let text = answer["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("[MEMORY] Stored as "), "{answer}");
    drop(stdin);
    assert_eq!(child.wait().await.unwrap().code(), Some(0));
    assert!(
        home.join("memory.db").exists(),
        "the file is in the data directory"
    );
    assert!(
        std::fs::read_dir(elsewhere.path())
            .unwrap()
            .next()
            .is_none()
    );
}

/// Changing the default never mixes two models in one store: a store MiniLM wrote refuses the
/// new default at start, naming both models and the way to move, and still serves MiniLM.
#[tokio::test]
async fn a_store_written_with_minilm_refuses_the_new_default_and_keeps_minilm() {
    let minilm = support::model_dir("MCP_MEMORY_TEST_MODEL", "all-MiniLM-L6-v2");
    let minilm = minilm.display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let fact = "the staging cluster is called blue-lagoon";
    let old = Server::start(dir.path(), &[("EMBEDDING_MODEL", &minilm)]).await;
    let stored = old.call("remember", json!({"content": fact})).await;
    assert!(stored.starts_with("[MEMORY] Stored as "), "{stored}");
    drop(old);

    let mut env = support::local_model_env(dir.path(), &model_dir());
    env.insert("PORT".into(), process::free_port().to_string());
    let refused = process::command(&env).output().await.unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_ne!(refused.status.code(), Some(0), "{said}");
    for named in [
        "local:all-MiniLM-L6-v2",
        "local:multilingual-e5-small",
        "mcp-memory reembed",
    ] {
        assert!(said.contains(named), "{named}: {said}");
    }

    let again = Server::start(dir.path(), &[("EMBEDDING_MODEL", &minilm)]).await;
    again
        .finds_first("What is the staging cluster called?", fact)
        .await;
}

/// The duplicate rule and recall across languages and subjects, through the binary with
/// e5's own calibration (docs/ranking.md#duplicate-rule, #abstention, and docs/models.md,
/// "Recall across languages"): a fact that differs from a stored one in one value is stored
/// and names it; a near-verbatim repeat is refused; a Korean question finds the English
/// memory that answers it, and an English question the Korean one; a question about a
/// subject nothing stored addresses is told so.
#[tokio::test]
async fn different_facts_are_kept_repeats_refused_and_languages_cross() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]).await;
    let mut ids = HashMap::new();
    let facts = [
        "The admin API listens on port 8080 behind the internal load balancer.",
        "Feature flags live in LaunchDarkly; every flag needs an owner and a removal date.",
        "The nightly ETL job exports orders to BigQuery at 01:30 UTC.",
        "Mobile releases go out every second Wednesday after QA signs off.",
        "결제 서버 요청 제한 시간은 5초로 둔다.",
        "신규 입사자 노트북은 IT팀이 입사 전날까지 세팅해 둔다.",
    ];
    for fact in facts {
        let stored = server.call("remember", json!({"content": fact})).await;
        assert!(stored.starts_with("[MEMORY] Stored as "), "{stored}");
        ids.insert(fact, support::stored_id(&stored));
    }
    // One value changed: stored, naming the memory it resembles and how to correct it.
    for (changed, original) in [
        (
            "The admin API listens on port 8443 behind the internal load balancer.",
            facts[0],
        ),
        ("결제 서버 요청 제한 시간은 10초로 둔다.", facts[4]),
        (
            "Mobile releases go out every second Thursday after QA signs off.",
            facts[3],
        ),
    ] {
        let answer = server.call("remember", json!({"content": changed})).await;
        assert!(answer.starts_with("[MEMORY] Stored as "), "{answer}");
        assert!(answer.contains("SIMILAR: 1 stored memory"), "{answer}");
        assert!(
            answer.contains(&format!("forget (id \"{}\")", ids[original])),
            "{answer}"
        );
    }
    // Near-verbatim: a typo, a changed particle and ending.
    for repeat in [
        "The admin API listens on port 8080 behind the internal load balancr.",
        "결제 서버 요청 제한 시간을 5초로 둡니다.",
    ] {
        let answer = server.call("remember", json!({"content": repeat})).await;
        assert!(answer.contains("Already known"), "{repeat}: {answer}");
    }
    // Across languages, by meaning, in the default (hybrid) recall.
    server
        .finds_first("기능 플래그는 어디서 관리하고 누가 책임져?", facts[1])
        .await;
    server
        .finds_first("주문 데이터는 밤에 몇 시에 어디로 내보내?", facts[2])
        .await;
    server
        .finds_first("Who sets up a new hire's laptop, and by when?", facts[5])
        .await;
    // A subject nothing stored addresses.
    let answer = server
        .call(
            "recall",
            json!({"query": "What is the guest Wi-Fi password in the Seoul office?"}),
        )
        .await;
    assert!(answer.contains("NO CONFIDENT MATCH"), "{answer}");
}

/// Three client windows, each with its own `mcp-memory stdio` on e5 and the one SQLite file,
/// as a desktop runs them: each remembers, each finds what the others remembered, and each
/// holds at most 250 MB resident, peak included (the model file is mapped, so the three share
/// its pages). Their memory and time to answer `initialize` are reported.
#[tokio::test]
async fn three_windows_share_one_file_each_within_250_mb() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    let data = tempfile::tempdir().unwrap();
    let file = format!("sqlite:{}", data.path().join("memory.db").display());
    let facts = [
        "the staging cluster is called blue-lagoon",
        "배포 승인은 플랫폼 팀의 김지훈이 한다",
        "nightly backups go to the bucket named cold-archive",
    ];
    let mut windows = Vec::new();
    for _ in 0..3 {
        let started = std::time::Instant::now();
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcp-memory"))
            .arg("stdio")
            .env("MEMORY_TENANT", "desktop")
            .env("DATABASE_URL", &file)
            .env("EMBEDDING_PROVIDER", "local")
            .env("EMBEDDING_MODEL", model_dir())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let hello = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "window", "version": "1"}}});
        stdin
            .write_all(format!("{hello}\n").as_bytes())
            .await
            .unwrap();
        let answer: Value =
            serde_json::from_str(&stdout.next_line().await.unwrap().unwrap()).unwrap();
        assert!(answer["result"]["serverInfo"].is_object(), "{answer}");
        eprintln!(
            "initialize answered {:.0} ms after start",
            started.elapsed().as_secs_f64() * 1e3
        );
        windows.push((child, stdin, stdout));
    }
    let mut id = 1;
    let mut call = async |window: &mut (
        tokio::process::Child,
        tokio::process::ChildStdin,
        tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    ),
                          tool: &str,
                          arguments: Value|
           -> String {
        id += 1;
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}});
        window
            .1
            .write_all(format!("{call}\n").as_bytes())
            .await
            .unwrap();
        let answer: Value =
            serde_json::from_str(&window.2.next_line().await.unwrap().unwrap()).unwrap();
        answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    for (window, fact) in windows.iter_mut().zip(facts) {
        let stored = call(window, "remember", json!({"content": fact})).await;
        assert!(stored.starts_with("[MEMORY] Stored as "), "{stored}");
    }
    for (n, window) in windows.iter_mut().enumerate() {
        let other = facts[(n + 1) % 3];
        let found = call(window, "recall", json!({"query": other})).await;
        assert!(found.contains(other), "window {n} finds {other:?}: {found}");
    }
    for (n, (child, _, _)) in windows.iter().enumerate() {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", child.id().unwrap())).unwrap();
        let field = |name: &str| -> f64 {
            let line = status.lines().find(|l| l.starts_with(name)).unwrap();
            line.split_whitespace()
                .nth(1)
                .unwrap()
                .parse::<f64>()
                .unwrap()
                / 1024.0
        };
        let (resident, peak) = (field("VmRSS:"), field("VmHWM:"));
        eprintln!("window {n}: {resident:.0} MB resident, {peak:.0} MB at peak");
        assert!(peak <= 250.0, "window {n} held {peak:.0} MB at peak");
    }
}
