//! The S3 store against the AWS emulator (`tests/support/aws_emulator.py`), which
//! `make test` starts and points `AWS_ENDPOINT_URL` at. Every test creates its own buckets,
//! so tests share one emulator without a reset.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};

use aws_sdk_s3vectors::types::{DataType, DistanceMetric, MetadataConfiguration};
use futures_util::{StreamExt, TryStreamExt};

use super::counters::{Compacted, Counters};
use super::objects::ObjectError;
use super::*;
use crate::memory::{Conversation, MemoryType, Scope};
use crate::store::suite::{self, RULE, T0, direction, note, seen_from, store_one, tenant};

const WIDTH: i32 = 8;

fn region() -> String {
    std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into())
}

fn require_emulator() {
    assert!(
        std::env::var("AWS_ENDPOINT_URL").is_ok(),
        "the S3 tests need the AWS emulator: run them through `make test`, or \
         `scripts/with-aws.sh cargo test --features s3`"
    );
}

fn unique(what: &str) -> String {
    format!(
        "{what}-{:012x}",
        crate::memory::rand_u128() as u64 & 0xffff_ffff_ffff
    )
}

async fn sdk() -> aws_config::SdkConfig {
    crate::aws::sdk_config(&region()).await
}

async fn s3_client() -> aws_sdk_s3::Client {
    let sdk = sdk().await;
    aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&sdk)
            .force_path_style(true)
            .build(),
    )
}

/// Creates a vector bucket with an index as docs/guide.md#aws-s3-vectors-s3-and-bedrock-on-eks says to, and a state bucket.
/// The index keeps its bucket's default mode, CLASSIC on the emulator unless
/// `S3V_BUCKET_INDEX_MODE` says otherwise: the server must not depend on the guide's
/// `update-index-mode` step.
async fn buckets() -> S3Settings {
    buckets_made(DistanceMetric::Cosine, &vectors::NON_FILTERABLE).await
}

/// The same with an index of another metric or other non-filterable keys.
async fn buckets_made(metric: DistanceMetric, non_filterable: &[&str]) -> S3Settings {
    require_emulator();
    let settings = S3Settings {
        vector_bucket: unique("vectors"),
        vector_index: "memories".into(),
        state_bucket: unique("state"),
        region: region(),
        force_path_style: true,
        flush_every: Duration::from_secs(3600),
        compact_threshold: 20,
    };
    let vectors = aws_sdk_s3vectors::Client::new(&sdk().await);
    vectors
        .create_vector_bucket()
        .vector_bucket_name(&settings.vector_bucket)
        .send()
        .await
        .unwrap();
    let mut config = MetadataConfiguration::builder();
    for key in non_filterable {
        config = config.non_filterable_metadata_keys(*key);
    }
    vectors
        .create_index()
        .vector_bucket_name(&settings.vector_bucket)
        .index_name(&settings.vector_index)
        .data_type(DataType::Float32)
        .dimension(WIDTH)
        .distance_metric(metric)
        .metadata_configuration(config.build().unwrap())
        .send()
        .await
        .unwrap();
    s3_client()
        .await
        .create_bucket()
        .bucket(&settings.state_bucket)
        .send()
        .await
        .unwrap();
    settings
}

async fn fresh() -> S3Store {
    S3Store::open(&buckets().await, &suite::model(WIDTH as usize)).await
}

#[tokio::test]
async fn the_shared_suite() {
    suite::run(fresh).await;
}

#[tokio::test]
async fn memories_move_out_and_in_whole() {
    suite::run_portable(fresh).await;
}

/// `count` memories of `who`, imported at once (no duplicate check), the i-th at
/// `direction(0, tilt(i))`.
async fn imported(
    store: &S3Store,
    who: &str,
    count: i64,
    tilt: impl Fn(i64) -> f32,
) -> Vec<String> {
    let memories: Vec<Portable> = (0..count)
        .map(|i| Portable {
            tenant: tenant(who),
            memory: note(
                &format!("fact number {i} of {who}"),
                T0 + i,
                Scope::Project,
                None,
            )
            .into_memory(),
            embedding: direction(0, tilt(i)),
        })
        .collect();
    store.import(&memories).await.unwrap();
    memories.into_iter().map(|p| p.memory.id).collect()
}

