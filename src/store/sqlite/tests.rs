//! The SQLite store: the shared suite, and what only a file shared by processes does.

use std::collections::HashMap;
use std::sync::Arc;

use crate::memory::Scope;
use crate::search::VectorHome;
use crate::search::cache::Indexing;
use crate::store::MemoryStore;
use crate::store::suite::{self, T0, direction, note, seen_from, store_one, tenant};

const IN_MEMORY: &Indexing = &Indexing::IN_MEMORY;

/// A store in a new directory, whose indexes keep every exact vector in a mapped file.
fn fresh() -> super::SqliteStore {
    let dir = tempfile::tempdir().unwrap();
    let mapped = Indexing {
        vectors: VectorHome::Files {
            dir: dir.path().to_owned(),
            chosen: true,
        },
        map_from: 0,
        ..Indexing::IN_MEMORY
    };
    let store = super::SqliteStore::open(
        &dir.path().join("nested/memory.db"),
        &suite::model(8),
        &mapped,
    )
    .unwrap();
    // Kept: the store's file and its vector files live in it.
    std::mem::forget(dir);
    store
}

/// The suite runs with every exact vector in a mapped file (`fresh`); the file is
/// counted apart from the budget, the heap holds none of them, and a directory the
/// operator named that cannot hold a file refuses the start by its variable.
#[tokio::test]
async fn exact_vectors_go_to_a_mapped_file_or_the_start_is_refused() {
    // One memory stored and found, exactly; what the store's indexes then hold.
    async fn one_found(store: &super::SqliteStore) -> crate::search::cache::Usage {
        let fact = note("one", T0, Scope::Project, None);
        store_one(store, "acme", fact, &direction(0, 0.0)).await;
        let query = crate::search::Query {
            vector: &direction(0, 0.0),
            terms: &[],
            k: 1,
        };
        let (acme, everyone) = (tenant("acme"), seen_from(None));
        let found = store.search(&acme, &everyone, &query).await.unwrap();
        assert_eq!(found.nearest[0].similarity, 1.0);
        store.index_usage().unwrap()
    }
    let mapped = one_found(&fresh()).await;
    assert!(mapped.mapped >= 8 * 4, "{mapped:?}");
    let dir = tempfile::tempdir().unwrap();
    let heap = super::SqliteStore::open(&dir.path().join("m.db"), &suite::model(8), IN_MEMORY);
    let on_heap = one_found(&heap.unwrap()).await;
    assert_eq!(on_heap.mapped, 0);
    // Eight values in a file: the index weighs only their 8-bit copy and the rest.
    assert!(mapped.bytes < on_heap.bytes, "{mapped:?} {on_heap:?}");

    let unusable = Indexing {
        vectors: VectorHome::Files {
            dir: "/nonexistent/vectors".into(),
            chosen: true,
        },
        ..Indexing::IN_MEMORY
    };
    let refused = super::SqliteStore::open(&dir.path().join("n.db"), &suite::model(8), &unusable)
        .err()
        .unwrap();
    assert!(
        refused.to_string().starts_with("INDEX_VECTORS_DIR"),
        "{refused}"
    );
}

#[tokio::test]
async fn the_shared_suite() {
    suite::run(|| async { fresh() }).await;
    suite::run_keywords(|| async { fresh() }).await;
    suite::run_atomic(|| async { fresh() }).await;
}

#[tokio::test]
async fn memories_move_out_and_in_whole() {
    suite::run_portable(|| async { fresh() }).await;
}

#[tokio::test]
async fn the_file_keeps_to_the_model_it_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    suite::run_model_record(|model| {
        let path = path.clone();
        async move { super::SqliteStore::open(&path, &model, IN_MEMORY) }
    })
    .await;
}

#[tokio::test]
async fn a_model_calibration_is_recorded_beside_its_model() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    suite::run_recorded_fit(|model| {
        let path = path.clone();
        async move { super::SqliteStore::open(&path, &model, IN_MEMORY) }
    })
    .await;
}

#[tokio::test]
async fn the_file_is_reembedded_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    suite::run_reembed(
        |model| {
            let path = path.clone();
            async move { super::SqliteStore::open(&path, &model, IN_MEMORY) }
        },
        || {
            let path = path.clone();
            async move {
                let run = super::reembed::Reembedder::open(&path).unwrap();
                Box::new(run) as Box<dyn crate::store::reembed::Reembedding>
            }
        },
        true,
    )
    .await;
}

