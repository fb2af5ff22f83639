//! The counter properties of docs/stores.md#lock-free-counters on an in-memory bucket whose conditional
//! writes behave as S3's do, and whose failures can be injected (S3 itself, through the
//! emulator, is exercised in `tests.rs`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};

use async_trait::async_trait;

use super::*;
use crate::store::s3::objects::Object;

const T0: i64 = 1_780_000_000_000;

/// A bucket in memory: ETags are version numbers, listing is in byte order.
#[derive(Default)]
struct Bucket {
    objects: Mutex<BTreeMap<String, (Vec<u8>, u64)>>,
    version: AtomicI64,
    /// Answer every conditional put with this instead of applying it.
    conditional_put_fails: Mutex<Option<ObjectError>>,
    deletes_fail: Mutex<bool>,
    puts_fail: Mutex<bool>,
    /// Fail only the puts of keys under this prefix.
    puts_fail_under: Mutex<Option<String>>,
    deleted: Mutex<Vec<String>>,
}

#[async_trait]
impl Objects for Bucket {
    async fn get(&self, key: &str) -> Result<Option<Object>, ObjectError> {
        Ok(lock(&self.objects).get(key).map(|(body, v)| Object {
            body: body.clone(),
            etag: format!("\"{v}\""),
        }))
    }

    async fn put(
        &self,
        key: &str,
        body: Vec<u8>,
        condition: Condition<'_>,
    ) -> Result<(), ObjectError> {
        let failing = lock(&self.puts_fail_under)
            .as_ref()
            .is_some_and(|prefix| key.starts_with(prefix.as_str()));
        if *lock(&self.puts_fail) || failing {
            return Err(super::super::objects::failed("PutObject", "InternalError"));
        }
        if condition != Condition::Always
            && let Some(e) = lock(&self.conditional_put_fails).clone()
        {
            return Err(e);
        }
        let mut objects = lock(&self.objects);
        let current = objects.get(key).map(|(_, v)| format!("\"{v}\""));
        match (condition, current) {
            (Condition::IfAbsent, Some(_)) => return Err(ObjectError::Precondition),
            (Condition::IfMatch(_), None) => return Err(ObjectError::Precondition),
            (Condition::IfMatch(want), Some(have)) if want != have => {
                return Err(ObjectError::Precondition);
            }
            _ => {}
        }
        let v = self.version.fetch_add(1, Ordering::SeqCst) as u64;
        objects.insert(key.to_owned(), (body, v));
        Ok(())
    }

    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, ObjectError> {
        Ok(lock(&self.objects)
            .keys()
            .filter(|k| k.starts_with(prefix) && start_after.is_none_or(|a| k.as_str() > a))
            .take(limit)
            .cloned()
            .collect())
    }

    async fn delete(&self, keys: &[String]) -> Result<(), ObjectError> {
        if *lock(&self.deletes_fail) {
            return Err(super::super::objects::failed(
                "DeleteObjects",
                "could not remove 1 of 1 keys",
            ));
        }
        let mut objects = lock(&self.objects);
        for k in keys {
            objects.remove(k);
            lock(&self.deleted).push(k.clone());
        }
        Ok(())
    }
}

impl Bucket {
    fn shards(&self, tenant: &str) -> Vec<String> {
        lock(&self.objects)
            .keys()
            .filter(|k| k.starts_with(&shard_prefix(tenant)))
            .cloned()
            .collect()
    }

    fn raw_put(&self, key: &str, body: &str) {
        let v = self.version.fetch_add(1, Ordering::SeqCst) as u64;
        lock(&self.objects).insert(key.to_owned(), (body.as_bytes().to_vec(), v));
    }
}

/// A clock the test moves by hand.
#[derive(Clone)]
struct Time(Arc<AtomicI64>);

impl Time {
    fn new() -> Self {
        Time(Arc::new(AtomicI64::new(T0)))
    }
    fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
    fn clock(&self, skew: i64) -> Clock {
        let now = Arc::clone(&self.0);
        Arc::new(move || now.load(Ordering::SeqCst) + skew)
    }
}

fn pod(bucket: &Arc<Bucket>, name: &str, time: &Time, threshold: usize) -> Arc<Counters> {
    Arc::new(Counters::new(
        Arc::clone(bucket) as Arc<dyn Objects>,
        name.into(),
        time.clock(0),
        threshold,
    ))
}

fn acme() -> Tenant {
    Tenant::new_unchecked("acme".into())
}