/// One tenant's 300 memories fill the nearest part of the index the tenants share, yet
/// another tenant's one memory on the subject is recalled and its repeat known
/// (docs/stores.md#index-modes). On the emulator's CLASSIC index, a query that did not ask
/// for ENHANCED would see only the 64 nearest vectors of the whole index: none of its.
#[tokio::test]
async fn a_small_tenant_is_found_beside_a_crowd_in_one_index() {
    let store = fresh().await;
    imported(&store, "crowd", 300, |i| 0.001 * i as f32).await;
    let fact = "the small project deploys from the blue pipeline";
    let vector = direction(0, 0.6);
    let mine = store_one(
        &store,
        "small",
        note(fact, T0, Scope::Project, None),
        &vector,
    )
    .await;
    let hits = suite::nearest(
        &store,
        &tenant("small"),
        &seen_from(None),
        &direction(0, 0.0),
        5,
    )
    .await
    .unwrap();
    let found: Vec<&str> = hits.iter().map(|h| h.memory.id.as_str()).collect();
    assert_eq!(found, [mine.id.as_str()]);
    let again = note(fact, T0 + 1, Scope::Project, None);
    let seen = seen_from(None).for_dedup(Scope::Project);
    match store
        .remember(&tenant("small"), &seen, again, &vector, RULE)
        .await
        .unwrap()
    {
        Remembered::AlreadyKnown { existing, .. } => assert_eq!(existing.id, mine.id),
        other => panic!("the repeat was not recognised: {other:?}"),
    }
}

/// Candidates that QueryVectors hands over in several pages rank as one page would: `make
/// test` runs this file again with the emulator's pages 7 long (Makefile, `aws-modes`).
#[tokio::test]
async fn candidates_over_several_pages_keep_their_order() {
    let store = fresh().await;
    let ids = imported(&store, "acme", 30, |i| 0.05 * (i * 7 % 30) as f32).await;
    let hits = suite::nearest(
        &store,
        &tenant("acme"),
        &seen_from(None),
        &direction(0, 0.0),
        25,
    )
    .await
    .unwrap();
    let found: Vec<&str> = hits.iter().map(|h| h.memory.id.as_str()).collect();
    // The i-th memory's tilt is 0.05·(7i mod 30): nearest first is the order of 7i mod 30.
    let mut expected: Vec<(i64, &str)> = (0..30)
        .map(|i| (i * 7 % 30, ids[i as usize].as_str()))
        .collect();
    expected.sort();
    let expected: Vec<&str> = expected.into_iter().take(25).map(|(_, id)| id).collect();
    assert_eq!(found, expected);
}

/// An index made otherwise than the server needs is named, with what fixes it, before the
/// first write, and nothing is written: not at a failed write later.
#[tokio::test]
async fn an_index_made_otherwise_is_refused_before_anything_is_written() {
    let cases = [
        (
            DistanceMetric::Euclidean,
            &vectors::NON_FILTERABLE[..],
            "measures euclidean distance",
        ),
        (
            DistanceMetric::Cosine,
            &["content", "createdAt"][..],
            "lets tags, trustBase be filtered",
        ),
    ];
    for (metric, keys, problem) in cases {
        let settings = buckets_made(metric, keys).await;
        let store = S3Store::open(&settings, &suite::model(WIDTH as usize)).await;
        let m = note("use pnpm", T0, Scope::Project, None);
        let seen = seen_from(None).for_dedup(Scope::Project);
        let err = (store
            .remember(&tenant("acme"), &seen, m, &direction(0, 0.0), RULE)
            .await)
            .unwrap_err();
        assert!(matches!(err, StoreError::SetUp { .. }), "{err:?}");
        let err = err.to_string();
        assert!(
            err.starts_with(&format!(
                "S3 Vectors {}/memories {problem}",
                settings.vector_bucket
            )) && err.contains("mcp-memory reembed --to-index")
                && err.ends_with("nothing was written"),
            "{err}"
        );
        let client = aws_sdk_s3vectors::Client::new(&sdk().await);
        let listed = (client.list_vectors())
            .vector_bucket_name(&settings.vector_bucket)
            .index_name("memories")
            .send()
            .await
            .unwrap();
        assert!(listed.vectors().is_empty());
        let counts = store
            .count_by_type(&tenant("acme"), &seen_from(None))
            .await
            .unwrap();
        assert_eq!(counts.total, 0);
    }
}

