//! The behaviours every store must show, written once as plain functions of a store and
//! run against every backend and every decorator (as object_store's `integration.rs`
//! does): `run` calls each on a fresh store, `run_keywords` the ones of a store with a
//! text index.

use std::future::Future;

use super::reembed::Reembedding;
use super::{Expired, MemoryStore, Portable, Remembered, StoreError};
use crate::dedup::Rule;
use crate::memory::{
    Conversation, Hit, KeywordHit, Memory, MemoryType, NewMemory, Scope, Tenant, Visibility,
};
use crate::search::{Query, query_terms};

/// The duplicate rule every store is tested with: the specification's.
/// The rule the suite's stores judge repeats by.
pub const RULE: Rule = Rule::SPECIFIED;

/// A repeat that replaced nothing.
fn known(existing: Memory) -> Remembered {
    Remembered::AlreadyKnown {
        existing,
        removed: None,
    }
}

/// Every behaviour of `store_suite`, each on a fresh store from `make`.
pub async fn run<S: MemoryStore, F: Future<Output = S>>(make: impl Fn() -> F) {
    a_stored_memory_comes_back_whole(&make().await).await;
    nearest_finds_the_closest_k(&make().await).await;
    words_never_change_what_meaning_finds(&make().await).await;
    tenants_never_see_each_other(&make().await).await;
    conversation_notes_stay_in_their_conversation(&make().await).await;
    a_near_verbatim_repeat_is_already_known(&make().await).await;
    dedup_respects_scope_and_conversation(&make().await).await;
    listing_is_newest_first_filtered_and_filled_past_hidden_notes(&make().await).await;
    counts_are_by_type_in_canonical_order(&make().await).await;
    accesses_are_counted_and_keep_the_latest_time(&make().await).await;
    delete_removes_exactly_one_memory(&make().await).await;
    a_replacement_takes_the_place_of_what_it_replaces(&make().await).await;
    pages_go_on_exactly_after_the_last_memory_shown(&make().await).await;
    only_a_memory_the_caller_sees_can_be_replaced(&make().await).await;
    an_expired_memory_is_gone_everywhere_from_its_instant(&make().await).await;
    the_sweep_deletes_what_expired_and_nothing_else(&make().await).await;
}

/// Check and write as one step, for the stores that can make them so (S3 cannot: it has
/// no transaction: docs/guide.md, "AWS: S3 Vectors, S3 and Bedrock on EKS").
pub async fn run_atomic<S: MemoryStore, F: Future<Output = S>>(make: impl Fn() -> F) {
    concurrent_identical_remembers_store_one(&make().await).await;
    concurrent_replacements_of_one_memory_leave_one(&make().await).await;
}

/// Keyword recall, for the stores that index words (S3 does not).
pub async fn run_keywords<S: MemoryStore, F: Future<Output = S>>(make: impl Fn() -> F) {
    a_search_finds_by_meaning_and_by_words(&make().await).await;
    words_find_what_meaning_does_not(&make().await).await;
    korean_and_english_match_by_word(&make().await).await;
    words_never_cross_tenants_or_conversations(&make().await).await;
    rare_words_count_more_and_forgotten_memories_are_gone(&make().await).await;
}

/// The model the suite's stores are opened with.
pub fn model(dimension: usize) -> crate::memory::Model {
    crate::memory::Model {
        name: "test:directions".into(),
        dimension,
    }
}

pub fn tenant(name: &str) -> Tenant {
    Tenant::new_unchecked(name.into())
}

/// What a request in `conversation` (if any) sees now.
pub fn seen_from(conversation: Option<&str>) -> Visibility {
    Visibility::now(conversation.map(|c| Conversation::new_unchecked(c.into())))
}

/// What a request in `conversation` (if any) sees at `at` (ms): the suite's clock.
pub fn seen_at(conversation: Option<&str>, at: i64) -> Visibility {
    Visibility {
        at,
        ..seen_from(conversation)
    }
}

pub fn note(content: &str, created_at: i64, scope: Scope, conversation: Option<&str>) -> NewMemory {
    NewMemory {
        id: crate::memory::new_id(created_at),
        content: content.into(),
        memory_type: MemoryType::Project,
        category: None,
        tags: vec![],
        created_at,
        scope,
        conversation: conversation.map(|c| Conversation::new_unchecked(c.into())),
        replaces: None,
        expires_at: None,
        author: None,
    }
}

/// A unit vector pointing mostly along axis `axis`, tilted by `tilt` towards the next.
pub fn direction(axis: usize, tilt: f32) -> Vec<f32> {
    let mut v = vec![0.0; 8];
    v[axis % 8] = 1.0;
    v[(axis + 1) % 8] = tilt;
    v
}

/// Up to `k` visible memories nearest to `vector`: a search by meaning only.
pub async fn nearest(
    store: &dyn MemoryStore,
    tenant: &Tenant,
    visibility: &Visibility,
    vector: &[f32],
    k: usize,
) -> Result<Vec<Hit>, StoreError> {
    let query = Query {
        vector,
        terms: &[],
        k,
    };
    Ok(store.search(tenant, visibility, &query).await?.nearest)
}

/// Up to `k` visible memories holding any of `terms`, best BM25 first.
pub async fn keyword_hits(
    store: &dyn MemoryStore,
    tenant: &Tenant,
    visibility: &Visibility,
    terms: &[String],
    vector: &[f32],
    k: usize,
) -> Result<Vec<KeywordHit>, StoreError> {
    let query = Query { vector, terms, k };
    Ok(store.search(tenant, visibility, &query).await?.by_words)
}

fn by_id(mut hits: Vec<Hit>) -> Vec<Hit> {
    hits.sort_by(|a, b| a.memory.id.cmp(&b.memory.id));
    hits
}

pub const T0: i64 = 1_780_000_000_000;

/// Stores `memory` for `who` now and returns it, failing the test on a duplicate.
pub async fn store_one(
    store: &dyn MemoryStore,
    who: &str,
    memory: NewMemory,
    embedding: &[f32],
) -> Memory {
    store_at(store, who, memory, crate::memory::now_ms(), embedding).await
}

/// Stores `memory` for `who`, in its conversation, as a request at `at` (ms) would.
pub async fn store_at(
    store: &dyn MemoryStore,
    who: &str,
    memory: NewMemory,
    at: i64,
    embedding: &[f32],
) -> Memory {
    let seen = seen_at(memory.conversation.as_ref().map(|c| c.as_str()), at);
    match store
        .remember(
            &tenant(who),
            &seen.for_dedup(memory.scope),
            memory,
            embedding,
            RULE,
        )
        .await
        .unwrap()
    {
        Remembered::Stored(m, _) => m,
        other => panic!("expected a write, got {other:?}"),
    }
}

pub async fn concurrent_identical_remembers_store_one(store: &dyn MemoryStore) {
    let (acme, everyone) = (tenant("acme"), seen_from(None));
    let vector = direction(0, 0.0);
    let writes = (0..8).map(|i| {
        let m = note(
            "the release train leaves on thursdays",
            T0 + i,
            Scope::Project,
            None,
        );
        store.remember(&acme, &everyone, m, &vector, RULE)
    });
    let outcomes = futures_util::future::join_all(writes).await;
    let stored = (outcomes.into_iter())
        .filter(|outcome| matches!(outcome, Ok(Remembered::Stored(_, _))))
        .count();
    assert_eq!(stored, 1);
    let counts = store.count_by_type(&acme, &everyone).await.unwrap();
    assert_eq!(counts.total, 1);
}

