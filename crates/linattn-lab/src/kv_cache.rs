//! The baseline the decode bench sets linear attention against: softmax decoding with a
//! KV cache (SPEC §1, causal). Each generated token appends its k, v to the cache, scores q
//! against every cached key (`s = qᵀk_j/√D`), takes the softmax and the weighted sum of the
//! cached values: time O(L·(D+M)) and memory O(L·(D+M)) per (batch, head) at context L,
//! where linear attention's step is O(C·M) in both.

use linattn_core::{AttnError, HostMemory};

/// One head's cache, f32 like the linear decoder it is compared with.
pub(crate) struct KvCache {
    d: usize,
    m: usize,
    keys: Vec<f32>,
    values: Vec<f32>,
    /// Scores of the current step, kept to avoid an allocation per token.
    scores: Vec<f32>,
}

impl KvCache {
    pub fn new(d: usize, m: usize) -> Self {
        KvCache {
            d,
            m,
            keys: Vec::new(),
            values: Vec::new(),
            scores: Vec::new(),
        }
    }

    /// Tokens cached.
    pub fn len(&self) -> usize {
        self.keys.len() / self.d
    }

    /// Bytes the cache holds (keys and values).
    pub fn bytes(&self) -> u64 {
        ((self.keys.len() + self.values.len()) * 4) as u64
    }

    /// Appends `tokens` rows of k (`tokens × D`) and v (`tokens × M`) without attending: the
    /// context a prompt leaves. Refuses, as out of memory, a cache the host cannot hold.
    pub fn extend(&mut self, k: &[f32], v: &[f32]) -> Result<(), AttnError> {
        if k.len() % self.d != 0 || v.len() / self.m != k.len() / self.d {
            return Err(AttnError::ShapeMismatch(format!(
                "{} key and {} value elements are not whole tokens of D = {}, M = {}",
                k.len(),
                v.len(),
                self.d,
                self.m
            )));
        }
        HostMemory::ensure_available(((k.len() + v.len()) * 8) as u64, "KV cache")?;
        self.keys.extend_from_slice(k);
        self.values.extend_from_slice(v);
        Ok(())
    }

    /// Drops every token after the first `len` (a timed step can be undone, so every sample
    /// of a benchmark sees the same context).
    pub fn truncate(&mut self, len: usize) {
        self.keys.truncate(len * self.d);
        self.values.truncate(len * self.m);
    }

    /// One generated token: caches k, v, then writes `o = softmax(K q/√D)ᵀ V` over every
    /// cached token, this one included.
    pub fn step(
        &mut self,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        o: &mut [f32],
    ) -> Result<(), AttnError> {
        self.extend(k, v)?;
        let scale = 1.0 / (self.d as f32).sqrt();
        self.scores.clear();
        self.scores.extend(
            self.keys
                .chunks_exact(self.d)
                .map(|kj| scale * kj.iter().zip(q).map(|(a, b)| a * b).sum::<f32>()),
        );
        // Max subtraction keeps exp finite; the weights are unchanged.
        let max = self
            .scores
            .iter()
            .copied()
            .fold(f32::NEG_INFINITY, f32::max);
        let mut total = 0.0f32;
        for s in &mut self.scores {
            *s = (*s - max).exp();
            total += *s;
        }
        o.fill(0.0);
        for (w, vj) in self.scores.iter().zip(self.values.chunks_exact(self.m)) {
            for (oo, &x) in o.iter_mut().zip(vj) {
                *oo += w * x;
            }
        }
        o.iter_mut().for_each(|x| *x /= total);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Causal softmax attention of every token, by the definition in f64.
    fn softmax_rows(q: &[f64], k: &[f64], v: &[f64], n: usize, d: usize, m: usize) -> Vec<f64> {
        let mut out = vec![0.0; n * m];
        for i in 0..n {
            let s: Vec<f64> = (0..=i)
                .map(|j| {
                    (0..d).map(|a| q[i * d + a] * k[j * d + a]).sum::<f64>() / (d as f64).sqrt()
                })
                .collect();
            let z: f64 = s.iter().map(|x| x.exp()).sum();
            for (j, sj) in s.iter().enumerate() {
                for b in 0..m {
                    out[i * m + b] += sj.exp() / z * v[j * m + b];
                }
            }
        }
        out
    }

    #[test]
    fn steps_equal_causal_softmax_attention() {
        let (n, d, m) = (17, 8, 5);
        let x = linattn_core::Inputs::random(linattn_core::Shape::new(1, 1, n, d, m), 3, false)
            .unwrap()
            .rounded(|a| a as f32 as f64);
        let want = softmax_rows(x.q.data(), x.k.data(), x.v.data(), n, d, m);
        let (q, k, v) = (x.q.to_f32(), x.k.to_f32(), x.v.to_f32());
        let mut cache = KvCache::new(d, m);
        let mut got = vec![0.0f32; n * m];
        for i in 0..n {
            cache
                .step(
                    &q[i * d..(i + 1) * d],
                    &k[i * d..(i + 1) * d],
                    &v[i * m..(i + 1) * m],
                    &mut got[i * m..(i + 1) * m],
                )
                .unwrap();
        }
        let got: Vec<f64> = got.iter().map(|&x| x as f64).collect();
        let err = linattn_core::ErrorMetrics::compare(&want, &got);
        assert!(err.passes(1e-5), "{err:?}");
        assert_eq!(cache.len(), n);
        assert_eq!(cache.bytes(), (n * (d + m) * 4) as u64);
        cache.truncate(3);
        assert_eq!(cache.bytes(), (3 * (d + m) * 4) as u64);
        assert!(matches!(
            cache.extend(&[0.0; 3], &[0.0; 5]),
            Err(AttnError::ShapeMismatch(_))
        ));
    }
}
