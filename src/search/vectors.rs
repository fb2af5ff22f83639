//! A tenant's vectors, end to end, for an exact nearest-neighbour search: each is kept in
//! f32 for the similarity a caller sees (`exact.rs`: in a mapped file once a tenant is
//! large), and again as 8-bit integers for the scan (`scan.rs`). The scan gives every
//! memory an interval its exact cosine lies in; only the memories whose interval reaches
//! the k-th best lower end can be among the k nearest, and only they are scored exactly,
//! so the answer is the exact top k.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use super::exact::{Exact, VectorFiles};
use super::passes::Passes;
use super::{Nearest, Position, scan};

pub struct Vectors {
    width: usize,
    /// Exact, for the similarity a caller sees.
    exact: Exact,
    /// The same as 8-bit integers, which a scan reads (`scan::Coarse`).
    coarse: Vec<i8>,
    /// What turns a coarse dot product into a cosine times the query's norm: the vector's
    /// scale over its norm.
    units: Vec<f64>,
    norms: Vec<f32>,
    /// Each vector's sum of squares, as `cosine` adds it up.
    squares: Vec<f64>,
    /// How much of each vector its 8-bit copy misses (`scan::Coarse::rounding`).
    roundings: Vec<f64>,
    /// Where concurrent searches share their scans of `coarse`.
    passes: Passes,
}

impl Vectors {
    pub fn new(width: usize, files: &VectorFiles) -> Vectors {
        Vectors {
            width,
            exact: Exact::new(files.clone()),
            coarse: Vec::new(),
            units: Vec::new(),
            norms: Vec::new(),
            squares: Vec::new(),
            roundings: Vec::new(),
            passes: Passes::default(),
        }
    }

    /// How many values are held (vectors × width).
    pub fn values(&self) -> usize {
        self.exact.len()
    }

    /// What the exact values take on the heap: none once they are in a file.
    pub fn exact_heap_bytes(&self) -> usize {
        self.exact.heap_bytes()
    }

    /// Adds a vector at the end. One of another width cannot be compared: it takes its
    /// slot, padded or cut, with norm 0, which scores 0 as `cosine` does.
    pub fn push(&mut self, vector: &[f32]) {
        let stored = self.exact.push_row(vector, self.width);
        let comparable = vector.len() == self.width;
        let sum = squares(stored);
        let length = sum.sqrt();
        let coarse = scan::Coarse::row(stored, length);
        self.coarse.extend(&coarse.values);
        self.norms
            .push(if comparable { length as f32 } else { 0.0 });
        self.squares.push(sum);
        self.units.push(if comparable {
            f64::from(coarse.scale) / length
        } else {
            0.0
        });
        self.roundings.push(coarse.rounding);
    }

    /// Removes the vector at `gone`; the last one (at `last`) takes its place.
    pub fn swap_remove(&mut self, gone: Position, last: Position) {
        let (gone, last) = (gone.index(), last.index());
        self.exact.swap_remove_row(gone, last, self.width);
        if gone != last {
            let from = last * self.width..(last + 1) * self.width;
            self.coarse.copy_within(from, gone * self.width);
        }
        self.coarse.truncate(last * self.width);
        self.units.swap_remove(gone);
        self.norms.swap_remove(gone);
        self.squares.swap_remove(gone);
        self.roundings.swap_remove(gone);
    }

    /// The exact cosine similarity of `query` to the vector at each of `positions`, in
    /// order: `cosine`'s answer to the last bit. The vectors are scattered through
    /// memory: each is asked for a few ahead of its turn, so their reads overlap instead of
    /// each waiting on the last.
    pub fn similarities(&self, positions: &[Position], query: &[f32]) -> Vec<f64> {
        const AHEAD: usize = 4;
        let query_squares = squares(query);
        for i in positions.iter().take(AHEAD) {
            self.prefetch(i.index());
        }
        (0..positions.len())
            .map(|j| {
                if let Some(ahead) = positions.get(j + AHEAD) {
                    self.prefetch(ahead.index());
                }
                self.exact(positions[j].index(), query, query_squares)
            })
            .collect()
    }

