//! The φ stage on the device (kernels/feature_map.cu): feature maps that are not elementwise
//! — softmax, 1+cos, FAVOR+, efficient attention — written as fp32 features, so every form
//! can run them with its identity core; and their vector-Jacobian products for the backward.
//!
//! Use from a form module:
//! ```ignore
//! if FeatureStage::needed(&problem.map) {
//!     FeatureStage::check(problem)?;                       // in supports(): Unsupported
//!     let stage = FeatureStage::new(&exec, problem, precision, &meter)?;  // at stage()
//!     let feats = stage.forward(&meter, &q, &k, heads, n)?;   // φ(Q), φ(K) fp32 [BH,N,C]
//!     // ... core on feats.q / feats.k with LA_MAP=0; ε_i scaled by feats' log scales ...
//!     stage.backward(&q, &k, &feats, &d_phi_q, &d_phi_k, &mut dq, &mut dk, heads, n)?;
//! }
//! ```
//! FAVOR+ shifts its exponents (row max for queries, the head's max for keys) like the CPU
//! f32 path; `DeviceFeatures::{q_log_scale, k_log_scale}` hold −shift, and the core must use
//! `ε_i = ε·exp(q_log_scale[i] + k_log_scale[head])` so O equals the unshifted result.

use std::sync::Arc;

use linattn_core::{AttnError, Backend, FeatureMap, Precision, Problem, Unsupported};

use crate::args;
use crate::executor::{Executor, KernelArg, Launch};
use crate::memory::{address_of, DeviceBuffer, MemoryMeter, StorageElem};
use crate::runtime::{
    as_i32, blocks_for, check_head_dim, head_dim_class, storage_define, KernelVariant,
    HEAD_DIM_CLASSES,
};

/// kernels/feature_map.cu.
pub const SOURCE: &str = include_str!("../../../kernels/feature_map.cu");

const ENTRY_POINTS: [&str; 10] = [
    "fm_softmax_rows",
    "fm_backward_softmax_rows",
    "fm_softmax_cols",
    "fm_backward_softmax_cols",
    "fm_cos_rows",
    "fm_backward_cos_rows",
    "fm_favor_exponents",
    "fm_favor_head_max",
    "fm_favor_exp",
    "fm_backward_favor",
];

/// Rows per 256-thread block of the row-wise kernels (one warp per row).
const ROWS_PER_BLOCK: usize = 8;
/// Largest FAVOR+ feature count the kernels stage in shared memory.
pub const FAVOR_MAX_FEATURES: usize = 256;

/// The φ stage has no backend of its own.
pub fn backends() -> Vec<Box<dyn Backend>> {
    Vec::new()
}

/// The variant for a storage precision and key-dim class.
pub fn variant(precision: Precision, dk_class: usize) -> Result<KernelVariant, Unsupported> {
    let (name, value) = storage_define(precision)?;
    Ok(KernelVariant::new("feature_map.cu", SOURCE)
        .define(name, value)
        .define("LA_DK_MAX", dk_class)
        .entries(&ENTRY_POINTS))
}

/// Every storage precision × key-dim class.
pub fn kernel_variants() -> Vec<KernelVariant> {
    [Precision::F32, Precision::F16, Precision::BF16]
        .into_iter()
        .flat_map(|p| {
            HEAD_DIM_CLASSES
                .into_iter()
                .filter_map(move |c| variant(p, c).ok())
        })
        .collect()
}

/// φ(Q), φ(K) as fp32 `[BH, N, C]`, and FAVOR+'s ε scales (absent for other maps).
pub struct DeviceFeatures {
    pub c: usize,
    pub q: DeviceBuffer<f32>,
    pub k: DeviceBuffer<f32>,
    /// −(query row shift), `[BH·N]`.
    pub q_log_scale: Option<DeviceBuffer<f32>>,
    /// −(key head shift), `[BH]`.
    pub k_log_scale: Option<DeviceBuffer<f32>>,
}

/// Device addresses of FAVOR+'s ε scales (0 = none: other maps, or no φ stage).
pub(crate) fn log_scales(features: Option<&DeviceFeatures>) -> (u64, u64) {
    features.map_or((0, 0), |f| {
        (
            address_of(f.q_log_scale.as_ref()),
            address_of(f.k_log_scale.as_ref()),
        )
    })
}