#[test]
fn reopening_keeps_memories_and_refuses_another_width() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = super::SqliteStore::open(&path, &suite::model(8), IN_MEMORY).unwrap();
        let m = note("kept", T0, Scope::Project, None);
        store_one(&store, "acme", m, &direction(0, 0.0)).await;
    });
    let store = super::SqliteStore::open(&path, &suite::model(8), IN_MEMORY).unwrap();
    let listed = rt
        .block_on(store.list(&tenant("acme"), &seen_from(None), None, None, 5))
        .unwrap();
    assert_eq!(listed[0].content, "kept");
    let reopen = || {
        super::SqliteStore::open(&path, &suite::model(16), IN_MEMORY)
            .err()
            .unwrap()
            .to_string()
    };
    let err = reopen();
    assert!(err.contains("8d") && err.contains("16d"), "{err}");
    // A file from before models were recorded is still held to its vectors' width.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute("DELETE FROM store_meta", []).unwrap();
    let err = reopen();
    assert!(
        err.contains("8-dimensional") && err.contains("EMBEDDING_DIM is 16"),
        "{err}"
    );
}

/// Acme's five memories nearest to the first direction, as everyone sees them.
async fn near(store: &super::SqliteStore) -> Vec<crate::memory::Hit> {
    let everyone = seen_from(None);
    suite::nearest(store, &tenant("acme"), &everyone, &direction(0, 0.0), 5)
        .await
        .unwrap()
}

async fn contents_near(store: &super::SqliteStore) -> Vec<String> {
    (near(store).await.into_iter())
        .map(|h| h.memory.content.clone())
        .collect()
}

async fn words(store: &super::SqliteStore, query: &str) -> usize {
    let terms = crate::search::query_terms(query);
    let found = suite::keyword_hits(
        store,
        &tenant("acme"),
        &seen_from(None),
        &terms,
        &direction(0, 0.0),
        5,
    )
    .await
    .unwrap();
    found.len()
}

/// Two processes sharing one file each keep an index in memory: a write by either is
/// found, and a forget by either is gone, for both.
#[tokio::test]
async fn two_processes_sharing_a_file_see_each_others_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let (a, b) = (
        super::SqliteStore::open(&path, &suite::model(8), IN_MEMORY).unwrap(),
        super::SqliteStore::open(&path, &suite::model(8), IN_MEMORY).unwrap(),
    );
    store_one(
        &a,
        "acme",
        note("first", T0, Scope::Project, None),
        &direction(0, 0.0),
    )
    .await;
    assert_eq!(contents_near(&a).await, ["first"]);
    assert_eq!(contents_near(&b).await, ["first"]);
    let second = store_one(
        &b,
        "acme",
        note("second", T0 + 1, Scope::Project, None),
        &direction(0, 0.1),
    )
    .await;
    assert_eq!(contents_near(&a).await.len(), 2, "a sees b's write");
    assert!(
        a.delete(&tenant("acme"), &seen_from(None), &second.id)
            .await
            .unwrap()
    );
    assert_eq!(contents_near(&b).await, ["first"], "b sees a's forget");
    assert_eq!(words(&a, "second").await + words(&b, "second").await, 0);
    assert_eq!(words(&b, "first").await, 1);
}

/// A tenant's version row goes with its last memory, whichever process removes it, and
/// its next row starts past every version it had: a process whose index shows the
/// tenant's past finds its present.
#[tokio::test]
async fn a_tenants_bookkeeping_goes_with_its_last_memory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let (a, b) = (
        super::SqliteStore::open(&path, &suite::model(8), IN_MEMORY).unwrap(),
        super::SqliteStore::open(&path, &suite::model(8), IN_MEMORY).unwrap(),
    );
    let first = note("redis runs on 6379", T0, Scope::Project, None);
    let first = store_one(&a, "acme", first, &direction(0, 0.0)).await;
    assert_eq!(contents_near(&a).await, ["redis runs on 6379"]);
    assert!(
        b.delete(&tenant("acme"), &seen_from(None), &first.id)
            .await
            .unwrap()
    );
    let rows = |table: &str| -> i64 {
        super::lock(&b.conn)
            .unwrap()
            .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(
        (rows("memory_versions"), rows("memory_uses")),
        (0, 0),
        "the tenant's bookkeeping stays"
    );
    // The same number of writes again from the other process: with versions counted
    // from the start, this process's index would show the tenant as it is now.
    let second = note("valkey runs on 6380", T0 + 1, Scope::Project, None);
    store_one(&b, "acme", second, &direction(0, 0.0)).await;
    assert_eq!(contents_near(&a).await, ["valkey runs on 6380"]);
    assert_eq!(words(&a, "redis").await, 0);
}

