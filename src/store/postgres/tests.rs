//! The PostgreSQL store against a real server (TEST_DATABASE_URL, started by `make test`):
//! the shared suite, then what only a shared database can get wrong — concurrent writers,
//! replicas booting together, the v0.8 migration, refusals at boot, dropped connections.

use std::sync::Arc;

use sqlx::Connection;
use sqlx::postgres::PgConnection;

use super::{PoolSettings, PostgresStore};
use crate::memory::{MemoryType, Scope};
use crate::search::VectorHome;
use crate::search::cache::Indexing;
use crate::store::suite::{self, RULE, T0, direction, note, seen_from, store_one, tenant};
use crate::store::{MemoryStore, Remembered};

const SETTINGS: PoolSettings = PoolSettings {
    max_connections: 4,
    statement_timeout_ms: 10_000,
    indexing: Indexing::IN_MEMORY,
};

fn server_url() -> String {
    std::env::var("TEST_DATABASE_URL")
        .expect("TEST_DATABASE_URL is not set: run `make test`, which starts PostgreSQL")
}

/// A fresh, empty database on the test server; returns its URL.
async fn fresh_database() -> String {
    let url = server_url();
    let name = format!(
        "t_{}",
        crate::memory::new_id(crate::memory::now_ms()).to_lowercase()
    );
    let mut admin = PgConnection::connect(&url).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .unwrap();
    let (base, _) = url.rsplit_once('/').unwrap();
    format!("{base}/{name}")
}

/// A store of the tests' model (width 8) on the database at `url`.
async fn opened(url: &str) -> PostgresStore {
    // Every exact vector in a mapped file, as a large tenant's are.
    let mapped = PoolSettings {
        indexing: Indexing {
            vectors: VectorHome::Files {
                dir: std::env::temp_dir(),
                chosen: true,
            },
            map_from: 0,
            ..Indexing::IN_MEMORY
        },
        ..SETTINGS
    };
    PostgresStore::open(url, &suite::model(8), &mapped)
        .await
        .unwrap()
}

async fn fresh() -> PostgresStore {
    opened(&fresh_database().await).await
}

#[tokio::test]
async fn the_shared_suite() {
    suite::run(fresh).await;
    suite::run_keywords(fresh).await;
    suite::run_atomic(fresh).await;
}

#[tokio::test]
async fn memories_move_out_and_in_whole() {
    suite::run_portable(fresh).await;
}

#[tokio::test]
async fn the_database_keeps_to_the_model_it_recorded() {
    let url = fresh_database().await;
    suite::run_model_record(|model| {
        let url = url.clone();
        async move { PostgresStore::open(&url, &model, &SETTINGS).await }
    })
    .await;
}

#[tokio::test]
async fn a_model_calibration_is_recorded_beside_its_model() {
    let url = fresh_database().await;
    suite::run_recorded_fit(|model| {
        let url = url.clone();
        async move { PostgresStore::open(&url, &model, &SETTINGS).await }
    })
    .await;
}

#[tokio::test]
async fn the_database_is_reembedded_in_place() {
    let url = fresh_database().await;
    suite::run_reembed(
        |model| {
            let url = url.clone();
            async move { PostgresStore::open(&url, &model, &SETTINGS).await }
        },
        || {
            let url = url.clone();
            async move {
                let run = super::reembed::Reembedder::open(&url, &SETTINGS)
                    .await
                    .unwrap();
                Box::new(run) as Box<dyn crate::store::reembed::Reembedding>
            }
        },
        true,
    )
    .await;
}

/// The switch locks the model's record against writes of vectors: a `remember` under way
/// waits for it (here, until its statement timeout), and goes through once it is over.
#[tokio::test]
async fn a_write_waits_for_a_reembedding_switch() {
    let url = fresh_database().await;
    let quick = PoolSettings {
        statement_timeout_ms: 500,
        ..SETTINGS
    };
    let store = PostgresStore::open(&url, &suite::model(8), &quick)
        .await
        .unwrap();
    let fact = |content: &str, at| note(content, at, Scope::Project, None);
    store_one(&store, "acme", fact("first", T0), &direction(0, 0.0)).await;
    let mut switch = PgConnection::connect(&url).await.unwrap();
    let mut tx = switch.begin().await.unwrap();
    sqlx::query("LOCK TABLE store_meta IN EXCLUSIVE MODE")
        .execute(&mut *tx)
        .await
        .unwrap();
    let held = store
        .remember(
            &tenant("acme"),
            &seen_from(None),
            fact("second", T0 + 1),
            &direction(1, 0.0),
            RULE,
        )
        .await;
    assert!(
        matches!(held, Err(crate::store::StoreError::TimedOut { .. })),
        "{held:?}"
    );
    tx.rollback().await.unwrap();
    store_one(&store, "acme", fact("second", T0 + 1), &direction(1, 0.0)).await;
}