pub async fn concurrent_replacements_of_one_memory_leave_one(store: &dyn MemoryStore) {
    let (acme, everyone) = (tenant("acme"), seen_from(None));
    let old = note("deploys go out on mondays", T0, Scope::Project, None);
    let old = store_one(store, "acme", old, &direction(0, 0.0)).await;
    let vectors: Vec<Vec<f32>> = (1..=4).map(|axis| direction(axis, 0.0)).collect();
    let writes = vectors.iter().enumerate().map(|(i, vector)| {
        let content = format!("deploys go out on day {i}");
        let mut m = note(&content, T0 + 1 + i as i64, Scope::Project, None);
        m.replaces = Some(old.id.clone());
        store.remember(&acme, &everyone, m, vector, RULE)
    });
    let outcomes = futures_util::future::join_all(writes).await;
    let (written, refused): (Vec<_>, Vec<_>) = outcomes.into_iter().partition(Result::is_ok);
    assert_eq!(written.len(), 1, "{written:?}");
    for refusal in refused {
        assert!(
            matches!(
                refusal,
                Err(StoreError::NotVisible {
                    field: "replaces",
                    ..
                })
            ),
            "{refusal:?}"
        );
    }
    let counts = store.count_by_type(&acme, &everyone).await.unwrap();
    assert_eq!(counts.total, 1);
    assert_eq!(store.get(&acme, &everyone, &old.id).await.unwrap(), None);
}

pub async fn a_stored_memory_comes_back_whole(store: &dyn MemoryStore) {
    let mut m = note("  Use pnpm, not npm  ", T0, Scope::Project, Some("chat:1"));
    m.memory_type = MemoryType::Pattern;
    m.category = Some("convention".into());
    m.tags = vec!["build".into(), "배포".into()];
    let stored = store_one(store, "acme", m.clone(), &direction(0, 0.0)).await;
    assert_eq!(stored, m.clone().into_memory());
    let hits = nearest(
        store,
        &tenant("acme"),
        &seen_from(None),
        &direction(0, 0.0),
        5,
    )
    .await
    .unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(*hits[0].memory, m.into_memory());
    assert!((hits[0].similarity - 1.0).abs() < 1e-6);
}

pub async fn nearest_finds_the_closest_k(store: &dyn MemoryStore) {
    for (i, tilt) in [0.9f32, 0.1, 2.0, 0.5].into_iter().enumerate() {
        let m = note(&format!("fact {i}"), T0 + i as i64, Scope::Project, None);
        store_one(store, "acme", m, &direction(0, tilt)).await;
    }
    let mut hits = nearest(
        store,
        &tenant("acme"),
        &seen_from(None),
        &direction(0, 0.0),
        2,
    )
    .await
    .unwrap();
    hits.sort_by(|a, b| b.similarity.total_cmp(&a.similarity));
    let found: Vec<_> = hits.iter().map(|h| h.memory.content.as_str()).collect();
    assert_eq!(found, ["fact 1", "fact 3"]);
    let expected = 1.0 / (1.0f64 + 0.25).sqrt();
    assert!((hits[1].similarity - expected).abs() < 1e-6);
}

pub async fn words_never_change_what_meaning_finds(store: &dyn MemoryStore) {
    for (i, text) in [
        "redis runs on port 6380",
        "redis sentinel",
        "nightly backups",
    ]
    .into_iter()
    .enumerate()
    {
        let m = note(text, T0 + i as i64, Scope::Project, None);
        store_one(store, "acme", m, &direction(i, 0.1)).await;
    }
    let (who, seen, query) = (tenant("acme"), seen_from(None), direction(0, 0.0));
    let terms = ["redis".to_owned()];
    let both = store
        .search(
            &who,
            &seen,
            &Query {
                vector: &query,
                terms: &terms,
                k: 2,
            },
        )
        .await
        .unwrap();
    let by_meaning = nearest(store, &who, &seen, &query, 2).await.unwrap();
    assert_eq!(both.nearest.len(), 2);
    assert_eq!(by_id(both.nearest), by_id(by_meaning));
}

pub async fn tenants_never_see_each_other(store: &dyn MemoryStore) {
    let theirs = store_one(
        store,
        "acme",
        note("acme secret", T0, Scope::Project, None),
        &direction(1, 0.0),
    )
    .await;
    let other = tenant("globex");
    let all = seen_from(None);
    assert!(
        nearest(store, &other, &all, &direction(1, 0.0), 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .list(&other, &all, None, None, 50)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.count_by_type(&other, &all).await.unwrap().total, 0);
    assert!(!store.delete(&other, &all, &theirs.id).await.unwrap());
    assert_eq!(store.get(&other, &all, &theirs.id).await.unwrap(), None);
    let own = store.get(&tenant("acme"), &all, &theirs.id).await.unwrap();
    assert_eq!(own.map(|m| m.content), Some(theirs.content.clone()));
    store
        .record_access(&other, &seen_from(None), &[&theirs], T0 + 5)
        .await
        .unwrap();
    let still = store
        .list(&tenant("acme"), &all, None, None, 50)
        .await
        .unwrap();
    assert_eq!(still, vec![theirs]);
}

pub async fn conversation_notes_stay_in_their_conversation(store: &dyn MemoryStore) {
    let acme = tenant("acme");
    let private = store_one(
        store,
        "acme",
        note("thread note", T0, Scope::Conversation, Some("chat:1")),
        &direction(2, 0.0),
    )
    .await;
    store_one(
        store,
        "acme",
        note("project fact", T0 + 1, Scope::Project, Some("chat:1")),
        &direction(3, 0.0),
    )
    .await;
    for outsider in [seen_from(None), seen_from(Some("chat:2"))] {
        let hits = nearest(store, &acme, &outsider, &direction(2, 0.0), 10)
            .await
            .unwrap();
        assert!(hits.iter().all(|h| h.memory.id != private.id));
        let listed = store.list(&acme, &outsider, None, None, 50).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].content, "project fact");
        assert_eq!(
            store.count_by_type(&acme, &outsider).await.unwrap().total,
            1
        );
        assert!(!store.delete(&acme, &outsider, &private.id).await.unwrap());
        assert_eq!(
            store.get(&acme, &outsider, &private.id).await.unwrap(),
            None
        );
    }
    let got = store
        .get(&acme, &seen_from(Some("chat:1")), &private.id)
        .await;
    assert_eq!(
        got.unwrap().map(|m| m.content).as_deref(),
        Some("thread note")
    );
    let insider = seen_from(Some("chat:1"));
    assert_eq!(
        store
            .list(&acme, &insider, None, None, 50)
            .await
            .unwrap()
            .len(),
        2
    );
    assert_eq!(store.count_by_type(&acme, &insider).await.unwrap().total, 2);
    assert!(store.delete(&acme, &insider, &private.id).await.unwrap());
    assert_eq!(store.count_by_type(&acme, &insider).await.unwrap().total, 1);
}

pub async fn a_near_verbatim_repeat_is_already_known(store: &dyn MemoryStore) {
    let text = "deploys go out blue green on friday";
    let first = store_one(
        store,
        "acme",
        note(text, T0, Scope::Project, None),
        &direction(4, 0.0),
    )
    .await;
    let again = note(text, T0 + 1, Scope::Project, None);
    let outcome = store
        .remember(
            &tenant("acme"),
            &seen_from(None),
            again,
            &direction(4, 0.01),
            RULE,
        )
        .await
        .unwrap();
    assert_eq!(outcome, known(first));
    // Close in meaning but in other words: a new memory.
    let paraphrase = note(
        "releases ship with a blue/green switch weekly",
        T0 + 2,
        Scope::Project,
        None,
    );
    let outcome = store
        .remember(
            &tenant("acme"),
            &seen_from(None),
            paraphrase,
            &direction(4, 0.01),
            RULE,
        )
        .await
        .unwrap();
    assert!(matches!(outcome, Remembered::Stored(_, _)));
    // The same text in another tenant is that tenant's first.
    let elsewhere = note(text, T0 + 3, Scope::Project, None);
    let outcome = store
        .remember(
            &tenant("globex"),
            &seen_from(None),
            elsewhere,
            &direction(4, 0.0),
            RULE,
        )
        .await
        .unwrap();
    assert!(matches!(outcome, Remembered::Stored(_, _)));
    assert_eq!(
        store
            .count_by_type(&tenant("acme"), &seen_from(None))
            .await
            .unwrap()
            .total,
        2
    );
}

