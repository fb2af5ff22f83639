//! The vectors of a list of texts, as the server embeds them, for calibration offline:
//! reads `{"passages": [...], "queries": [...]}` and writes each list's vectors as
//! little-endian f32 rows (`OUT.passages.f32`, `OUT.queries.f32`).
//!
//!     cargo bench --bench vectors -- MODEL_DIR TEXTS.json OUT

use mcp_memory::embed::Embedder;
use mcp_memory::embed::local::LocalEmbedder;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let [dir, texts, out] = &args[..] else {
        panic!("usage: cargo bench --bench vectors -- MODEL_DIR TEXTS.json OUT")
    };
    let embedder = LocalEmbedder::load(std::path::Path::new(dir), None).unwrap();
    let texts: serde_json::Value = serde_json::from_slice(&std::fs::read(texts).unwrap()).unwrap();
    for kind in ["passages", "queries"] {
        use futures_util::StreamExt;
        let list: Vec<&str> = (texts[kind].as_array().into_iter().flatten())
            .map(|t| t.as_str().unwrap())
            .collect();
        // In flight together, so the embedder's worker batches them; in order.
        let vectors: Vec<_> = futures_util::stream::iter(list)
            .map(|text| async {
                if kind == "queries" {
                    embedder.embed_query(text).await
                } else {
                    embedder.embed(text).await
                }
            })
            .buffered(64)
            .collect()
            .await;
        let mut bytes = Vec::new();
        for vector in vectors {
            bytes.extend(vector.unwrap().iter().flat_map(|x| x.to_le_bytes()));
        }
        std::fs::write(format!("{out}.{kind}.f32"), bytes).unwrap();
    }
}