/// A write holding its tenant's version row when a switch starts (a forget, a sweep) ends,
/// and so does the switch: neither waits for the other in a circle.
#[tokio::test]
async fn a_switch_and_a_write_under_way_both_finish() {
    use crate::store::reembed::{Reembedding, Switched};
    let url = fresh_database().await;
    let store = opened(&url).await;
    let fact = |content: &str, at| note(content, at, Scope::Project, None);
    let kept = store_one(&store, "acme", fact("kept", T0), &direction(0, 0.0)).await;
    for i in 1..8 {
        let content = format!("gone {i}");
        store_one(
            &store,
            "acme",
            fact(&content, T0 + i),
            &direction(i as usize, 0.0),
        )
        .await;
    }
    let run = super::reembed::Reembedder::open(&url, &SETTINGS)
        .await
        .unwrap();
    let wider = crate::memory::Model {
        name: "test:wider".into(),
        dimension: 12,
    };
    run.begin(&wider).await.unwrap();
    let page = run.pending(None, 10).await.unwrap();
    let vectors: Vec<_> = (page.memories.iter())
        .map(|m| (m.key.clone(), vec![0.5; 12]))
        .collect();
    run.stage(&vectors).await.unwrap();
    // A forget as the store makes one, the version row first, then the rows: most of them,
    // so whichever row an update would lock first is likely among them.
    let mut forget = PgConnection::connect(&url).await.unwrap();
    let mut tx = forget.begin().await.unwrap();
    super::versions::lock_version(&mut *tx, "acme")
        .await
        .unwrap();
    let switch = tokio::spawn(async move { run.switch(&wider).await });
    // The write goes on once the switch waits for the version row it holds.
    let mut watch = PgConnection::connect(&url).await.unwrap();
    for _ in 0..1200 {
        let waiting: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_locks WHERE NOT granted")
            .fetch_one(&mut watch)
            .await
            .unwrap();
        if waiting > 0 {
            break;
        }
        assert!(
            !switch.is_finished(),
            "the switch did not wait for the write"
        );
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    sqlx::query("DELETE FROM memories WHERE tenant_id = 'acme' AND id <> $1")
        .bind(&kept.id)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(switch.await.unwrap().unwrap(), Switched::Done);
    let renewed = PostgresStore::open(
        &url,
        &crate::memory::Model {
            name: "test:wider".into(),
            dimension: 12,
        },
        &SETTINGS,
    )
    .await
    .unwrap();
    let found = suite::nearest(&renewed, &tenant("acme"), &seen_from(None), &[0.5; 12], 5)
        .await
        .unwrap();
    let ids: Vec<&str> = found.iter().map(|h| h.memory.id.as_str()).collect();
    assert_eq!(ids, [kept.id.as_str()]);
}

#[tokio::test]
async fn concurrent_identical_remembers_store_one_memory() {
    let url = fresh_database().await;
    let store = Arc::new(opened(&url).await);
    // Separate pools stand for separate replicas.
    let other = Arc::new(opened(&url).await);
    let mut writers = tokio::task::JoinSet::new();
    for i in 0..8 {
        let store = if i % 2 == 0 {
            Arc::clone(&store)
        } else {
            Arc::clone(&other)
        };
        writers.spawn(async move {
            let m = note(
                "the release train leaves on thursdays",
                T0 + i,
                Scope::Project,
                None,
            );
            store
                .remember(
                    &tenant("acme"),
                    &seen_from(None),
                    m,
                    &direction(0, 0.0),
                    RULE,
                )
                .await
                .unwrap()
        });
    }
    let mut stored = 0;
    while let Some(outcome) = writers.join_next().await {
        if matches!(outcome.unwrap(), Remembered::Stored(_, _)) {
            stored += 1;
        }
    }
    assert_eq!(stored, 1);
    let counts = store
        .count_by_type(&tenant("acme"), &seen_from(None))
        .await
        .unwrap();
    assert_eq!(counts.total, 1);
}

#[tokio::test]
async fn replicas_booting_together_create_one_schema_and_both_serve() {
    let url = fresh_database().await;
    let model = suite::model(8);
    let (a, b) = tokio::join!(
        PostgresStore::open(&url, &model, &SETTINGS),
        PostgresStore::open(&url, &model, &SETTINGS)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    store_one(
        &a,
        "acme",
        note("from a", T0, Scope::Project, None),
        &direction(0, 0.0),
    )
    .await;
    store_one(
        &b,
        "acme",
        note("from b", T0 + 1, Scope::Project, None),
        &direction(1, 0.0),
    )
    .await;
    assert_eq!(
        a.count_by_type(&tenant("acme"), &seen_from(None))
            .await
            .unwrap()
            .total,
        2
    );
    // Opening again changes nothing.
    let c = opened(&url).await;
    assert_eq!(
        c.list(&tenant("acme"), &seen_from(None), None, None, 10)
            .await
            .unwrap()
            .len(),
        2
    );
}

#[tokio::test]
async fn stored_vectors_of_another_width_are_refused_untouched() {
    let url = fresh_database().await;
    let store = opened(&url).await;
    store_one(
        &store,
        "acme",
        note("kept", T0, Scope::Project, None),
        &direction(0, 0.0),
    )
    .await;
    let reopen = || async {
        PostgresStore::open(&url, &suite::model(16), &SETTINGS)
            .await
            .err()
            .unwrap()
            .to_string()
    };
    let err = reopen().await;
    assert!(err.contains("8d") && err.contains("16d"), "{err}");
    // A database from before models were recorded is still held to its vectors' width.
    let mut conn = PgConnection::connect(&url).await.unwrap();
    sqlx::query("DELETE FROM store_meta")
        .execute(&mut conn)
        .await
        .unwrap();
    let err = reopen().await;
    assert!(
        err.contains("8-dimensional") && err.contains("EMBEDDING_DIM is 16"),
        "{err}"
    );
    assert!(
        !err.contains("postgres@"),
        "the URL's user must not leak: {err}"
    );
    let again = opened(&url).await;
    assert_eq!(
        again
            .list(&tenant("acme"), &seen_from(None), None, None, 10)
            .await
            .unwrap()[0]
            .content,
        "kept"
    );
}

#[tokio::test]
async fn a_role_that_cannot_create_the_extension_is_told_what_to_run() {
    let url = fresh_database().await;
    let role = format!(
        "r_{}",
        crate::memory::new_id(crate::memory::now_ms()).to_lowercase()
    );
    let mut admin = PgConnection::connect(&url).await.unwrap();
    for statement in [
        format!("CREATE ROLE {role} LOGIN"),
        format!("GRANT CREATE ON SCHEMA public TO {role}"),
    ] {
        sqlx::query(&statement).execute(&mut admin).await.unwrap();
    }
    let limited = url.replacen("postgres@", &format!("{role}@"), 1);
    let err = PostgresStore::open(&limited, &suite::model(8), &SETTINGS)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("CREATE EXTENSION vector") && err.contains("superuser"),
        "{err}"
    );
}

#[tokio::test]
async fn an_unreachable_database_is_named_without_credentials() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let url = format!("postgres://someone:hunter2@{closed}/memories");
    let err = PostgresStore::open(&url, &suite::model(8), &SETTINGS)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains(&format!("{closed}/memories")), "{err}");
    assert!(
        !err.contains("hunter2") && !err.contains("someone"),
        "{err}"
    );
}

