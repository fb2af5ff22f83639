//! The exact scan's inner loop, in integers: each stored vector is kept a second time as
//! 8-bit integers with one scale, and the query as 16-bit integers with one scale. A scan
//! reads little but the stored vectors, so a quarter of f32's bytes is most of its speed,
//! and integer multiply-adds do 16 or 32 products an instruction (BENCHMARKS.md has the
//! timings against half precision and f32). The integer dot products are exact, so every
//! CPU gets the same numbers; only the two roundings separate them from the real ones, and
//! `radius` bounds how far that can move a cosine. A coarse score only *selects*: a search rescores
//! exactly (`vectors::dot64`) every memory whose bound reaches the k-th best, so its answer
//! is the exact top k.
//!
//! Kernels, chosen once per scan at run time so one binary serves every CPU: AVX-512 VNNI,
//! AVX2, and a portable loop, all giving the same sums.

/// Largest value a stored vector's integers reach.
const ROW_STEPS: f32 = 127.0;

/// Largest value a query's integers reach: 32767, or fewer for vectors so wide that a dot
/// product could otherwise pass 2³¹ (past 4,228 values), so every sum fits 32 bits.
fn query_steps(width: usize) -> f32 {
    (f64::from(i32::MAX) / (f64::from(ROW_STEPS) * width.max(1) as f64))
        .floor()
        .min(32_767.0) as f32
}

/// A vector as integers: `v ≈ scale × values`, each value within half a step of `v`'s.
pub struct Coarse<T> {
    pub values: Vec<T>,
    pub scale: f32,
    /// The rounding's norm relative to `v`'s (‖v − scale × values‖ / ‖v‖); infinite when
    /// `v` has a value beyond f32's range or none but zeros, which only the exact score can
    /// place.
    pub rounding: f64,
}

impl Coarse<i8> {
    /// A stored vector in 8 bits; `length` is its norm.
    pub fn row(v: &[f32], length: f64) -> Coarse<i8> {
        quantise(v, length, ROW_STEPS, |x| x as i8)
    }
}

impl Coarse<i16> {
    /// A query in 16 bits; `length` is its norm.
    pub fn query(v: &[f32], length: f64) -> Coarse<i16> {
        quantise(v, length, query_steps(v.len()), |x| x as i16)
    }
}

fn quantise<T: Copy + Default + Into<f64>>(
    v: &[f32],
    length: f64,
    steps: f32,
    cast: impl Fn(f32) -> T,
) -> Coarse<T> {
    let largest = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let scale = largest / steps;
    if !(scale.is_normal() && length.is_normal()) {
        return Coarse {
            values: vec![T::default(); v.len()],
            scale: 0.0,
            rounding: f64::INFINITY,
        };
    }
    let values: Vec<T> = v
        .iter()
        .map(|x| cast((x / scale).round().clamp(-steps, steps)))
        .collect();
    // In f64 each step times the scale is exact, and so is its difference from the value.
    let rounding = v
        .iter()
        .zip(&values)
        .map(|(x, q)| (f64::from(*x) - (*q).into() * f64::from(scale)).powi(2))
        .sum::<f64>()
        .sqrt();
    Coarse {
        values,
        scale,
        rounding: rounding / length,
    }
}

/// How far a coarse cosine can be from the exact one, for a stored vector and a query with
/// these relative roundings (`Coarse::rounding`). With v = a + e and x = b + f (a, b what
/// the integers say): v·x − a·b = a·f + e·x, so |v·x − a·b| ≤ (‖v‖ + ‖e‖)‖f‖ + ‖e‖‖x‖.
/// Divided by ‖v‖‖x‖ that is (1 + r)·q + r. The small margin covers f64's own rounding in
/// the norms and the cosines.
pub fn radius(row: f64, query: f64) -> f64 {
    (row + (1.0 + row) * query) * (1.0 + 1e-9) + 1e-12
}

/// `dots[i]` = the dot product of `query` (from `Coarse::query`) with the `i`-th row of
/// `rows` (`query.len()` values each), exactly.
pub fn dot_all(rows: &[i8], query: &[i16], dots: &mut Vec<i32>) {
    dots.clear();
    if query.is_empty() {
        return;
    }
    dots.reserve(rows.len() / query.len());
    Kernel::best().run(rows, query, dots);
}

/// What a shared pass multiplies with every query before it moves on: small enough to stay
/// in the core's own caches while each query reads it (8, 16, 64 and 256 KiB measured in
/// bench/scan.rs; 64 did best, 8 and 256 worst).
const SHARED_BLOCK_BYTES: usize = 64 << 10;