    /// Asks the CPU to bring the vector at `position` into its cache; a hint, nothing more.
    fn prefetch(&self, position: usize) {
        #[cfg(target_arch = "x86_64")]
        if let Some(vector) = self
            .exact
            .get(position * self.width..(position + 1) * self.width)
        {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            // Every 64-byte line of the vector.
            for line in vector.chunks(16) {
                // SAFETY: a prefetch never faults; the address is inside `exact` anyway.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast()) };
            }
        }
    }

    /// The exact similarity at `position`, with the query's sum of squares worked out once.
    fn exact(&self, position: usize, query: &[f32], query_squares: f64) -> f64 {
        // Norm 0: a zero vector or one of another width, both 0 to `cosine` too.
        if self.norms[position] == 0.0 || query_squares == 0.0 || query.len() != self.width {
            return 0.0;
        }
        let vector = &self.exact[position * self.width..(position + 1) * self.width];
        dot64(query, vector) / (query_squares.sqrt() * self.squares[position].sqrt())
    }

    /// Up to `k` of the vectors `seen` accepts nearest to `query`, most similar first, with
    /// their exact cosine similarity; equal similarities in position order.
    pub fn nearest(&self, query: &[f32], seen: impl Fn(usize) -> bool, k: usize) -> Vec<Nearest> {
        if query.len() != self.width || k == 0 {
            return Vec::new();
        }
        let query_squares = squares(query);
        // In f64: the product of two f32 norms can leave f32's range.
        let query_norm = query_squares.sqrt();
        let coarse_query = scan::Coarse::query(query, query_norm);
        let per_query = f64::from(coarse_query.scale) / query_norm;
        let dots = self.passes.dots(&self.coarse, &coarse_query.values);
        // A memory's coarse cosine and how far the exact one can be from it, from its dot
        // product, unit and rounding; both passes below use it, so they agree to the bit.
        let estimate = |dot: i32, unit: f64, rounding: f64| {
            (
                f64::from(dot) * unit * per_query,
                scan::radius(rounding, coarse_query.rounding),
            )
        };
        // Every upper end first, in plain arithmetic the compiler vectorises; a NaN (a
        // query of zeros) is never below anything, so it is kept.
        let highs: Vec<f64> = (dots.iter().zip(&self.units).zip(&self.roundings))
            .map(|((dot, unit), rounding)| {
                let (cosine, radius) = estimate(*dot, *unit, *rounding);
                cosine + radius
            })
            .collect();
        // The least of the k best lower ends so far: it only rises, and a memory whose upper
        // end is below it can never be among the k. Intervals are worked out in full only
        // for the memories that reach it (a zero vector, or a query of zeros, gets no finite
        // interval and is always scored).
        let mut best: BinaryHeap<Reverse<Low>> = BinaryHeap::with_capacity(k + 1);
        let mut floor = f64::NEG_INFINITY;
        let mut reaching: Vec<(usize, f64)> = Vec::new();
        for (i, high) in highs.iter().enumerate() {
            if *high < floor || !seen(i) {
                continue;
            }
            let (cosine, radius) = estimate(dots[i], self.units[i], self.roundings[i]);
            let (low, high) = if cosine.is_finite() && radius.is_finite() {
                (cosine - radius, cosine + radius)
            } else {
                (f64::NEG_INFINITY, f64::INFINITY)
            };
            reaching.push((i, high));
            if best.len() < k {
                best.push(Reverse(Low(low)));
            } else if low > floor
                && let Some(mut least) = best.peek_mut()
            {
                *least = Reverse(Low(low));
            } else {
                continue;
            }
            if best.len() == k {
                floor = best.peek().map_or(floor, |least| least.0.0);
            }
        }
        let candidates: Vec<Position> = (reaching.into_iter())
            .filter(|(_, high)| *high >= floor)
            .map(|(i, _)| Position::at(i))
            .collect();
        let similarities = self.similarities(&candidates, query);
        let mut nearest: Vec<Nearest> = (candidates.into_iter().zip(similarities))
            .map(|(position, similarity)| Nearest {
                position,
                similarity,
            })
            .collect();
        nearest.sort_by(|a, b| {
            (b.similarity.total_cmp(&a.similarity)).then(a.position.cmp(&b.position))
        });
        nearest.truncate(k);
        nearest
    }
}