pub async fn dedup_respects_scope_and_conversation(store: &dyn MemoryStore) {
    let acme = tenant("acme");
    let text = "the staging database is reset nightly";
    let v = direction(5, 0.0);
    let in_c1 = store_one(
        store,
        "acme",
        note(text, T0, Scope::Conversation, Some("c1")),
        &v,
    )
    .await;
    // The same note from another thread is stored anew.
    store_one(
        store,
        "acme",
        note(text, T0 + 1, Scope::Conversation, Some("c2")),
        &v,
    )
    .await;
    // The same note in the same thread merges.
    let repeat = note(text, T0 + 2, Scope::Conversation, Some("c1"));
    let seen = seen_from(Some("c1"));
    assert_eq!(
        store
            .remember(
                &acme,
                &seen.for_dedup(Scope::Conversation),
                repeat,
                &v,
                RULE
            )
            .await
            .unwrap(),
        known(in_c1)
    );
    // A project write is never swallowed by a thread's private note (docs/ranking.md#duplicates).
    let project = store_one(
        store,
        "acme",
        note(text, T0 + 3, Scope::Project, Some("c1")),
        &v,
    )
    .await;
    // ... and once the project knows it, no thread needs its own copy.
    let thread_copy = note(text, T0 + 4, Scope::Conversation, Some("c3"));
    let seen3 = seen_from(Some("c3"));
    assert_eq!(
        store
            .remember(
                &acme,
                &seen3.for_dedup(Scope::Conversation),
                thread_copy,
                &v,
                RULE
            )
            .await
            .unwrap(),
        known(project)
    );
}

pub async fn listing_is_newest_first_filtered_and_filled_past_hidden_notes(
    store: &dyn MemoryStore,
) {
    let acme = tenant("acme");
    let mut old_pattern = note("old pattern", T0, Scope::Project, None);
    old_pattern.memory_type = MemoryType::Pattern;
    store_one(store, "acme", old_pattern, &direction(6, 0.0)).await;
    for i in 0..12 {
        store_one(
            store,
            "acme",
            note(&format!("project {i}"), T0 + 10 + i, Scope::Project, None),
            &direction(i as usize, 0.3),
        )
        .await;
    }
    for i in 0..25 {
        store_one(
            store,
            "acme",
            note(
                &format!("foreign {i}"),
                T0 + 100 + i,
                Scope::Conversation,
                Some("other"),
            ),
            &direction(i as usize, 0.7),
        )
        .await;
    }
    let listed = store
        .list(&acme, &seen_from(Some("third")), None, None, 10)
        .await
        .unwrap();
    let names: Vec<_> = listed.iter().map(|m| m.content.as_str()).collect();
    let want: Vec<String> = (2..12).rev().map(|i| format!("project {i}")).collect();
    assert_eq!(names, want);
    let patterns = store
        .list(&acme, &seen_from(None), Some(MemoryType::Pattern), None, 20)
        .await
        .unwrap();
    assert_eq!(patterns.len(), 1);
    assert_eq!(patterns[0].content, "old pattern");
    assert!(
        store
            .list(
                &acme,
                &seen_from(None),
                Some(MemoryType::Reference),
                None,
                20
            )
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn counts_are_by_type_in_canonical_order(store: &dyn MemoryStore) {
    let acme = tenant("acme");
    for (i, ty) in [
        MemoryType::Conversation,
        MemoryType::Project,
        MemoryType::Pattern,
        MemoryType::Project,
    ]
    .into_iter()
    .enumerate()
    {
        let mut m = note(&format!("n{i}"), T0 + i as i64, Scope::Project, None);
        m.memory_type = ty;
        store_one(store, "acme", m, &direction(i, 0.0)).await;
    }
    let counts = store.count_by_type(&acme, &seen_from(None)).await.unwrap();
    assert_eq!(counts.total, 4);
    assert_eq!(
        counts.by_type,
        vec![
            (MemoryType::Project, 2),
            (MemoryType::Pattern, 1),
            (MemoryType::Conversation, 1)
        ]
    );
}

pub async fn accesses_are_counted_and_keep_the_latest_time(store: &dyn MemoryStore) {
    let acme = tenant("acme");
    let a = store_one(
        store,
        "acme",
        note("a", T0, Scope::Project, None),
        &direction(0, 0.0),
    )
    .await;
    let b = store_one(
        store,
        "acme",
        note("b", T0 + 1, Scope::Project, None),
        &direction(1, 0.0),
    )
    .await;
    store
        .record_access(&acme, &seen_from(None), &[&a, &b], T0 + 100)
        .await
        .unwrap();
    store
        .record_access(&acme, &seen_from(None), &[&a], T0 + 50)
        .await
        .unwrap();
    store
        .record_access(&acme, &seen_from(None), &[], T0 + 500)
        .await
        .unwrap();
    // Another conversation's note is not counted for a caller who cannot see it.
    let note = store_one(
        store,
        "acme",
        note("c", T0 + 2, Scope::Conversation, Some("chat:1")),
        &direction(2, 0.0),
    )
    .await;
    store
        .record_access(&acme, &seen_from(Some("chat:2")), &[&note], T0 + 600)
        .await
        .unwrap();
    let own = store
        .list(&acme, &seen_from(Some("chat:1")), None, None, 10)
        .await
        .unwrap();
    assert_eq!(
        own.iter().find(|m| m.id == note.id).unwrap().access_count,
        0
    );
    let listed = store
        .list(&acme, &seen_from(None), None, None, 10)
        .await
        .unwrap();
    let a_now = listed.iter().find(|m| m.id == a.id).unwrap();
    let b_now = listed.iter().find(|m| m.id == b.id).unwrap();
    assert_eq!(
        (a_now.access_count, a_now.last_accessed_at),
        (2, Some(T0 + 100))
    );
    assert_eq!(
        (b_now.access_count, b_now.last_accessed_at),
        (1, Some(T0 + 100))
    );
    assert_eq!(a_now.content, "a");
    // One memory, got by id, is as whole as a listed one: its uses with it.
    let got = store
        .get(&acme, &seen_from(None), &a.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (got.access_count, got.last_accessed_at),
        (2, Some(T0 + 100))
    );
}

pub async fn delete_removes_exactly_one_memory(store: &dyn MemoryStore) {
    let acme = tenant("acme");
    let a = store_one(
        store,
        "acme",
        note("a", T0, Scope::Project, None),
        &direction(0, 0.0),
    )
    .await;
    store_one(
        store,
        "acme",
        note("b", T0 + 1, Scope::Project, None),
        &direction(1, 0.0),
    )
    .await;
    assert!(store.delete(&acme, &seen_from(None), &a.id).await.unwrap());
    assert!(!store.delete(&acme, &seen_from(None), &a.id).await.unwrap());
    let left = store
        .list(&acme, &seen_from(None), None, None, 10)
        .await
        .unwrap();
    assert_eq!(
        left.iter().map(|m| m.content.as_str()).collect::<Vec<_>>(),
        ["b"]
    );
    store.flush().await.unwrap();
}

async fn words(
    store: &dyn MemoryStore,
    who: &str,
    conversation: Option<&str>,
    query: &str,
) -> Vec<(String, f64)> {
    keyword_hits(
        store,
        &tenant(who),
        &seen_from(conversation),
        &query_terms(query),
        &direction(7, 0.0),
        10,
    )
    .await
    .unwrap()
    .into_iter()
    .map(|k| (k.hit.memory.content.clone(), k.score))
    .collect()
}

pub async fn a_search_finds_by_meaning_and_by_words(store: &dyn MemoryStore) {
    for (i, text) in [
        "redis runs on port 6380",
        "redis sentinel",
        "nightly backups",
    ]
    .into_iter()
    .enumerate()
    {
        let m = note(text, T0 + i as i64, Scope::Project, None);
        store_one(store, "acme", m, &direction(i, 0.1)).await;
    }
    let (who, seen, query) = (tenant("acme"), seen_from(None), direction(1, 0.0));
    let terms = query_terms("redis");
    let found = store
        .search(
            &who,
            &seen,
            &Query {
                vector: &query,
                terms: &terms,
                k: 2,
            },
        )
        .await
        .unwrap();
    let mut worded: Vec<&str> = (found.by_words.iter())
        .map(|k| k.hit.memory.content.as_str())
        .collect();
    worded.sort();
    assert_eq!(worded, ["redis runs on port 6380", "redis sentinel"]);
    // A memory found both ways has the one similarity, and every match has its own.
    for word in &found.by_words {
        let exact = crate::search::cosine(
            &query,
            &direction(
                ["redis runs on port 6380", "redis sentinel"]
                    .iter()
                    .position(|t| *t == word.hit.memory.content)
                    .unwrap(),
                0.1,
            ),
        );
        assert!((word.hit.similarity - exact).abs() < 1e-6, "{word:?}");
        if let Some(same) = found
            .nearest
            .iter()
            .find(|n| n.memory.id == word.hit.memory.id)
        {
            assert_eq!(same.similarity, word.hit.similarity);
        }
    }
    let none = store
        .search(
            &who,
            &seen,
            &Query {
                vector: &query,
                terms: &[],
                k: 2,
            },
        )
        .await
        .unwrap();
    assert!(none.by_words.is_empty() && none.nearest.len() == 2);
}

pub async fn words_find_what_meaning_does_not(store: &dyn MemoryStore) {
    for (i, text) in [
        "deploys fail with ERR_SSL_PROTOCOL behind the corporate proxy",
        "we deploy every friday afternoon",
        "the database is PostgreSQL with pgvector",
    ]
    .into_iter()
    .enumerate()
    {
        store_one(
            store,
            "acme",
            note(text, T0 + i as i64, Scope::Project, None),
            &direction(i, 0.0),
        )
        .await;
    }
    let found = words(store, "acme", None, "ERR_SSL_PROTOCOL").await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].0.contains("ERR_SSL_PROTOCOL") && found[0].1 > 0.0);
    let hits = keyword_hits(
        store,
        &tenant("acme"),
        &seen_from(None),
        &query_terms("pgvector"),
        &direction(2, 0.0),
        10,
    )
    .await
    .unwrap();
    assert!(
        (hits[0].hit.similarity - 1.0).abs() < 1e-6,
        "the cosine comes along"
    );
    // Stemming: "deploying" finds both deploy memories; the rarer word ranks first.
    let deploying = words(store, "acme", None, "deploying on friday").await;
    assert_eq!(deploying.len(), 2, "{deploying:?}");
    assert!(deploying[0].0.contains("friday"));
    assert!(words(store, "acme", None, "kubernetes").await.is_empty());
    assert!(words(store, "acme", None, "what is the").await.is_empty());
}

