//! Amazon Bedrock Titan text embeddings (docs/embeddings.md#bedrock-titan): one InvokeModel per text,
//! always asking for the configured width, normalised at the source. The client is built on
//! first use, so a pod that never embeds never resolves credentials; a 10 s limit covers
//! the whole call including the SDK's own retries.

use std::time::Duration;

use async_trait::async_trait;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::Blob;
use aws_smithy_types::timeout::TimeoutConfig;
use tokio::sync::OnceCell;

use super::{EmbedError, Embedder, check_vector};

const TIMEOUT_MS: u64 = 10_000;

pub struct BedrockEmbedder {
    region: String,
    model: String,
    dimension: usize,
    client: OnceCell<aws_sdk_bedrockruntime::Client>,
}

impl BedrockEmbedder {
    pub fn new(region: &str, model: &str, dimension: usize) -> Self {
        BedrockEmbedder {
            region: region.to_owned(),
            model: model.to_owned(),
            dimension,
            client: OnceCell::new(),
        }
    }

    async fn client(&self) -> &aws_sdk_bedrockruntime::Client {
        self.client
            .get_or_init(|| async {
                let sdk = crate::aws::sdk_config(&self.region).await;
                aws_sdk_bedrockruntime::Client::from_conf(
                    aws_sdk_bedrockruntime::config::Builder::from(&sdk)
                        .timeout_config(
                            TimeoutConfig::builder()
                                .connect_timeout(Duration::from_secs(3))
                                .operation_timeout(Duration::from_millis(TIMEOUT_MS))
                                .build(),
                        )
                        .build(),
                )
            })
            .await
    }
}

#[async_trait]
impl Embedder for BedrockEmbedder {
    async fn embed(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let request = serde_json::json!({
            "inputText": text,
            "dimensions": self.dimension,
            "normalize": true,
        });
        let out = self
            .client()
            .await
            .invoke_model()
            .model_id(&self.model)
            .content_type("application/json")
            .accept("application/json")
            .body(Blob::new(request.to_string()))
            .send()
            .await
            .map_err(|e| match e {
                SdkError::TimeoutError(_) => EmbedError::Timeout(TIMEOUT_MS),
                other => EmbedError::Bedrock(crate::aws::describe(&other)),
            })?;
        let json: serde_json::Value =
            serde_json::from_slice(out.body().as_ref()).map_err(|_| EmbedError::InvalidJson)?;
        check_vector(json.get("embedding"), &self.model, self.dimension)
    }

    fn model(&self) -> crate::memory::Model {
        crate::memory::Model {
            name: format!("bedrock:{}", self.model),
            dimension: self.dimension,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    impl BedrockEmbedder {
        fn with_client(client: aws_sdk_bedrockruntime::Client, dimension: usize) -> Self {
            BedrockEmbedder {
                region: "us-east-1".into(),
                model: "amazon.titan-embed-text-v2:0".into(),
                dimension,
                client: OnceCell::new_with(Some(client)),
            }
        }
    }

    /// A Bedrock runtime that answers every call with one status and body.
    async fn bedrock_answering(
        status: u16,
        error_type: &'static str,
        body: &'static str,
    ) -> BedrockEmbedder {
        let app = axum::Router::new().fallback(move || async move {
            (
                StatusCode::from_u16(status).unwrap(),
                [
                    ("content-type", "application/json"),
                    ("x-amzn-errortype", error_type),
                ],
                body,
            )
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let config = aws_sdk_bedrockruntime::config::Builder::new()
            .behavior_version(aws_sdk_bedrockruntime::config::BehaviorVersion::latest())
            .region(aws_sdk_bedrockruntime::config::Region::new("us-east-1"))
            .endpoint_url(url)
            .credentials_provider(aws_sdk_bedrockruntime::config::Credentials::new(
                "test", "test", None, None, "stub",
            ))
            .retry_config(aws_sdk_bedrockruntime::config::retry::RetryConfig::disabled())
            .build();
        BedrockEmbedder::with_client(aws_sdk_bedrockruntime::Client::from_conf(config), 4)
    }

    #[tokio::test]
    async fn failures_read_as_bedrock_failures() {
        let refused = bedrock_answering(
            400,
            "ValidationException",
            r#"{"message":"Malformed input request"}"#,
        )
        .await;
        assert_eq!(
            refused.embed("x").await.unwrap_err().to_string(),
            "Bedrock could not embed the text — ValidationException: Malformed input request"
        );
        let throttled =
            bedrock_answering(429, "ThrottlingException", r#"{"message":"slow down"}"#).await;
        assert!(
            throttled
                .embed("x")
                .await
                .unwrap_err()
                .to_string()
                .contains("ThrottlingException")
        );
        let garbled = bedrock_answering(200, "", "not json").await;
        assert_eq!(
            garbled.embed("x").await.unwrap_err(),
            EmbedError::InvalidJson
        );
        let empty = bedrock_answering(200, "", "{}").await;
        assert_eq!(empty.embed("x").await.unwrap_err(), EmbedError::NoEmbedding);
        let narrow = bedrock_answering(200, "", r#"{"embedding":[0.5,0.5]}"#).await;
        assert!(matches!(
            narrow.embed("x").await.unwrap_err(),
            EmbedError::Dimension {
                got: 2,
                expected: 4,
                ..
            }
        ));
        let fine = bedrock_answering(
            200,
            "",
            r#"{"embedding":[0.5,0.5,0.5,0.5],"inputTextTokenCount":1}"#,
        )
        .await;
        assert_eq!(fine.embed("x").await.unwrap(), vec![0.5; 4]);
    }

    /// The emulator's Titan: hashed bag-of-words vectors of the width asked for.
    #[tokio::test]
    async fn titan_answers_at_the_width_asked_for() {
        assert!(
            std::env::var("AWS_ENDPOINT_URL").is_ok(),
            "needs the AWS emulator: run through `make test` or scripts/with-aws.sh"
        );
        let titan = BedrockEmbedder::new("us-east-1", "amazon.titan-embed-text-v2:0", 256);
        let a = titan.embed("deploys go through argo").await.unwrap();
        let b = titan.embed("argo deploys").await.unwrap();
        let c = titan.embed("lunch is at noon").await.unwrap();
        assert_eq!(a.len(), 256);
        let norm: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!(
            (norm - 1.0).abs() < 1e-4,
            "normalised at the source: {norm}"
        );
        let cos = |x: &[f32], y: &[f32]| crate::search::cosine(x, y);
        assert!(cos(&a, &b) > cos(&a, &c));
        assert_eq!(
            titan.describe(),
            "bedrock:amazon.titan-embed-text-v2:0, 256d"
        );
        // The emulator refuses an empty text as Bedrock does; the error reaches the agent.
        let err = titan.embed(" ").await.unwrap_err().to_string();
        assert!(
            err.starts_with("Bedrock could not embed the text — ValidationException"),
            "{err}"
        );
    }
}
