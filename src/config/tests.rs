//! The configuration as an operator gives it: defaults, refusals by name, and what is
//! ignored with a warning.

use super::*;
use crate::embed::{Calibrated, Calibration, Fit};
use crate::ranking::{Abstention, Thresholds};
use crate::{embed, store};
use std::collections::HashMap;
use std::path::PathBuf;

fn load(pairs: &[(&str, &str)]) -> Result<Config, String> {
    let vars: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Config::from_vars(|name| vars.get(name).cloned())
}

const BASE: [(&str, &str); 4] = [
    ("DATABASE_URL", "sqlite:/tmp/m.db"),
    ("EMBEDDING_PROVIDER", "openai"),
    ("EMBEDDING_BASE_URL", "http://127.0.0.1:9/v1/"),
    ("EMBEDDING_API_KEY", "k"),
];

fn with(extra: &[(&'static str, &'static str)]) -> Result<Config, String> {
    let mut pairs: Vec<(&str, &str)> = BASE.to_vec();
    pairs.retain(|(k, _)| !extra.iter().any(|(e, _)| e == k));
    pairs.extend_from_slice(extra);
    load(&pairs)
}

#[test]
// Without the postgres feature the store pattern below cannot fail.
#[allow(irrefutable_let_patterns)]
fn defaults() {
    let c = with(&[]).unwrap();
    assert_eq!(c.port, 3000);
    assert_eq!(c.numbers.judged(None).thresholds, Thresholds::of_floor(0.1));
    assert_eq!(c.numbers.judged(None).calibrated, Calibrated::Not);
    assert_eq!(c.body_limit, 1024 * 1024);
    assert!(c.gate.is_open() && c.allowed_origins.is_empty());
    assert_eq!(c.max_connections, 256);
    assert_eq!(c.max_idle_connections, 4096);
    assert_eq!(c.timeouts.write, std::time::Duration::from_secs(30));
    let embed::Settings::OpenAi {
        base_url,
        model,
        dimension,
        max_requests,
        max_tokens,
        ..
    } = c.embedder
    else {
        panic!("not the openai embedder");
    };
    assert_eq!(base_url, "http://127.0.0.1:9/v1");
    assert_eq!((max_requests, max_tokens), (8, 8191));
    assert_eq!(
        (model.as_str(), dimension),
        ("text-embedding-3-small", 1536)
    );
    let store::Settings::Sqlite { path, .. } = c.store else {
        panic!("not the SQLite store");
    };
    assert_eq!(path, PathBuf::from("/tmp/m.db"));
}

#[test]
fn port_must_be_in_range() {
    for bad in ["0", "65536", "-1", "3.0", "abc"] {
        let err = with(&[("PORT", bad)]).err().unwrap();
        assert_eq!(
            err,
            format!("PORT must be an integer between 1 and 65535, got \"{bad}\"")
        );
    }
    assert_eq!(with(&[("PORT", " 8080 ")]).unwrap().port, 8080);
}

#[test]
fn similarity_thresholds_are_in_the_open_closed_unit_interval() {
    for name in ["RECALL_MIN_SIMILARITY", "RECALL_HIGH_SIMILARITY"] {
        for bad in ["0", "-0.5", "2", "many", "NaN", "inf"] {
            let err = with(&[(name, bad)]).err().unwrap();
            assert!(
                err.starts_with(&format!("{name} must be greater than 0 and at most 1")),
                "{err}"
            );
        }
    }
    let thresholds = |pairs: &[(&'static str, &'static str)]| {
        with(pairs).unwrap().numbers.judged(None).thresholds
    };
    assert_eq!(
        thresholds(&[("RECALL_MIN_SIMILARITY", "1")]),
        Thresholds::of_floor(1.0)
    );
    assert_eq!(
        thresholds(&[("RECALL_MIN_SIMILARITY", "0.25")]),
        Thresholds::of_floor(0.25)
    );
    let both = [
        ("RECALL_MIN_SIMILARITY", "0.25"),
        ("RECALL_HIGH_SIMILARITY", "0.5"),
    ];
    assert_eq!(
        thresholds(&both),
        Thresholds {
            floor: 0.25,
            high: 0.5,
            baseline: 0.0,
            abstention: None,
            reads_across_scripts: false,
        }
    );
    let below = with(&[
        ("RECALL_MIN_SIMILARITY", "0.5"),
        ("RECALL_HIGH_SIMILARITY", "0.4"),
    ]);
    assert_eq!(
        below.err().unwrap(),
        "RECALL_HIGH_SIMILARITY (0.4) must be at least RECALL_MIN_SIMILARITY (0.5)"
    );
}

