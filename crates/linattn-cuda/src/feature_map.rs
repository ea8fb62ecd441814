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

use linattn_core::{AttnError, FeatureMap, Precision, Problem, Unsupported};

use crate::executor::{Executor, Launch};
use crate::limits::{self, product, Axis, Grid};
use crate::memory::{DeviceBuffer, MemoryMeter, StorageElem};
use crate::params::{launch, ptr, KernelParams, Ptr};
use crate::runtime::{
    as_i32, check_head_dim, head_dim_class, storage_define, KernelVariant, HEAD_DIM_CLASSES,
};

/// kernels/feature_map.cu.
pub const SOURCE: &str = include_str!("../../../kernels/feature_map.cu");

crate::kernel_params! {
    /// The argument structs of feature_map.cu's entry points.
    pub mod params;
    /// `fm_softmax_rows`: φ = softmax over each row's D features.
    pub struct SoftmaxRows => "fm_softmax_rows" { x: Ptr, phi: Ptr, rows: i64, d: i32 }
    /// `fm_backward_softmax_rows`: its vector-Jacobian product.
    pub struct BackwardSoftmaxRows => "fm_backward_softmax_rows" {
        phi: Ptr, g: Ptr, dx: Ptr, rows: i64, d: i32,
    }
    /// `fm_softmax_cols`: φ = softmax of each feature over the N rows of a head.
    pub struct SoftmaxCols => "fm_softmax_cols" { x: Ptr, phi: Ptr, n: i32, d: i32 }
    /// `fm_backward_softmax_cols`: its vector-Jacobian product.
    pub struct BackwardSoftmaxCols => "fm_backward_softmax_cols" {
        phi: Ptr, g: Ptr, dx: Ptr, n: i32, d: i32,
    }
    /// `fm_cos_rows`: φ = [1 + cos x, 1 + sin x].
    pub struct CosRows => "fm_cos_rows" { x: Ptr, phi: Ptr, rows: i64, d: i32 }
    /// `fm_backward_cos_rows`: its vector-Jacobian product.
    pub struct BackwardCosRows => "fm_backward_cos_rows" { x: Ptr, g: Ptr, dx: Ptr, rows: i64, d: i32 }
    /// `fm_favor_exponents`: FAVOR+'s exponents w_r·x·scale − ‖x‖²/2 and each row's max.
    pub struct FavorExponents => "fm_favor_exponents" {
        x: Ptr, w: Ptr, phi: Ptr, row_max: Ptr, rows: i64, d: i32, r: i32, scale: f32,
    }
    /// `fm_favor_head_max`: the max of a head's row maxima (the keys' shift).
    pub struct FavorHeadMax => "fm_favor_head_max" { row_max: Ptr, head_max: Ptr, n: i32 }
    /// `fm_favor_exp`: φ = exp(exponent − shift)/√R and the ε log-scales.
    pub struct FavorExp => "fm_favor_exp" {
        phi: Ptr, shift: Ptr, log_scale: Ptr, rows: i64, n: i32, r: i32, per_row: bool,
    }
    /// `fm_backward_favor`: FAVOR+'s vector-Jacobian product.
    pub struct BackwardFavor => "fm_backward_favor" {
        x: Ptr, w: Ptr, phi: Ptr, g: Ptr, dx: Ptr, rows: i64, d: i32, r: i32, scale: f32,
    }
}

pub use params::SPECS as KERNEL_PARAMS;

/// Rows per 256-thread block of the row-wise kernels (one warp per row).
const ROWS_PER_BLOCK: usize = 8;
/// Largest FAVOR+ feature count the kernels stage in shared memory.
pub const FAVOR_MAX_FEATURES: usize = 256;
/// Elements of φ per block of `fm_favor_exp` (a thread each).
const FAVOR_EXP_PER_BLOCK: u64 = 256;

/// A row kernel `P`: a warp per row of [B·H·N], [`ROWS_PER_BLOCK`] rows a 256-thread block.
fn row_grid<P: KernelParams>(rows: u64) -> Grid {
    let x = Axis::covering("B·H·N", rows, ROWS_PER_BLOCK as u64);
    Grid::of::<P>(x, Axis::one(), Axis::one())
}

/// A column kernel `P` over the N rows of each head: 32 features a block, heads on grid y.
fn column_grid<P: KernelParams>(dk: usize, heads: usize) -> Grid {
    let x = Axis::covering("D", dk as u64, 32);
    Grid::of::<P>(x, Axis::each("B·H", heads), Axis::one())
}