/// A lower end of an interval, ordered by `f64::total_cmp`, for a heap.
struct Low(f64);

impl Ord for Low {
    fn cmp(&self, other: &Low) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl PartialOrd for Low {
    fn partial_cmp(&self, other: &Low) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Low {
    fn eq(&self, other: &Low) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Low {}

/// The sum of squares of `v`, as `cosine` adds it up.
fn squares(v: &[f32]) -> f64 {
    dot64(v, v)
}

/// Cosine similarity; 0 for mismatched widths or a zero vector.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() {
        return 0.0;
    }
    let (na, nb) = (dot64(a, a), dot64(b, b));
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot64(a, b) / (na.sqrt() * nb.sqrt())
    }
}

/// The dot product in f64, over eight running sums (one sum would wait on each addition).
/// Every exact similarity is made of these, so all stores agree to the last bit; the
/// AVX2 build (chosen at run time) does the same operations per sum, four sums to a
/// register, and so gives the same bits.
pub fn dot64(a: &[f32], b: &[f32]) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if a.len() == b.len() && std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has the feature `dot64_avx2` is compiled for.
        return unsafe { dot64_avx2(a, b) };
    }
    dot64_lanes(a, b)
}

/// `dot64_lanes` for equal lengths: `low` holds sums 0–3 and `high` sums 4–7. Written out,
/// because the compiler vectorised the loop two sums at a time, with shuffles.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn dot64_avx2(a: &[f32], b: &[f32]) -> f64 {
    use std::arch::x86_64::*;
    let body = a.len() / 8 * 8;
    let tail: f64 = a[body..]
        .iter()
        .zip(&b[body..])
        .fold(0.0, |sum, (x, y)| sum + f64::from(*x) * f64::from(*y));
    let (mut low, mut high) = (_mm256_setzero_pd(), _mm256_setzero_pd());
    for at in (0..body).step_by(8) {
        // SAFETY: `at + 8 <= body <= a.len() == b.len()`; unaligned loads.
        let (x, y) = unsafe {
            (
                _mm256_loadu_ps(a.as_ptr().add(at)),
                _mm256_loadu_ps(b.as_ptr().add(at)),
            )
        };
        let half = |v: __m256, upper: bool| {
            _mm256_cvtps_pd(if upper {
                _mm256_extractf128_ps(v, 1)
            } else {
                _mm256_castps256_ps128(v)
            })
        };
        low = _mm256_add_pd(low, _mm256_mul_pd(half(x, false), half(y, false)));
        high = _mm256_add_pd(high, _mm256_mul_pd(half(x, true), half(y, true)));
    }
    // Sums i and i + 4, side by side, then added as `dot64_lanes` adds them.
    let mut pairs = [0.0f64; 4];
    // SAFETY: `pairs` holds four f64; unaligned store.
    unsafe { _mm256_storeu_pd(pairs.as_mut_ptr(), _mm256_add_pd(low, high)) };
    ((pairs[0] + pairs[1]) + (pairs[2] + pairs[3])) + tail
}

fn dot64_lanes(a: &[f32], b: &[f32]) -> f64 {
    let mut lanes = [0.0f64; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let mut tail = 0.0f64;
    for (x, y) in a8.remainder().iter().zip(b8.remainder()) {
        tail += f64::from(*x) * f64::from(*y);
    }
    for (x, y) in a8.zip(b8) {
        for i in 0..8 {
            lanes[i] += f64::from(x[i]) * f64::from(y[i]);
        }
    }
    ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5]))
        + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]))
        + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot64_gives_the_same_bits_on_every_cpu() {
        let mut state = 3u64;
        let mut next = || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            // Mixed magnitudes, so the order of additions shows in the last bits.
            ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5)
                * [1e-3, 1.0, 1e4][(state % 3) as usize]
        };
        for width in [0, 1, 7, 8, 9, 31, 384, 1536] {
            let a: Vec<f32> = (0..width).map(|_| next()).collect();
            let b: Vec<f32> = (0..width).map(|_| next()).collect();
            assert_eq!(
                dot64(&a, &b).to_bits(),
                dot64_lanes(&a, &b).to_bits(),
                "{width}"
            );
        }
    }
}