/// A prepared φ stage for one problem and precision (FAVOR+'s W uploaded once).
pub struct FeatureStage {
    exec: Arc<dyn Executor>,
    map: FeatureMap,
    dk: usize,
    variant: KernelVariant,
    favor_w: Option<DeviceBuffer<f32>>,
}

enum Operand {
    Query,
    Key,
}

impl FeatureStage {
    /// Whether `map` needs this stage (elementwise maps are fused into the cores).
    pub fn needed(map: &FeatureMap) -> bool {
        !map.elementwise()
    }

    /// What the stage supports: D as the cores do, FAVOR+ with R ≤ 256.
    pub fn check(problem: &Problem) -> Result<(), Unsupported> {
        check_head_dim("head dim D", problem.shape.dk)?;
        if let FeatureMap::Favor { features, .. } = problem.map {
            if features == 0 || features > FAVOR_MAX_FEATURES {
                return Err(Unsupported::Problem(format!(
                    "FAVOR+ with R = {features} features: CUDA kernels take 1..={FAVOR_MAX_FEATURES}"
                )));
            }
        }
        Ok(())
    }

    pub fn new(
        exec: &Arc<dyn Executor>,
        problem: &Problem,
        precision: Precision,
        meter: &MemoryMeter,
    ) -> Result<Self, AttnError> {
        Self::check(problem)?;
        let dk = problem.shape.dk;
        let variant = variant(precision, head_dim_class("head dim D", dk)?)?;
        let favor_w = match problem.map {
            FeatureMap::Favor { features, seed } => {
                let w = linattn_core::favor_projection(dk, features, seed);
                Some(DeviceBuffer::<f32>::upload_f64(exec, meter, &w)?)
            }
            _ => None,
        };
        Ok(FeatureStage {
            exec: exec.clone(),
            map: problem.map,
            dk,
            variant,
            favor_w,
        })
    }

    /// Feature dimension C.
    pub fn feature_dim(&self) -> usize {
        self.map.feature_dim(self.dk)
    }

    /// φ of both operands (`heads` = B·H, `n` rows each).
    pub fn forward<T: StorageElem>(
        &self,
        meter: &MemoryMeter,
        q: &DeviceBuffer<T>,
        k: &DeviceBuffer<T>,
        heads: usize,
        n: usize,
    ) -> Result<DeviceFeatures, AttnError> {
        let c = self.feature_dim();
        let rows = heads
            .checked_mul(n)
            .ok_or_else(|| AttnError::SizeOverflow(format!("{heads} heads × {n} rows")))?;
        let features = || -> Result<DeviceBuffer<f32>, AttnError> {
            let len = rows
                .checked_mul(c)
                .ok_or_else(|| AttnError::SizeOverflow(format!("{rows} rows × {c} features")))?;
            DeviceBuffer::uninit(&self.exec, meter, len)
        };
        let mut out = DeviceFeatures {
            c,
            q: features()?,
            k: features()?,
            q_log_scale: None,
            k_log_scale: None,
        };
        match self.map {
            FeatureMap::Softmax => {
                self.rows_kernel("fm_softmax_rows", q, &out.q, rows)?;
                self.rows_kernel("fm_softmax_rows", k, &out.k, rows)?;
            }
            FeatureMap::EfficientAttention => {
                self.rows_kernel("fm_softmax_rows", q, &out.q, rows)?;
                self.cols_kernel("fm_softmax_cols", k.address(), 0, out.k.address(), heads, n)?;
            }
            FeatureMap::OnePlusCos => {
                self.rows_kernel("fm_cos_rows", q, &out.q, rows)?;
                self.rows_kernel("fm_cos_rows", k, &out.k, rows)?;
            }
            FeatureMap::Favor { .. } => {
                let q_scale = DeviceBuffer::uninit(&self.exec, meter, rows)?;
                let k_scale = DeviceBuffer::uninit(&self.exec, meter, heads)?;
                self.favor(meter, Operand::Query, q, &out.q, &q_scale, heads, n)?;
                self.favor(meter, Operand::Key, k, &out.k, &k_scale, heads, n)?;
                out.q_log_scale = Some(q_scale);
                out.k_log_scale = Some(k_scale);
            }
            other => {
                return Err(AttnError::State(format!(
                    "feature map {other} is elementwise: fused in the cores, no φ stage"
                )))
            }
        }
        Ok(out)
    }