/// `fm_favor_head_max`: a block per head.
fn head_max_grid(heads: usize) -> Grid {
    Grid::of::<params::FavorHeadMax>(Axis::each("B·H", heads), Axis::one(), Axis::one())
}

/// `fm_favor_exp`: a thread per element of φ ([B·H·N, R]).
fn favor_exp_grid(elements: u64) -> Grid {
    let x = Axis::covering("B·H·N·R", elements, FAVOR_EXP_PER_BLOCK);
    Grid::of::<params::FavorExp>(x, Axis::one(), Axis::one())
}

/// The variant for a storage precision and key-dim class.
pub fn variant(precision: Precision, dk_class: usize) -> Result<KernelVariant, Unsupported> {
    let (name, value) = storage_define(precision)?;
    Ok(KernelVariant::new("feature_map.cu", SOURCE)
        .define(name, value)
        .define("LA_DK_MAX", dk_class)
        .entries(&params::ENTRIES))
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

/// FAVOR+'s ε scales for the cores' `q_log_scale`, `k_log_scale` (null: other maps, or no
/// φ stage).
pub(crate) fn log_scales(features: Option<&DeviceFeatures>) -> (Ptr, Ptr) {
    features.map_or((Ptr::NULL, Ptr::NULL), |f| {
        (ptr(f.q_log_scale.as_ref()), ptr(f.k_log_scale.as_ref()))
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

    /// What the stage supports: D as the cores do, FAVOR+ with R ≤ 256, and the grids of
    /// its launches.
    pub fn check(problem: &Problem) -> Result<(), Unsupported> {
        check_head_dim("head dim D", problem.shape.dk)?;
        if let FeatureMap::Favor { features, .. } = problem.map {
            if features == 0 || features > FAVOR_MAX_FEATURES {
                return Err(Unsupported::Problem(format!(
                    "FAVOR+ with R = {features} features: CUDA kernels take 1..={FAVOR_MAX_FEATURES}"
                )));
            }
        }
        limits::check_grids(&Self::launch_grids(problem))
    }

    /// The grid of every launch of the stage's forward and backward for `problem`'s map
    /// (the row kernels of one map share one grid).
    fn launch_grids(problem: &Problem) -> Vec<Grid> {
        let shape = &problem.shape;
        let rows = product(&[shape.bh(), shape.seq]);
        let columns = |grid: fn(usize, usize) -> Grid| grid(shape.dk, shape.bh());
        match problem.map {
            FeatureMap::Softmax => vec![row_grid::<params::SoftmaxRows>(rows)],
            FeatureMap::EfficientAttention => vec![
                row_grid::<params::SoftmaxRows>(rows),
                columns(column_grid::<params::SoftmaxCols>),
                columns(column_grid::<params::BackwardSoftmaxCols>),
            ],
            FeatureMap::OnePlusCos => vec![row_grid::<params::CosRows>(rows)],
            FeatureMap::Favor { features, .. } => vec![
                row_grid::<params::FavorExponents>(rows),
                head_max_grid(shape.bh()),
                favor_exp_grid(product(&[shape.bh(), shape.seq, features])),
            ],
            _ => Vec::new(),
        }
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
                for (x, phi) in [(ptr(q), ptr(&out.q)), (ptr(k), ptr(&out.k))] {
                    let (rows, d) = (rows as i64, self.d()?);
                    self.by_rows(rows, &params::SoftmaxRows { x, phi, rows, d })?;
                }
            }
            FeatureMap::EfficientAttention => {
                let (x, phi, d) = (ptr(q), ptr(&out.q), self.d()?);
                let rows = rows as i64;
                self.by_rows(rows, &params::SoftmaxRows { x, phi, rows, d })?;
                let (x, phi) = (ptr(k), ptr(&out.k));
                let n = as_i32("sequence length N", n)?;
                self.by_columns(heads, &params::SoftmaxCols { x, phi, n, d })?;
            }
            FeatureMap::OnePlusCos => {
                for (x, phi) in [(ptr(q), ptr(&out.q)), (ptr(k), ptr(&out.k))] {
                    let (rows, d) = (rows as i64, self.d()?);
                    self.by_rows(rows, &params::CosRows { x, phi, rows, d })?;
                }
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
        let rows = (heads * n) as i64;
        let d = self.d()?;
        match self.map {
            FeatureMap::Softmax | FeatureMap::EfficientAttention => {
                // Both maps softmax a query over its features.
                let softmax_rows = |phi, g, dx| {
                    self.by_rows(
                        rows,
                        &params::BackwardSoftmaxRows {
                            phi,
                            g,
                            dx,
                            rows,
                            d,
                        },
                    )
                };
                softmax_rows(ptr(&features.q), ptr(g_q), ptr(dq))?;
                let (phi, g, dx) = (ptr(&features.k), ptr(g_k), ptr(dk));
                if self.map == FeatureMap::Softmax {
                    softmax_rows(phi, g, dx)?;
                } else {
                    // Efficient attention softmaxes keys over the sequence instead.
                    let n = as_i32("sequence length N", n)?;
                    self.by_columns(heads, &params::BackwardSoftmaxCols { phi, g, dx, n, d })?;
                }
            }
            FeatureMap::OnePlusCos => {
                for (x, g, dx) in [(ptr(q), ptr(g_q), ptr(dq)), (ptr(k), ptr(g_k), ptr(dk))] {
                    self.by_rows(rows, &params::BackwardCosRows { x, g, dx, rows, d })?;
                }
            }
            FeatureMap::Favor { .. } => {
                let (r, scale) = (
                    as_i32("FAVOR+ features", self.feature_dim())?,
                    self.favor_scale(),
                );
                let w = ptr(self.favor_w()?);
                for (x, phi, g, dx) in [
                    (ptr(q), ptr(&features.q), ptr(g_q), ptr(dq)),
                    (ptr(k), ptr(&features.k), ptr(g_k), ptr(dk)),
                ] {
                    let vjp = params::BackwardFavor {
                        x,
                        w,
                        phi,
                        g,
                        dx,
                        rows,
                        d,
                        r,
                        scale,
                    };
                    self.by_rows(rows, &vjp)?;
                }
            }
            other => {
                return Err(AttnError::State(format!(
                    "feature map {other} is elementwise: no φ-stage backward"
                )))
            }
        }
        Ok(())
    }

    fn d(&self) -> Result<i32, AttnError> {
        as_i32("head dim", self.dk)
    }

    /// A row kernel: [`row_grid`].
    fn by_rows<P: KernelParams>(&self, rows: i64, params: &P) -> Result<(), AttnError> {
        let rows = u64::try_from(rows).map_err(|_| AttnError::SizeOverflow("rows".into()))?;
        let grid = row_grid::<P>(rows).dims()?;
        launch(
            self.exec.as_ref(),
            &self.variant,
            &Launch::new(grid, 256),
            params,
        )
    }

    /// A column kernel: [`column_grid`], 32 × 8 threads; buffers are [heads, n, d].
    fn by_columns<P: KernelParams>(&self, heads: usize, params: &P) -> Result<(), AttnError> {
        let grid = column_grid::<P>(self.dk, heads).dims()?;
        let launch_shape = Launch::new(grid, 32).with_block((32, 8, 1));
        launch(self.exec.as_ref(), &self.variant, &launch_shape, params)
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
        self.by_rows(
            rows_i64,
            &params::FavorExponents {
                x: ptr(x),
                w: ptr(self.favor_w()?),
                phi: ptr(phi),
                row_max: ptr(&row_max),
                rows: rows_i64,
                d,
                r: r_i32,
                scale,
            },
        )?;

        let head_max = match operand {
            Operand::Query => None,
            Operand::Key => {
                let head_max = DeviceBuffer::<f32>::uninit(&self.exec, meter, heads)?;
                // row_max [heads·n] → head_max [heads].
                launch(
                    self.exec.as_ref(),
                    &self.variant,
                    &Launch::new(head_max_grid(heads).dims()?, 256),
                    &params::FavorHeadMax {
                        row_max: ptr(&row_max),
                        head_max: ptr(&head_max),
                        n: n_i32,
                    },
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
        launch(
            self.exec.as_ref(),
            &self.variant,
            &Launch::new(
                favor_exp_grid(total as u64).dims()?,
                FAVOR_EXP_PER_BLOCK as u32,
            ),
            &params::FavorExp {
                phi: ptr(phi),
                shift: ptr(shift),
                log_scale: ptr(log_scale),
                rows: rows_i64,
                n: n_i32,
                r: r_i32,
                per_row,
            },
        )
    }
}
