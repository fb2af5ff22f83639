//! The exact scan's inner loop, over vectors kept a second time in half precision (IEEE
//! binary16): a scan reads little but the vectors, so half the bytes is about twice the
//! speed. A half-precision score only *selects*: `error_radius` bounds how far it can be
//! from the exact one, and a search rescores exactly (`store::cosine`) every memory whose
//! bound reaches the k-th best, so its answer is the exact top k. Half precision keeps 11
//! significant bits (bfloat16 keeps 8), so few memories fall within the bound.
//!
//! On x86-64 CPUs with AVX2, FMA and F16C (checked once per scan, at run time, so one
//! binary serves every CPU) the loop is written with their intrinsics: four independent
//! accumulators, and one horizontal sum per vector.

/// The half-precision value nearest to `x` (ties to even), as its bits.
pub fn to_half(x: f32) -> u16 {
    half::f16::from_f32(x).to_bits()
}

pub fn from_half(bits: u16) -> f32 {
    half::f16::from_bits(bits).to_f32()
}

/// How far, relative to its norm, the half-precision dot product of any query with `v` (stored as
/// `coarse`) can be from the exact one, divided by the query's norm: the rounding of `v`
/// (Cauchy–Schwarz) plus a generous allowance for f32 summation. `length` is `v`'s norm.
pub fn error_radius(v: &[f32], coarse: &[u16], length: f64) -> f32 {
    let rounding: f64 = v
        .iter()
        .zip(coarse)
        .map(|(x, h)| (f64::from(*x) - f64::from(from_half(*h))).powi(2))
        .sum::<f64>()
        .sqrt();
    if length == 0.0 {
        return 0.0;
    }
    ((rounding + 1e-4 * length) / length * 1.001 + 1e-6) as f32
}

/// `scores[i]` = the dot product of `query` with the `i`-th half-precision vector of `rows`
/// (`query.len()` values each).
pub fn dot_all(rows: &[u16], query: &[f32], scores: &mut Vec<f32>) {
    scores.clear();
    if query.is_empty() {
        return;
    }
    scores.reserve(rows.len() / query.len());
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("f16c")
    {
        // SAFETY: the CPU has the features `avx2::dot_all` is compiled for.
        unsafe { avx2::dot_all(rows, query, scores) };
        return;
    }
    dot_all_portable(rows, query, scores);
}

fn dot_all_portable(rows: &[u16], query: &[f32], scores: &mut Vec<f32>) {
    for row in rows.chunks_exact(query.len()) {
        let mut lanes = [0.0f32; 8];
        let (r8, q8) = (row.chunks_exact(8), query.chunks_exact(8));
        let tail: f32 = r8
            .remainder()
            .iter()
            .zip(q8.remainder())
            .map(|(h, q)| from_half(*h) * q)
            .sum();
        for (r, q) in r8.zip(q8) {
            for i in 0..8 {
                lanes[i] += from_half(r[i]) * q[i];
            }
        }
        scores.push(lanes.iter().sum::<f32>() + tail);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::from_half;

    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn dot_all(rows: &[u16], query: &[f32], scores: &mut Vec<f32>) {
        for row in rows.chunks_exact(query.len()) {
            scores.push(dot(row, query));
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn dot(row: &[u16], query: &[f32]) -> f32 {
        let body = query.len() / 32 * 32;
        let mut acc = [_mm256_setzero_ps(); 4];
        for start in (0..body).step_by(32) {
            for (j, lane) in acc.iter_mut().enumerate() {
                let at = start + 8 * j;
                // SAFETY: `at + 8 <= body <= row.len() == query.len()`; unaligned loads.
                unsafe {
                    let half = _mm_loadu_si128(row.as_ptr().add(at).cast::<__m128i>());
                    let x = _mm256_cvtph_ps(half);
                    let q = _mm256_loadu_ps(query.as_ptr().add(at));
                    *lane = _mm256_fmadd_ps(x, q, *lane);
                }
            }
        }
        let tail: f32 = row[body..]
            .iter()
            .zip(&query[body..])
            .map(|(h, q)| from_half(*h) * q)
            .sum();
        let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let four = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
        let two = _mm_add_ps(four, _mm_movehl_ps(four, four));
        _mm_cvtss_f32(_mm_add_ss(two, _mm_movehdup_ps(two))) + tail
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(v: &[f32]) -> f64 {
        v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt()
    }

    #[test]
    fn every_row_gets_its_dot_product_within_the_radius() {
        for width in [1, 7, 8, 13, 33, 384] {
            let query: Vec<f32> = (0..width).map(|i| (i as f32 * 0.37).sin()).collect();
            let rows: Vec<f32> = (0..3 * width)
                .map(|i| (i as f32 * 0.11).cos() * 1e3)
                .collect();
            let coarse: Vec<u16> = rows.iter().map(|x| to_half(*x)).collect();
            let mut scores = Vec::new();
            dot_all(&coarse, &query, &mut scores);
            let mut portable = Vec::new();
            dot_all_portable(&coarse, &query, &mut portable);
            assert_eq!(scores.len(), 3);
            for (i, (row, score)) in rows.chunks_exact(width).zip(&scores).enumerate() {
                let exact: f64 = row
                    .iter()
                    .zip(&query)
                    .map(|(a, b)| f64::from(*a) * f64::from(*b))
                    .sum();
                let radius = error_radius(row, &coarse[i * width..(i + 1) * width], norm(row));
                let allowed = f64::from(radius) * norm(row) * norm(&query);
                for got in [score, &portable[i]] {
                    assert!(
                        (f64::from(*got) - exact).abs() <= allowed,
                        "{width}: {got} vs {exact} beyond {allowed}"
                    );
                }
            }
        }
    }

    #[test]
    fn half_precision_rounds_to_nearest_even() {
        assert_eq!(from_half(to_half(1.0)), 1.0);
        assert_eq!(from_half(to_half(-2.5)), -2.5);
        // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties go to the even one, 1.
        assert_eq!(from_half(to_half(1.0 + 1.0 / 2048.0)), 1.0);
        assert_eq!(from_half(to_half(1.0 + 3.0 / 2048.0)), 1.0 + 4.0 / 2048.0);
        assert!(from_half(to_half(f32::NAN)).is_nan());
        // Beyond its range a vector scores infinite, which only the exact score decides.
        assert_eq!(from_half(to_half(1e5)), f32::INFINITY);
    }
}
