//! The CPU backends behind [`linattn_core::Backend`]: the f64 reference forms and the fast
//! f32 path. Stage validates and converts (untimed); run_* time the compute only.
//!
//! One [`CpuBackend`] owns what both share (info, checks, staging order, release); what
//! differs between the two precisions is its [`CpuPath`].

use crate::chunked;
use crate::fast::{self, GradsF32};
use crate::oracle::{self, backward_stored::StoredForward};
use linattn_core::{
    check_linear_form, Algorithm, AttnError, Backend, BackendInfo, BackwardKind, DeviceKind, Form,
    Grads, Inputs, Precision, Problem, RunStats, SeededInputs, Tensor, TensorRole, Unsupported,
};
use std::time::Instant;

pub(crate) fn all() -> Vec<Box<dyn Backend>> {
    vec![
        Box::new(OracleBackend::new(
            "cpu-ref/noncausal/f64",
            Form::Noncausal,
            Some(BackwardKind::Efficient),
        )),
        Box::new(OracleBackend::new(
            "cpu-ref/causal_recurrent/f64",
            Form::Recurrent,
            Some(BackwardKind::Efficient),
        )),
        Box::new(OracleBackend::new(
            "cpu-ref/causal_cumsum/f64",
            Form::Cumsum,
            None,
        )),
        Box::new(OracleBackend::new(
            "cpu-ref/quadratic/f64",
            Form::Quadratic,
            None,
        )),
        Box::new(OracleBackend::new(
            "cpu-ref/causal_recurrent+storedbwd/f64",
            Form::Recurrent,
            Some(BackwardKind::StoredStates),
        )),
        Box::new(OracleBackend::new(
            "cpu-ref/noncausal+storedbwd/f64",
            Form::Noncausal,
            Some(BackwardKind::StoredStates),
        )),
        Box::new(FastBackend::new("cpu/noncausal/f32", Form::Noncausal)),
        Box::new(FastBackend::new(
            "cpu/causal_recurrent/f32",
            Form::Recurrent,
        )),
        Box::new(FastBackend::new("cpu/causal_chunked/f32", Form::Chunked)),
    ]
}

fn no_stage() -> AttnError {
    AttnError::State("nothing staged: call stage() first".into())
}

fn no_forward() -> AttnError {
    AttnError::State("backward needs a forward on the staged inputs first".into())
}

fn no_output() -> AttnError {
    AttnError::State("no output: run a forward first".into())
}

fn no_grads() -> AttnError {
    AttnError::State("no gradients: run a backward first".into())
}

/// What both backends check before staging: the inputs fit the problem, and the problem is
/// one this backend's form computes.
fn validate_stage(info: &BackendInfo, problem: &Problem, inputs: &Inputs) -> Result<(), AttnError> {
    inputs.validate_for(problem)?;
    check_linear_form(info, problem)?;
    Ok(())
}

/// A CPU backend: what it is (its info and form) and the state of its path.
pub struct CpuBackend<P> {
    info: BackendInfo,
    form: Form,
    path: P,
}

/// One f64 reference form (see [`crate::oracle`]).
pub type OracleBackend = CpuBackend<OraclePath>;

/// The fast f32 paths: recurrent ([`crate::fast`]), chunked and non-causal on GEMMs
/// ([`crate::chunked`]).
pub type FastBackend = CpuBackend<FastPath>;

/// What one precision's path keeps between calls and does; [`CpuBackend`] drives it. Its
/// default is the released state.
pub trait CpuPath: Default + Send {
    /// Whether [`CpuPath::stage_seeded`] fills the path's own storage from seeded inputs;
    /// otherwise they are made in f64 and staged as any inputs.
    const STAGES_SEEDED: bool = false;

    /// Keeps inputs already checked against the problem and the backend's form.
    fn stage(&mut self, problem: &Problem, inputs: &Inputs) -> Result<(), AttnError>;