pub async fn korean_and_english_match_by_word(store: &dyn MemoryStore) {
    store_one(
        store,
        "acme",
        note("배포는 금요일 오후에 한다", T0, Scope::Project, None),
        &direction(0, 0.0),
    )
    .await;
    store_one(
        store,
        "acme",
        note("Releases go out on Fridays", T0 + 1, Scope::Project, None),
        &direction(1, 0.0),
    )
    .await;
    let korean = words(store, "acme", None, "배포 일정").await;
    assert_eq!(korean.len(), 1, "{korean:?}");
    assert!(korean[0].0.starts_with("배포는"));
    let english = words(store, "acme", None, "release friday").await;
    assert_eq!(english.len(), 1, "{english:?}");
    assert!(english[0].0.starts_with("Releases"));
}

pub async fn words_never_cross_tenants_or_conversations(store: &dyn MemoryStore) {
    store_one(
        store,
        "acme",
        note(
            "the vault token is in ERR_VAULT_42",
            T0,
            Scope::Conversation,
            Some("chat:1"),
        ),
        &direction(0, 0.0),
    )
    .await;
    store_one(
        store,
        "globex",
        note(
            "globex also logs ERR_VAULT_42",
            T0 + 1,
            Scope::Project,
            None,
        ),
        &direction(1, 0.0),
    )
    .await;
    assert!(
        words(store, "acme", Some("chat:2"), "ERR_VAULT_42")
            .await
            .is_empty()
    );
    assert!(words(store, "acme", None, "ERR_VAULT_42").await.is_empty());
    let own = words(store, "acme", Some("chat:1"), "ERR_VAULT_42").await;
    assert_eq!(own.len(), 1);
    assert!(own[0].0.starts_with("the vault"));
    let other = words(store, "globex", Some("chat:1"), "ERR_VAULT_42").await;
    assert_eq!(other.len(), 1);
    assert!(other[0].0.starts_with("globex"));
}

pub async fn rare_words_count_more_and_forgotten_memories_are_gone(store: &dyn MemoryStore) {
    let mut kept = Vec::new();
    for i in 0..6 {
        let text = if i == 0 {
            "cache warmup uses redis cluster".to_owned()
        } else {
            format!("cache note number {i}")
        };
        kept.push(
            store_one(
                store,
                "acme",
                note(&text, T0 + i, Scope::Project, None),
                &direction(i as usize, 0.0),
            )
            .await,
        );
    }
    let found = words(store, "acme", None, "redis cache").await;
    assert_eq!(found.len(), 6);
    assert!(
        found[0].0.contains("redis"),
        "the rare word decides: {found:?}"
    );
    assert!(found[0].1 > found[1].1);
    assert!(
        store
            .delete(&tenant("acme"), &seen_from(None), &kept[0].id)
            .await
            .unwrap()
    );
    let after = words(store, "acme", None, "redis").await;
    assert!(after.is_empty(), "{after:?}");
}

/// `memory` for a caller in `conversation`, replacing `old`.
async fn replace(
    store: &dyn MemoryStore,
    who: &str,
    conversation: Option<&str>,
    mut memory: NewMemory,
    old: &str,
    embedding: &[f32],
) -> Result<Remembered, StoreError> {
    memory.replaces = Some(old.to_owned());
    store
        .remember(
            &tenant(who),
            &seen_from(conversation),
            memory,
            embedding,
            RULE,
        )
        .await
}