/// `dot_all` for several queries (each of `rows`' width) in one pass over `rows`: each block
/// of rows is read from memory once and multiplied with every query while it is cached, so
/// a scan bound by memory bandwidth serves them all for about the price of one. The same
/// kernel adds up each dot product the same way, so every sum is `dot_all`'s.
pub fn dot_all_shared(rows: &[i8], queries: &[&[i16]]) -> Vec<Vec<i32>> {
    let Some(width) = queries.first().map(|q| q.len()).filter(|w| *w > 0) else {
        return vec![Vec::new(); queries.len()];
    };
    assert!(
        queries.iter().all(|q| q.len() == width),
        "one width per pass"
    );
    let kernel = Kernel::best();
    let mut dots: Vec<Vec<i32>> = (queries.iter())
        .map(|_| Vec::with_capacity(rows.len() / width))
        .collect();
    let block = (SHARED_BLOCK_BYTES / width).max(1) * width;
    for rows in rows.chunks(block) {
        for (query, dots) in queries.iter().zip(&mut dots) {
            kernel.run(rows, query, dots);
        }
    }
    dots
}

/// `dot_all_shared` with the rows cut into `threads` runs of whole rows, each on a thread of its
/// own: a tenant that outgrows the caches is scanned at the speed of memory, and one core alone
/// draws less of it than two (BENCHMARKS.md, "One query's scan on every idle core"). Every sum is
/// `dot_all`'s: each row's is added up alone.
pub fn dot_all_shared_split(rows: &[i8], queries: &[&[i16]], threads: usize) -> Vec<Vec<i32>> {
    let width = queries.first().map_or(0, |q| q.len());
    if threads < 2 || width == 0 || rows.len() < 2 * width {
        return dot_all_shared(rows, queries);
    }
    let run = (rows.len() / width).div_ceil(threads) * width;
    let mut runs = rows.chunks(run);
    let first = runs.next().unwrap_or_default();
    std::thread::scope(|scope| {
        // A run no thread could be made for (a process at its limit) is scanned here.
        let others: Vec<_> = runs
            .map(|rows| {
                std::thread::Builder::new()
                    .spawn_scoped(scope, move || dot_all_shared(rows, queries))
                    .map_err(|_| rows)
            })
            .collect();
        let mut dots = dot_all_shared(first, queries);
        for other in others {
            let more = match other {
                // A panic in a helper is the pass's own (`passes.rs` scans alone after it).
                Ok(helper) => helper
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p)),
                Err(rows) => dot_all_shared(rows, queries),
            };
            for (dots, more) in dots.iter_mut().zip(more) {
                dots.extend(more);
            }
        }
        dots
    })
}

/// The ways to work out `dot_all`, each for the CPUs that have its instructions.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kernel {
    Vnni,
    Avx2,
    Portable,
}

impl Kernel {
    /// Every kernel this CPU can run, fastest first.
    fn available() -> Vec<Kernel> {
        let mut kernels = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("avx512bw")
                && std::is_x86_feature_detected!("avx512vnni")
            {
                kernels.push(Kernel::Vnni);
            }
            if std::is_x86_feature_detected!("avx2") {
                kernels.push(Kernel::Avx2);
            }
        }
        kernels.push(Kernel::Portable);
        kernels
    }

    /// The fastest kernel this CPU can run, found once.
    fn best() -> Kernel {
        static BEST: std::sync::OnceLock<Kernel> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| Kernel::available()[0])
    }

    fn run(self, rows: &[i8], query: &[i16], dots: &mut Vec<i32>) {
        match self {
            // SAFETY: `available` offers a kernel only on a CPU with its features.
            #[cfg(target_arch = "x86_64")]
            Kernel::Vnni => unsafe { x86::dot_all_vnni(rows, query, dots) },
            // SAFETY: as above.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => unsafe { x86::dot_all_avx2(rows, query, dots) },
            _ => dot_all_portable(rows, query, dots),
        }
    }
}

fn dot_all_portable(rows: &[i8], query: &[i16], dots: &mut Vec<i32>) {
    for row in rows.chunks_exact(query.len()) {
        dots.push(dot_portable(row, query));
    }
}

