//! The exact scan's inner loop: one query against many stored vectors laid out end to end.
//! Thirty-two independent accumulators keep four SIMD registers busy at once, and on
//! x86-64 CPUs with AVX2 and FMA (checked once per scan, at run time, so one binary serves
//! every CPU) the same loop is compiled for them. Scores are f32 and only *select*
//! neighbours; the similarity a caller sees is recomputed exactly by `store::cosine`.

/// `scores[i]` = the dot product of `query` with the `i`-th vector of `vectors`
/// (`query.len()` floats each).
pub fn dot_all(vectors: &[f32], query: &[f32], scores: &mut Vec<f32>) {
    scores.clear();
    if query.is_empty() {
        return;
    }
    scores.reserve(vectors.len() / query.len());
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has the features `dot_all_fma` is compiled for.
        unsafe { dot_all_fma(vectors, query, scores) };
        return;
    }
    dot_all_portable(vectors, query, scores);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn dot_all_fma(vectors: &[f32], query: &[f32], scores: &mut Vec<f32>) {
    for row in vectors.chunks_exact(query.len()) {
        scores.push(dot(row, query, f32::mul_add));
    }
}

fn dot_all_portable(vectors: &[f32], query: &[f32], scores: &mut Vec<f32>) {
    for row in vectors.chunks_exact(query.len()) {
        scores.push(dot(row, query, |a, b, acc| acc + a * b));
    }
}

/// `madd(a, b, acc)` = acc + a·b, fused or not as the caller is compiled. Four registers'
/// worth of accumulators, so consecutive multiply-adds do not wait on each other.
#[inline(always)]
fn dot(a: &[f32], b: &[f32], madd: impl Fn(f32, f32, f32) -> f32) -> f32 {
    let mut lanes = [0.0f32; 32];
    let (a32, b32) = (a.chunks_exact(32), b.chunks_exact(32));
    let tail: f32 = a32
        .remainder()
        .iter()
        .zip(b32.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a32.zip(b32) {
        for i in 0..32 {
            lanes[i] = madd(x[i], y[i], lanes[i]);
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// The Euclidean length of `v`.
pub fn norm(v: &[f32]) -> f32 {
    let mut scores = Vec::with_capacity(1);
    dot_all(v, v, &mut scores);
    scores.first().copied().unwrap_or(0.0).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_gets_its_dot_product_whatever_the_width() {
        for width in [1, 7, 8, 13, 384] {
            let query: Vec<f32> = (0..width).map(|i| (i as f32 * 0.37).sin()).collect();
            let rows: Vec<f32> = (0..3 * width).map(|i| (i as f32 * 0.11).cos()).collect();
            let mut scores = Vec::new();
            dot_all(&rows, &query, &mut scores);
            assert_eq!(scores.len(), 3);
            for (row, score) in rows.chunks_exact(width).zip(&scores) {
                let exact: f64 = row
                    .iter()
                    .zip(&query)
                    .map(|(a, b)| f64::from(*a) * f64::from(*b))
                    .sum();
                assert!(
                    (f64::from(*score) - exact).abs() < 1e-4,
                    "{width}: {score} vs {exact}"
                );
            }
            let mut portable = Vec::new();
            dot_all_portable(&rows, &query, &mut portable);
            for (a, b) in portable.iter().zip(&scores) {
                assert!((a - b).abs() < 1e-4, "{width}: {a} vs {b}");
            }
        }
        assert_eq!(norm(&[3.0, 4.0]), 5.0);
    }
}