pub async fn a_replacement_takes_the_place_of_what_it_replaces(store: &dyn MemoryStore) {
    let (acme, everyone) = (tenant("acme"), seen_from(None));
    let old = store_one(
        store,
        "acme",
        note("the cache is redis on port 6379", T0, Scope::Project, None),
        &direction(0, 0.0),
    )
    .await;
    // A correction near-verbatim of what it corrects is not a repeat of it.
    let mut fixed = note(
        "the cache is redis on port 6380",
        T0 + 1,
        Scope::Project,
        None,
    );
    fixed.memory_type = MemoryType::Reference;
    let Remembered::Stored(new, _) =
        replace(store, "acme", None, fixed, &old.id, &direction(0, 0.001))
            .await
            .unwrap()
    else {
        panic!("the correction was not stored");
    };
    assert_eq!(new.replaces.as_deref(), Some(old.id.as_str()));
    assert_eq!(new.memory_type, MemoryType::Reference);
    let listed = store.list(&acme, &everyone, None, None, 10).await.unwrap();
    assert_eq!(
        listed.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(),
        [new.id.as_str()]
    );
    assert_eq!(
        listed[0].replaces.as_deref(),
        Some(old.id.as_str()),
        "the link is stored"
    );
    let found = nearest(store, &acme, &everyone, &direction(0, 0.0), 5)
        .await
        .unwrap();
    assert_eq!(
        found
            .iter()
            .map(|h| h.memory.id.as_str())
            .collect::<Vec<_>>(),
        [new.id.as_str()]
    );
    assert!(
        !store.delete(&acme, &everyone, &old.id).await.unwrap(),
        "the old one is gone"
    );
    assert_eq!(
        store.count_by_type(&acme, &everyone).await.unwrap().total,
        1
    );
    // A correction that repeats a third memory is that memory, and what it was to replace
    // goes all the same: the caller said it was wrong.
    let third = store_one(
        store,
        "acme",
        note("use pnpm not npm", T0 + 2, Scope::Project, None),
        &direction(3, 0.0),
    )
    .await;
    let again = replace(
        store,
        "acme",
        None,
        note("use pnpm not npm", T0 + 3, Scope::Project, None),
        &new.id,
        &direction(3, 0.001),
    )
    .await
    .unwrap();
    assert_eq!(
        again,
        Remembered::AlreadyKnown {
            existing: third,
            removed: Some(new.id.clone()),
        }
    );
    assert_eq!(
        store.count_by_type(&acme, &everyone).await.unwrap().total,
        1
    );
    let hits = nearest(store, &acme, &everyone, &direction(0, 0.0), 5)
        .await
        .unwrap();
    assert!(
        hits.iter().all(|h| h.memory.id != new.id),
        "the replaced memory is gone from the index too"
    );
    // A thread's own note can be corrected from that thread, even into a project memory.
    let private = store_one(
        store,
        "acme",
        note(
            "the thread's draft",
            T0 + 4,
            Scope::Conversation,
            Some("c1"),
        ),
        &direction(5, 0.0),
    )
    .await;
    let public = note("the project's decision", T0 + 5, Scope::Project, Some("c1"));
    assert!(matches!(
        replace(
            store,
            "acme",
            Some("c1"),
            public,
            &private.id,
            &direction(6, 0.0)
        )
        .await
        .unwrap(),
        Remembered::Stored(_, _)
    ));
    assert!(
        !store
            .delete(&acme, &seen_from(Some("c1")), &private.id)
            .await
            .unwrap()
    );
}

pub async fn only_a_memory_the_caller_sees_can_be_replaced(store: &dyn MemoryStore) {
    let (acme, everyone) = (tenant("acme"), seen_from(None));
    let theirs = store_one(
        store,
        "globex",
        note("globex's fact", T0, Scope::Project, None),
        &direction(0, 0.0),
    )
    .await;
    let private = store_one(
        store,
        "acme",
        note("a thread's note", T0 + 1, Scope::Conversation, Some("c1")),
        &direction(1, 0.0),
    )
    .await;
    let mine = store_one(
        store,
        "acme",
        note("acme's fact", T0 + 2, Scope::Project, None),
        &direction(2, 0.0),
    )
    .await;
    store.delete(&acme, &everyone, &mine.id).await.unwrap();
    for (old, conversation) in [
        (theirs.id.as_str(), None),
        (private.id.as_str(), None),
        (private.id.as_str(), Some("c2")),
        (mine.id.as_str(), None),
        ("01JZZZZZZZZZZZZZZZZZZZZZZZ", None),
    ] {
        let attempt = note("a correction", T0 + 3, Scope::Project, conversation);
        let refused = replace(
            store,
            "acme",
            conversation,
            attempt,
            old,
            &direction(3, 0.0),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(&refused, StoreError::NotVisible { field: "replaces", id } if id == old),
            "{refused}"
        );
    }
    // Nothing was written, and nothing taken.
    assert_eq!(
        store
            .count_by_type(&acme, &seen_from(Some("c1")))
            .await
            .unwrap()
            .total,
        1
    );
    assert_eq!(
        store
            .count_by_type(&tenant("globex"), &everyone)
            .await
            .unwrap()
            .total,
        1
    );
}

/// Pages of `limit` after `after`, as `list_memories` asks for them.
async fn page(store: &dyn MemoryStore, after: Option<&super::After>, limit: usize) -> Vec<Memory> {
    store
        .list(&tenant("acme"), &seen_from(Some("c1")), None, after, limit)
        .await
        .unwrap()
}

pub async fn pages_go_on_exactly_after_the_last_memory_shown(store: &dyn MemoryStore) {
    let mut expected = Vec::new();
    for i in 0..15i64 {
        // Three share one millisecond; one in another thread is never shown here.
        let at = if i >= 12 { T0 + 12 } else { T0 + i };
        let conversation = if i == 5 { Some("c2") } else { Some("c1") };
        let scope = if i == 5 || i == 7 {
            Scope::Conversation
        } else {
            Scope::Project
        };
        let m = note(
            &format!("memory number {i} marker{i}"),
            at,
            scope,
            conversation,
        );
        let m = store_one(store, "acme", m, &direction(i as usize % 8, 0.1 * i as f32)).await;
        if i != 5 {
            expected.push(m.id);
        }
    }
    let (mut seen, mut times): (Vec<String>, Vec<i64>) = (Vec::new(), Vec::new());
    let mut after: Option<super::After> = None;
    let mut written = 0;
    loop {
        let shown = page(store, after.as_ref(), 4).await;
        if shown.is_empty() {
            break;
        }
        seen.extend(shown.iter().map(|m| m.id.clone()));
        times.extend(shown.iter().map(|m| m.created_at));
        after = shown.last().map(super::After::memory);
        // Between pages: a newer memory arrives, one already shown and one still to come
        // are forgotten.
        written += 1;
        let newer = note(
            &format!("arrived later {written} late{written}"),
            T0 + 100 + written,
            Scope::Project,
            None,
        );
        store_one(store, "acme", newer, &direction(written as usize % 8, 0.5)).await;
        let everyone = seen_from(None);
        if written == 1 {
            // expected[13] (the newest) was on this first page; expected[2] is to come.
            for id in [&expected[13], &expected[2]] {
                assert!(store.delete(&tenant("acme"), &everyone, id).await.unwrap());
            }
        }
    }
    // Each once; what was forgotten before its page never shows (what was forgotten after
    // it did), and what arrived after the first page never shows either.
    let mut wanted: Vec<String> = (expected.iter())
        .filter(|id| **id != expected[2])
        .cloned()
        .collect();
    let mut listed = seen.clone();
    listed.sort();
    listed.dedup();
    assert_eq!(
        listed.len(),
        seen.len(),
        "a memory was listed twice: {seen:?}"
    );
    wanted.sort();
    assert_eq!(listed, wanted);
    assert!(
        times.windows(2).all(|w| w[0] >= w[1]),
        "newest first: {times:?}"
    );
    // A cursor after a memory that is gone still goes on from where it was.
    let last_of_first = super::After::memory(&page(store, None, 30).await[3]);
    let gone_after = super::After {
        created_at: last_of_first.created_at,
        id: last_of_first.id.clone(),
    };
    store
        .delete(&tenant("acme"), &seen_from(None), &gone_after.id)
        .await
        .unwrap();
    let next = page(store, Some(&gone_after), 30).await;
    assert!(
        next.iter()
            .all(|m| (m.created_at, &m.id) != (gone_after.created_at, &gone_after.id))
    );
    assert!(next.iter().all(|m| m.created_at <= gone_after.created_at));
}

/// `memory`, expiring at `at`.
fn expiring(memory: NewMemory, at: i64) -> NewMemory {
    NewMemory {
        expires_at: Some(at),
        ..memory
    }
}

fn ids<'a>(memories: impl IntoIterator<Item = &'a Memory>) -> Vec<&'a str> {
    let mut ids: Vec<&str> = memories.into_iter().map(|m| m.id.as_str()).collect();
    ids.sort_unstable();
    ids
}

