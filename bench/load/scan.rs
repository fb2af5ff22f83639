//! The physical reference: the raw exact scan, N dot products of width d over one contiguous
//! f32 array, as fast as this machine does it (eight accumulators, AVX2+FMA when the CPU has
//! them). Nothing a recall does can beat it; the ratio of recall latency to it is how much
//! the rest of the request costs.

use std::time::Instant;

use crate::corpus::Rng;

pub struct Reference {
    pub memories: usize,
    pub width: usize,
    pub millis: f64,
}

pub fn references(sizes: &[(usize, usize)]) -> Vec<Reference> {
    sizes
        .iter()
        .map(|&(memories, width)| Reference {
            memories,
            width,
            millis: median_scan(memories, width),
        })
        .collect()
}

fn median_scan(memories: usize, width: usize) -> f64 {
    let mut rng = Rng::new(11);
    let mut random = |n: usize| -> Vec<f32> { (0..n).map(|_| rng.unit() as f32 - 0.5).collect() };
    let matrix = random(memories * width);
    let query = random(width);
    let mut scores = vec![0.0f32; memories];
    // Enough repetitions for a stable median, at least 20 and about half a second.
    let mut times = Vec::new();
    let began = Instant::now();
    while times.len() < 20 || (began.elapsed().as_secs_f64() < 0.5 && times.len() < 10_000) {
        let t = Instant::now();
        scan(&matrix, &query, &mut scores);
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        std::hint::black_box(&scores);
    }
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn scan(matrix: &[f32], query: &[f32], scores: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has the features the function is compiled for.
        unsafe { scan_avx2(matrix, query, scores) };
        return;
    }
    scan_portable(matrix, query, scores);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn scan_avx2(matrix: &[f32], query: &[f32], scores: &mut [f32]) {
    for (row, score) in matrix.chunks_exact(query.len()).zip(scores.iter_mut()) {
        let mut lanes = [0.0f32; 8];
        for (a, b) in row.chunks_exact(8).zip(query.chunks_exact(8)) {
            for i in 0..8 {
                lanes[i] = a[i].mul_add(b[i], lanes[i]);
            }
        }
        *score = lanes.iter().sum();
    }
}

fn scan_portable(matrix: &[f32], query: &[f32], scores: &mut [f32]) {
    for (row, score) in matrix.chunks_exact(query.len()).zip(scores.iter_mut()) {
        let mut lanes = [0.0f32; 8];
        for (a, b) in row.chunks_exact(8).zip(query.chunks_exact(8)) {
            for i in 0..8 {
                lanes[i] += a[i] * b[i];
            }
        }
        *score = lanes.iter().sum();
    }
}