/// Each local model we fetch has its own measured thresholds; e5's HIGH is measured, not a
/// multiple, and a configured floor above it raises it to the floor.
#[cfg(feature = "local")]
#[test]
fn each_local_model_has_its_measured_thresholds() {
    let local = |extra: &[(&'static str, &'static str)]| {
        let mut pairs = vec![("EMBEDDING_PROVIDER", "local")];
        pairs.extend_from_slice(extra);
        with(&pairs).unwrap().numbers.judged(None).thresholds
    };
    let e5 = Thresholds {
        floor: 0.78,
        high: 0.87,
        baseline: 0.7,
        abstention: Some(Abstention {
            words: 0.1,
            threshold: 0.85,
        }),
        reads_across_scripts: true,
    };
    let minilm = Thresholds {
        abstention: Some(Abstention {
            words: 1.0,
            threshold: 0.75,
        }),
        ..Thresholds::of_floor(0.2)
    };
    assert_eq!(local(&[]), e5);
    assert_eq!(
        local(&[("EMBEDDING_MODEL", "/opt/m/multilingual-e5-small")]),
        e5
    );
    assert_eq!(local(&[("EMBEDDING_MODEL", "all-MiniLM-L6-v2")]), minilm);
    let gemma = Thresholds {
        floor: 0.25,
        high: 0.7,
        baseline: 0.1,
        abstention: Some(Abstention {
            words: 0.2,
            threshold: 0.4,
        }),
        reads_across_scripts: true,
    };
    assert_eq!(local(&[("EMBEDDING_MODEL", "embeddinggemma-300m")]), gemma);
    assert_eq!(
        local(&[("EMBEDDING_MODEL", "./my-own-bert")]),
        Thresholds::of_floor(0.2)
    );
    // A floor below e5's baseline moves the baseline down with it: nothing the floor lets
    // through is measured as no closer than unrelated text.
    assert_eq!(local(&[("RECALL_MIN_SIMILARITY", "0.6")]).baseline, 0.6);
    // Only a model we fetch comes calibrated; a floor configured for another does not
    // calibrate it.
    let calibrated = |extra: &[(&'static str, &'static str)]| {
        let mut pairs = vec![("EMBEDDING_PROVIDER", "local")];
        pairs.extend_from_slice(extra);
        with(&pairs).unwrap().numbers.judged(None).calibrated
    };
    assert_eq!(calibrated(&[]), Calibrated::Shipped);
    assert_eq!(
        calibrated(&[("EMBEDDING_MODEL", "./my-own-bert")]),
        Calibrated::Not
    );
    assert_eq!(
        calibrated(&[
            ("EMBEDDING_MODEL", "./my-own-bert"),
            ("RECALL_MIN_SIMILARITY", "0.3")
        ]),
        Calibrated::Not
    );
    assert_eq!(local(&[("EMBEDDING_MODEL", "all-mpnet-base-v2")]), minilm);
    assert_eq!(
        local(&[("RECALL_MIN_SIMILARITY", "0.9")]),
        Thresholds {
            floor: 0.9,
            high: 0.9,
            ..e5
        }
    );
    assert_eq!(
        local(&[("RECALL_MIN_SIMILARITY", "0.8")]).high,
        0.87,
        "a floor below it keeps the measured HIGH"
    );
}

