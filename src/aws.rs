//! What every AWS-backed part shares: one SDK configuration (one region, the default
//! credential chain, which on EKS is the pod's role) and one way of turning an SDK error
//! into a sentence an agent or an operator can read.
//!
//! Endpoints follow the SDK's own `AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_<SERVICE>`
//! variables, which is how the tests point every client at the local emulator. Building
//! the configuration makes no network call: credentials are resolved on first use.

use std::time::Duration;

use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::display::DisplayErrorContext;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;

/// Attempts of one AWS call, the first included (docs/operations.md#retries).
const ATTEMPTS: u32 = 3;

/// Every AWS call: 3 s to connect, 10 s for one attempt, 20 s with the SDK's retries. A
/// client may set a shorter operation timeout of its own (Bedrock's embedder does).
///
/// Retries are the SDK's standard mode, said here rather than left to the behaviour
/// version: `ATTEMPTS` in all, for throttling (429, `ThrottlingException`,
/// `TooManyRequestsException`, `SlowDown`) and transient failures (500, 502, 503, 504, a
/// timed-out attempt, a dropped connection), each after a random wait of up to 0.5 s,
/// then 1 s; the client's retry quota stops retries when a service fails for everyone.
pub async fn sdk_config(region: &str) -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new(region.to_owned()))
        .retry_config(
            aws_config::retry::RetryConfig::standard()
                .with_max_attempts(ATTEMPTS)
                .with_initial_backoff(Duration::from_millis(500))
                .with_max_backoff(Duration::from_secs(2)),
        )
        .timeout_config(
            aws_config::timeout::TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(3))
                .operation_attempt_timeout(Duration::from_secs(10))
                .operation_timeout(Duration::from_secs(20))
                .build(),
        )
        .load()
        .await
}

/// `Code: message` for an error the service answered, the whole cause chain otherwise
/// (a connection refused, a timeout, missing credentials). Never the request itself.
pub fn describe<E, R>(error: &SdkError<E, R>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    match error {
        SdkError::ServiceError(service) => {
            let e = service.err();
            match (e.code(), e.message()) {
                (Some(code), Some(message)) => format!("{code}: {message}"),
                (Some(code), None) => code.to_owned(),
                _ => DisplayErrorContext(error).to_string(),
            }
        }
        SdkError::TimeoutError(_) => "the request timed out".into(),
        _ => DisplayErrorContext(error).to_string(),
    }
}

/// The HTTP status of a failed call, when there was a response at all.
pub fn status<E>(error: &SdkError<E, HttpResponse>) -> Option<u16> {
    error.raw_response().map(|r| r.status().as_u16())
}
