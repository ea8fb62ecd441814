use crate::error::AttnError;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// ε added to every normaliser (SPEC §2). Named once, used everywhere.
pub const DEFAULT_EPS: f64 = 1e-6;
/// Seed of the FAVOR+ random projection when the user names none.
pub const DEFAULT_FAVOR_SEED: u64 = 0x5eed_fa70;

/// `label()`, `Display` and `FromStr` of a unit enum from one table: each variant's label
/// (what it prints as, and parses from) and the other spellings it parses from, any case.
/// `$what` and `$expected` name the enum and its labels in the parse error.
macro_rules! labelled {
    (
        $ty:ident, $what:literal, $expected:literal;
        $($variant:ident => $label:literal $(| $alias:literal)*,)+
    ) => {
        impl $ty {
            pub fn label(self) -> &'static str {
                match self {
                    $($ty::$variant => $label,)+
                }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.label())
            }
        }

        impl FromStr for $ty {
            type Err = AttnError;
            fn from_str(s: &str) -> Result<Self, AttnError> {
                match s.to_ascii_lowercase().as_str() {
                    $($label $(| $alias)* => Ok($ty::$variant),)+
                    _ => Err(AttnError::InvalidArgument(format!(
                        concat!("unknown ", $what, " '{}' (expected ", $expected, ")"),
                        s
                    ))),
                }
            }
        }
    };
}

/// Sizes of one problem: Q, K are `[batch, heads, seq, dk]`, V and O are `[batch, heads, seq, dv]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Shape {
    pub batch: usize,
    pub heads: usize,
    pub seq: usize,
    pub dk: usize,
    pub dv: usize,
}

impl Shape {
    pub const fn new(batch: usize, heads: usize, seq: usize, dk: usize, dv: usize) -> Self {
        Shape {
            batch,
            heads,
            seq,
            dk,
            dv,
        }
    }
    /// Number of independent (batch, head) sequences.
    pub fn bh(&self) -> usize {
        self.batch * self.heads
    }
    /// Dims of Q and K.
    pub fn qk_dims(&self) -> [usize; 4] {
        [self.batch, self.heads, self.seq, self.dk]
    }
    /// Dims of V, O and dO.
    pub fn v_dims(&self) -> [usize; 4] {
        [self.batch, self.heads, self.seq, self.dv]
    }
    /// Elements of Q (or K), checked for overflow.
    pub fn qk_len(&self) -> Result<usize, AttnError> {
        checked_len(&self.qk_dims())
    }
    /// Elements of V (or O), checked for overflow.
    pub fn v_len(&self) -> Result<usize, AttnError> {
        checked_len(&self.v_dims())
    }
    /// Every dim non-zero and every size representable.
    pub fn validate(&self) -> Result<(), AttnError> {
        for (name, v) in [
            ("batch (B)", self.batch),
            ("heads (H)", self.heads),
            ("sequence length (N)", self.seq),
            ("key/query head dim (D)", self.dk),
            ("value head dim (M)", self.dv),
        ] {
            if v == 0 {
                return Err(AttnError::EmptyDim(name));
            }
        }
        self.qk_len()?;
        self.v_len()?;
        Ok(())
    }
}

pub(crate) fn checked_len(dims: &[usize; 4]) -> Result<usize, AttnError> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| AttnError::SizeOverflow(format!("tensor of dims {dims:?}")))
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "B={} H={} N={} D={} M={}",
            self.batch, self.heads, self.seq, self.dk, self.dv
        )
    }
}

/// Whether position i sees every position (non-causal) or only j ≤ i (causal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Causality {
    Causal,
    NonCausal,
}

impl Causality {
    pub fn is_causal(self) -> bool {
        self == Causality::Causal
    }
}

labelled! {
    Causality, "causality", "causal or non-causal";
    Causal => "causal",
    NonCausal => "non-causal" | "noncausal" | "full",
}

