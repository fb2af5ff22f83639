//! The documentation library behind `search_docs` (docs/tools.md#search_docs): excerpts from a
//! Bedrock Knowledge Base shared by every tenant. The knowledge base embeds the query
//! itself, so the memory embedder plays no part.

use std::sync::Arc;

use async_trait::async_trait;

#[cfg(feature = "kb")]
mod bedrock;

/// One passage the library returned, in its order.
#[derive(Debug, Clone, PartialEq)]
pub struct Excerpt {
    pub text: String,
    /// Where the passage comes from (an `s3://` URI), when the library says.
    pub source: Option<String>,
    /// Higher is more relevant; only ever shown relative to the top result.
    pub score: Option<f64>,
}

/// The Bedrock Knowledge Base `search_docs` reads; only ever set in builds with `kb`.
#[derive(Debug, Clone)]
pub struct KnowledgeBase {
    pub id: String,
    pub region: String,
}

/// The library's one variable, declared in every build so `--help` lists it and a build
/// without `kb` reports it as ignored.
#[derive(clap::Args, Debug, Clone, Default)]
#[group(id = "docs")]
pub struct Variables {
    /// Bedrock Knowledge Base for search_docs [default: unset]
    #[arg(long, env = "KNOWLEDGE_BASE_ID", value_parser = crate::variables::text)]
    pub knowledge_base_id: Option<String>,
}

impl Variables {
    cfg_if::cfg_if! {
        if #[cfg(feature = "kb")] {
            /// The knowledge base to offer `search_docs` over, if one is set and this build can.
            pub fn resolve(
                self,
                region: &str,
                _: &mut Vec<String>,
            ) -> Result<Option<KnowledgeBase>, String> {
                let Some(id) = self.knowledge_base_id else {
                    return Ok(None);
                };
                let is_id = id.len() == 10 && id.chars().all(|c| c.is_ascii_alphanumeric());
                if !is_id && !id.starts_with("arn:") {
                    return Err(format!(
                        "KNOWLEDGE_BASE_ID must be a knowledge base id (10 letters or digits) \
                         or its ARN, got \"{id}\""
                    ));
                }
                Ok(Some(KnowledgeBase {
                    id,
                    region: region.to_owned(),
                }))
            }
        } else {
            pub fn resolve(
                self,
                _: &str,
                warnings: &mut Vec<String>,
            ) -> Result<Option<KnowledgeBase>, String> {
                if self.knowledge_base_id.is_some() {
                    warnings.push(
                        "KNOWLEDGE_BASE_ID is ignored: search_docs is not available in this \
                         build (build with --features kb)"
                            .into(),
                    );
                }
                Ok(None)
            }
        }
    }
}

/// Why the library could not be searched, as the service said it; the tool layer says
/// what failed around it.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
#[error("{0}")]
pub struct DocsError(pub String);

#[async_trait]
pub trait Library: Send + Sync {
    async fn search(&self, query: &str, limit: usize) -> Result<Vec<Excerpt>, DocsError>;
}

cfg_if::cfg_if! {
    if #[cfg(feature = "kb")] {
        /// The configured library, if this build has one; no client is created until the first
        /// search, so a memories-only process never loads it.
        pub fn open(knowledge_base: &KnowledgeBase) -> Option<Arc<dyn Library>> {
            Some(Arc::new(bedrock::KnowledgeBaseLibrary::new(knowledge_base)))
        }
    } else {
        /// Configuration never names a knowledge base in a build without `kb`.
        pub fn open(_: &KnowledgeBase) -> Option<Arc<dyn Library>> {
            None
        }
    }
}