pub async fn an_expired_memory_is_gone_everywhere_from_its_instant(store: &dyn MemoryStore) {
    let acme = tenant("acme");
    let expiry = T0 + 60_000;
    let freeze = "the freeze lasts until friday";
    let gone = store_at(
        store,
        "acme",
        expiring(note(freeze, T0, Scope::Project, None), expiry),
        T0,
        &direction(0, 0.0),
    )
    .await;
    assert_eq!(gone.expires_at, Some(expiry));
    let private = note(
        "the release branch is frozen",
        T0 + 1,
        Scope::Conversation,
        Some("c1"),
    );
    let private = store_at(
        store,
        "acme",
        expiring(private, expiry),
        T0 + 1,
        &direction(1, 0.0),
    )
    .await;
    let kept = store_one(
        store,
        "acme",
        note("deploys go through argo", T0 + 2, Scope::Project, None),
        &direction(2, 0.0),
    )
    .await;
    let all = [gone.clone(), private.clone(), kept.clone()];

    // Up to its instant, it is there like any memory, its expiry with it.
    let before = seen_at(Some("c1"), expiry - 1);
    let found = nearest(store, &acme, &before, &direction(0, 0.0), 5)
        .await
        .unwrap();
    assert_eq!(ids(found.iter().map(|h| &*h.memory)), ids(&all));
    let listed = store.list(&acme, &before, None, None, 10).await.unwrap();
    assert_eq!(ids(&listed), ids(&all));
    let listed_gone = listed.iter().find(|m| m.id == gone.id).unwrap();
    assert_eq!(listed_gone.expires_at, Some(expiry));
    assert_eq!(store.count_by_type(&acme, &before).await.unwrap().total, 3);
    let got = store.get(&acme, &before, &gone.id).await.unwrap();
    assert_eq!(got.map(|m| m.id), Some(gone.id.clone()));

    // From its instant, nothing finds it, gets it, lists it, counts it, forgets or replaces it.
    let at = seen_at(Some("c1"), expiry);
    for expired in [&gone, &private] {
        assert_eq!(store.get(&acme, &at, &expired.id).await.unwrap(), None);
    }
    let found = nearest(store, &acme, &at, &direction(0, 0.0), 5)
        .await
        .unwrap();
    assert_eq!(ids(found.iter().map(|h| &*h.memory)), [kept.id.as_str()]);
    let by_words = keyword_hits(
        store,
        &acme,
        &at,
        &query_terms(freeze),
        &direction(0, 0.0),
        5,
    )
    .await
    .unwrap();
    assert!(by_words.is_empty(), "{by_words:?}");
    let listed = store.list(&acme, &at, None, None, 10).await.unwrap();
    assert_eq!(ids(&listed), [kept.id.as_str()]);
    let counts = store.count_by_type(&acme, &at).await.unwrap();
    assert_eq!(
        (counts.total, counts.by_type),
        (1, vec![(MemoryType::Project, 1)])
    );
    let refused = store
        .remember(
            &acme,
            &at,
            NewMemory {
                replaces: Some(gone.id.clone()),
                ..note("the freeze was lifted", expiry, Scope::Project, None)
            },
            &direction(3, 0.0),
            RULE,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, StoreError::NotVisible { field: "replaces", id } if *id == gone.id),
        "{refused}"
    );
    assert!(!store.delete(&acme, &at, &gone.id).await.unwrap());
    assert!(!store.delete(&acme, &at, &private.id).await.unwrap());
    store
        .record_access(&acme, &at, &[&gone], expiry)
        .await
        .unwrap();
    // Nor is it a memory a new one could repeat.
    let again = store
        .remember(
            &acme,
            &seen_at(None, expiry),
            note(freeze, expiry, Scope::Project, None),
            &direction(0, 0.0),
            RULE,
        )
        .await
        .unwrap();
    assert!(matches!(again, Remembered::Stored(_, _)), "{again:?}");
}

pub async fn the_sweep_deletes_what_expired_and_nothing_else(store: &dyn MemoryStore) {
    let expiry = T0 + 60_000;
    for who in ["acme", "globex"] {
        for (i, expires_at) in [Some(expiry), Some(expiry + 1_000), None]
            .into_iter()
            .enumerate()
        {
            let content = format!("{who}'s fact number {i}");
            let created = T0 + i as i64;
            let memory = NewMemory {
                expires_at,
                ..note(&content, created, Scope::Project, None)
            };
            store_at(store, who, memory, created, &direction(i, 0.0)).await;
        }
    }
    // Seen from before anything expired: only what the sweep deleted is missing.
    let early = seen_at(None, T0 + 10);
    let left = |who: &'static str| {
        let early = early.clone();
        async move {
            let listed = store
                .list(&tenant(who), &early, None, None, 10)
                .await
                .unwrap();
            listed.into_iter().map(|m| m.content).collect::<Vec<_>>()
        }
    };
    let expired = |deleted, more| Expired { deleted, more };
    assert_eq!(
        store.expire(expiry - 1, 500).await.unwrap(),
        expired(0, false)
    );
    assert_eq!(left("acme").await.len(), 3, "nothing had expired");
    assert_eq!(store.expire(expiry, 500).await.unwrap(), expired(2, false));
    for who in ["acme", "globex"] {
        assert_eq!(
            left(who).await,
            [
                format!("{who}'s fact number 2"),
                format!("{who}'s fact number 1")
            ]
        );
        let found = nearest(store, &tenant(who), &early, &direction(0, 0.0), 5)
            .await
            .unwrap();
        assert_eq!(
            found.len(),
            2,
            "{who}: the deleted memory is not found either"
        );
        assert_eq!(
            store
                .count_by_type(&tenant(who), &early)
                .await
                .unwrap()
                .total,
            2
        );
    }
    // A pass deletes at most its batch and says there may be more; the next one goes on.
    assert_eq!(
        store.expire(expiry + 1_000, 1).await.unwrap(),
        expired(1, true)
    );
    assert_eq!(
        store.expire(expiry + 1_000, 500).await.unwrap(),
        expired(1, false)
    );
    assert_eq!(
        store.expire(expiry + 1_000, 500).await.unwrap(),
        expired(0, false)
    );
    for who in ["acme", "globex"] {
        assert_eq!(left(who).await, [format!("{who}'s fact number 2")]);
    }
}

/// One store reopened with the model given, as another process would open it.
pub async fn run_model_record<S: MemoryStore, F: Future<Output = Result<S, StoreError>>>(
    open: impl Fn(crate::memory::Model) -> F,
) {
    let mine = model(8);
    let theirs = crate::memory::Model {
        name: "test:another".into(),
        dimension: 8,
    };
    let first = open(mine.clone()).await.unwrap();
    // Nothing is recorded until a write: a process of another model opens too.
    let other = open(theirs.clone()).await.unwrap();
    store_one(
        &first,
        "acme",
        note("a fact", T0, Scope::Project, None),
        &direction(0, 0.0),
    )
    .await;
    let refused = other
        .remember(
            &tenant("acme"),
            &seen_from(None),
            note("another fact", T0 + 1, Scope::Project, None),
            &direction(1, 0.0),
            RULE,
        )
        .await
        .unwrap_err();
    let named_both = |e: &StoreError| {
        matches!(e, StoreError::OtherModel { stored, configured, .. }
            if *stored == mine && *configured == theirs)
    };
    assert!(named_both(&refused), "{refused}");
    let message = refused.to_string();
    assert!(
        message.contains("test:directions, 8d") && message.contains("test:another, 8d"),
        "{message}"
    );
    assert!(message.contains("`mcp-memory reembed`"), "{message}");
    assert!(message.contains("mcp-memory import --reembed"), "{message}");
    // Opened again with the other model, it refuses: at open, or (S3) at the first search.
    match open(theirs.clone()).await {
        Err(e) => assert!(named_both(&e), "{e}"),
        Ok(late) => {
            let e = nearest(
                &late,
                &tenant("acme"),
                &seen_from(None),
                &direction(0, 0.0),
                5,
            )
            .await
            .unwrap_err();
            assert!(named_both(&e), "{e}");
        }
    }
    let again = open(mine).await.unwrap();
    let found = nearest(
        &again,
        &tenant("acme"),
        &seen_from(None),
        &direction(0, 0.0),
        5,
    )
    .await
    .unwrap();
    assert_eq!(found.len(), 1, "nothing was altered");
}