#[test]
fn storage_refusals_name_the_variables() {
    // Nothing chosen: the embedded file in the user's data directory, where SQLite is built.
    match load(&BASE[1..]) {
        #[cfg(feature = "sqlite")]
        Ok(Config {
            store: store::Settings::Sqlite { path, .. },
            ..
        }) => assert!(path.ends_with("mcp-memory/memory.db"), "{}", path.display()),
        Err(none) => assert!(
            !cfg!(feature = "sqlite")
                && none.starts_with("no storage is configured")
                && none.contains("DATABASE_URL")
        ),
        #[allow(unreachable_patterns)]
        Ok(_) => panic!("another store than the default"),
    }
    let only_state = load(&[&BASE[1..], &[("STATE_BUCKET", "s")]].concat())
        .err()
        .unwrap();
    assert_eq!(only_state, "VECTOR_BUCKET is required");
    let only_vector = load(&[&BASE[1..], &[("VECTOR_BUCKET", "v")]].concat())
        .err()
        .unwrap();
    assert_eq!(only_vector, "STATE_BUCKET is required");
    let pg = with(&[("DATABASE_URL", "postgres://u:hunter2@db/x")]);
    if cfg!(feature = "postgres") {
        assert!(pg.is_ok());
    } else {
        let pg = pg.err().unwrap();
        assert!(pg.contains("PostgreSQL") && !pg.contains("hunter2"), "{pg}");
    }
    let odd = with(&[("DATABASE_URL", "mysql://u:hunter2@db/x")])
        .err()
        .unwrap();
    assert!(odd.starts_with("DATABASE_URL must start with") && !odd.contains("hunter2"));
    assert!(
        with(&[("DATABASE_URL", "sqlite:")])
            .err()
            .unwrap()
            .contains("needs a file path")
    );
}