#[tokio::test]
async fn a_dropped_connection_is_an_error_and_the_next_request_works() {
    let url = fresh_database().await;
    let store = opened(&url).await;
    let kept = store_one(
        &store,
        "acme",
        note("survives", T0, Scope::Project, None),
        &direction(0, 0.0),
    )
    .await;
    let database = url.rsplit_once('/').unwrap().1.to_owned();
    let mut admin = PgConnection::connect(&server_url()).await.unwrap();
    let mut errors = 0;
    for round in 0..6 {
        if round % 2 == 0 {
            sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()")
                .bind(&database)
                .execute(&mut admin)
                .await
                .unwrap();
        }
        if store
            .list(&tenant("acme"), &seen_from(None), None, None, 10)
            .await
            .is_err()
        {
            errors += 1;
        }
    }
    // However many calls failed, the pool recovers and nothing written is lost.
    assert!(errors < 6);
    let listed = store
        .list(&tenant("acme"), &seen_from(None), None, None, 10)
        .await
        .unwrap();
    assert_eq!(listed, vec![kept]);
}

#[tokio::test]
async fn a_v08_database_is_migrated_with_every_memory_and_its_counters() {
    let url = fresh_database().await;
    let mut db = PgConnection::connect(&url).await.unwrap();
    let metadata = |content: &str, extra: serde_json::Value| {
        let mut m = serde_json::json!({"tenantId": "acme", "memoryType": "pattern", "content": content,
                                       "createdAt": "2026-05-01T10:00:00.000Z", "trustBase": 1});
        m.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        m.to_string()
    };
    let shard =
        r#"{"01JV0000000000000000000001":{"access":2,"lastAt":"2026-06-02T00:00:00.000Z"}}"#;
    let merged = r#"{"counts":{"01JV0000000000000000000001":{"access":3,"lastAt":"2026-06-01T00:00:00.000Z"}},"watermark":"01JV1-pod.json"}"#;
    for statement in [
        "CREATE EXTENSION IF NOT EXISTS vector".to_owned(),
        "CREATE TABLE memories (tenant_id text NOT NULL, id text NOT NULL, embedding vector NOT NULL, \
         metadata jsonb NOT NULL, PRIMARY KEY (tenant_id, id))".to_owned(),
        "CREATE SEQUENCE objects_version".to_owned(),
        "CREATE TABLE objects (key text COLLATE \"C\" PRIMARY KEY, body text NOT NULL, \
         version bigint NOT NULL DEFAULT nextval('objects_version'), updated_at timestamptz NOT NULL DEFAULT now())".to_owned(),
        format!("INSERT INTO memories VALUES ('acme', '01JV0000000000000000000001', '[1,0,0,0,0,0,0,0]', '{}')",
                metadata("use pnpm", serde_json::json!({"category": "convention", "tags": ["node"]}))),
        format!("INSERT INTO memories VALUES ('acme', '01JV0000000000000000000002', '[0,1,0,0,0,0,0,0]', '{}')",
                metadata("thread note", serde_json::json!({"scope": "conversation", "conversation": "chat:1"}))),
        format!("INSERT INTO memories VALUES ('globex', '01JV0000000000000000000003', '[0,0,1,0,0,0,0,0]', '{}')",
                metadata("other tenant", serde_json::json!({"tenantId": "globex", "memoryType": "reference"}))),
        format!("INSERT INTO objects (key, body) VALUES ('stats/acme/merged.json', '{merged}')"),
        format!("INSERT INTO objects (key, body) VALUES ('stats/acme/shard/01JV0-pod.json', '{shard}')"),
        format!("INSERT INTO objects (key, body) VALUES ('stats/acme/shard/01JV2-pod.json', '{shard}')"),
        "INSERT INTO objects (key, body) VALUES ('index/acme/ZZZ#01JV0000000000000000000001#pattern', '')".to_owned(),
    ] {
        sqlx::query(&statement).execute(&mut db).await.unwrap();
    }

    let store = opened(&url).await;
    let acme = store
        .list(&tenant("acme"), &seen_from(Some("chat:1")), None, None, 10)
        .await
        .unwrap();
    assert_eq!(acme.len(), 2);
    let pnpm = acme.iter().find(|m| m.content == "use pnpm").unwrap();
    assert_eq!(pnpm.memory_type, MemoryType::Pattern);
    assert_eq!(pnpm.category.as_deref(), Some("convention"));
    assert_eq!(pnpm.tags, ["node"]);
    assert_eq!(
        crate::memory::iso(pnpm.created_at),
        "2026-05-01T10:00:00.000Z"
    );
    // merged 3 + the shard above the watermark 2; the one below it is already inside.
    assert_eq!(pnpm.access_count, 5);
    assert_eq!(
        pnpm.last_accessed_at.map(crate::memory::iso).as_deref(),
        Some("2026-06-02T00:00:00.000Z")
    );
    let note = acme.iter().find(|m| m.content == "thread note").unwrap();
    assert_eq!(
        (note.scope, note.conversation.as_ref().map(|c| c.as_str())),
        (Scope::Conversation, Some("chat:1"))
    );
    assert!(
        store
            .list(&tenant("acme"), &seen_from(None), None, None, 10)
            .await
            .unwrap()
            .len()
            == 1
    );
    let globex = store
        .list(&tenant("globex"), &seen_from(None), None, None, 10)
        .await
        .unwrap();
    assert_eq!(globex[0].memory_type, MemoryType::Reference);
    // The embedding came along: nearest finds the memory by its own vector.
    let hits = suite::nearest(
        &store,
        &tenant("acme"),
        &seen_from(None),
        &direction(0, 0.0),
        1,
    )
    .await
    .unwrap();
    assert_eq!(hits[0].memory.content, "use pnpm");
    assert!((hits[0].similarity - 1.0).abs() < 1e-6);
    // And its words were indexed on the way in.
    let by_word = suite::keyword_hits(
        &store,
        &tenant("acme"),
        &seen_from(None),
        &crate::search::query_terms("pnpm"),
        &direction(0, 0.0),
        5,
    )
    .await
    .unwrap();
    assert_eq!(by_word.len(), 1);
    assert_eq!(by_word[0].hit.memory.content, "use pnpm");

    let leftovers: Vec<(String,)> = sqlx::query_as(
        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = current_schema() \
         AND table_name IN ('objects', 'memories_v08')",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // A second boot finds the native table and migrates nothing.
    opened(&url).await;
    assert_eq!(
        store
            .count_by_type(&tenant("acme"), &seen_from(Some("chat:1")))
            .await
            .unwrap()
            .total,
        2
    );
}

/// What `store` finds for acme by meaning (near axis 0) and by `word`, as contents.
async fn found(store: &PostgresStore, word: &str) -> (Vec<String>, Vec<String>) {
    let by_meaning = suite::nearest(
        store,
        &tenant("acme"),
        &seen_from(None),
        &direction(0, 0.0),
        10,
    )
    .await
    .unwrap();
    let by_word = suite::keyword_hits(
        store,
        &tenant("acme"),
        &seen_from(None),
        &crate::search::query_terms(word),
        &direction(0, 0.0),
        10,
    )
    .await
    .unwrap();
    let mut by_meaning: Vec<String> = by_meaning
        .into_iter()
        .map(|h| h.memory.content.clone())
        .collect();
    by_meaning.sort();
    (
        by_meaning,
        by_word
            .into_iter()
            .map(|k| k.hit.memory.content.clone())
            .collect(),
    )
}

#[tokio::test]
async fn searches_see_every_replicas_writes_and_an_operators_sql() {
    let url = fresh_database().await;
    let a = opened(&url).await;
    let b = opened(&url).await;
    let redis = note("the cache is redis", T0, Scope::Project, None);
    let redis = store_one(&a, "acme", redis, &direction(0, 0.0)).await;
    // Both replicas hold an index of acme now.
    assert_eq!(found(&a, "redis").await.1, ["the cache is redis"]);
    assert_eq!(found(&b, "redis").await.1, ["the cache is redis"]);

    let deploys = note(
        "redis deploys go out on fridays",
        T0 + 1,
        Scope::Project,
        None,
    );
    store_one(&b, "acme", deploys, &direction(0, 0.1)).await;
    let (by_meaning, by_word) = found(&a, "friday").await;
    assert_eq!(
        by_meaning,
        ["redis deploys go out on fridays", "the cache is redis"]
    );
    assert_eq!(by_word, ["redis deploys go out on fridays"]);

    assert!(
        b.delete(&tenant("acme"), &seen_from(None), &redis.id)
            .await
            .unwrap()
    );
    assert_eq!(
        found(&a, "redis").await,
        (
            vec!["redis deploys go out on fridays".to_owned()],
            vec!["redis deploys go out on fridays".to_owned()]
        )
    );

    // Rows changed by hand, not through any replica, are seen as well.
    let mut db = PgConnection::connect(&url).await.unwrap();
    sqlx::query("DELETE FROM memories WHERE tenant_id = 'acme'")
        .execute(&mut db)
        .await
        .unwrap();
    assert_eq!(found(&a, "redis").await, (vec![], vec![]));
    store_one(
        &a,
        "acme",
        note("postgres is 18", T0 + 2, Scope::Project, None),
        &direction(0, 0.0),
    )
    .await;
    // A database restored from a backup has older versions than a replica's index: the
    // next write there must still reach that replica's searches.
    sqlx::query("UPDATE memory_versions SET version = 0")
        .execute(&mut db)
        .await
        .unwrap();
    let restored = note("postgres runs on port 5433", T0 + 3, Scope::Project, None);
    store_one(&b, "acme", restored, &direction(0, 0.2)).await;
    assert_eq!(found(&a, "5433").await.1, ["postgres runs on port 5433"]);
    // A tenant an older release wrote has no version row at all; TRUNCATE reaches it too.
    sqlx::query("DELETE FROM memory_versions")
        .execute(&mut db)
        .await
        .unwrap();
    assert_eq!(found(&a, "postgres").await.1.len(), 2);
    sqlx::query("TRUNCATE memories")
        .execute(&mut db)
        .await
        .unwrap();
    assert_eq!(found(&a, "postgres").await, (vec![], vec![]));
    // Nothing truncated lingers in the index to crowd out what is written next.
    let fresh = note("a fresh start", T0 + 4, Scope::Project, None);
    store_one(&a, "acme", fresh, &direction(5, 0.0)).await;
    let nearest = suite::nearest(&a, &tenant("acme"), &seen_from(None), &direction(0, 0.0), 1)
        .await
        .unwrap();
    assert_eq!(nearest.len(), 1, "a truncated memory took the only place");
}

#[tokio::test]
async fn a_replicas_own_writes_update_its_index_in_place() {
    let store = fresh().await;
    for i in 0..3 {
        let m = note(&format!("fact number {i}"), T0 + i, Scope::Project, None);
        store_one(&store, "acme", m, &direction(i as usize, 0.0)).await;
    }
    let gone = store_one(
        &store,
        "acme",
        note("a passing fact", T0 + 3, Scope::Project, None),
        &direction(3, 0.0),
    )
    .await;
    assert!(
        store
            .delete(&tenant("acme"), &seen_from(None), &gone.id)
            .await
            .unwrap()
    );
    // Five writes, five versions in the epoch the tenant's first write started
    // (`versions.rs`); the index this process built at the first write shows the last one
    // without being rebuilt from the rows.
    let version = super::versions::version(&store.pool, "acme").await.unwrap();
    assert!(version >> 32 > 0, "{version}");
    assert_eq!(version % (1 << 32), 5);
    let held = store.indexes.held("acme").unwrap();
    assert_eq!(held.read_at(version, |index| index.len()).ok(), Some(3));
    assert_eq!(found(&store, "fact").await.1.len(), 3);
}

/// What the replica's tenant indexes did so far: (built, caught up).
fn builds(store: &PostgresStore) -> (u64, u64) {
    let usage = store.indexes.usage();
    (usage.builds, usage.catch_ups)
}

/// Another replica's writes reach this one's index through the change log, without a
/// rebuild, whether this replica searches or writes next; a log that cannot cover the gap
/// falls back to a rebuild.
#[tokio::test]
async fn a_replica_catches_up_with_another_ones_writes_instead_of_rebuilding() {
    let url = fresh_database().await;
    let a = opened(&url).await;
    let b = opened(&url).await;
    let (acme, everyone) = (tenant("acme"), seen_from(None));
    let redis = note("the cache is redis", T0, Scope::Project, None);
    let redis = store_one(&a, "acme", redis, &direction(0, 0.0)).await;
    let kafka = note("the queue is kafka", T0 + 1, Scope::Project, None);
    let kafka = store_one(&a, "acme", kafka, &direction(0, 0.3)).await;
    found(&b, "redis").await;
    // Counted from here (a tenant's first, empty index is not kept, so it counts twice).
    let (built, caught_up) = builds(&a);
    let since = |store: &PostgresStore| {
        let (b, c) = builds(store);
        (b - built, c - caught_up)
    };

    // B stores one, corrects one, forgets one, and keeps a note to a conversation.
    let deploys = note("deploys go out on fridays", T0 + 2, Scope::Project, None);
    store_one(&b, "acme", deploys, &direction(0, 0.1)).await;
    let mut valkey = note("the cache is valkey", T0 + 3, Scope::Project, None);
    valkey.replaces = Some(redis.id.clone());
    store_one(&b, "acme", valkey, &direction(0, 0.05)).await;
    assert!(b.delete(&acme, &everyone, &kafka.id).await.unwrap());
    let private = note(
        "fridays are quiet",
        T0 + 4,
        Scope::Conversation,
        Some("chat:1"),
    );
    suite::store_at(&b, "acme", private, T0 + 4, &direction(0, 0.2)).await;

    let (by_meaning, by_word) = found(&a, "friday").await;
    assert_eq!(
        by_meaning,
        ["deploys go out on fridays", "the cache is valkey"]
    );
    assert_eq!(by_word, ["deploys go out on fridays"]);
    assert_eq!(since(&a), (0, 1), "the index was built again");

    // A writes next: its write catches up first, and its index moves on in place.
    store_one(
        &b,
        "acme",
        note("ci runs on arm", T0 + 5, Scope::Project, None),
        &direction(1, 0.0),
    )
    .await;
    store_one(
        &a,
        "acme",
        note("ci caches cargo", T0 + 6, Scope::Project, None),
        &direction(1, 0.1),
    )
    .await;
    assert_eq!(since(&a), (0, 2));
    assert_eq!(found(&a, "ci").await.1.len(), 2);
    assert_eq!(since(&a), (0, 2), "a search after the write read nothing");

    // A gap the log no longer covers: built again, with every change.
    store_one(
        &b,
        "acme",
        note("ci is green", T0 + 7, Scope::Project, None),
        &direction(1, 0.2),
    )
    .await;
    let mut db = PgConnection::connect(&url).await.unwrap();
    sqlx::query("DELETE FROM memory_changes")
        .execute(&mut db)
        .await
        .unwrap();
    assert_eq!(found(&a, "ci").await.1.len(), 3);
    assert_eq!(since(&a), (1, 2));
}

/// The change log keeps about the tenant's last `LOGGED` versions, however many writes.
#[tokio::test]
async fn the_change_log_stays_bounded() {
    let url = fresh_database().await;
    let store = opened(&url).await;
    store_one(
        &store,
        "acme",
        note("first", T0, Scope::Project, None),
        &direction(0, 0.0),
    )
    .await;
    let mut db = PgConnection::connect(&url).await.unwrap();
    let before = super::versions::version(&mut db, "acme").await.unwrap();
    sqlx::query(
        "INSERT INTO memories (tenant_id, id, content, memory_type, created_at, embedding) \
         SELECT 'acme', 'm' || i, 'memory ' || i, 'project', now(), \
                array_fill(0.5, ARRAY[8])::vector FROM generate_series(1, 2500) AS i",
    )
    .execute(&mut db)
    .await
    .unwrap();
    let (logged, version): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM memory_changes WHERE tenant_id = 'acme'), \
                (SELECT version FROM memory_versions WHERE tenant_id = 'acme')",
    )
    .fetch_one(&mut db)
    .await
    .unwrap();
    assert_eq!(version - before, 2500);
    let kept = super::versions::LOGGED;
    assert!(
        (kept..=kept + 100).contains(&logged),
        "{logged} rows logged"
    );
}