/// An import cut short between a memory's vector and its index key is finished by the
/// next one: the key is written again, and the memory counts as held.
#[tokio::test]
async fn a_second_import_writes_the_index_key_a_first_one_missed() {
    let source = fresh().await;
    let m = store_one(
        &source,
        "acme",
        note("a fact", T0, Scope::Project, None),
        &direction(0, 0.0),
    )
    .await;
    let exported = source
        .export(&[], crate::memory::now_ms(), None, 10)
        .await
        .unwrap();
    let target = fresh().await;
    assert_eq!(target.import(&exported.memories).await.unwrap(), 1);
    let key = index_keys(&target, "acme").await.remove(0);
    target.objects.delete(&[key]).await.unwrap();
    assert!(
        target
            .list(&tenant("acme"), &seen_from(None), None, None, 5)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(target.import(&exported.memories).await.unwrap(), 0);
    let listed = target
        .list(&tenant("acme"), &seen_from(None), None, None, 5)
        .await
        .unwrap();
    assert_eq!(listed.iter().map(|l| &l.id).collect::<Vec<_>>(), [&m.id]);
}

#[tokio::test]
async fn the_index_keeps_to_the_model_it_recorded() {
    let settings = buckets().await;
    suite::run_model_record(|model| {
        let settings = settings.clone();
        async move { Ok(S3Store::open(&settings, &model).await) }
    })
    .await;
}

#[tokio::test]
async fn a_model_calibration_is_recorded_beside_its_model() {
    let settings = buckets().await;
    suite::run_recorded_fit(|model| {
        let settings = settings.clone();
        async move { Ok(S3Store::open(&settings, &model).await) }
    })
    .await;
}

#[tokio::test]
async fn the_vectors_are_reembedded_into_another_index() {
    let settings = buckets().await;
    suite::run_reembed(
        |model| {
            let mut settings = settings.clone();
            if model.dimension != WIDTH as usize {
                settings.vector_index = "wider".into();
            }
            async move { Ok(S3Store::open(&settings, &model).await) }
        },
        || {
            let settings = settings.clone();
            async move {
                let run = super::reembed::Reembedder::open(&settings, "wider")
                    .await
                    .unwrap();
                Box::new(run) as Box<dyn crate::store::reembed::Reembedding>
            }
        },
        false,
    )
    .await;
    // The index reembed made is ENHANCED whatever the bucket's default.
    let client = aws_sdk_s3vectors::Client::new(&sdk().await);
    let made = (client.get_index())
        .vector_bucket_name(&settings.vector_bucket)
        .index_name("wider")
        .send()
        .await
        .unwrap();
    let mode = made.index().and_then(|i| i.index_mode()).cloned();
    assert_eq!(mode, Some(aws_sdk_s3vectors::types::IndexMode::Enhanced));
}

async fn index_keys(store: &S3Store, who: &str) -> Vec<String> {
    store
        .objects
        .list(&index::prefix(&tenant(who)), None, 1_000)
        .await
        .unwrap()
}

#[tokio::test]
async fn the_layout_is_the_one_the_original_wrote() {
    let store = fresh().await;
    let chat = "chat:1";
    let mut m = note(
        "deploys go through argo",
        T0,
        Scope::Conversation,
        Some(chat),
    );
    m.memory_type = MemoryType::Reference;
    m.tags = vec!["ops".into()];
    let stored = store_one(&store, "acme", m, &direction(0, 0.0)).await;

    let keys = index_keys(&store, "acme").await;
    let digest = index::digest(&Conversation::new_unchecked(chat.into()));
    assert_eq!(
        keys,
        [format!(
            "index/acme/{}#{}#reference#{digest}",
            index::inverted_time(T0 as u64).unwrap(),
            stored.id
        )]
    );
    let records = store
        .vectors
        .get(&[format!("acme#{}", stored.id)])
        .await
        .unwrap();
    let metadata = &records[&format!("acme#{}", stored.id)];
    assert_eq!(metadata["tenantId"], "acme");
    assert_eq!(metadata["scope"], "conversation");
    assert_eq!(metadata["conversation"], chat);
    assert_eq!(metadata["tags"], serde_json::json!(["ops"]));
    assert!(metadata.get("category").is_none());
}

#[tokio::test]
async fn an_orphaned_index_key_is_skipped_in_listings_but_counted() {
    let store = fresh().await;
    let acme = tenant("acme");
    let a = store_one(
        &store,
        "acme",
        note("a", T0, Scope::Project, None),
        &direction(0, 0.0),
    )
    .await;
    let b = store_one(
        &store,
        "acme",
        note("b", T0 + 1, Scope::Project, None),
        &direction(1, 0.0),
    )
    .await;
    // The memory behind b's key vanished (a forget whose index cleanup failed).
    store
        .vectors
        .delete(&[format!("acme#{}", b.id)])
        .await
        .unwrap();
    let listed = store
        .list(&acme, &seen_from(None), None, None, 2)
        .await
        .unwrap();
    assert_eq!(
        listed.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(),
        [a.id.as_str()]
    );
    let counts = store.count_by_type(&acme, &seen_from(None)).await.unwrap();
    assert_eq!((counts.total, counts.scan_cap), (2, None));
}

#[tokio::test]
async fn forget_removes_the_index_key_and_honours_visibility() {
    let store = fresh().await;
    let acme = tenant("acme");
    let mine = store_one(
        &store,
        "acme",
        note("mine", T0, Scope::Conversation, Some("chat:1")),
        &direction(0, 0.0),
    )
    .await;
    assert!(
        !store
            .delete(&acme, &seen_from(Some("chat:2")), &mine.id)
            .await
            .unwrap()
    );
    assert!(
        !store
            .delete(&tenant("other"), &seen_from(Some("chat:1")), &mine.id)
            .await
            .unwrap()
    );
    assert_eq!(index_keys(&store, "acme").await.len(), 1);
    assert!(
        store
            .delete(&acme, &seen_from(Some("chat:1")), &mine.id)
            .await
            .unwrap()
    );
    assert!(index_keys(&store, "acme").await.is_empty());
    assert_eq!(
        store
            .count_by_type(&acme, &seen_from(Some("chat:1")))
            .await
            .unwrap()
            .total,
        0
    );
}

/// One round of the sweep reads the whole bucket, a stretch of keys at a time: memories that
/// expired behind many other keys are all deleted in it, not one stretch a round.
#[tokio::test]
async fn a_sweep_round_covers_the_whole_bucket() {
    let mut store = fresh().await;
    // The real stretch is 10,000 keys; the rule is the same at 2, and 9 writes are quick.
    store.sweep_scan = 2;
    let expiry = T0 + 60_000;
    for who in ["acme", "globex", "initech"] {
        for i in 0..3 {
            let created = T0 + i;
            let memory = NewMemory {
                expires_at: (i != 1).then_some(expiry),
                ..note(&format!("{who} {i}"), created, Scope::Project, None)
            };
            suite::store_at(&store, who, memory, created, &direction(i as usize, 0.0)).await;
        }
    }
    let metrics = crate::metrics::Metrics::new(false, &[]);
    let deleted = crate::store::sweep::round(&store, &metrics, &Default::default()).await;
    assert_eq!(
        deleted, 6,
        "every expired memory, in five stretches of the keys"
    );
    assert!(
        metrics
            .render(None)
            .contains("mcp_memory_memories_expired_total 6")
    );
    for who in ["acme", "globex", "initech"] {
        let left = store
            .list(&tenant(who), &suite::seen_at(None, T0 + 10), None, None, 10)
            .await
            .unwrap();
        let left: Vec<_> = left.into_iter().map(|m| m.content).collect();
        assert_eq!(left, [format!("{who} 1")]);
    }
}

#[tokio::test]
async fn counting_stops_at_the_cap_and_says_so() {
    let mut store = fresh().await;
    // The real cap is 10,000 keys; the rule is the same at 40, and 40 writes are quick.
    store.stats_scan_cap = 40;
    let acme = tenant("acme");
    store_one(
        &store,
        "acme",
        note("a", T0, Scope::Project, None),
        &direction(0, 0.0),
    )
    .await;
    // Index keys alone are what counting reads: write the rest directly, with one type
    // this version does not know.
    let mut keys = Vec::new();
    for i in 1..store.stats_scan_cap as i64 + 5 {
        let id = crate::memory::new_id(T0 + i);
        let t = if i == store.stats_scan_cap as i64 + 4 {
            "future-type"
        } else {
            "pattern"
        };
        let inverted = index::inverted_time((T0 + i) as u64).unwrap();
        keys.push(format!("index/acme/{inverted}#{id}#{t}"));
    }
    futures_util::stream::iter(keys)
        .map(|k| {
            let objects = Arc::clone(&store.objects);
            async move { objects.put(&k, Vec::new(), Condition::Always).await }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    let counts = store.count_by_type(&acme, &seen_from(None)).await.unwrap();
    assert_eq!(counts.scan_cap, Some(store.stats_scan_cap));
    assert_eq!(counts.total, store.stats_scan_cap as u64);
    // The newest keys come first, so the scan saw the unknown type but not the oldest memory.
    assert_eq!(
        counts.by_type,
        [(MemoryType::Pattern, store.stats_scan_cap as u64 - 1)]
    );
}

#[tokio::test]
async fn a_memory_too_large_once_escaped_is_refused_and_nothing_is_written() {
    let store = fresh().await;
    let mut m = note(&"\"".repeat(25_000), T0, Scope::Project, None);
    m.tags = vec!["x".into()];
    let err = store
        .remember(
            &tenant("acme"),
            &seen_from(None),
            m,
            &direction(0, 0.0),
            RULE,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Refused { ref message, limit: 40_000, .. } if message.contains("40000 byte limit")),
        "{err}"
    );
    assert!(index_keys(&store, "acme").await.is_empty());
    assert!(
        suite::nearest(
            &store,
            &tenant("acme"),
            &seen_from(None),
            &direction(0, 0.0),
            5
        )
        .await
        .unwrap()
        .is_empty()
    );
}

#[tokio::test]
async fn missing_buckets_are_tool_errors_not_crashes() {
    require_emulator();
    let store = S3Store::open(
        &S3Settings {
            vector_bucket: unique("absent"),
            vector_index: "memories".into(),
            state_bucket: unique("absent"),
            region: region(),
            force_path_style: true,
            flush_every: Duration::from_secs(3600),
            compact_threshold: 20,
        },
        &suite::model(WIDTH as usize),
    )
    .await;
    let err = suite::nearest(
        &store,
        &tenant("acme"),
        &seen_from(None),
        &direction(0, 0.0),
        5,
    )
    .await
    .unwrap_err()
    .to_string();
    // The index is read before its first use (docs/stores.md#the-index-checked-before-use).
    assert!(
        err.starts_with("S3 Vectors absent-")
            && err.contains("/memories does not exist; create it"),
        "{err}"
    );
    let err = store
        .count_by_type(&tenant("acme"), &seen_from(None))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("S3 ListObjectsV2 failed — NoSuchBucket"),
        "{err}"
    );
}

#[tokio::test]
async fn recall_counts_reach_other_pods_through_the_state_bucket() {
    let settings = buckets().await;
    let one = S3Store::open(&settings, &suite::model(WIDTH as usize)).await;
    let two = S3Store::open(&settings, &suite::model(WIDTH as usize)).await;
    let acme = tenant("acme");
    let m = store_one(
        &one,
        "acme",
        note("a", T0, Scope::Project, None),
        &direction(0, 0.0),
    )
    .await;
    one.record_access(&acme, &seen_from(None), &[&m], T0 + 10)
        .await
        .unwrap();
    one.flush().await.unwrap();
    let seen = suite::nearest(&two, &acme, &seen_from(None), &direction(0, 0.0), 5)
        .await
        .unwrap();
    assert_eq!(
        (seen[0].memory.access_count, seen[0].memory.last_accessed_at),
        (1, Some(T0 + 10))
    );
}

/// The state bucket with its deletes refused: a pod that dies between folding shards
/// into merged.json and deleting them.
struct DiesBeforeCleanup(Arc<dyn Objects>);

#[async_trait]
impl Objects for DiesBeforeCleanup {
    async fn get(&self, key: &str) -> Result<Option<objects::Object>, ObjectError> {
        self.0.get(key).await
    }
    async fn put(
        &self,
        key: &str,
        body: Vec<u8>,
        condition: Condition<'_>,
    ) -> Result<(), ObjectError> {
        self.0.put(key, body, condition).await
    }
    async fn list(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, ObjectError> {
        self.0.list(prefix, after, limit).await
    }
    async fn delete(&self, _: &[String]) -> Result<(), ObjectError> {
        Err(objects::failed("PutObject", "the pod died"))
    }
}

/// Several pods in one process against the emulator's S3: concurrent flushes and
/// compactions every round, one pod that dies right after a fold without cleaning up, and
/// one whose clock runs almost a minute behind. Once everything settles, every use recorded
/// anywhere is counted exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_use_counts_exactly_once_across_pods() {
    let settings = buckets().await;
    let bucket: Arc<dyn Objects> =
        Arc::new(S3Objects::new(s3_client().await, &settings.state_bucket));
    let now = Arc::new(AtomicI64::new(T0));
    let clock = |skew: i64| -> counters::Clock {
        let now = Arc::clone(&now);
        Arc::new(move || now.load(Ordering::SeqCst) + skew)
    };
    let make = |name: &str, objects: Arc<dyn Objects>, skew: i64| {
        Arc::new(Counters::new(objects, name.into(), clock(skew), 2))
    };
    let mut pods = vec![
        make("a", Arc::clone(&bucket), 0),
        make("b", Arc::clone(&bucket), 0),
        // Just within the lag: shards stamped exactly `now - lag` may be folded by another
        // pod before they land (docs/stores.md#lock-free-counters folds at `<= now - lag`), and one that
        // lands after the fold, below the watermark, is never read again.
        make("behind", Arc::clone(&bucket), -59_000),
        make(
            "doomed",
            Arc::new(DiesBeforeCleanup(Arc::clone(&bucket))),
            0,
        ),
    ];
    let tenants = [tenant("acme"), tenant("globex")];
    let mut expected: HashMap<(String, String), u64> = HashMap::new();
    let mut folds = 0;
    for round in 0..12i64 {
        now.fetch_add(10_000, Ordering::SeqCst);
        for (p, pod) in pods.iter().enumerate() {
            for use_ in 0..(round as usize + p) % 4 + 1 {
                let t = &tenants[(use_ + p) % 2];
                let id = format!("m{}", (round as usize + use_) % 5);
                pod.record(t, &id, T0 + round);
                *expected.entry((t.as_str().into(), id)).or_default() += 1;
            }
        }
        // Every pod flushes and folds at once.
        let mut work = tokio::task::JoinSet::new();
        for pod in &pods {
            for t in tenants.clone() {
                let pod = Arc::clone(pod);
                work.spawn(async move {
                    pod.flush().await.unwrap();
                    match pod.read(&t).await.unwrap().compaction {
                        Some(plan) => pod.compact(plan).await.unwrap(),
                        None => Compacted::Lost,
                    }
                });
            }
        }
        while let Some(done) = work.join_next().await {
            if let Compacted::Folded(_) = done.unwrap() {
                folds += 1;
            }
        }
        if round == 5 {
            pods.pop(); // "doomed" has flushed everything it recorded; it dies now.
        }
    }
    assert!(folds > 0, "the simulation must exercise compaction");
    // Let everything settle: past the lag, every pod folds until nothing is left to fold.
    now.fetch_add(5 * 60_000, Ordering::SeqCst);
    for _ in 0..4 {
        for pod in &pods {
            for t in &tenants {
                pod.flush().await.unwrap();
                if let Some(plan) = pod.read(t).await.unwrap().compaction {
                    pod.compact(plan).await.unwrap();
                }
            }
        }
    }
    let reader = make("reader", Arc::clone(&bucket), 0);
    for t in &tenants {
        let tally = reader.read(t).await.unwrap().tally;
        for id in (0..5).map(|i| format!("m{i}")) {
            let want = expected
                .get(&(t.as_str().into(), id.clone()))
                .copied()
                .unwrap_or(0);
            assert_eq!(
                tally.get(&id).map_or(0, |u| u.access),
                want,
                "{} {id}",
                t.as_str()
            );
        }
    }
}

/// A tiny S3 that answers every PutObject with one status, for the conditional-write
/// outcomes the emulator never produces (409).
async fn s3_answering(status: u16, code: &'static str) -> S3Objects {
    use axum::http::{HeaderMap, StatusCode};
    let app = axum::Router::new().fallback(move |_: HeaderMap| async move {
        (
            StatusCode::from_u16(status).unwrap(),
            [("content-type", "application/xml")],
            format!(
                "<?xml version=\"1.0\"?><Error><Code>{code}</Code><Message>stub</Message></Error>"
            ),
        )
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let config = aws_sdk_s3::config::Builder::new()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .region(aws_sdk_s3::config::Region::new("us-east-1"))
        .endpoint_url(url)
        .credentials_provider(aws_sdk_s3::config::Credentials::new(
            "test", "test", None, None, "stub",
        ))
        .force_path_style(true)
        .retry_config(aws_sdk_s3::config::retry::RetryConfig::disabled())
        .build();
    S3Objects::new(aws_sdk_s3::Client::from_conf(config), "state")
}

#[tokio::test]
async fn lost_races_are_preconditions_and_everything_else_propagates() {
    for (status, code) in [
        (412, "PreconditionFailed"),
        (409, "ConditionalRequestConflict"),
    ] {
        let s3 = s3_answering(status, code).await;
        for condition in [Condition::IfMatch("\"1\""), Condition::IfAbsent] {
            assert_eq!(
                s3.put("k", vec![], condition).await,
                Err(ObjectError::Precondition),
                "{status}"
            );
        }
    }
    // The merged file vanished under an If-Match: someone else changed it.
    let gone = s3_answering(404, "NoSuchKey").await;
    assert_eq!(
        gone.put("k", vec![], Condition::IfMatch("\"1\"")).await,
        Err(ObjectError::Precondition)
    );
    // A 500 must never look like a lost race.
    let broken = s3_answering(500, "InternalError").await;
    let err = broken
        .put("k", vec![], Condition::IfAbsent)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ObjectError::Failed { ref cause, .. } if cause.contains("InternalError")),
        "{err:?}"
    );
    assert!(
        broken
            .get("k")
            .await
            .unwrap_err()
            .to_string()
            .contains("InternalError")
    );
}

/// A `remember` whose request is dropped at any point lands in both the vector index and
/// the recency index, or in neither: what recall finds, list shows.
#[tokio::test]
async fn a_remember_dropped_midway_lands_whole_or_not_at_all() {
    let store = fresh().await;
    let (acme, everyone) = (tenant("acme"), seen_from(None));
    for (i, wait_us) in [0u64, 100, 300, 600, 1_000, 2_000, 4_000, 8_000, 16_000]
        .into_iter()
        .enumerate()
    {
        let m = note(
            &format!("dropped request number {i}"),
            T0 + i as i64,
            Scope::Project,
            None,
        );
        let vector = direction(i % 8, 0.1 * i as f32);
        let writing = store.remember(&acme, &everyone, m, &vector, RULE);
        let _ = tokio::time::timeout(Duration::from_micros(wait_us), writing).await;
    }
    // One not dropped, so the sets below are never empty however slow the machine is.
    let kept = note(
        "a request that was not dropped",
        T0 + 20,
        Scope::Project,
        None,
    );
    let kept = store_one(&store, "acme", kept, &direction(3, 0.5)).await;
    // What was started finishes on its own; shutdown would wait for it the same way.
    drop(store.writes.write().await);
    let listed: std::collections::BTreeSet<String> =
        (store.list(&acme, &everyone, None, None, 50).await)
            .unwrap()
            .into_iter()
            .map(|m| m.id)
            .collect();
    let mut recalled = std::collections::BTreeSet::new();
    for axis in 0..8 {
        for hit in suite::nearest(&store, &acme, &everyone, &direction(axis, 0.0), 30)
            .await
            .unwrap()
        {
            recalled.insert(hit.memory.id.clone());
        }
    }
    assert_eq!(listed, recalled);
    assert!(listed.contains(&kept.id));
}

/// Shutdown's flush stops the timer first, then writes every tenant's counts.
#[tokio::test]
async fn the_final_flush_stops_the_timer_and_writes_every_tenant() {
    let mut settings = buckets().await;
    settings.flush_every = Duration::from_millis(50);
    let store = S3Store::open(&settings, &suite::model(WIDTH as usize)).await;
    let everyone = seen_from(None);
    let mut stored = Vec::new();
    for (i, who) in ["acme", "globex", "initech"].into_iter().enumerate() {
        let m = note(&format!("a fact of {who}"), T0, Scope::Project, None);
        stored.push((who, store_one(&store, who, m, &direction(i, 0.0)).await));
    }
    for (who, m) in &stored {
        store
            .record_access(&tenant(who), &everyone, &[m], T0 + 1)
            .await
            .unwrap();
    }
    store.flush().await.unwrap();
    let shards = |who: &str| {
        let objects = Arc::clone(&store.objects);
        let prefix = format!("stats/{who}/shard/");
        async move { objects.list(&prefix, None, 100).await.unwrap().len() }
    };
    for (who, _) in &stored {
        assert_eq!(shards(who).await, 1, "{who}");
    }
    // No timer is left to write what is counted after the final flush.
    assert!(lock(&store.flusher.0).is_none(), "the timer was stopped");
    store
        .record_access(&tenant("acme"), &everyone, &[&stored[0].1], T0 + 2)
        .await
        .unwrap();
    assert_eq!(shards("acme").await, 1);
}

/// An emulator of one test's own, on its own port, so that the faults it is told to
/// inject reach no other test: the one `scripts/with-aws.sh` started (`AWS_EMULATOR`, or
/// this project's), run from the same virtualenv.
struct OwnEmulator {
    child: std::process::Child,
    url: String,
}

impl OwnEmulator {
    fn start() -> OwnEmulator {
        use std::io::BufRead;
        require_emulator();
        let root = env!("CARGO_MANIFEST_DIR");
        let script = std::env::var("AWS_EMULATOR")
            .unwrap_or_else(|_| format!("{root}/tests/support/aws_emulator.py"));
        let mut child = std::process::Command::new(format!("{root}/.venv-aws/bin/python"))
            .args([&script, "--host", "127.0.0.1", "--port", "0"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the emulator's virtualenv, made by scripts/aws.sh");
        let stdout = child.stdout.take().unwrap();
        let port = std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find_map(|line| line.strip_prefix("READY ").map(str::to_owned))
            .expect("the emulator said READY");
        OwnEmulator {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }

    /// The next `times` S3 requests of `method` fail with `status` `code`.
    async fn fail(&self, method: &str, status: u16, code: &str, times: u32) {
        let fault = serde_json::json!({"service": "s3", "operation": method,
                                       "status": status, "code": code, "times": times});
        let client = reqwest::Client::new();
        let sent = client
            .post(format!("{}/_fake/faults", self.url))
            .json(&fault);
        sent.send().await.unwrap().error_for_status().unwrap();
    }

    /// An S3 client of this emulator, with the retries every AWS client has.
    async fn s3(&self) -> aws_sdk_s3::Client {
        let config = aws_sdk_s3::config::Builder::from(&sdk().await)
            .endpoint_url(&self.url)
            .force_path_style(true)
            .build();
        aws_sdk_s3::Client::from_conf(config)
    }
}

impl Drop for OwnEmulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A compaction meets a lost conditional write (409 `ConditionalRequestConflict`) and
/// passing 503s on its write and its cleanup: the 409 ends it as a lost race with nothing
/// deleted, the 503s are retried, and every use is still counted exactly once.
#[tokio::test]
async fn counters_survive_a_conflict_and_unavailability_during_compaction() {
    let emulator = OwnEmulator::start();
    let client = emulator.s3().await;
    let bucket = unique("state");
    client.create_bucket().bucket(&bucket).send().await.unwrap();
    let objects: Arc<dyn Objects> = Arc::new(S3Objects::new(client, &bucket));
    let now = Arc::new(AtomicI64::new(T0));
    let clock: counters::Clock = {
        let now = Arc::clone(&now);
        Arc::new(move || now.load(Ordering::SeqCst))
    };
    let pod = Counters::new(objects, "a".into(), clock, 2);
    let acme = tenant("acme");
    for round in 0..4 {
        now.fetch_add(10_000, Ordering::SeqCst);
        pod.record_uses(&acme, "m1", round + 1, T0 + round as i64);
        pod.flush().await.unwrap();
    }
    let total = |reading: &counters::Reading| reading.tally.get("m1").map_or(0, |u| u.access);
    now.fetch_add(2 * 60_000, Ordering::SeqCst);
    let plan = (pod.read(&acme).await.unwrap().compaction).expect("four old shards to fold");
    emulator
        .fail("PUT", 409, "ConditionalRequestConflict", 1)
        .await;
    assert!(matches!(pod.compact(plan).await.unwrap(), Compacted::Lost));
    let reading = pod.read(&acme).await.unwrap();
    assert_eq!(total(&reading), 1 + 2 + 3 + 4);
    let plan = reading
        .compaction
        .expect("the shards are still there to fold");
    emulator.fail("PUT", 503, "SlowDown", 2).await;
    // DeleteObjects, a POST.
    emulator.fail("POST", 503, "SlowDown", 2).await;
    assert!(matches!(
        pod.compact(plan).await.unwrap(),
        Compacted::Folded(4)
    ));
    let reading = pod.read(&acme).await.unwrap();
    assert_eq!(total(&reading), 10);
    assert!(
        reading.compaction.is_none(),
        "the folded shards were deleted"
    );
}