fn access(tally: &Tally, id: &str) -> u64 {
    tally.get(id).map_or(0, |u| u.access)
}

/// Reads and, if a compaction is due, runs it to the end.
async fn settle(counters: &Counters, tenant: &Tenant) -> Option<Compacted> {
    let plan = counters.read(tenant).await.unwrap().compaction?;
    Some(counters.compact(plan).await.unwrap())
}

#[tokio::test]
async fn concurrent_pods_sum_even_in_the_same_millisecond() {
    let bucket = Arc::new(Bucket::default());
    let time = Time::new();
    let pods: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|p| pod(&bucket, p, &time, 20))
        .collect();
    for p in &pods {
        p.record(&acme(), "m1", T0);
        p.record(&acme(), "m1", T0);
    }
    futures_util::future::join_all(pods.iter().map(|p| p.flush())).await;
    assert_eq!(bucket.shards("acme").len(), 3);
    let reader = pod(&bucket, "reader", &time, 20);
    let tally = reader.read(&acme()).await.unwrap().tally;
    assert_eq!(access(&tally, "m1"), 6);
}

#[tokio::test]
async fn the_later_time_wins_and_a_pod_sees_its_own_uses_at_once() {
    let bucket = Arc::new(Bucket::default());
    let time = Time::new();
    let a = pod(&bucket, "a", &time, 20);
    let b = pod(&bucket, "b", &time, 20);
    a.record(&acme(), "m1", T0 + 500);
    a.flush().await.unwrap();
    b.record(&acme(), "m1", T0 + 100);
    let seen = b.load(&acme()).await.unwrap();
    assert_eq!(
        seen["m1"],
        Usage {
            access: 2,
            last_at: iso(T0 + 500)
        }
    );
}

#[tokio::test]
async fn compaction_keeps_totals_and_replays_never_double_count() {
    let bucket = Arc::new(Bucket::default());
    let time = Time::new();
    let a = pod(&bucket, "a", &time, 3);
    for i in 0..40 {
        a.record(&acme(), "m1", T0 + i);
        if i % 2 == 0 {
            a.record(&acme(), "m2", T0 + i);
        }
        a.flush().await.unwrap();
        time.advance(1);
    }
    // 40 shards, more than one batch of reads, all count.
    assert_eq!(bucket.shards("acme").len(), 40);
    let before = a.read(&acme()).await.unwrap();
    assert_eq!(
        (access(&before.tally, "m1"), access(&before.tally, "m2")),
        (40, 20)
    );
    // All are younger than the lag: counted, not folded.
    assert!(before.compaction.is_none());

    time.advance(LAG_MS);
    // The cleanup after the fold fails, as if the pod died before deleting.
    *lock(&bucket.deletes_fail) = true;
    assert_eq!(settle(&a, &acme()).await, Some(Compacted::Folded(40)));
    assert_eq!(
        bucket.shards("acme").len(),
        40,
        "the absorbed shards are still there"
    );
    let after = a.read(&acme()).await.unwrap();
    assert_eq!(
        after.tally, before.tally,
        "absorbed shards are not counted again"
    );
    assert!(after.compaction.is_none());

    *lock(&bucket.deletes_fail) = false;
    a.record(&acme(), "m1", T0 + 999_000);
    a.flush().await.unwrap();
    let later = a.read(&acme()).await.unwrap().tally;
    assert_eq!(access(&later, "m1"), 41);
}