#[test]
fn embedding_refusals_name_the_variables() {
    // No provider: the local model where it is built, from the data directory, with its floor.
    #[cfg(feature = "local")]
    match load(&[BASE[0]]) {
        Ok(Config {
            embedder:
                embed::Settings::Local {
                    model_dir,
                    dimension: None,
                    ..
                },
            numbers,
            ..
        }) => {
            assert!(model_dir.ends_with("mcp-memory/models/multilingual-e5-small"));
            assert_eq!(numbers.calibration.floor, 0.78);
        }
        other => panic!("the default provider is local: {:?}", other.err()),
    }
    // Under S3 (and in builds without the local model) the default is Bedrock's.
    let s3 = [("VECTOR_BUCKET", "vectors"), ("STATE_BUCKET", "state")];
    let defaulted = if cfg!(feature = "local") {
        load(&s3)
    } else {
        load(&[BASE[0]])
    };
    match defaulted {
        #[cfg(feature = "bedrock")]
        Ok(Config {
            embedder:
                embed::Settings::Bedrock {
                    model,
                    dimension,
                    region,
                },
            ..
        }) => assert_eq!(
            (model.as_str(), dimension, region.as_str()),
            ("amazon.titan-embed-text-v2:0", 1024, "ap-northeast-2")
        ),
        Err(other) if !cfg!(feature = "s3") && cfg!(feature = "local") => {
            assert!(other.contains("S3"), "{other}")
        }
        Err(default) => assert!(
            !cfg!(feature = "bedrock")
                && default.starts_with("EMBEDDING_PROVIDER defaults to bedrock"),
            "{default}"
        ),
        #[allow(unreachable_patterns)]
        Ok(_) => panic!("the default provider is bedrock"),
    }
    let unknown = with(&[("EMBEDDING_PROVIDER", "cohere")]).err().unwrap();
    assert!(unknown.starts_with("EMBEDDING_PROVIDER must be"));
    let no_base = load(&[BASE[0], BASE[1], BASE[3]]).err().unwrap();
    assert_eq!(no_base, "EMBEDDING_BASE_URL is required");
    let no_key = load(&[BASE[0], BASE[1], BASE[2]]).err().unwrap();
    assert_eq!(no_key, "EMBEDDING_API_KEY is required");
    for bad in [
        "ftp://x",
        "http://user:pw@host/v1",
        "https://h/v1?x=1",
        "https://h/v1#f",
        "http://",
    ] {
        let err = with(&[("EMBEDDING_BASE_URL", bad)]).err().unwrap();
        assert!(
            err.starts_with("EMBEDDING_BASE_URL must be an HTTP(S) base URL"),
            "{bad}"
        );
    }
    let dim = with(&[("EMBEDDING_DIM", "0")]).err().unwrap();
    assert_eq!(dim, "EMBEDDING_DIM must be a positive integer, got \"0\"");
    let turns = with(&[("EMBEDDING_MAX_REQUESTS", "0")]).err().unwrap();
    assert_eq!(
        turns,
        "EMBEDDING_MAX_REQUESTS must be a positive integer, got \"0\""
    );
    let turns = with(&[("EMBEDDING_MAX_REQUESTS", "3000000000000000000")])
        .err()
        .unwrap();
    assert_eq!(
        turns,
        "EMBEDDING_MAX_REQUESTS must be at most 1000, got \"3000000000000000000\""
    );
    for (given, refusal) in [
        (
            "0",
            "MCP_MAX_CONNECTIONS must be a positive integer, got \"0\"",
        ),
        (
            "1000001",
            "MCP_MAX_CONNECTIONS must be at most 1000000, got \"1000001\"",
        ),
    ] {
        assert_eq!(
            with(&[("MCP_MAX_CONNECTIONS", given)]).err().unwrap(),
            refusal
        );
        let idle = with(&[("MCP_MAX_IDLE_CONNECTIONS", given)]).err().unwrap();
        assert_eq!(idle, refusal.replace("MCP_MAX_", "MCP_MAX_IDLE_"));
    }
    let write = with(&[("MCP_WRITE_TIMEOUT_MS", "-1")]).err().unwrap();
    assert_eq!(
        write,
        "MCP_WRITE_TIMEOUT_MS must be a positive integer, got \"-1\""
    );
    // The local model's arithmetic: f32 unless int8 is asked for; nothing else.
    #[cfg(feature = "local")]
    {
        use mcp_memory_encoder::{Kernel, Precision};
        let precision = |given: &'static str| {
            with(&[
                ("EMBEDDING_PROVIDER", "local"),
                ("EMBEDDING_PRECISION", given),
            ])
        };
        let local_precision = |config: Result<Config, String>| match config.unwrap().embedder {
            embed::Settings::Local { precision, .. } => precision,
            #[allow(unreachable_patterns)]
            _ => panic!("not the local model"),
        };
        let default = with(&[("EMBEDDING_PROVIDER", "local")]);
        assert_eq!(local_precision(default), Precision::F32);
        assert_eq!(local_precision(precision("f32")), Precision::F32);
        // int8 by default on a CPU whose best kernel is the portable one (slower in int8) is
        // refused; the portable kernel named runs it anyway.
        if Kernel::best() == Kernel::portable() {
            let refused = precision("int8").err().unwrap();
            assert!(refused.starts_with("EMBEDDING_PRECISION=int8 needs a CPU with VNNI"));
        } else {
            assert_eq!(local_precision(precision("int8")), Precision::Int8);
        }
        let portable = with(&[
            ("EMBEDDING_PROVIDER", "local"),
            ("EMBEDDING_KERNEL", "portable"),
            ("EMBEDDING_PRECISION", "int8"),
        ]);
        assert_eq!(local_precision(portable), Precision::Int8);
        assert_eq!(
            precision("int4").err().unwrap(),
            "EMBEDDING_PRECISION must be \"f32\" or \"int8\", got \"int4\""
        );
    }
    // Local without a model directory takes the data directory's; a bare name is a model
    // there, a path is the model's directory.
    #[cfg(feature = "local")]
    for (given, found) in [
        (None, "mcp-memory/models/multilingual-e5-small"),
        (
            Some("all-MiniLM-L6-v2"),
            "mcp-memory/models/all-MiniLM-L6-v2",
        ),
        (
            Some("multilingual-e5-small"),
            "mcp-memory/models/multilingual-e5-small",
        ),
        (Some("./my-model"), "./my-model"),
        (Some("/opt/models/minilm"), "/opt/models/minilm"),
    ] {
        let mut pairs = vec![("EMBEDDING_PROVIDER", "local")];
        pairs.extend(given.map(|g| ("EMBEDDING_MODEL", g)));
        match with(&pairs).unwrap().embedder {
            embed::Settings::Local { model_dir, .. } => {
                assert!(
                    model_dir.ends_with(found),
                    "{given:?}: {}",
                    model_dir.display()
                )
            }
            #[allow(unreachable_patterns)]
            _ => panic!("not the local model"),
        }
    }
}

