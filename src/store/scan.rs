//! The exact scan's inner loop, over vectors kept a second time as 8-bit integers with one
//! scale per vector: a scan reads little but the vectors, so a quarter of f32's bytes is
//! the speed that matters (at 10k memories of 384 values, 0.26 ms against 0.42 ms for half
//! precision and 0.8 ms for f32 on the machine in BENCHMARKS.md). A coarse score only
//! *selects*: `Coarse::radius` bounds how far it can be from the exact one, and a search
//! rescores exactly (`store::dot64`) every memory whose bound reaches the k-th best, so its
//! answer is the exact top k.
//!
//! On x86-64 CPUs with AVX2 and FMA (checked once per scan, at run time, so one binary
//! serves every CPU) the loop is written with their intrinsics: four independent
//! accumulators, and one horizontal sum per vector.

/// A vector as 8-bit integers: `v ≈ scale × values`, each value within half a step of `v`'s.
pub struct Coarse {
    pub values: Vec<i8>,
    pub scale: f32,
    /// How far, relative to `v`'s norm, a coarse dot product of any query with `v` can be
    /// from the exact one, divided by the query's norm.
    pub radius: f64,
}

impl Coarse {
    /// `v` quantised, with the bound of its rounding. `length` is `v`'s norm. A vector with
    /// a value beyond f32's range (or none but zeros) gets an infinite radius: only the
    /// exact score can place it.
    pub fn of(v: &[f32], length: f64) -> Coarse {
        let largest = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        let scale = largest / 127.0;
        if !(scale.is_normal() && length.is_normal()) {
            return Coarse {
                values: vec![0; v.len()],
                scale: 0.0,
                radius: f64::INFINITY,
            };
        }
        let values: Vec<i8> = v
            .iter()
            .map(|x| (x / scale).round().clamp(-127.0, 127.0) as i8)
            .collect();
        // Cauchy–Schwarz: |e·x| ≤ |e||x|, e being what rounding took from `v`.
        let rounding = v
            .iter()
            .zip(&values)
            .map(|(x, q)| (f64::from(*x) - f64::from(*q) * f64::from(scale)).powi(2))
            .sum::<f64>()
            .sqrt();
        // Plus a generous allowance for adding up in f32: the kernels keep at least eight
        // running sums, so each sum's rounding stays far below 1e-4 of |q||x| at any
        // width in use (|q| × scale ≤ |v| + rounding).
        let radius = (rounding + 1e-4 * (length + rounding)) / length * 1.001 + 1e-6;
        Coarse {
            values,
            scale,
            radius,
        }
    }
}

/// `scores[i]` = the dot product of `query` with the `i`-th row of `rows` (`query.len()`
/// values each), in the rows' units: times the row's scale, it approximates the dot
/// product with the vector the row was made from.
pub fn dot_all(rows: &[i8], query: &[f32], scores: &mut Vec<f32>) {
    scores.clear();
    if query.is_empty() {
        return;
    }
    scores.reserve(rows.len() / query.len());
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has the features `avx2::dot_all` is compiled for.
        unsafe { avx2::dot_all(rows, query, scores) };
        return;
    }
    dot_all_portable(rows, query, scores);
}

fn dot_all_portable(rows: &[i8], query: &[f32], scores: &mut Vec<f32>) {
    for row in rows.chunks_exact(query.len()) {
        let mut lanes = [0.0f32; 8];
        let (r8, q8) = (row.chunks_exact(8), query.chunks_exact(8));
        let tail: f32 = r8
            .remainder()
            .iter()
            .zip(q8.remainder())
            .map(|(r, q)| f32::from(*r) * q)
            .sum();
        for (r, q) in r8.zip(q8) {
            for i in 0..8 {
                lanes[i] += f32::from(r[i]) * q[i];
            }
        }
        scores.push(lanes.iter().sum::<f32>() + tail);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma")]
    pub fn dot_all(rows: &[i8], query: &[f32], scores: &mut Vec<f32>) {
        for row in rows.chunks_exact(query.len()) {
            scores.push(dot(row, query));
        }
    }

    #[target_feature(enable = "avx2,fma")]
    fn dot(row: &[i8], query: &[f32]) -> f32 {
        let body = query.len() / 32 * 32;
        let mut acc = [_mm256_setzero_ps(); 4];
        for start in (0..body).step_by(32) {
            for (j, lane) in acc.iter_mut().enumerate() {
                let at = start + 8 * j;
                // SAFETY: `at + 8 <= body <= row.len() == query.len()`; unaligned loads.
                unsafe {
                    let bytes = _mm_loadl_epi64(row.as_ptr().add(at).cast::<__m128i>());
                    let x = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
                    let q = _mm256_loadu_ps(query.as_ptr().add(at));
                    *lane = _mm256_fmadd_ps(x, q, *lane);
                }
            }
        }
        let tail: f32 = row[body..]
            .iter()
            .zip(&query[body..])
            .map(|(r, q)| f32::from(*r) * q)
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
        for width in [1, 7, 8, 13, 33, 384, 1536] {
            let query: Vec<f32> = (0..width).map(|i| (i as f32 * 0.37).sin()).collect();
            for magnitude in [1e-30, 1e-3, 1.0, 1e3, 1e30] {
                let rows: Vec<f32> = (0..3 * width)
                    .map(|i| (i as f32 * 0.11).cos() * magnitude)
                    .collect();
                let coarse: Vec<Coarse> = rows
                    .chunks_exact(width)
                    .map(|row| Coarse::of(row, norm(row)))
                    .collect();
                let values: Vec<i8> = coarse.iter().flat_map(|c| c.values.clone()).collect();
                let mut scores = Vec::new();
                dot_all(&values, &query, &mut scores);
                let mut portable = Vec::new();
                dot_all_portable(&values, &query, &mut portable);
                assert_eq!(scores.len(), 3);
                for (i, row) in rows.chunks_exact(width).enumerate() {
                    let exact: f64 = row
                        .iter()
                        .zip(&query)
                        .map(|(a, b)| f64::from(*a) * f64::from(*b))
                        .sum();
                    let allowed = coarse[i].radius * norm(row) * norm(&query);
                    assert!(
                        coarse[i].radius < 0.02,
                        "{width}, {magnitude}: {}",
                        coarse[i].radius
                    );
                    for got in [scores[i], portable[i]] {
                        let got = f64::from(got) * f64::from(coarse[i].scale);
                        assert!(
                            (got - exact).abs() <= allowed,
                            "{width}, {magnitude}: {got} vs {exact} beyond {allowed}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_vector_no_scale_can_hold_is_left_to_the_exact_score() {
        for v in [
            vec![0.0f32; 4],
            vec![1.0, f32::INFINITY, 0.0, 2.0],
            vec![f32::NAN; 4],
        ] {
            let coarse = Coarse::of(&v, norm(&v));
            assert_eq!(coarse.radius, f64::INFINITY, "{v:?}");
            assert_eq!(coarse.values, [0; 4]);
        }
    }
}