/// Feature maps φ of SPEC §5.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "map")]
pub enum FeatureMap {
    /// `elu(x) + 1` (Katharopoulos et al.; the default).
    EluPlusOne,
    /// `max(x, 0)`: rows of zeros give den = ε.
    Relu,
    /// softmax over the feature axis.
    Softmax,
    /// `[1, x/‖x‖]`, so `sim = 1 + cos(q, k)` (C = D + 1).
    OnePlusCos,
    /// FAVOR+ positive random features, `exp(W x' − ‖x'‖²/2)/√R`, `x' = x·D^{-1/4}`,
    /// W with orthogonal Gaussian blocks from `seed` (C = R = `features`).
    Favor { features: usize, seed: u64 },
    /// `φ(x) = x` with no normaliser: un-normalised linear attention (SPEC §7 study).
    Identity,
    /// Efficient attention (Shen et al.): softmax over D for Q, over N for K, no normaliser.
    /// Non-causal only.
    EfficientAttention,
}

impl FeatureMap {
    /// Every map, with FAVOR+ at `favor_features` features and the default seed.
    pub fn all(favor_features: usize) -> Vec<FeatureMap> {
        vec![
            FeatureMap::EluPlusOne,
            FeatureMap::Relu,
            FeatureMap::Softmax,
            FeatureMap::OnePlusCos,
            FeatureMap::Favor {
                features: favor_features,
                seed: DEFAULT_FAVOR_SEED,
            },
            FeatureMap::Identity,
            FeatureMap::EfficientAttention,
        ]
    }

    /// Feature dimension C for key/query dim `dk`.
    pub fn feature_dim(&self, dk: usize) -> usize {
        match self {
            FeatureMap::OnePlusCos => dk + 1,
            FeatureMap::Favor { features, .. } => *features,
            _ => dk,
        }
    }

    /// Whether O is divided by `φ(q)ᵀz + ε` (false for identity and efficient attention).
    pub fn normalised(&self) -> bool {
        !matches!(self, FeatureMap::Identity | FeatureMap::EfficientAttention)
    }

    /// Whether φ acts on each element alone (so kernels can fuse it and φ' is elementwise).
    pub fn elementwise(&self) -> bool {
        matches!(
            self,
            FeatureMap::EluPlusOne | FeatureMap::Relu | FeatureMap::Identity
        )
    }

    /// Whether the map is defined for this causality.
    pub fn supports(&self, causality: Causality) -> bool {
        !(matches!(self, FeatureMap::EfficientAttention) && causality.is_causal())
    }

    /// Short stable name, as parsed by `FromStr` (`favor:R` carries R; the seed is separate).
    pub fn label(&self) -> String {
        match self {
            FeatureMap::EluPlusOne => "elu+1".into(),
            FeatureMap::Relu => "relu".into(),
            FeatureMap::Softmax => "softmax".into(),
            FeatureMap::OnePlusCos => "1+cos".into(),
            FeatureMap::Favor { features, .. } => format!("favor:{features}"),
            FeatureMap::Identity => "identity".into(),
            FeatureMap::EfficientAttention => "efficient".into(),
        }
    }
}

impl fmt::Display for FeatureMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

impl FromStr for FeatureMap {
    type Err = AttnError;
    /// `elu+1`/`elu`, `relu`, `softmax`, `1+cos`/`cos`, `favor`/`favor:R`, `identity`,
    /// `efficient`.
    fn from_str(s: &str) -> Result<Self, AttnError> {
        let lower = s.to_ascii_lowercase();
        let (head, arg) = match lower.split_once(':') {
            Some((h, a)) => (h, Some(a)),
            None => (lower.as_str(), None),
        };
        let no_arg = |m: FeatureMap| match arg {
            None => Ok(m),
            Some(_) => Err(AttnError::InvalidArgument(format!(
                "feature map '{head}' takes no ':' argument"
            ))),
        };
        match head {
            "elu+1" | "elu" | "elu1" => no_arg(FeatureMap::EluPlusOne),
            "relu" => no_arg(FeatureMap::Relu),
            "softmax" => no_arg(FeatureMap::Softmax),
            "1+cos" | "cos" | "onepluscos" => no_arg(FeatureMap::OnePlusCos),
            "identity" | "none" => no_arg(FeatureMap::Identity),
            "efficient" | "efficient-attention" => no_arg(FeatureMap::EfficientAttention),
            "favor" | "favor+" => {
                let features = match arg {
                    None => 64,
                    Some(a) => a.parse::<usize>().ok().filter(|&r| r > 0).ok_or_else(|| {
                        AttnError::InvalidArgument(format!(
                            "favor feature count '{a}' is not a positive integer"
                        ))
                    })?,
                };
                Ok(FeatureMap::Favor {
                    features,
                    seed: DEFAULT_FAVOR_SEED,
                })
            }
            _ => Err(AttnError::InvalidArgument(format!(
                "unknown feature map '{s}' (expected one of elu+1, relu, softmax, 1+cos, \
                 favor[:R], identity, efficient)"
            ))),
        }
    }
}

