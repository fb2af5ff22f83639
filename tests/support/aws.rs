//! Buckets on the local AWS emulator (`scripts/with-aws.sh` points `AWS_ENDPOINT_URL` at it),
//! made the way the guide (docs/guide.md) tells operators to make them. Every call makes new, uniquely
//! named buckets, so tests share one emulator without resetting it.

use aws_sdk_s3vectors::types::{DataType, DistanceMetric, MetadataConfiguration};

pub fn endpoint() -> String {
    std::env::var("AWS_ENDPOINT_URL")
        .expect("needs the AWS emulator: run through `make test` or scripts/with-aws.sh")
}

fn unique(what: &str) -> String {
    format!(
        "{what}-{}",
        mcp_memory::memory::new_id(mcp_memory::memory::now_ms()).to_lowercase()
    )
}

pub async fn sdk() -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .load()
        .await
}

pub async fn s3() -> aws_sdk_s3::Client {
    aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&sdk().await)
            .force_path_style(true)
            .build(),
    )
}

/// The vector bucket and index exactly as the guide's CLI creates them, and a state bucket.
pub async fn buckets(width: usize) -> (String, String) {
    endpoint();
    let (vector_bucket, state_bucket) = (unique("vectors"), unique("state"));
    let vectors = aws_sdk_s3vectors::Client::new(&sdk().await);
    vectors
        .create_vector_bucket()
        .vector_bucket_name(&vector_bucket)
        .send()
        .await
        .unwrap();
    let mut config = MetadataConfiguration::builder();
    for key in ["content", "createdAt", "tags", "trustBase"] {
        config = config.non_filterable_metadata_keys(key);
    }
    vectors
        .create_index()
        .vector_bucket_name(&vector_bucket)
        .index_name("memories")
        .data_type(DataType::Float32)
        .dimension(width as i32)
        .distance_metric(DistanceMetric::Cosine)
        .metadata_configuration(config.build().unwrap())
        .send()
        .await
        .unwrap();
    s3().await
        .create_bucket()
        .bucket(&state_bucket)
        .send()
        .await
        .unwrap();
    (vector_bucket, state_bucket)
}

/// What the AWS image's pod gets on EKS, with the emulator standing in for AWS: these
/// buckets, vectors `width` wide, counters flushed only by the final flush on SIGTERM.
pub fn pod_env(
    vector_bucket: &str,
    state_bucket: &str,
    width: usize,
) -> std::collections::HashMap<String, String> {
    let mut env: std::collections::HashMap<String, String> = [
        ("VECTOR_BUCKET", vector_bucket),
        ("STATE_BUCKET", state_bucket),
        ("EMBEDDING_DIM", &width.to_string()),
        ("STATS_FLUSH_MS", "3600000"),
        ("S3_FORCE_PATH_STYLE", "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    point_at_emulator(&mut env);
    env
}

/// A child process gets only the variables it is given: these point its AWS clients at the
/// emulator, as `scripts/with-aws.sh` points this one.
pub fn point_at_emulator(env: &mut std::collections::HashMap<String, String>) {
    for name in [
        "AWS_ENDPOINT_URL",
        "AWS_REGION",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_EC2_METADATA_DISABLED",
    ] {
        if let Ok(value) = std::env::var(name) {
            env.insert(name.into(), value);
        }
    }
}