async fn by_content(store: &super::SqliteStore) -> HashMap<String, Arc<crate::memory::Memory>> {
    let hits = near(store).await;
    (hits.into_iter())
        .map(|h| (h.memory.content.clone(), h.memory))
        .collect()
}

/// Another process's recalls change only counts: this process reads them again, and
/// keeps its index (every memory it did not see used is the very same one).
#[tokio::test]
async fn another_process_counting_uses_does_not_rebuild_this_ones_index() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let (a, b) = (
        super::SqliteStore::open(&path, &suite::model(8), IN_MEMORY).unwrap(),
        super::SqliteStore::open(&path, &suite::model(8), IN_MEMORY).unwrap(),
    );
    let (acme, everyone) = (tenant("acme"), seen_from(None));
    let used = store_one(
        &a,
        "acme",
        note("used", T0, Scope::Project, None),
        &direction(0, 0.0),
    )
    .await;
    store_one(
        &a,
        "acme",
        note("unused", T0 + 1, Scope::Project, None),
        &direction(1, 0.0),
    )
    .await;
    let before = by_content(&a).await;
    for at in 0..3 {
        b.record_access(&acme, &everyone, &[&used], T0 + 10 + at)
            .await
            .unwrap();
    }
    let after = by_content(&a).await;
    assert_eq!(
        (after["used"].access_count, after["used"].last_accessed_at),
        (3, Some(T0 + 12))
    );
    assert!(
        Arc::ptr_eq(&before["unused"], &after["unused"]),
        "the index was rebuilt for a change of counts"
    );
    // A's own count lands once, on top of B's; B reads it once A has written it.
    a.record_access(&acme, &everyone, &[&used], T0 + 20)
        .await
        .unwrap();
    assert_eq!(by_content(&a).await["used"].access_count, 4);
    a.flush().await.unwrap();
    assert_eq!(by_content(&b).await["used"].access_count, 4);
}

fn counts(memory: &crate::memory::Memory) -> (u64, Option<i64>) {
    (memory.access_count, memory.last_accessed_at)
}

/// A recall's uses wait in the process that counted them (written behind, `uses.rs`):
/// its own searches and lists show them at once, another process once they are
/// written, and another process's counts and writes meanwhile neither hide them nor
/// count them twice.
#[tokio::test]
async fn uses_are_written_behind_and_add_up_across_processes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    // No timer writes while the test looks.
    let open = || {
        let hour = std::time::Duration::from_secs(3600);
        super::SqliteStore::open_writing_uses(&path, &suite::model(8), IN_MEMORY, hour)
    };
    let (a, b) = (open().unwrap(), open().unwrap());
    let (acme, everyone) = (tenant("acme"), seen_from(None));
    let used = store_one(
        &a,
        "acme",
        note("used", T0, Scope::Project, None),
        &direction(0, 0.0),
    )
    .await;
    // Both hold an index, so both count behind.
    by_content(&a).await;
    by_content(&b).await;
    a.record_access(&acme, &everyone, &[&used], T0 + 10)
        .await
        .unwrap();
    assert_eq!(counts(&by_content(&a).await["used"]), (1, Some(T0 + 10)));
    assert_eq!(
        counts(&by_content(&b).await["used"]),
        (0, None),
        "not yet written"
    );

    // B counts and writes while A's count waits: A reads B's and keeps its own.
    b.record_access(&acme, &everyone, &[&used], T0 + 20)
        .await
        .unwrap();
    b.flush().await.unwrap();
    assert_eq!(counts(&by_content(&a).await["used"]), (2, Some(T0 + 20)));

    // B stores a memory: A builds its index again from the file, its count still on top.
    store_one(
        &b,
        "acme",
        note("new", T0 + 1, Scope::Project, None),
        &direction(1, 0.0),
    )
    .await;
    a.record_access(&acme, &everyone, &[&used], T0 + 30)
        .await
        .unwrap();
    let rebuilt = by_content(&a).await;
    assert!(rebuilt.contains_key("new"));
    assert_eq!(counts(&rebuilt["used"]), (3, Some(T0 + 30)));

    // A lists: its counts are written first, and then they are the file's.
    let listed = a.list(&acme, &everyone, None, None, 5).await.unwrap();
    let listed = listed.iter().find(|m| m.id == used.id).unwrap();
    assert_eq!(counts(listed), (3, Some(T0 + 30)));
    assert_eq!(counts(&by_content(&b).await["used"]), (3, Some(T0 + 30)));
    assert_eq!(counts(&by_content(&a).await["used"]), (3, Some(T0 + 30)));
}