#[test]
fn settings_for_other_backends_are_ignored_with_a_warning() {
    let c = with(&[
        ("KNOWLEDGE_BASE_ID", "KB12345678"),
        ("STATS_FLUSH_MS", "100"),
        ("VECTOR_BUCKET", "v"),
    ])
    .unwrap();
    let warned = |start: &str| c.warnings.iter().any(|w| w.starts_with(start));
    assert!(warned(
        "VECTOR_BUCKET is ignored: DATABASE_URL selects the store"
    ));
    assert!(warned(
        "STATS_FLUSH_MS is ignored: it applies to the S3 store only"
    ));
    assert_eq!(c.knowledge_base.is_some(), cfg!(feature = "kb"));
    assert_eq!(
        c.warnings
            .iter()
            .any(|w| w.starts_with("KNOWLEDGE_BASE_ID is ignored")),
        !cfg!(feature = "kb")
    );
    let err = with(&[("STATS_FLUSH_MS", "soon")]).err().unwrap();
    assert_eq!(
        err,
        "STATS_FLUSH_MS must be a positive integer, got \"soon\""
    );
}

#[cfg(feature = "s3")]
#[test]
fn the_s3_store_reads_its_buckets_and_counter_settings() {
    let s3 = [
        ("VECTOR_BUCKET", "acme-vectors"),
        ("STATE_BUCKET", "acme-state"),
        ("EMBEDDING_PROVIDER", "openai"),
        ("EMBEDDING_BASE_URL", "http://127.0.0.1:9/v1"),
        ("EMBEDDING_API_KEY", "k"),
    ];
    let c = load(&s3).unwrap();
    let store::Settings::S3(settings) = &c.store else {
        panic!("not the S3 store");
    };
    assert_eq!(
        (
            settings.vector_index.as_str(),
            settings.region.as_str(),
            settings.flush_every.as_millis(),
            settings.compact_threshold,
            settings.force_path_style
        ),
        ("memories", "ap-northeast-2", 30_000, 20, false)
    );
    assert!(c.warnings.is_empty());
    let tuned = load(
        &[
            &s3[..],
            &[
                ("STATS_FLUSH_MS", "500"),
                ("STATS_COMPACT_THRESHOLD", "3"),
                ("AWS_REGION", "us-east-1"),
                ("S3_FORCE_PATH_STYLE", "true"),
            ],
        ]
        .concat(),
    )
    .unwrap();
    let store::Settings::S3(settings) = &tuned.store else {
        panic!("not the S3 store");
    };
    assert_eq!(
        (
            settings.flush_every.as_millis(),
            settings.compact_threshold,
            settings.region.as_str()
        ),
        (500, 3, "us-east-1")
    );
    assert!(settings.force_path_style);
    for (name, bad) in [
        ("VECTOR_BUCKET", "Acme"),
        ("VECTOR_INDEX", "a_b"),
        ("STATE_BUCKET", "ab"),
        ("STATE_BUCKET", "-acme"),
    ] {
        let err = load(&[&s3[..], &[(name, bad)]].concat()).err().unwrap();
        assert!(
            err.starts_with(&format!("{name} must be 3-63 characters")),
            "{err}"
        );
    }
    let err = load(&[&s3[..], &[("STATS_COMPACT_THRESHOLD", "0")]].concat())
        .err()
        .unwrap();
    assert_eq!(
        err,
        "STATS_COMPACT_THRESHOLD must be a positive integer, got \"0\""
    );
    // DATABASE_URL wins over the buckets, which are then reported as ignored.
    let both = with(&[
        ("VECTOR_BUCKET", "acme-vectors"),
        ("STATE_BUCKET", "acme-state"),
    ])
    .unwrap();
    assert!(matches!(both.store, store::Settings::Sqlite { .. }) && both.warnings.len() == 2);
}