    /// Fills the path's storage from `source`, whose shape and form are checked (only with
    /// [`CpuPath::STAGES_SEEDED`]).
    fn stage_seeded(&mut self, problem: &Problem, source: &SeededInputs) -> Result<(), AttnError> {
        self.stage(problem, &source.materialize()?)
    }

    fn run_forward(&mut self, info: &BackendInfo, form: Form) -> Result<RunStats, AttnError>;

    fn run_backward(&mut self, info: &BackendInfo, form: Form) -> Result<RunStats, AttnError>;

    fn output(&mut self) -> Result<Tensor, AttnError>;

    fn grads(&mut self) -> Result<Grads, AttnError>;
}

impl<P> CpuBackend<P> {
    fn with_path(
        name: &str,
        precision: Precision,
        form: Form,
        backward: Option<BackwardKind>,
    ) -> Self
    where
        P: Default,
    {
        CpuBackend {
            info: BackendInfo {
                name: name.into(),
                device: DeviceKind::Cpu,
                precision,
                algorithm: Algorithm::Linear(form),
                backward,
            },
            form,
            path: P::default(),
        }
    }
}

impl OracleBackend {
    /// `backward`: `Efficient` (SPEC §4), `StoredStates` (keeps every S_i) or none.
    pub fn new(name: &str, form: Form, backward: Option<BackwardKind>) -> Self {
        CpuBackend::with_path(name, Precision::F64, form, backward)
    }
}

impl FastBackend {
    /// `form`: [`Form::Noncausal`] (non-causal), [`Form::Recurrent`] or [`Form::Chunked`]
    /// (causal).
    pub fn new(name: &str, form: Form) -> Self {
        CpuBackend::with_path(name, Precision::F32, form, Some(BackwardKind::Efficient))
    }
}

impl<P: CpuPath> Backend for CpuBackend<P> {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn supports(&self, problem: &Problem) -> Result<(), Unsupported> {
        check_linear_form(&self.info, problem)
    }

    fn stage(&mut self, problem: &Problem, inputs: &Inputs) -> Result<(), AttnError> {
        self.release();
        validate_stage(&self.info, problem, inputs)?;
        self.path.stage(problem, inputs)
    }

    fn stage_seeded(&mut self, problem: &Problem, source: &SeededInputs) -> Result<(), AttnError> {
        if !P::STAGES_SEEDED {
            return self.stage(problem, &source.materialize()?);
        }
        self.release();
        check_linear_form(&self.info, problem)?;
        if source.shape() != problem.shape {
            return Err(AttnError::ShapeMismatch(format!(
                "inputs are {}, problem is {}",
                source.shape(),
                problem.shape
            )));
        }
        self.path.stage_seeded(problem, source)
    }

    fn run_forward(&mut self) -> Result<RunStats, AttnError> {
        self.path.run_forward(&self.info, self.form)
    }

    fn run_backward(&mut self) -> Result<RunStats, AttnError> {
        self.path.run_backward(&self.info, self.form)
    }

    fn output(&mut self) -> Result<Tensor, AttnError> {
        self.path.output()
    }

    fn grads(&mut self) -> Result<Grads, AttnError> {
        self.path.grads()
    }

    fn release(&mut self) {
        self.path = P::default();
    }
}

/// The f64 reference path: inputs as staged, O and the gradients in f64.
#[derive(Default)]
pub struct OraclePath {
    staged: Option<(Problem, Inputs)>,
    output: Option<Tensor>,
    grads: Option<Grads>,
    /// States kept by the forward of a stored-states backend.
    stored: Option<StoredForward>,
}

impl CpuPath for OraclePath {
    fn stage(&mut self, problem: &Problem, inputs: &Inputs) -> Result<(), AttnError> {
        self.staged = Some((*problem, inputs.clone()));
        Ok(())
    }