/// Storage precision of a backend. Accumulation is always at least fp32 (SPEC §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    F64,
    F32,
    F16,
    BF16,
}

labelled! {
    Precision, "precision", "f64, f32, f16 or bf16";
    F64 => "f64" | "fp64" | "double",
    F32 => "f32" | "fp32" | "float",
    F16 => "f16" | "fp16" | "half",
    BF16 => "bf16",
}

impl Precision {
    /// Bytes per stored element.
    pub fn bytes(self) -> usize {
        match self {
            Precision::F64 => 8,
            Precision::F32 => 4,
            Precision::F16 | Precision::BF16 => 2,
        }
    }
    /// Tolerance on the RMS ratio `rms(got − ref) / rms(ref)` against the f64 oracle.
    /// f32 and f16 are the bars of the project's issues; bf16 has 3 fewer mantissa bits.
    pub fn rms_tolerance(self) -> f64 {
        match self {
            Precision::F64 => 1e-10,
            Precision::F32 => 1e-5,
            Precision::F16 => 2e-3,
            Precision::BF16 => 5e-3,
        }
    }
}

/// How linear attention is evaluated (SPEC §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Form {
    /// Materialise the N×N similarity `φ(Q)φ(K)ᵀ` (masked when causal), normalise by row
    /// sums, multiply by V. O(N²) on purpose: an independent check of the other forms.
    Quadratic,
    /// Non-causal: reduce `S = φ(K)ᵀV`, `z = Σφ(k)` over N, then `O = φ(Q)S / (φ(Q)z + ε)`.
    /// (Files written before it had one name call it `parallel`.)
    #[serde(alias = "parallel")]
    Noncausal,
    /// Causal, sequential over N with a C×M state.
    Recurrent,
    /// Causal, materialised prefix sums of `φ(k_i)v_iᵀ`: O(N·C·M) memory on purpose.
    Cumsum,
    /// Causal, chunks of L: masked quadratic inside, state carried across (tensor cores).
    Chunked,
}

labelled! {
    Form, "form", "quadratic, noncausal, recurrent, cumsum or chunked";
    Quadratic => "quadratic",
    Noncausal => "noncausal" | "non-causal" | "parallel",
    Recurrent => "recurrent",
    Cumsum => "cumsum",
    Chunked => "chunked" | "chunkwise",
}

impl Form {
    /// The causalities this form computes.
    pub fn supports(self, causality: Causality) -> bool {
        match self {
            Form::Quadratic => true,
            Form::Noncausal => !causality.is_causal(),
            Form::Recurrent | Form::Cumsum | Form::Chunked => causality.is_causal(),
        }
    }
}

/// What a backend computes: linear attention in some form, or the softmax baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    Linear(Form),
    /// Naive softmax attention `softmax(QKᵀ/√D)V`, materialising N×N (SPEC §1). Ignores the
    /// feature map, ε and decay of the problem.
    Softmax,
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Algorithm::Linear(form) => write!(f, "linear/{form}"),
            Algorithm::Softmax => f.write_str("softmax"),
        }
    }
}

/// One attention problem: sizes and the math options. Inputs travel separately.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Problem {
    pub shape: Shape,
    pub causality: Causality,
    pub map: FeatureMap,
    /// Added to every denominator (SPEC §2).
    pub eps: f64,
    /// λ of SPEC §6: `S_i = λ S_{i−1} + φ(k_i)v_iᵀ` (and z likewise); 1.0 means no decay.
    /// Non-causal with decay weights key j by `λ^{N−1−j}`.
    pub decay: f64,
}