    /// Chains `g_q = ∂L/∂φ(Q)`, `g_k = ∂L/∂φ(K)` (fp32 `[BH, N, C]`) through φ into `dq`, `dk`.
    #[allow(clippy::too_many_arguments)]
    pub fn backward<T: StorageElem>(
        &self,
        q: &DeviceBuffer<T>,
        k: &DeviceBuffer<T>,
        features: &DeviceFeatures,
        g_q: &DeviceBuffer<f32>,
        g_k: &DeviceBuffer<f32>,
        dq: &mut DeviceBuffer<T>,
        dk: &mut DeviceBuffer<T>,
        heads: usize,
        n: usize,
    ) -> Result<(), AttnError> {
        let rows = heads * n;
        match self.map {
            FeatureMap::Softmax | FeatureMap::EfficientAttention => {
                // Both maps softmax a query over its features.
                self.vjp_rows(
                    "fm_backward_softmax_rows",
                    features.q.address(),
                    g_q,
                    dq,
                    rows,
                )?;
                if self.map == FeatureMap::Softmax {
                    self.vjp_rows(
                        "fm_backward_softmax_rows",
                        features.k.address(),
                        g_k,
                        dk,
                        rows,
                    )?;
                } else {
                    // Efficient attention softmaxes keys over the sequence instead.
                    self.cols_kernel(
                        "fm_backward_softmax_cols",
                        features.k.address(),
                        g_k.address(),
                        dk.address(),
                        heads,
                        n,
                    )?;
                }
            }
            FeatureMap::OnePlusCos => {
                self.vjp_rows("fm_backward_cos_rows", q.address(), g_q, dq, rows)?;
                self.vjp_rows("fm_backward_cos_rows", k.address(), g_k, dk, rows)?;
            }
            FeatureMap::Favor { .. } => {
                self.vjp_favor(q, &features.q, g_q, dq, rows)?;
                self.vjp_favor(k, &features.k, g_k, dk, rows)?;
            }
            other => {
                return Err(AttnError::State(format!(
                    "feature map {other} is elementwise: no φ-stage backward"
                )))
            }
        }
        Ok(())
    }

    /// One warp per row, 8 rows per 256-thread block.
    fn row_launch(rows: usize) -> Result<Launch, AttnError> {
        Ok(Launch::new((blocks_for(rows, ROWS_PER_BLOCK)?, 1, 1), 256))
    }

    fn launch(&self, entry: &str, launch: &Launch, args: &[KernelArg]) -> Result<(), AttnError> {
        let kernel = self.exec.kernel(&self.variant, entry)?;
        self.exec.launch(&kernel, launch, args)
    }

    /// `entry(x, phi, rows, d)`.
    fn rows_kernel<T>(
        &self,
        entry: &str,
        x: &DeviceBuffer<T>,
        phi: &DeviceBuffer<f32>,
        rows: usize,
    ) -> Result<(), AttnError> {
        // x holds rows·d elements and phi rows·C.
        let d = as_i32("head dim", self.dk)?;
        self.launch(
            entry,
            &Self::row_launch(rows)?,
            &args![x, phi, rows as i64, d],
        )
    }

    /// `entry(first, g, dx, rows, d)`: `first` is φ (softmax) or x (1+cos).
    fn vjp_rows<T>(
        &self,
        entry: &str,
        first: u64,
        g: &DeviceBuffer<f32>,
        dx: &mut DeviceBuffer<T>,
        rows: usize,
    ) -> Result<(), AttnError> {
        let d = as_i32("head dim", self.dk)?;
        self.launch(
            entry,
            &Self::row_launch(rows)?,
            &args![KernelArg::Ptr(first), g, dx, rows as i64, d],
        )
    }