    fn run_forward(&mut self, info: &BackendInfo, form: Form) -> Result<RunStats, AttnError> {
        let (problem, inputs) = self.staged.as_ref().ok_or_else(no_stage)?;
        self.grads = None;
        let start = Instant::now();
        if info.backward == Some(BackwardKind::StoredStates) {
            let fwd = oracle::backward_stored::forward_storing(problem, inputs)?;
            self.output = Some(fwd.output.clone());
            self.stored = Some(fwd);
        } else {
            self.output = Some(oracle::forward_with(problem, inputs, form)?);
        }
        Ok(RunStats::host(start.elapsed()))
    }

    fn run_backward(&mut self, info: &BackendInfo, _form: Form) -> Result<RunStats, AttnError> {
        let (problem, inputs) = self.staged.as_ref().ok_or_else(no_stage)?;
        let kind = info
            .backward
            .ok_or_else(|| Unsupported::Problem(format!("{} has no backward", info.name)))?;
        inputs.require_d_out()?;
        if self.output.is_none() {
            return Err(no_forward());
        }
        let start = Instant::now();
        let grads = match kind {
            BackwardKind::StoredStates => {
                let fwd = self.stored.as_ref().ok_or_else(no_forward)?;
                oracle::backward_stored::backward_from(problem, inputs, fwd)?
            }
            _ => oracle::backward(problem, inputs)?.1,
        };
        let elapsed = start.elapsed();
        self.grads = Some(grads);
        Ok(RunStats::host(elapsed))
    }

    fn output(&mut self) -> Result<Tensor, AttnError> {
        self.output.clone().ok_or_else(no_output)
    }

    fn grads(&mut self) -> Result<Grads, AttnError> {
        self.grads.clone().ok_or_else(no_grads)
    }
}

/// Inputs converted to f32.
struct StagedF32 {
    problem: Problem,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    d_out: Option<Vec<f32>>,
}

/// The f32 path: inputs, O and the gradients in f32, buffers reused across runs.
#[derive(Default)]
pub struct FastPath {
    staged: Option<StagedF32>,
    output: Option<Vec<f32>>,
    grads: Option<GradsF32>,
    /// Whether `grads` belong to the last forward (a forward makes them stale).
    grads_current: bool,
    /// The recurrent backward's own O (it recomputes the forward), kept for the next run's
    /// reuse.
    recomputed_out: Vec<f32>,
}

/// f32 copy of a tensor; values beyond f32's range are rejected rather than turned into ∞.
fn to_f32(t: &Tensor, role: TensorRole) -> Result<Vec<f32>, AttnError> {
    let out = t.to_f32();
    match out.iter().position(|x| !x.is_finite()) {
        None => Ok(out),
        Some(index) => Err(AttnError::NonFinite {
            tensor: role.name(),
            index,
            value: f64::INFINITY.copysign(t.data()[index]),
        }),
    }
}

impl CpuPath for FastPath {
    const STAGES_SEEDED: bool = true;

    fn stage(&mut self, problem: &Problem, inputs: &Inputs) -> Result<(), AttnError> {
        self.staged = Some(StagedF32 {
            problem: *problem,
            q: to_f32(&inputs.q, TensorRole::Q)?,
            k: to_f32(&inputs.k, TensorRole::K)?,
            v: to_f32(&inputs.v, TensorRole::V)?,
            d_out: inputs
                .d_out
                .as_ref()
                .map(|g| to_f32(g, TensorRole::DOut))
                .transpose()?,
        });
        Ok(())
    }

    /// Fills the f32 buffers straight from the seeded streams, every core, no f64 copy.
    fn stage_seeded(&mut self, problem: &Problem, source: &SeededInputs) -> Result<(), AttnError> {
        linattn_core::HostMemory::ensure_available(source.bytes(4), "f32 inputs")?;
        let make = |role| source.make(role, |x| x as f32);
        self.staged = Some(StagedF32 {
            problem: *problem,
            q: make(TensorRole::Q)?,
            k: make(TensorRole::K)?,
            v: make(TensorRole::V)?,
            d_out: source
                .with_grad()
                .then(|| make(TensorRole::DOut))
                .transpose()?,
        });
        Ok(())
    }