#[tokio::test]
async fn the_cas_loser_deletes_nothing() {
    let bucket = Arc::new(Bucket::default());
    let time = Time::new();
    let a = pod(&bucket, "a", &time, 1);
    let b = pod(&bucket, "b", &time, 1);
    for _ in 0..3 {
        a.record(&acme(), "m1", T0);
        a.flush().await.unwrap();
        time.advance(1);
    }
    time.advance(LAG_MS);
    let plan_a = a.read(&acme()).await.unwrap().compaction.unwrap();
    let plan_b = b.read(&acme()).await.unwrap().compaction.unwrap();
    assert_eq!(a.compact(plan_a).await.unwrap(), Compacted::Folded(3));
    // b read merged.json before a replaced it: its If-None-Match write loses.
    assert_eq!(b.compact(plan_b).await.unwrap(), Compacted::Lost);
    assert_eq!(lock(&bucket.deleted).len(), 3, "only the winner deleted");
    assert_eq!(access(&b.read(&acme()).await.unwrap().tally, "m1"), 3);

    // 412 and 409 from S3 both arrive as Precondition: lost quietly, shards kept.
    for _ in 0..3 {
        a.record(&acme(), "m1", T0);
        a.flush().await.unwrap();
    }
    time.advance(LAG_MS);
    *lock(&bucket.conditional_put_fails) = Some(ObjectError::Precondition);
    assert_eq!(settle(&a, &acme()).await, Some(Compacted::Lost));
    assert_eq!(bucket.shards("acme").len(), 3);
    // Anything else is a failure the caller logs, and also leaves the shards.
    *lock(&bucket.conditional_put_fails) =
        Some(super::super::objects::failed("PutObject", "InternalError"));
    let plan = a.read(&acme()).await.unwrap().compaction.unwrap();
    assert!(matches!(
        a.compact(plan).await,
        Err(ObjectError::Failed { .. })
    ));
    assert_eq!(bucket.shards("acme").len(), 3);
    assert_eq!(access(&a.read(&acme()).await.unwrap().tally, "m1"), 6);
}

#[tokio::test]
async fn a_late_shard_above_the_watermark_still_counts() {
    let bucket = Arc::new(Bucket::default());
    let time = Time::new();
    let a = pod(&bucket, "a", &time, 0);
    a.record(&acme(), "m1", T0);
    a.flush().await.unwrap();
    // A slow pod stamps its shard at +65 s but only lands it after a compaction at +118 s.
    let slow_name = format!(
        "{}{}-slow.json",
        shard_prefix("acme"),
        crate::memory::new_id(T0 + 65_000)
    );
    time.advance(118_000);
    a.record(&acme(), "m2", T0 + 118_000);
    a.flush().await.unwrap();
    assert_eq!(settle(&a, &acme()).await, Some(Compacted::Folded(1)));
    bucket.raw_put(
        &slow_name,
        r#"{"m1": {"access": 5, "lastAt": "2026-05-28T20:27:45.000Z"}}"#,
    );
    let tally = a.read(&acme()).await.unwrap().tally;
    assert_eq!((access(&tally, "m1"), access(&tally, "m2")), (6, 1));
}

#[tokio::test]
async fn tenants_never_mix_and_bad_entries_are_dropped_alone() {
    let bucket = Arc::new(Bucket::default());
    let time = Time::new();
    let a = pod(&bucket, "a", &time, 20);
    a.record(&acme(), "m1", T0);
    a.record(&Tenant::new_unchecked("other".into()), "m1", T0);
    a.flush().await.unwrap();
    bucket.raw_put(
        &format!(
            "{}{}-x.json",
            shard_prefix("acme"),
            crate::memory::new_id(T0)
        ),
        r#"{"m1": {"access": 2, "lastAt": "2026-05-28T20:27:45.000Z"},
            "m2": {"access": 9, "lastAt": "last tuesday"},
            "m3": {"access": "many", "lastAt": "2026-05-28T20:27:45.000Z"}}"#,
    );
    let tally = a.read(&acme()).await.unwrap().tally;
    assert_eq!((access(&tally, "m1"), tally.len()), (3, 1));
    let other = a
        .read(&Tenant::new_unchecked("other".into()))
        .await
        .unwrap()
        .tally;
    assert_eq!(access(&other, "m1"), 1);
}

#[tokio::test]
async fn an_unreadable_shard_or_merged_file_leaves_the_tenant_working() {
    let bucket = Arc::new(Bucket::default());
    let time = Time::new();
    let a = pod(&bucket, "a", &time, 0);
    bucket.raw_put(&merged_key("acme"), "{not json");
    let corrupt = format!(
        "{}{}-x.json",
        shard_prefix("acme"),
        crate::memory::new_id(T0)
    );
    bucket.raw_put(&corrupt, "\u{0}\u{1}garbage");
    a.record(&acme(), "m1", T0 + 1);
    a.flush().await.unwrap();
    let reading = a.read(&acme()).await.unwrap();
    assert_eq!(access(&reading.tally, "m1"), 1);
    assert!(reading.compaction.is_none(), "young shards are not folded");
    time.advance(LAG_MS + 1);
    // The corrupt merged file is replaced through its ETag; the corrupt shard is never folded
    // or deleted.
    assert_eq!(settle(&a, &acme()).await, Some(Compacted::Folded(1)));
    assert!(lock(&bucket.objects).contains_key(&corrupt));
    assert_eq!(access(&a.read(&acme()).await.unwrap().tally, "m1"), 1);
}