/// A tenant's version row and its log go with its last memory, whoever removes it, and
/// the tenant's next row starts past every version it had: a replica whose index shows the
/// tenant's past finds its present.
#[tokio::test]
async fn a_tenants_bookkeeping_goes_with_its_last_memory() {
    let url = fresh_database().await;
    let (a, b) = (opened(&url).await, opened(&url).await);
    let first = note("redis runs on 6379", T0, Scope::Project, None);
    let first = store_one(&a, "acme", first, &direction(0, 0.0)).await;
    assert_eq!(found(&a, "redis").await.1, ["redis runs on 6379"]);
    assert!(
        b.delete(&tenant("acme"), &seen_from(None), &first.id)
            .await
            .unwrap()
    );
    let mut db = PgConnection::connect(&url).await.unwrap();
    let left: (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM memory_versions WHERE tenant_id = 'acme'), \
                (SELECT count(*) FROM memory_changes WHERE tenant_id = 'acme')",
    )
    .fetch_one(&mut db)
    .await
    .unwrap();
    assert_eq!(left, (0, 0), "the version row and the log stay");
    // The same number of writes again from the other replica: with versions counted from
    // the start, this replica's index would show the tenant as it is now.
    let second = note("valkey runs on 6380", T0 + 1, Scope::Project, None);
    store_one(&b, "acme", second, &direction(0, 0.0)).await;
    assert_eq!(found(&a, "runs").await.1, ["valkey runs on 6380"]);
    // A raw statement removing the last memory is seen the same way.
    sqlx::query("DELETE FROM memories WHERE tenant_id = 'acme'")
        .execute(&mut db)
        .await
        .unwrap();
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM memory_versions")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(rows, 0);
    assert_eq!(found(&a, "runs").await, (vec![], vec![]));
}