    fn run_forward(&mut self, _info: &BackendInfo, form: Form) -> Result<RunStats, AttnError> {
        let st = self.staged.as_ref().ok_or_else(no_stage)?;
        // The previous output's buffer is reused, so repeated runs do not fault in fresh
        // pages; the gradients' buffers stay for the next backward but no longer count.
        self.grads_current = false;
        let mut out = self.output.take().unwrap_or_default();
        let want = st.problem.shape.v_len()?;
        if out.len() != want {
            out = vec![0f32; want];
        }
        let (p, q, k, v) = (&st.problem, &st.q[..], &st.k[..], &st.v[..]);
        let start = Instant::now();
        match form {
            Form::Chunked => chunked::forward_into(p, q, k, v, &mut out)?,
            Form::Noncausal => chunked::noncausal_forward_into(p, q, k, v, &mut out)?,
            _ => fast::forward_into(p, q, k, v, &mut out)?,
        }
        let elapsed = start.elapsed();
        self.output = Some(out);
        Ok(RunStats::host(elapsed))
    }

    fn run_backward(&mut self, _info: &BackendInfo, form: Form) -> Result<RunStats, AttnError> {
        let st = self.staged.as_ref().ok_or_else(no_stage)?;
        let d_out = st.d_out.as_ref().ok_or_else(|| {
            AttnError::InvalidArgument("backward needs d_out (∂L/∂O), none was staged".into())
        })?;
        // The output is this staging's forward's O: staging clears it.
        let Some(out) = self.output.as_deref() else {
            return Err(no_forward());
        };
        // The previous run's gradient buffers and recomputed O are reused (every element is
        // overwritten), so repeated runs do not fault in fresh pages.
        let s = st.problem.shape;
        let (qk_len, v_len) = (s.qk_len()?, s.v_len()?);
        let mut grads = match self.grads.take() {
            Some(g) if g.dq.len() == qk_len && g.dv.len() == v_len => g,
            _ => GradsF32::zeros(qk_len, v_len),
        };
        let mut o = std::mem::take(&mut self.recomputed_out);
        let (p, q, k, v) = (&st.problem, &st.q[..], &st.k[..], &st.v[..]);
        // Every backward is memory-efficient: the states are recomputed, none is kept from
        // the forward. The GEMM forms take the forward's O (as a training step has it); the
        // recurrent form computes O again on its way.
        let start = Instant::now();
        match form {
            Form::Chunked => {
                chunked::backward_from_output_into(p, q, k, v, d_out, out, &mut grads)?
            }
            Form::Noncausal => {
                chunked::noncausal_backward_from_output_into(p, q, k, v, d_out, out, &mut grads)?
            }
            _ => {
                o.resize(v_len, 0.0);
                fast::backward_into(p, q, k, v, d_out, &mut o, &mut grads)?
            }
        }
        let elapsed = start.elapsed();
        self.grads = Some(grads);
        self.grads_current = true;
        self.recomputed_out = o;
        Ok(RunStats::host(elapsed))
    }

    fn output(&mut self) -> Result<Tensor, AttnError> {
        let st = self.staged.as_ref().ok_or_else(no_stage)?;
        let out = self.output.as_ref().ok_or_else(no_output)?;
        Tensor::from_slice(st.problem.shape.v_dims(), out)
    }

    fn grads(&mut self) -> Result<Grads, AttnError> {
        let st = self.staged.as_ref().ok_or_else(no_stage)?;
        let g = self
            .grads
            .as_ref()
            .filter(|_| self.grads_current)
            .ok_or_else(no_grads)?;
        let s = st.problem.shape;
        Ok(Grads {
            dq: Tensor::from_slice(s.qk_dims(), &g.dq)?,
            dk: Tensor::from_slice(s.qk_dims(), &g.dk)?,
            dv: Tensor::from_slice(s.v_dims(), &g.dv)?,
        })
    }
}
