//! Query levelling across languages (docs/models.md, "Recall across languages"): a
//! multilingual model puts a Korean question nearer every Korean memory than any English
//! one, whatever they say, so the English memory that answers it ranks below the Korean ones.
//! The directions the language alone adds to a vector are measured once per model, on
//! parallel Korean and English sentences (`bench/calibrate_languages.py`), and shipped here;
//! a query loses most of its share along them before it is compared.
//!
//! Only the query is changed: with `P` the projection off those directions, `(Pq)·m =
//! (Pq)·(Pm)`, so the stored vectors need no change and no store is re-embedded. What the
//! languages share on those directions is kept in proportion `1 − STRENGTH`.

/// How much of a query's share along the language directions is removed, measured on the
/// multilingual set (BENCHMARKS.md, "Issue 31: memory you can trust on the default model"): all of
/// it also removes what the model means there, and Korean questions then lose their Korean answers.
const STRENGTH: f32 = 0.7;

/// A model's language directions: orthonormal rows of the model's width.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Languages {
    /// Little-endian f32 rows of `width` each.
    axes: &'static [u8],
    width: usize,
}

impl Languages {
    /// multilingual-e5-small's four directions (`languages/multilingual-e5-small.f32`).
    pub const E5_SMALL: Languages = Languages {
        axes: include_bytes!("languages/multilingual-e5-small.f32"),
        width: 384,
    };

    fn rows(&self) -> impl Iterator<Item = Vec<f32>> + '_ {
        (self.axes.chunks_exact(self.width * 4)).map(|row| {
            row.chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect()
        })
    }

    /// `query` with most of its share along the directions removed, at unit length; as it
    /// was when the directions are of another width (a folder of the same name holding
    /// another model), or when nothing would be left.
    pub fn level(&self, query: &mut [f32]) {
        if query.len() != self.width {
            return;
        }
        let mut levelled = query.to_vec();
        for axis in self.rows() {
            let share: f32 = query.iter().zip(&axis).map(|(q, a)| q * a).sum();
            for (l, a) in levelled.iter_mut().zip(&axis) {
                *l -= STRENGTH * share * a;
            }
        }
        let norm = levelled.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm > f32::EPSILON {
            for (q, l) in query.iter_mut().zip(levelled) {
                *q = l / norm;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_directions_are_orthonormal_rows_of_e5s_width() {
        let rows: Vec<Vec<f32>> = Languages::E5_SMALL.rows().collect();
        assert_eq!(rows.len(), 4);
        for (i, a) in rows.iter().enumerate() {
            for (j, b) in rows.iter().enumerate() {
                let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
                let expected = if i == j { 1.0 } else { 0.0 };
                assert!((dot - expected).abs() < 1e-4, "rows {i}, {j}: {dot}");
            }
        }
    }

    #[test]
    fn levelling_removes_most_of_the_language_share_and_keeps_unit_length() {
        let axis: Vec<f32> = Languages::E5_SMALL.rows().next().unwrap();
        // A query half along the first direction, half elsewhere.
        let mut other = vec![0.0f32; 384];
        other[0] = 1.0;
        let along: f32 = other.iter().zip(&axis).map(|(o, a)| o * a).sum();
        let mut query: Vec<f32> = (other.iter().zip(&axis))
            .map(|(o, a)| (o - along * a) * 0.5f32.sqrt() + a * 0.5f32.sqrt())
            .collect();
        let norm = query.iter().map(|x| x * x).sum::<f32>().sqrt();
        query.iter_mut().for_each(|x| *x /= norm);
        let before: f32 = query.iter().zip(&axis).map(|(q, a)| q * a).sum();
        Languages::E5_SMALL.level(&mut query);
        let after: f32 = query.iter().zip(&axis).map(|(q, a)| q * a).sum();
        assert!(after.abs() < before.abs() * 0.5, "{before} -> {after}");
        let norm = query.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5);
        // A vector of another width is left as it was.
        let mut short = vec![1.0f32, 0.0];
        Languages::E5_SMALL.level(&mut short);
        assert_eq!(short, [1.0, 0.0]);
    }
}
