//! Bedrock Agent Runtime `Retrieve` over one knowledge base (docs/tools.md#search_docs).

use async_trait::async_trait;
use aws_sdk_bedrockagentruntime::types::{
    KnowledgeBaseQuery, KnowledgeBaseRetrievalConfiguration, KnowledgeBaseVectorSearchConfiguration,
};
use tokio::sync::OnceCell;

use super::KnowledgeBase;
use super::{DocsError, Excerpt, Library};

pub struct KnowledgeBaseLibrary {
    id: String,
    region: String,
    client: OnceCell<aws_sdk_bedrockagentruntime::Client>,
}

impl KnowledgeBaseLibrary {
    pub fn new(knowledge_base: &KnowledgeBase) -> Self {
        KnowledgeBaseLibrary {
            id: knowledge_base.id.clone(),
            region: knowledge_base.region.clone(),
            client: OnceCell::new(),
        }
    }

    async fn client(&self) -> &aws_sdk_bedrockagentruntime::Client {
        self.client
            .get_or_init(|| async {
                aws_sdk_bedrockagentruntime::Client::new(
                    &crate::aws::sdk_config(&self.region).await,
                )
            })
            .await
    }
}

#[async_trait]
impl Library for KnowledgeBaseLibrary {
    async fn search(&self, query: &str, limit: usize) -> Result<Vec<Excerpt>, DocsError> {
        let out = self
            .client()
            .await
            .retrieve()
            .knowledge_base_id(&self.id)
            .retrieval_query(KnowledgeBaseQuery::builder().text(query).build())
            .retrieval_configuration(
                KnowledgeBaseRetrievalConfiguration::builder()
                    .vector_search_configuration(
                        KnowledgeBaseVectorSearchConfiguration::builder()
                            .number_of_results(limit as i32)
                            .build(),
                    )
                    .build(),
            )
            .send()
            .await
            .map_err(|e| DocsError(crate::aws::describe(&e)))?;
        // Only text passages are kept; chunk metadata is dropped.
        Ok(out
            .retrieval_results()
            .iter()
            .filter_map(|r| {
                let text = r.content().map(|c| c.text())?;
                (!text.trim().is_empty()).then(|| Excerpt {
                    text: text.to_owned(),
                    source: r
                        .location()
                        .and_then(|l| l.s3_location())
                        .and_then(|s| s.uri())
                        .map(str::to_owned),
                    score: r.score(),
                })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn emulator() -> String {
        std::env::var("AWS_ENDPOINT_URL")
            .expect("needs the AWS emulator: run through `make test` or scripts/with-aws.sh")
    }

    #[tokio::test]
    async fn retrieve_returns_passages_with_sources_in_the_service_order() {
        let id = format!("KB{:08}", crate::memory::rand_u128() % 100_000_000);
        let documents = serde_json::json!({"documents": [
            {"text": "Refunds take 5 business days", "uri": "s3://docs/refunds.md"},
            {"text": "Invoices are sent monthly", "uri": "s3://docs/invoices.md"},
            {"text": "   ", "uri": "s3://docs/blank.md"},
        ]});
        let loaded = reqwest::Client::new()
            .put(format!("{}/_fake/knowledgebases/{id}", emulator()))
            .json(&documents)
            .send()
            .await
            .unwrap();
        assert!(loaded.status().is_success());
        let library = KnowledgeBaseLibrary::new(&KnowledgeBase {
            id: id.clone(),
            region: "us-east-1".into(),
        });
        let found = library.search("how long do refunds take", 3).await.unwrap();
        assert_eq!(found.len(), 2, "the blank passage is dropped: {found:?}");
        assert_eq!(found[0].text, "Refunds take 5 business days");
        assert_eq!(found[0].source.as_deref(), Some("s3://docs/refunds.md"));
        assert!(found[0].score.unwrap() >= found[1].score.unwrap());
        assert_eq!(library.search("refunds", 1).await.unwrap().len(), 1);

        let missing = KnowledgeBaseLibrary::new(&KnowledgeBase {
            id: "KB00000000".into(),
            region: "us-east-1".into(),
        });
        let err = missing.search("refunds", 3).await.unwrap_err().to_string();
        assert!(err.starts_with("ResourceNotFoundException"), "{err}");
    }
}