/// Waiting counts reach the file by themselves within about a second (`uses::EVERY`),
/// and a process that dies before then loses at most those counts, never a memory.
#[tokio::test]
async fn waiting_uses_are_written_by_the_timer_and_a_crash_loses_only_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let open = || super::SqliteStore::open(&path, &suite::model(8), IN_MEMORY).unwrap();
    let (a, b) = (open(), open());
    let (acme, everyone) = (tenant("acme"), seen_from(None));
    let used = store_one(
        &a,
        "acme",
        note("used", T0, Scope::Project, None),
        &direction(0, 0.0),
    )
    .await;
    by_content(&a).await;
    a.record_access(&acme, &everyone, &[&used], T0 + 10)
        .await
        .unwrap();
    let mut seen = 0;
    for _ in 0..100 {
        seen = by_content(&b).await["used"].access_count;
        if seen == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(seen, 1, "the timer never wrote the waiting count");

    // A process killed with a count waiting: no flush, no drop.
    a.record_access(&acme, &everyone, &[&used], T0 + 20)
        .await
        .unwrap();
    std::mem::forget(a);
    let reopened = open();
    let after = by_content(&reopened).await;
    assert_eq!(after.len(), 1, "the memory is kept");
    assert!(after["used"].access_count <= 2);
}

/// The triggers keep the names they were first created with: a file that has them gets
/// them again, with this release's bodies, and not a second set.
#[test]
fn version_triggers_keep_their_names() {
    let sql = super::schema::version_triggers();
    for name in [
        "memories_inserted_version",
        "memories_deleted_version",
        "memories_updated_version",
        "memory_uses_inserted_version",
        "memory_uses_updated_version",
        "memory_uses_deleted_version",
    ] {
        assert!(sql.contains(&format!("EXISTS {name};")), "{name}");
        assert!(sql.contains(&format!("TRIGGER {name} AFTER")), "{name}");
    }
    assert_eq!(sql.matches("CREATE TRIGGER").count(), 6);
    assert_eq!(sql.matches("DROP TRIGGER").count(), 6);
}

/// Two processes opening a file from before keyword recall at the same moment both
/// start: one adds the column, the other finds it.
#[test]
fn two_processes_opening_an_old_file_at_once_both_start() {
    for round in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("old-{round}.db"));
        old_file(&path);
        let opened: Vec<_> = (0..2)
            .map(|_| {
                let path = path.clone();
                std::thread::spawn(move || {
                    super::SqliteStore::open(&path, &suite::model(8), IN_MEMORY).map(|_| ())
                })
            })
            .collect();
        for opening in opened {
            let result = opening.join().unwrap();
            assert!(result.is_ok(), "{:?}", result.err().map(|e| e.to_string()));
        }
    }
}

/// A row an older release let count past `MAX_USES` (an import of i64::MAX) still lists and
/// recalls, at `MAX_USES`, once uses are counted beside it: the sum no longer becomes a REAL
/// the row reader refuses.
#[tokio::test]
async fn a_count_past_the_most_uses_reads_as_the_most_once_more_are_counted() {
    use crate::memory::MAX_USES;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    let store = super::SqliteStore::open(&path, &suite::model(8), IN_MEMORY).unwrap();
    let (acme, everyone) = (tenant("acme"), seen_from(None));
    let m = store_one(
        &store,
        "acme",
        note("use pnpm", T0, Scope::Project, None),
        &direction(0, 0.0),
    )
    .await;
    super::lock(&store.conn)
        .unwrap()
        .execute(
            "UPDATE memories SET access_count = ?2 WHERE id = ?1",
            rusqlite::params![m.id, i64::MAX],
        )
        .unwrap();
    for at in [T0 + 10, T0 + 20] {
        store
            .record_access(&acme, &everyone, &[&m], at)
            .await
            .unwrap();
    }
    store.flush().await.unwrap();
    let listed = store.list(&acme, &everyone, None, None, 5).await.unwrap();
    assert_eq!(listed[0].access_count, MAX_USES);
    let reopened = super::SqliteStore::open(&path, &suite::model(8), IN_MEMORY).unwrap();
    let hits = suite::nearest(&reopened, &acme, &everyone, &direction(0, 0.0), 1)
        .await
        .unwrap();
    assert_eq!(hits[0].memory.access_count, MAX_USES);
}