/// A fit for `model` whose floor is `floor`.
fn fit_of(model: &crate::memory::Model, floor: f64) -> crate::embed::Fit {
    let rate = |errors, of| crate::embed::Rate { errors, of };
    crate::embed::Fit {
        model: model.name.clone(),
        dimension: model.dimension,
        at: T0,
        calibration: crate::embed::Calibration {
            floor,
            high: Some(0.8),
            baseline: 0.1,
            duplicates: Rule {
                repeat: 0.93,
                hangul_repeat: 0.9,
                similar: 0.85,
            },
            abstention: Some(crate::ranking::Abstention {
                words: 0.2,
                threshold: 0.45,
            }),
            reads_across_scripts: true,
        },
        expected: crate::embed::Expected {
            found_called_no_match: rate(3, 30),
            unanswerable_vouched: rate(12, 20),
            repeats_stored_twice: rate(4, 10),
            different_refused: rate(0, 10),
        },
    }
}

/// The fit `mcp-memory calibrate` records is what every process opened on the store reads,
/// whole, until another replaces it; memories are untouched by either, and a process of
/// another model can record none over the vectors of this one.
pub async fn run_recorded_fit<S: MemoryStore, F: Future<Output = Result<S, StoreError>>>(
    open: impl Fn(crate::memory::Model) -> F,
) {
    let mine = model(8);
    let first = open(mine.clone()).await.unwrap();
    assert_eq!(first.calibration().await.unwrap(), None);
    let kept = store_one(
        &first,
        "acme",
        note("a fact", T0, Scope::Project, None),
        &direction(0, 0.0),
    )
    .await;
    let fit = fit_of(&mine, 0.3);
    first.record_calibration(&fit).await.unwrap();
    let second = open(mine.clone()).await.unwrap();
    assert_eq!(second.calibration().await.unwrap(), Some(fit));
    let refit = fit_of(&mine, 0.35);
    second.record_calibration(&refit).await.unwrap();
    assert_eq!(first.calibration().await.unwrap(), Some(refit.clone()));
    let found = nearest(
        &second,
        &tenant("acme"),
        &seen_from(None),
        &direction(0, 0.0),
        5,
    )
    .await
    .unwrap();
    assert_eq!(
        found.iter().map(|h| &h.memory.id).collect::<Vec<_>>(),
        [&kept.id]
    );
    let theirs = crate::memory::Model {
        name: "test:another".into(),
        dimension: 8,
    };
    // Refused at open, or (S3) when it records.
    if let Ok(other) = open(theirs.clone()).await {
        let refused = other.record_calibration(&fit_of(&theirs, 0.5)).await;
        assert!(
            matches!(refused, Err(StoreError::OtherModel { .. })),
            "{refused:?}"
        );
    }
    assert_eq!(second.calibration().await.unwrap(), Some(refit));
}

/// Every page of an export, `page` at a time.
async fn export_all(
    store: &dyn MemoryStore,
    only: &[Tenant],
    at: i64,
    page: usize,
) -> Vec<Portable> {
    let mut all = Vec::new();
    let mut from: Option<String> = None;
    loop {
        let exported = store.export(only, at, from.as_deref(), page).await.unwrap();
        assert!(exported.memories.len() <= page);
        all.extend(exported.memories);
        match exported.next {
            Some(next) => from = Some(next),
            None => return all,
        }
    }
}

fn by_tenant_and_id(mut all: Vec<Portable>) -> Vec<Portable> {
    all.sort_by(|a, b| (a.tenant.as_str(), &a.memory.id).cmp(&(b.tenant.as_str(), &b.memory.id)));
    all
}

/// Export from one store and import into another (`make` twice): what the first holds,
/// whole, comes out once; imported twice it is stored once; and the second answers alike.
pub async fn run_portable<S: MemoryStore, F: Future<Output = S>>(make: impl Fn() -> F) {
    let (source, target) = (make().await, make().await);
    let now = crate::memory::now_ms();
    let mut written = Vec::new();
    for (i, who) in ["acme", "acme", "globex", "acme", "acme"]
        .into_iter()
        .enumerate()
    {
        let mut m = note(
            &format!("{who}'s fact {i}"),
            T0 + i as i64,
            Scope::Project,
            None,
        );
        match i {
            1 => {
                m.scope = Scope::Conversation;
                m.conversation = Some(Conversation::new_unchecked("c1".into()));
                m.memory_type = MemoryType::Pattern;
                m.category = Some("convention".into());
                m.tags = vec!["build".into(), "배포".into()];
            }
            3 => m.expires_at = Some(now + 86_400_000),
            4 => m.expires_at = Some(now - 1),
            _ => {}
        }
        let at = if i == 4 { now - 10 } else { now };
        written.push((
            who,
            store_at(&source, who, m, at, &direction(i, 0.1 * i as f32)).await,
        ));
    }
    // A correction, and a use of it.
    let fixed = NewMemory {
        replaces: Some(written[0].1.id.clone()),
        ..note("acme's fact 0, corrected", T0 + 9, Scope::Project, None)
    };
    let Remembered::Stored(fixed, _) = source
        .remember(
            &tenant("acme"),
            &seen_from(None),
            fixed,
            &direction(7, 0.0),
            RULE,
        )
        .await
        .unwrap()
    else {
        panic!("the correction was not stored");
    };
    source
        .record_access(&tenant("acme"), &seen_from(None), &[&fixed], T0 + 50)
        .await
        .unwrap();
    source.flush().await.unwrap();

    let all = by_tenant_and_id(export_all(&source, &[], now, 2).await);
    // Everything held, once each, but what replaced and what expired.
    let mut expected: Vec<&str> = vec![
        written[1].1.id.as_str(),
        written[2].1.id.as_str(),
        written[3].1.id.as_str(),
        fixed.id.as_str(),
    ];
    expected.sort_unstable();
    let mut got: Vec<&str> = all.iter().map(|p| p.memory.id.as_str()).collect();
    got.sort_unstable();
    assert_eq!(got, expected);
    let whole = |id: &str| all.iter().find(|p| p.memory.id == id).unwrap();
    assert_eq!(whole(&written[1].1.id).memory, written[1].1, "a note whole");
    assert_eq!(whole(&written[1].1.id).embedding, direction(1, 0.1));
    assert_eq!(whole(&written[2].1.id).tenant.as_str(), "globex");
    assert_eq!(
        whole(&written[3].1.id).memory.expires_at,
        written[3].1.expires_at
    );
    let corrected = &whole(&fixed.id).memory;
    assert_eq!(
        corrected.replaces.as_deref(),
        Some(written[0].1.id.as_str())
    );
    assert_eq!(
        (corrected.access_count, corrected.last_accessed_at),
        (1, Some(T0 + 50))
    );
    // One tenant only, however often it is named.
    let globex = export_all(&source, &[tenant("globex"), tenant("globex")], now, 1).await;
    assert_eq!(globex.len(), 1);
    assert_eq!(globex[0].memory.id, written[2].1.id);

    // Imported twice, stored once, and answered alike.
    assert_eq!(target.import(&all).await.unwrap(), 4);
    assert_eq!(target.import(&all).await.unwrap(), 0);
    target.flush().await.unwrap();
    let again = by_tenant_and_id(export_all(&target, &[], now, 10).await);
    assert_eq!(again, all);
    for (who, conversation) in [("acme", None), ("acme", Some("c1")), ("globex", None)] {
        let seen = seen_from(conversation);
        let who = tenant(who);
        assert_eq!(
            target.list(&who, &seen, None, None, 10).await.unwrap(),
            source.list(&who, &seen, None, None, 10).await.unwrap()
        );
        assert_eq!(
            target.count_by_type(&who, &seen).await.unwrap(),
            source.count_by_type(&who, &seen).await.unwrap()
        );
        let near = |hits: Vec<Hit>| {
            (by_id(hits).into_iter())
                .map(|h| (h.memory.id.clone(), h.similarity))
                .collect::<Vec<_>>()
        };
        let query = direction(1, 0.1);
        let a = near(nearest(&target, &who, &seen, &query, 3).await.unwrap());
        let b = near(nearest(&source, &who, &seen, &query, 3).await.unwrap());
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.0, y.0);
            assert!((x.1 - y.1).abs() < 1e-6);
        }
    }
}