impl Problem {
    /// Causality and map as given, ε = [`DEFAULT_EPS`], no decay.
    pub fn new(shape: Shape, causality: Causality, map: FeatureMap) -> Self {
        Problem {
            shape,
            causality,
            map,
            eps: DEFAULT_EPS,
            decay: 1.0,
        }
    }
    pub fn with_eps(mut self, eps: f64) -> Self {
        self.eps = eps;
        self
    }
    pub fn with_decay(mut self, decay: f64) -> Self {
        self.decay = decay;
        self
    }
    /// Feature dimension C.
    pub fn feature_dim(&self) -> usize {
        self.map.feature_dim(self.shape.dk)
    }
    pub fn has_decay(&self) -> bool {
        self.decay != 1.0
    }
    /// What of this problem softmax attention would silently ignore (feature map, ε, decay),
    /// if anything: only the defaults (elu+1, default ε, no decay) describe a softmax run
    /// truthfully, so the harness refuses or marks n/a anything else.
    pub fn softmax_ignores(&self) -> Option<String> {
        let mut ignored = Vec::new();
        if self.map != FeatureMap::EluPlusOne {
            ignored.push(format!("feature map (map={})", self.map));
        }
        if self.eps != DEFAULT_EPS {
            ignored.push(format!("normaliser ε (eps={:e})", self.eps));
        }
        if self.has_decay() {
            ignored.push(format!("decay (decay={})", self.decay));
        }
        (!ignored.is_empty()).then(|| ignored.join(", "))
    }
    /// Checks sizes and options; every backend calls this before running.
    pub fn validate(&self) -> Result<(), AttnError> {
        self.shape.validate()?;
        if !self.map.supports(self.causality) {
            return Err(AttnError::InvalidArgument(format!(
                "feature map {} is defined only for non-causal attention",
                self.map
            )));
        }
        if let FeatureMap::Favor { features, .. } = self.map {
            if features == 0 {
                return Err(AttnError::EmptyDim("FAVOR+ feature count (R)"));
            }
        }
        if !(self.eps.is_finite() && self.eps >= 0.0) {
            return Err(AttnError::InvalidArgument(format!(
                "eps must be finite and >= 0, got {}",
                self.eps
            )));
        }
        if !(self.decay.is_finite() && self.decay > 0.0 && self.decay <= 1.0) {
            return Err(AttnError::InvalidArgument(format!(
                "decay must lie in (0, 1], got {}",
                self.decay
            )));
        }
        Ok(())
    }

    /// Multiply-adds of the linear forms, for GFLOP/s columns: feature map ignored,
    /// `2·B·H·N·C·(M+1)` for S/z plus the same for reading them out (forward).
    pub fn linear_forward_flops(&self) -> f64 {
        let s = &self.shape;
        let c = self.feature_dim() as f64;
        4.0 * s.bh() as f64 * s.seq as f64 * c * (s.dv as f64 + 1.0)
    }
    /// Useful flops of one call, for the "% of GEMM rate" of a cell: the products any
    /// implementation of the algorithm must do, not what a particular form spends (chunk
    /// masks, recomputation, the normaliser's extra column, feature maps are not counted).
    /// 2 flops per multiply-add.
    /// * linear, forward: `4·B·H·N·C·M`, the state `φ(K)ᵀV` and the read-out `φ(Q)S`
    ///   (C = D for the elementwise maps: the issue's `4·B·H·N·D·M`);
    /// * softmax, forward: `2·B·H·N²·(D+M)` for `QKᵀ` and `PV`, halved when causal
    ///   (only j ≤ i is useful);
    /// * backward: twice the forward (linear: `G Sᵀ`, `φ(Q)ᵀG`, `V Rᵀ`, `φ(K)R`; softmax:
    ///   `G Vᵀ`, `PᵀG`, `dS K`, `dSᵀQ`), so forward+backward is 3× the forward.
    pub fn useful_flops(&self, algorithm: Algorithm, pass: Pass) -> f64 {
        let s = &self.shape;
        let (bh, n) = (s.bh() as f64, s.seq as f64);
        let forward = match algorithm {
            Algorithm::Linear(_) => 4.0 * bh * n * self.feature_dim() as f64 * s.dv as f64,
            Algorithm::Softmax => {
                let full = 2.0 * bh * n * n * (s.dk + s.dv) as f64;
                if self.causality.is_causal() {
                    full / 2.0
                } else {
                    full
                }
            }
        };
        match pass {
            Pass::Forward => forward,
            Pass::ForwardBackward => 3.0 * forward,
        }
    }