fn dot_portable(row: &[i8], query: &[i16]) -> i32 {
    row.iter()
        .zip(query)
        .map(|(r, q)| i32::from(*r) * i32::from(*q))
        .sum()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::dot_portable;

    /// The products past the last whole block of 64 (none at the usual widths).
    #[inline(always)]
    fn tail(row: &[i8], query: &[i16], body: usize) -> i32 {
        if body == query.len() {
            0
        } else {
            dot_portable(&row[body..], &query[body..])
        }
    }

    /// 32 products an instruction (16-bit pairs multiplied and added into 32-bit sums).
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub fn dot_all_vnni(rows: &[i8], query: &[i16], dots: &mut Vec<i32>) {
        let width = query.len();
        let body = width / 64 * 64;
        for row in rows.chunks_exact(width) {
            let mut acc = [_mm512_setzero_si512(); 2];
            for start in (0..body).step_by(64) {
                for (j, lane) in acc.iter_mut().enumerate() {
                    let at = start + 32 * j;
                    // SAFETY: `at + 32 <= body <= row.len() == query.len()`; unaligned loads.
                    unsafe {
                        let r =
                            _mm512_cvtepi8_epi16(_mm256_loadu_si256(row.as_ptr().add(at).cast()));
                        let q = _mm512_loadu_si512(query.as_ptr().add(at).cast());
                        *lane = _mm512_dpwssd_epi32(*lane, r, q);
                    }
                }
            }
            let sum = _mm512_reduce_add_epi32(_mm512_add_epi32(acc[0], acc[1]));
            dots.push(sum + tail(row, query, body));
        }
    }

    /// 16 products an instruction.
    #[target_feature(enable = "avx2")]
    pub fn dot_all_avx2(rows: &[i8], query: &[i16], dots: &mut Vec<i32>) {
        let width = query.len();
        let body = width / 64 * 64;
        for row in rows.chunks_exact(width) {
            let mut acc = [_mm256_setzero_si256(); 4];
            for start in (0..body).step_by(64) {
                for (j, lane) in acc.iter_mut().enumerate() {
                    let at = start + 16 * j;
                    // SAFETY: `at + 16 <= body <= row.len() == query.len()`; unaligned loads.
                    unsafe {
                        let r = _mm256_cvtepi8_epi16(_mm_loadu_si128(row.as_ptr().add(at).cast()));
                        let q = _mm256_loadu_si256(query.as_ptr().add(at).cast());
                        *lane = _mm256_add_epi32(*lane, _mm256_madd_epi16(r, q));
                    }
                }
            }
            let sum = _mm256_add_epi32(
                _mm256_add_epi32(acc[0], acc[1]),
                _mm256_add_epi32(acc[2], acc[3]),
            );
            let four = _mm_add_epi32(
                _mm256_castsi256_si128(sum),
                _mm256_extracti128_si256(sum, 1),
            );
            let two = _mm_add_epi32(four, _mm_shuffle_epi32(four, 0b01_00_11_10));
            let one = _mm_add_epi32(two, _mm_shuffle_epi32(two, 0b10_11_00_01));
            dots.push(_mm_cvtsi128_si32(one) + tail(row, query, body));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(v: &[f32]) -> f64 {
        v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt()
    }

    #[test]
    fn every_row_gets_its_cosine_within_the_radius() {
        for width in [1, 7, 8, 13, 33, 64, 100, 384, 1536] {
            let query: Vec<f32> = (0..width).map(|i| (i as f32 * 0.37).sin() + 0.1).collect();
            let coarse_query = Coarse::query(&query, norm(&query));
            for magnitude in [1e-30, 1e-3, 1.0, 1e3, 1e30] {
                let rows: Vec<f32> = (0..3 * width)
                    .map(|i| (i as f32 * 0.11).cos() * magnitude)
                    .collect();
                let coarse: Vec<Coarse<i8>> = rows
                    .chunks_exact(width)
                    .map(|row| Coarse::row(row, norm(row)))
                    .collect();
                let values: Vec<i8> = coarse.iter().flat_map(|c| c.values.clone()).collect();
                let mut dots = Vec::new();
                dot_all(&values, &coarse_query.values, &mut dots);
                let mut portable = Vec::new();
                dot_all_portable(&values, &coarse_query.values, &mut portable);
                assert_eq!(dots, portable, "every kernel gives the same sums");
                for (i, row) in rows.chunks_exact(width).enumerate() {
                    let exact = row
                        .iter()
                        .zip(&query)
                        .map(|(a, b)| f64::from(*a) * f64::from(*b))
                        .sum::<f64>()
                        / (norm(row) * norm(&query));
                    let coarse_cosine =
                        dots[i] as f64 * f64::from(coarse[i].scale) * f64::from(coarse_query.scale)
                            / (norm(row) * norm(&query));
                    let allowed = radius(coarse[i].rounding, coarse_query.rounding);
                    assert!(
                        (coarse_cosine - exact).abs() <= allowed,
                        "{width}, {magnitude}: {coarse_cosine} vs {exact} beyond {allowed}"
                    );
                    assert!(
                        allowed < 0.02,
                        "{width}, {magnitude}: a useful bound, {allowed}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_largest_sums_fit() {
        for width in [64, 384, 4228, 4229, 16_384] {
            let rows = vec![-127i8; 2 * width];
            let query = Coarse::query(&vec![-1.0; width], (width as f64).sqrt());
            let mut dots = Vec::new();
            dot_all(&rows, &query.values, &mut dots);
            let steps = query_steps(width) as i64;
            assert_eq!(
                steps,
                32_767.min(i64::from(i32::MAX) / (127 * width as i64))
            );
            assert_eq!(dots, [(width as i64 * 127 * steps) as i32; 2], "{width}");
            assert!(query.rounding < 1e-6);
        }
    }

    #[test]
    fn a_vector_no_scale_can_hold_is_left_to_the_exact_score() {
        for v in [
            vec![0.0f32; 4],
            vec![1.0, f32::INFINITY, 0.0, 2.0],
            vec![f32::NAN; 4],
        ] {
            let coarse = Coarse::row(&v, norm(&v));
            assert_eq!(coarse.rounding, f64::INFINITY, "{v:?}");
            assert_eq!(coarse.values, [0; 4]);
            assert_eq!(Coarse::query(&v, norm(&v)).rounding, f64::INFINITY);
        }
    }

    /// Deterministic pseudo-random numbers from `seed`, any bits.
    fn numbers(seed: u64) -> impl FnMut() -> u32 {
        let mut state = seed;
        move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            (state >> 33) as u32
        }
    }

    proptest::proptest! {
        /// Every kernel this CPU has gives the portable sums to the last bit, at every width
        /// (each kernel has its own tail), on any values.
        #[test]
        fn every_kernel_this_cpu_has_gives_the_portable_sums(
            width in 1usize..200,
            rows in 0usize..5,
            seed in proptest::prelude::any::<u64>(),
        ) {
            let mut next = numbers(seed);
            let values: Vec<i8> = (0..rows * width).map(|_| next() as i8).collect();
            let query: Vec<i16> = (0..width).map(|_| next() as i16).collect();
            let mut portable = Vec::new();
            dot_all_portable(&values, &query, &mut portable);
            for kernel in Kernel::available() {
                let mut dots = Vec::new();
                kernel.run(&values, &query, &mut dots);
                proptest::prop_assert_eq!(&dots, &portable, "{:?}", kernel);
            }
        }
    }

    proptest::proptest! {
        /// A shared pass gives each query `dot_all`'s sums, whatever the number of rows
        /// against the pass's block, however many queries share it, and however many
        /// threads split it.
        #[test]
        fn a_shared_pass_gives_each_query_its_own_sums(
            width in 1usize..100,
            rows in 0usize..2000,
            queries in 1usize..5,
            threads in 1usize..4,
            seed in proptest::prelude::any::<u64>(),
        ) {
            let mut next = numbers(seed);
            let values: Vec<i8> = (0..rows * width).map(|_| next() as i8).collect();
            let queries: Vec<Vec<i16>> = (0..queries)
                .map(|_| (0..width).map(|_| next() as i16).collect())
                .collect();
            let refs: Vec<&[i16]> = queries.iter().map(Vec::as_slice).collect();
            let shared = dot_all_shared_split(&values, &refs, threads);
            proptest::prop_assert_eq!(shared.len(), queries.len());
            for (query, dots) in queries.iter().zip(&shared) {
                let mut alone = Vec::new();
                dot_all(&values, query, &mut alone);
                proptest::prop_assert_eq!(dots, &alone);
            }
        }
    }

    #[test]
    fn the_kernel_that_runs_is_the_fastest_this_cpu_has() {
        let available = Kernel::available();
        // Printed so a run shows what it tested: an AVX2-only machine never runs VNNI.
        println!(
            "scan kernel: {:?} (this CPU has {available:?})",
            Kernel::best()
        );
        assert_eq!(Kernel::best(), available[0]);
        assert_eq!(available.last(), Some(&Kernel::Portable));
    }
}