/// Uses counted in the row (as older releases do) add to those counted now, a reopened
/// file's index reads the same, and the uses leave with their memory.
#[tokio::test]
async fn counts_from_an_older_release_add_up_and_leave_with_the_memory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    let store = super::SqliteStore::open(&path, &suite::model(8), IN_MEMORY).unwrap();
    let (acme, everyone) = (tenant("acme"), seen_from(None));
    let m = store_one(
        &store,
        "acme",
        note("use pnpm", T0, Scope::Project, None),
        &direction(0, 0.0),
    )
    .await;
    super::lock(&store.conn)
        .unwrap()
        .execute(
            "UPDATE memories SET access_count = access_count + 2, last_accessed_at = ?2 \
             WHERE id = ?1",
            rusqlite::params![m.id, T0 + 50],
        )
        .unwrap();
    store
        .record_access(&acme, &everyone, &[&m], T0 + 10)
        .await
        .unwrap();
    store
        .record_access(&acme, &everyone, &[&m], T0 + 20)
        .await
        .unwrap();
    let listed = store.list(&acme, &everyone, None, None, 5).await.unwrap();
    assert_eq!(
        (listed[0].access_count, listed[0].last_accessed_at),
        (4, Some(T0 + 50))
    );
    let reopened = super::SqliteStore::open(&path, &suite::model(8), IN_MEMORY).unwrap();
    let hits = suite::nearest(&reopened, &acme, &everyone, &direction(0, 0.0), 1)
        .await
        .unwrap();
    assert_eq!(
        (hits[0].memory.access_count, hits[0].memory.last_accessed_at),
        (4, Some(T0 + 50))
    );
    assert!(reopened.delete(&acme, &everyone, &m.id).await.unwrap());
    let uses: i64 = super::lock(&store.conn)
        .unwrap()
        .query_row("SELECT count(*) FROM memory_uses", [], |r| r.get(0))
        .unwrap();
    assert_eq!(uses, 0);
}

/// A file as the release before keyword recall left it, with one memory.
fn old_file(path: &std::path::Path) {
    let conn = rusqlite::Connection::open(path).unwrap();
    // The previous release's table, exactly.
    conn.execute_batch(
        "CREATE TABLE memories (
               tenant_id TEXT NOT NULL, id TEXT NOT NULL, content TEXT NOT NULL,
               memory_type TEXT NOT NULL, category TEXT, tags TEXT NOT NULL DEFAULT '[]',
               created_at INTEGER NOT NULL, scope TEXT NOT NULL DEFAULT 'project',
               conversation TEXT, trust_base REAL NOT NULL DEFAULT 1,
               embedding BLOB NOT NULL, access_count INTEGER NOT NULL DEFAULT 0,
               last_accessed_at INTEGER, PRIMARY KEY (tenant_id, id)) WITHOUT ROWID;",
    )
    .unwrap();
    conn.execute(
        "INSERT INTO memories (tenant_id, id, content, memory_type, created_at, embedding) \
             VALUES ('acme', ?1, 'the cache is redis 7 on port 6380', 'project', ?2, ?3)",
        rusqlite::params![
            crate::memory::new_id(T0),
            T0,
            super::rows::to_blob(&direction(0, 0.0))
        ],
    )
    .unwrap();
}

/// A file written before keyword recall existed gets its words at the next boot.
#[tokio::test]
async fn a_file_from_before_keyword_recall_is_indexed_when_opened() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    old_file(&path);
    let store = super::SqliteStore::open(&path, &suite::model(8), IN_MEMORY).unwrap();
    let found = suite::keyword_hits(
        &store,
        &tenant("acme"),
        &seen_from(None),
        &crate::search::query_terms("redis"),
        &direction(1, 0.0),
        5,
    )
    .await
    .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(
        found[0].hit.memory.content,
        "the cache is redis 7 on port 6380"
    );
    // Indexed once: opening again adds nothing twice.
    drop(store);
    let again = super::SqliteStore::open(&path, &suite::model(8), IN_MEMORY).unwrap();
    let stored = store_one(
        &again,
        "acme",
        note("redis backups run hourly", T0 + 1, Scope::Project, None),
        &direction(2, 0.0),
    )
    .await;
    assert!(
        again
            .delete(&tenant("acme"), &seen_from(None), &stored.id)
            .await
            .unwrap()
    );
    let after = suite::keyword_hits(
        &again,
        &tenant("acme"),
        &seen_from(None),
        &crate::search::query_terms("redis"),
        &direction(1, 0.0),
        5,
    )
    .await
    .unwrap();
    assert_eq!(
        after.len(),
        1,
        "the forgotten memory's words went with it: {after:?}"
    );
}