    /// Flops of naive softmax attention forward (halved when causal is not exploited: it is
    /// not; the naive baseline computes the full N×N).
    pub fn softmax_forward_flops(&self) -> f64 {
        let s = &self.shape;
        2.0 * s.bh() as f64 * (s.seq as f64).powi(2) * (s.dk + s.dv) as f64
    }
}

/// What a timed call runs, for [`Problem::useful_flops`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    Forward,
    ForwardBackward,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} map={}", self.shape, self.causality, self.map)?;
        if self.eps != DEFAULT_EPS {
            write!(f, " eps={:e}", self.eps)?;
        }
        if self.has_decay() {
            write!(f, " decay={}", self.decay)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_names_round_trip() {
        for m in FeatureMap::all(32) {
            let parsed: FeatureMap = m.label().parse().unwrap();
            assert_eq!(parsed, m);
        }
        assert!("gelu".parse::<FeatureMap>().is_err());
        assert!("favor:0".parse::<FeatureMap>().is_err());
        assert!("relu:3".parse::<FeatureMap>().is_err());
    }

    #[test]
    fn validation_names_the_problem() {
        let causal =
            |heads, map| Problem::new(Shape::new(1, heads, 4, 8, 8), Causality::Causal, map);
        let p = causal(0, FeatureMap::Relu);
        assert_eq!(p.validate(), Err(AttnError::EmptyDim("heads (H)")));
        let p = causal(1, FeatureMap::EfficientAttention);
        assert!(matches!(p.validate(), Err(AttnError::InvalidArgument(_))));
        let p = causal(1, FeatureMap::Relu).with_decay(1.5);
        assert!(matches!(p.validate(), Err(AttnError::InvalidArgument(_))));
        let huge = Shape::new(usize::MAX / 2, 4, 4, 4, 4);
        assert!(matches!(huge.validate(), Err(AttnError::SizeOverflow(_))));
    }

    #[test]
    fn forms_know_their_causality() {
        assert!(Form::Noncausal.supports(Causality::NonCausal));
        assert!(!Form::Noncausal.supports(Causality::Causal));
        assert!(Form::Cumsum.supports(Causality::Causal));
        assert!(Form::Quadratic.supports(Causality::Causal));
    }
}

#[cfg(test)]
mod useful_flops_tests {
    use super::*;

    #[test]
    fn useful_flops_count_the_products() {
        let p = Problem::new(
            Shape::new(1, 8, 16384, 64, 64),
            Causality::Causal,
            FeatureMap::EluPlusOne,
        );
        let lin = Algorithm::Linear(Form::Chunked);
        // The figure: 4·B·H·N·D·M = 2.15 GFLOP.
        assert_eq!(
            p.useful_flops(lin, Pass::Forward),
            4.0 * 8.0 * 16384.0 * 64.0 * 64.0
        );
        assert_eq!(
            p.useful_flops(lin, Pass::ForwardBackward),
            3.0 * p.useful_flops(lin, Pass::Forward)
        );
        let favor = Problem::new(
            p.shape,
            Causality::Causal,
            FeatureMap::Favor {
                features: 96,
                seed: 1,
            },
        );
        assert_eq!(
            favor.useful_flops(lin, Pass::Forward),
            4.0 * 8.0 * 16384.0 * 96.0 * 64.0
        );
        let soft_nc = Problem::new(p.shape, Causality::NonCausal, FeatureMap::EluPlusOne);
        let full = 2.0 * 8.0 * 16384f64.powi(2) * 128.0;
        assert_eq!(
            soft_nc.useful_flops(Algorithm::Softmax, Pass::Forward),
            full
        );
        assert_eq!(
            p.useful_flops(Algorithm::Softmax, Pass::Forward),
            full / 2.0
        );
    }
}