#[cfg(feature = "bedrock")]
#[test]
fn titan_v2_offers_three_widths() {
    let bedrock = [BASE[0], ("EMBEDDING_PROVIDER", "bedrock")];
    for good in ["256", "512", "1024"] {
        assert!(load(&[&bedrock[..], &[("EMBEDDING_DIM", good)]].concat()).is_ok());
    }
    let err = load(&[&bedrock[..], &[("EMBEDDING_DIM", "768")]].concat())
        .err()
        .unwrap();
    assert!(
        err.starts_with("EMBEDDING_DIM must be 256, 512 or 1024"),
        "{err}"
    );
}

#[cfg(feature = "kb")]
#[test]
fn the_knowledge_base_id_is_checked() {
    assert_eq!(
        with(&[("KNOWLEDGE_BASE_ID", "KB12345678")])
            .unwrap()
            .knowledge_base
            .unwrap()
            .id,
        "KB12345678"
    );
    let arn = "arn:aws:bedrock:us-east-1:123456789012:knowledge-base/KB12345678";
    assert!(with(&[("KNOWLEDGE_BASE_ID", arn)]).is_ok());
    let err = with(&[("KNOWLEDGE_BASE_ID", "kb1")]).err().unwrap();
    assert!(err.starts_with("KNOWLEDGE_BASE_ID must be"), "{err}");
    assert!(with(&[]).unwrap().knowledge_base.is_none());
}

/// Where a large tenant's exact vectors go: beside the SQLite file unless a directory is
/// named, or the heap for `memory`.
#[cfg(feature = "sqlite")]
#[test]
fn index_vectors_go_beside_the_file_unless_told_otherwise() {
    use crate::search::VectorHome;
    let home = |pairs: &[(&str, &str)]| match load(pairs).unwrap().store {
        store::Settings::Sqlite { indexing, .. } => indexing.vectors,
        #[allow(unreachable_patterns)]
        _ => panic!("not the SQLite store"),
    };
    let files = |dir: &str, chosen| VectorHome::Files {
        dir: dir.into(),
        chosen,
    };
    assert_eq!(home(&BASE), files("/tmp", false));
    let relative = [&BASE[1..], &[("DATABASE_URL", "sqlite:memory.db")]].concat();
    assert_eq!(home(&relative), files(".", false));
    let named = [&BASE[..], &[("INDEX_VECTORS_DIR", "/var/cache/mcp")]].concat();
    assert_eq!(home(&named), files("/var/cache/mcp", true));
    let heap = [&BASE[..], &[("INDEX_VECTORS_DIR", "memory")]].concat();
    assert_eq!(home(&heap), VectorHome::Memory);
}