#[tokio::test]
async fn the_cache_serves_durable_counts_for_a_minute() {
    let bucket = Arc::new(Bucket::default());
    let time = Time::new();
    let a = pod(&bucket, "a", &time, 20);
    let b = pod(&bucket, "b", &time, 20);
    assert!(a.load(&acme()).await.unwrap().is_empty());
    b.record(&acme(), "m1", T0);
    b.flush().await.unwrap();
    time.advance(CACHE_MS - 1);
    assert!(a.load(&acme()).await.unwrap().is_empty(), "still cached");
    time.advance(1);
    assert_eq!(access(&a.load(&acme()).await.unwrap(), "m1"), 1);
}

#[tokio::test]
async fn a_failed_flush_loses_its_deltas_and_every_other_tenant_is_written() {
    let bucket = Arc::new(Bucket::default());
    let time = Time::new();
    let a = pod(&bucket, "a", &time, 20);
    let tenants = ["acme", "other", "third"].map(|t| Tenant::new_unchecked(t.into()));
    for tenant in &tenants {
        a.record(tenant, "m1", T0);
    }
    *lock(&bucket.puts_fail_under) = Some(shard_prefix("other"));
    let failed = a.flush().await.unwrap_err();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].tenant, "other");
    assert!(matches!(failed[0].error, ObjectError::Failed { .. }));
    *lock(&bucket.puts_fail_under) = None;
    a.flush().await.unwrap();
    for tenant in &tenants {
        let lost = tenant.as_str() == "other";
        assert_eq!(
            access(&a.read(tenant).await.unwrap().tally, "m1"),
            u64::from(!lost)
        );
        // What failed to land is not counted from memory either.
        assert_eq!(
            access(&a.load(tenant).await.unwrap(), "m1"),
            u64::from(!lost)
        );
    }
}

#[tokio::test]
async fn a_pods_own_counts_never_vanish_between_its_flush_and_its_next_read() {
    let bucket = Arc::new(Bucket::default());
    let time = Time::new();
    let a = pod(&bucket, "a", &time, 1);
    let b = pod(&bucket, "b", &time, 1);
    // A durable reading is cached before the uses are counted and flushed.
    assert!(a.load(&acme()).await.unwrap().is_empty());
    for round in 1..=4u64 {
        a.record(&acme(), "m1", T0);
        b.record(&acme(), "m1", T0);
        assert_eq!(access(&a.load(&acme()).await.unwrap(), "m1"), 2 * round - 1);
        a.flush().await.unwrap();
        b.flush().await.unwrap();
        // The cached reading predates both shards: a's own still count, b's wait for
        // the next reading.
        assert_eq!(access(&a.load(&acme()).await.unwrap(), "m1"), 2 * round - 1);
        time.advance(CACHE_MS / 2);
        let now = a.load(&acme()).await.unwrap();
        time.advance(CACHE_MS / 2);
        let fresh = a.load(&acme()).await.unwrap();
        // Whether read again or not, never counted twice; once read again, everything.
        assert!(access(&now, "m1") >= 2 * round - 1 && access(&now, "m1") <= 2 * round);
        assert_eq!(access(&fresh, "m1"), 2 * round, "round {round}");
        // Folded into the merged file as it goes, and still counted once.
        time.advance(LAG_MS);
        settle(&a, &acme()).await;
    }
    assert_eq!(access(&a.load(&acme()).await.unwrap(), "m1"), 8);
    assert_eq!(access(&b.load(&acme()).await.unwrap(), "m1"), 8);
}

#[tokio::test]
async fn load_folds_in_the_background() {
    let bucket = Arc::new(Bucket::default());
    let time = Time::new();
    let a = pod(&bucket, "a", &time, 2);
    for _ in 0..3 {
        a.record(&acme(), "m1", T0);
        a.flush().await.unwrap();
    }
    time.advance(LAG_MS);
    assert_eq!(access(&a.load(&acme()).await.unwrap(), "m1"), 3);
    // Waited for, up to 10 s: the compaction runs on the runtime, whenever it gets a turn.
    for _ in 0..2000 {
        if bucket.shards("acme").is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert!(
        bucket.shards("acme").is_empty(),
        "the compaction ran and cleaned up"
    );
    assert!(lock(&bucket.objects).contains_key(&merged_key("acme")));
}