    /// Column softmax over N: `fm_softmax_cols(x, phi, n, d)` (middle = 0 unused) or
    /// `fm_backward_softmax_cols(phi, g, dx, n, d)`.
    #[allow(clippy::too_many_arguments)]
    fn cols_kernel(
        &self,
        entry: &str,
        first: u64,
        middle: u64,
        last: u64,
        heads: usize,
        n: usize,
    ) -> Result<(), AttnError> {
        let n_i32 = as_i32("sequence length N", n)?;
        let d = as_i32("head dim", self.dk)?;
        let heads_u32 =
            u32::try_from(heads).map_err(|_| AttnError::SizeOverflow(format!("{heads} heads")))?;
        let launch =
            Launch::new((blocks_for(self.dk, 32)?, heads_u32, 1), 32).with_block((32, 8, 1));
        // Buffers are [heads, n, d].
        let (first, middle, last) = (
            KernelArg::Ptr(first),
            KernelArg::Ptr(middle),
            KernelArg::Ptr(last),
        );
        if entry == "fm_backward_softmax_cols" {
            self.launch(entry, &launch, &args![first, middle, last, n_i32, d])
        } else {
            self.launch(entry, &launch, &args![first, last, n_i32, d])
        }
    }

    fn favor_scale(&self) -> f32 {
        (self.dk as f64).powf(-0.25) as f32
    }

    fn favor_w(&self) -> Result<&DeviceBuffer<f32>, AttnError> {
        self.favor_w
            .as_ref()
            .ok_or_else(|| AttnError::State("FAVOR+ projection not uploaded".into()))
    }

    #[allow(clippy::too_many_arguments)]
    fn favor<T>(
        &self,
        meter: &MemoryMeter,
        operand: Operand,
        x: &DeviceBuffer<T>,
        phi: &DeviceBuffer<f32>,
        log_scale: &DeviceBuffer<f32>,
        heads: usize,
        n: usize,
    ) -> Result<(), AttnError> {
        let rows = heads * n;
        let r = self.feature_dim();
        let r_i32 = as_i32("FAVOR+ features", r)?;
        let d = as_i32("head dim", self.dk)?;
        let n_i32 = as_i32("sequence length N", n)?;
        let rows_i64 = rows as i64;
        let scale = self.favor_scale();
        let row_max = DeviceBuffer::<f32>::uninit(&self.exec, meter, rows)?;
        // W is [r, d], phi [rows, r], row_max [rows].
        self.launch(
            "fm_favor_exponents",
            &Self::row_launch(rows)?,
            &args![x, self.favor_w()?, phi, &row_max, rows_i64, d, r_i32, scale],
        )?;

        let head_max = match operand {
            Operand::Query => None,
            Operand::Key => {
                let head_max = DeviceBuffer::<f32>::uninit(&self.exec, meter, heads)?;
                let heads_u32 = u32::try_from(heads)
                    .map_err(|_| AttnError::SizeOverflow(format!("{heads} heads")))?;
                // row_max [heads·n] → head_max [heads].
                self.launch(
                    "fm_favor_head_max",
                    &Launch::new((heads_u32, 1, 1), 256),
                    &args![&row_max, &head_max, n_i32],
                )?;
                Some(head_max)
            }
        };
        let (shift, per_row) = match &head_max {
            None => (&row_max, true),
            Some(head_max) => (head_max, false),
        };
        let total = rows
            .checked_mul(r)
            .ok_or_else(|| AttnError::SizeOverflow(format!("{rows} rows × {r} features")))?;
        // log_scale holds rows (queries) or heads (keys).
        self.launch(
            "fm_favor_exp",
            &Launch::new((blocks_for(total, 256)?, 1, 1), 256),
            &args![phi, shift, log_scale, rows_i64, n_i32, r_i32, per_row],
        )
    }

    fn vjp_favor<T>(
        &self,
        x: &DeviceBuffer<T>,
        phi: &DeviceBuffer<f32>,
        g: &DeviceBuffer<f32>,
        dx: &mut DeviceBuffer<T>,
        rows: usize,
    ) -> Result<(), AttnError> {
        let d = as_i32("head dim", self.dk)?;
        let r = as_i32("FAVOR+ features", self.feature_dim())?;
        // (x, W, phi, g, dx, rows, d, r, scale).
        self.launch(
            "fm_backward_favor",
            &Self::row_launch(rows)?,
            &args![
                x,
                self.favor_w()?,
                phi,
                g,
                dx,
                rows as i64,
                d,
                r,
                self.favor_scale()
            ],
        )
    }
}