/// A fit the store recorded for the model replaces the numbers it would have; the floor and
/// the high similarity configured replace the fit's, and nothing else of it.
#[test]
fn a_recorded_fit_is_judged_by_under_the_configured_floor_and_high() {
    let fit = Fit {
        model: "openai:text-embedding-3-small".into(),
        dimension: 1536,
        at: 0,
        calibration: Calibration {
            floor: 0.4,
            high: Some(0.6),
            baseline: 0.2,
            duplicates: crate::dedup::Rule {
                repeat: 0.95,
                hangul_repeat: 0.9,
                similar: 0.85,
            },
            abstention: Some(Abstention {
                words: 0.3,
                threshold: 0.5,
            }),
            reads_across_scripts: true,
        },
        expected: crate::embed::Expected {
            found_called_no_match: crate::embed::Rate { errors: 1, of: 10 },
            unanswerable_vouched: crate::embed::Rate { errors: 2, of: 10 },
            repeats_stored_twice: crate::embed::Rate { errors: 3, of: 10 },
            different_refused: crate::embed::Rate { errors: 0, of: 10 },
        },
    };
    let judged = with(&[]).unwrap().numbers.judged(Some(&fit));
    assert_eq!(judged.calibrated, Calibrated::Recorded(fit.clone()));
    assert_eq!(judged.thresholds, fit.calibration.thresholds());
    assert_eq!(judged.duplicates, fit.calibration.duplicates);
    let floored = with(&[("RECALL_MIN_SIMILARITY", "0.7")])
        .unwrap()
        .numbers
        .judged(Some(&fit));
    assert_eq!(
        (floored.thresholds.floor, floored.thresholds.high),
        (0.7, 0.7)
    );
    assert_eq!(floored.thresholds.abstention, fit.calibration.abstention);
    assert_eq!(floored.duplicates, fit.calibration.duplicates);
    let high = with(&[("RECALL_HIGH_SIMILARITY", "0.9")])
        .unwrap()
        .numbers
        .judged(Some(&fit));
    assert_eq!((high.thresholds.floor, high.thresholds.high), (0.4, 0.9));
}

/// docs/embeddings.md#prompts: given to the OpenAI-compatible embedder as written, a line
/// break as `\n`; refused, by name, to the embedders that take their own or none.
#[test]
fn prompts_are_read_as_given_and_only_for_the_openai_embedder() {
    let prompts = |c: Config| match c.embedder {
        embed::Settings::OpenAi { prompts, .. } => prompts,
        #[allow(unreachable_patterns)]
        _ => panic!("not the openai embedder"),
    };
    assert_eq!(prompts(with(&[]).unwrap()), embed::Prompts::default());
    let given = with(&[
        ("EMBEDDING_QUERY_PROMPT", "Instruct: find the note\\nQuery:"),
        ("EMBEDDING_DOCUMENT_PROMPT", "passage: "),
    ]);
    assert_eq!(
        prompts(given.unwrap()),
        embed::Prompts {
            query: "Instruct: find the note\nQuery:".into(),
            document: "passage: ".into()
        }
    );
    let escaped = with(&[("EMBEDDING_QUERY_PROMPT", "C:\\\\new ")]).unwrap();
    assert_eq!(prompts(escaped).query, "C:\\new ");

    let long: &'static str = Box::leak("x".repeat(1_001).into_boxed_str());
    assert_eq!(
        with(&[("EMBEDDING_QUERY_PROMPT", long)]).err().unwrap(),
        "EMBEDDING_QUERY_PROMPT must be at most 1000 characters, got 1001"
    );
    #[cfg(feature = "local")]
    assert_eq!(
        with(&[
            ("EMBEDDING_PROVIDER", "local"),
            ("EMBEDDING_DOCUMENT_PROMPT", "passage: ")
        ])
        .err()
        .unwrap(),
        "EMBEDDING_DOCUMENT_PROMPT is for EMBEDDING_PROVIDER=openai, not local: a local model \
         uses the prompts it records in its folder, and Titan takes none \
         (docs/embeddings.md#prompts)"
    );
}