/// A vector of width 12 for a memory of the re-embedding test, along an axis the old
/// vectors (width 8) never use.
fn wide(content: &str) -> Vec<f32> {
    let axis = ["alpha", "beta", "gamma", "delta"]
        .iter()
        .position(|c| *c == content)
        .expect("a memory of the test");
    let mut v = vec![0.0; 12];
    v[8 + axis] = 1.0;
    v
}

/// Each memory `pending` names, with its vector of the new model, every page from the first.
async fn embed_pending(run: &dyn Reembedding, page: usize) -> Vec<(String, Vec<f32>)> {
    let mut staged = Vec::new();
    let mut from: Option<String> = None;
    loop {
        let pending = run.pending(from.as_deref(), page).await.unwrap();
        let vectors: Vec<(String, Vec<f32>)> = (pending.memories.iter())
            .map(|m| (m.key.clone(), wide(&m.content)))
            .collect();
        run.stage(&vectors).await.unwrap();
        staged.extend(vectors);
        match pending.next {
            Some(next) => from = Some(next),
            None => return staged,
        }
    }
}

/// `mcp-memory reembed` from the model of width 8 to one of width 12. `open(model)` opens
/// the store as a server of that model would, `reembedder()` opens it for a re-embedding;
/// `in_place` stores switch their vectors (SQLite, PostgreSQL), S3 copies them to another
/// index, which `open` opens for the new model.
pub async fn run_reembed<S, F, G>(
    open: impl Fn(crate::memory::Model) -> F,
    reembedder: impl Fn() -> G,
    in_place: bool,
) where
    S: MemoryStore,
    F: Future<Output = Result<S, StoreError>>,
    G: Future<Output = Box<dyn Reembedding>>,
{
    use super::reembed::{Plan, Switched};
    let (old, new) = (
        model(8),
        crate::memory::Model {
            name: "test:wider".into(),
            dimension: 12,
        },
    );
    let (acme, globex, chat) = (tenant("acme"), tenant("globex"), Some("chat:1"));
    let server = open(old.clone()).await.unwrap();
    let first = |content: &str, at: i64, conversation: Option<&str>| {
        let scope = match conversation {
            Some(_) => Scope::Conversation,
            None => Scope::Project,
        };
        note(content, at, scope, conversation)
    };
    let a = store_one(
        &server,
        "acme",
        first("alpha", T0, None),
        &direction(0, 0.0),
    )
    .await;
    let b = store_one(
        &server,
        "acme",
        first("beta", T0 + 1, chat),
        &direction(1, 0.0),
    )
    .await;
    let c = store_one(
        &server,
        "globex",
        first("gamma", T0 + 2, None),
        &direction(2, 0.0),
    )
    .await;

    let run = reembedder().await;
    let plan = run.begin(&new).await.unwrap();
    assert_eq!(plan.recorded, Some(old.clone()));
    if in_place {
        assert_eq!((plan.total, plan.staged), (Some(3), 0));
    }
    let page = run.pending(None, 1).await.unwrap();
    assert_eq!(page.memories.len(), 1);
    assert!(page.next.is_some(), "a full page says there may be more");
    let vectors: Vec<_> = (page.memories.iter())
        .map(|m| (m.key.clone(), wide(&m.content)))
        .collect();
    run.stage(&vectors).await.unwrap();
    drop(run);

    // The run stopped; the next one goes on with the two memories left.
    let run = reembedder().await;
    let plan = run.begin(&new).await.unwrap();
    if in_place {
        assert_eq!(
            plan,
            Plan {
                recorded: Some(old.clone()),
                total: Some(3),
                staged: 1
            }
        );
    }
    let rest = embed_pending(&*run, 1).await;
    assert_eq!(rest.len(), 2, "each memory is embedded once");
    assert!(!rest.iter().any(|(key, _)| *key == vectors[0].0));

    // A server writes meanwhile, and answers with the old vectors until the switch.
    let d = store_one(
        &server,
        "acme",
        first("delta", T0 + 3, None),
        &direction(3, 0.0),
    )
    .await;
    let (server, acme_ref) = (&server, &acme);
    let old_nearest = move |vector: Vec<f32>| async move {
        nearest(server, acme_ref, &seen_from(chat), &vector, 5).await
    };
    assert_eq!(
        old_nearest(direction(1, 0.0)).await.unwrap()[0].memory.id,
        b.id
    );
    if in_place {
        // The write since makes the switch wait, and change nothing.
        assert_eq!(run.switch(&new).await.unwrap(), Switched::Behind(1));
        assert_eq!(
            old_nearest(direction(3, 0.0)).await.unwrap()[0].memory.id,
            d.id
        );
        assert_eq!(embed_pending(&*run, 10).await.len(), 1);
        assert_eq!(run.switch(&new).await.unwrap(), Switched::Done);
        // The old model's server now refuses to search or write, naming both models.
        let refused = old_nearest(direction(0, 0.0)).await.unwrap_err();
        let names_both = |e: &StoreError| {
            matches!(e, StoreError::OtherModel { stored, configured, .. }
                if *stored == new && *configured == old)
        };
        assert!(names_both(&refused), "{refused}");
        let refused = (server.remember(
            &acme,
            &seen_from(None),
            first("epsilon", T0 + 4, None),
            &direction(4, 0.0),
            RULE,
        ))
        .await
        .unwrap_err();
        assert!(names_both(&refused), "{refused}");
        match open(old.clone()).await {
            Err(e) => assert!(names_both(&e), "{e}"),
            Ok(_) => panic!("a store of the new model opened for the old"),
        }
    } else {
        // Copied to a new index: the old one serves on, and a second run copies what was
        // written through it meanwhile.
        assert_eq!(run.switch(&new).await.unwrap(), Switched::Done);
        assert_eq!(
            old_nearest(direction(3, 0.0)).await.unwrap()[0].memory.id,
            d.id
        );
        let again = reembedder().await;
        again.begin(&new).await.unwrap();
        let late = embed_pending(&*again, 10).await;
        assert_eq!(late.len(), 1, "only the memory written since: {late:?}");
        assert_eq!(again.switch(&new).await.unwrap(), Switched::Done);
    }

    // The new model's server finds each memory by its new vector, and lists and counts the
    // same memories with their ids.
    let renewed = open(new.clone()).await.unwrap();
    for (who, memory, content, seen) in [
        (&acme, &a, "alpha", None),
        (&acme, &b, "beta", chat),
        (&acme, &d, "delta", None),
        (&globex, &c, "gamma", None),
    ] {
        let found = nearest(&renewed, who, &seen_from(seen), &wide(content), 1)
            .await
            .unwrap();
        assert_eq!(found[0].memory.id, memory.id, "{content}");
        assert!(
            found[0].similarity > 0.99,
            "{content}: {}",
            found[0].similarity
        );
        assert_eq!(found[0].memory.content, content);
    }
    let listed = (renewed.list(&acme, &seen_from(chat), None, None, 10))
        .await
        .unwrap();
    let ids: Vec<&str> = listed.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, [&d.id, &b.id, &a.id]);
    assert_eq!(
        renewed
            .count_by_type(&acme, &seen_from(chat))
            .await
            .unwrap()
            .total,
        3
    );
    if !in_place {
        // Forgotten through the new index, a memory is not copied again.
        assert!(
            renewed
                .delete(&acme, &seen_from(None), &a.id)
                .await
                .unwrap()
        );
        let third = reembedder().await;
        third.begin(&new).await.unwrap();
        assert!(embed_pending(&*third, 10).await.is_empty());
    }
}
