//! The one CUDA backend: any [`DeviceForm`] on any [`Platform`], with the life cycle
//! stage → forward → backward → output written once.

use std::marker::PhantomData;
use std::sync::Arc;

use linattn_core::{
    AttnError, Backend, BackendInfo, Grads, Inputs, Problem, RunStats, SeededInputs, Tensor,
    Unsupported,
};

use crate::executor::{Executor, Platform};
use crate::form::{DeviceForm, DeviceGrads, DeviceInputs, Forward, Run};
use crate::memory::{MemoryMeter, StorageElem};

/// `<platform>/<form>/<precision>`: form `F` with storage `T` on `platform`.
pub struct DeviceBackend<F: DeviceForm<T>, T: StorageElem> {
    form: F,
    info: BackendInfo,
    platform: Platform,
    /// Staged inputs (and what a plan uploads): not part of a run's device bytes.
    input_meter: MemoryMeter,
    /// Outputs and workspace: a run's `device_bytes` is its peak during the run.
    work_meter: MemoryMeter,
    staged: Option<Staged<F, T>>,
    forward: Option<Forward<T, F::Saved>>,
    grads: Option<DeviceGrads<T>>,
    _storage: PhantomData<T>,
}

struct Staged<F: DeviceForm<T>, T: StorageElem> {
    exec: Arc<dyn Executor>,
    problem: Problem,
    plan: F::Plan,
    inputs: DeviceInputs<T>,
}

impl<F: DeviceForm<T>, T: StorageElem> DeviceBackend<F, T> {
    pub fn new(platform: Platform, form: F) -> Self {
        let form_info = form.info();
        DeviceBackend {
            info: BackendInfo {
                name: format!("{platform}/{}/{}", form_info.name, T::PRECISION.label()),
                device: platform.device_kind(),
                precision: T::PRECISION,
                algorithm: form_info.algorithm,
                backward: form_info.backward,
            },
            form,
            platform,
            input_meter: MemoryMeter::new(),
            work_meter: MemoryMeter::new(),
            staged: None,
            forward: None,
            grads: None,
            _storage: PhantomData,
        }
    }

    /// The same backend, boxed for the harness.
    pub fn boxed(platform: Platform, form: F) -> Box<dyn Backend> {
        Box::new(Self::new(platform, form))
    }

    pub fn form(&self) -> &F {
        &self.form
    }

    pub fn platform(&self) -> Platform {
        self.platform
    }

    /// The staging, or why there is none: the platform is absent here (the same typed
    /// refusal as `supports`), or nothing was staged yet.
    fn staged(&self, what: &str) -> Result<&Staged<F, T>, AttnError> {
        match &self.staged {
            Some(staged) => Ok(staged),
            None => {
                self.platform.available()?;
                Err(AttnError::State(format!(
                    "{}: stage inputs before {what}",
                    self.info.name
                )))
            }
        }
    }

    /// What the last `run` left in `slot`, or why there is nothing.
    fn ran<'a, R>(&self, slot: &'a Option<R>, run: &str) -> Result<&'a R, AttnError> {
        slot.as_ref()
            .ok_or_else(|| AttnError::State(format!("{}: no {run} has run", self.info.name)))
    }

    fn run_of<'a>(&'a self, staged: &'a Staged<F, T>) -> Run<'a, T> {
        Run {
            exec: &staged.exec,
            meter: &self.work_meter,
            problem: &staged.problem,
            inputs: &staged.inputs,
        }
    }

    /// Staging after the inputs were validated: plan, upload through `upload`, wait.
    fn stage_with(
        &mut self,
        problem: &Problem,
        upload: impl FnOnce(&Arc<dyn Executor>, &MemoryMeter) -> Result<DeviceInputs<T>, AttnError>,
    ) -> Result<(), AttnError> {
        let exec = self.platform.executor()?;
        let plan = self.form.plan(&exec, problem, &self.input_meter)?;
        let inputs = upload(&exec, &self.input_meter)?;
        exec.synchronize()?;
        self.staged = Some(Staged {
            exec,
            problem: *problem,
            plan,
            inputs,
        });
        Ok(())
    }

    fn stats(&self, elapsed: std::time::Duration) -> RunStats {
        RunStats {
            elapsed,
            device_bytes: Some(self.work_meter.peak()),
        }
    }
}

impl<F: DeviceForm<T>, T: StorageElem> Backend for DeviceBackend<F, T> {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn supports(&self, problem: &Problem) -> Result<(), Unsupported> {
        self.form.check(&self.info, problem)?;
        self.platform.available()?;
        self.form
            .device_ready_for(self.platform.executor()?.as_ref(), problem)
    }

    fn stage(&mut self, problem: &Problem, inputs: &Inputs) -> Result<(), AttnError> {
        self.release();
        self.supports(problem)?;
        self.form.validate(problem, inputs)?;
        self.stage_with(problem, |exec, meter| {
            DeviceInputs::upload(exec, meter, inputs)
        })
    }

    /// Seeded inputs need no value scan: they are N(0, 1) draws of Box–Muller on 53-bit
    /// uniforms, finite and below 8.6 in magnitude, inside every storage type's range.
    fn stage_seeded(&mut self, problem: &Problem, source: &SeededInputs) -> Result<(), AttnError> {
        self.release();
        self.supports(problem)?;
        if source.shape() != problem.shape {
            return Err(AttnError::ShapeMismatch(format!(
                "seeded inputs of shape {:?} for a problem of shape {:?}",
                source.shape(),
                problem.shape
            )));
        }
        self.stage_with(problem, |exec, meter| {
            DeviceInputs::upload_seeded(exec, meter, source)
        })
    }

    fn run_forward(&mut self) -> Result<RunStats, AttnError> {
        // Results of an earlier run go first, so the peak counts this run alone.
        self.grads = None;
        self.forward = None;
        self.work_meter.reset_peak();
        let staged = self.staged("run_forward")?;
        let (forward, elapsed) = self.form.forward(&self.run_of(staged), &staged.plan)?;
        let stats = self.stats(elapsed);
        self.forward = Some(forward);
        Ok(stats)
    }

    fn run_backward(&mut self) -> Result<RunStats, AttnError> {
        self.grads = None;
        let staged = self.staged("run_backward")?;
        let forward = self.forward.as_ref().ok_or_else(|| {
            AttnError::State(format!(
                "{}: run_forward before run_backward",
                self.info.name
            ))
        })?;
        let d_out = staged.inputs.d_out.as_ref().ok_or_else(|| {
            AttnError::InvalidArgument("backward needs d_out (∂L/∂O), none was staged".into())
        })?;
        self.work_meter.reset_peak();
        let (grads, elapsed) =
            self.form
                .backward(&self.run_of(staged), &staged.plan, forward, d_out)?;
        let stats = self.stats(elapsed);
        self.grads = Some(grads);
        Ok(stats)
    }

    fn output(&mut self) -> Result<Tensor, AttnError> {
        let staged = self.staged("output")?;
        let forward = self.ran(&self.forward, "forward")?;
        Tensor::from_vec(staged.problem.shape.v_dims(), forward.out.download_f64()?)
    }

    fn grads(&mut self) -> Result<Grads, AttnError> {
        let staged = self.staged("grads")?;
        let grads = self.ran(&self.grads, "backward")?;
        let shape = staged.problem.shape;
        Ok(Grads {
            dq: Tensor::from_vec(shape.qk_dims(), grads.dq.download_f64()?)?,
            dk: Tensor::from_vec(shape.qk_dims(), grads.dk.download_f64()?)?,
            dv: Tensor::from_vec(shape.v_dims(), grads.dv.download_f64()?)?,
        })
    }

    fn release(&mut self) {
        self.grads = None;
        self.forward = None;
        self.staged = None;
    }

    fn flush_cache(&mut self) -> Result<(), AttnError> {
        match &self.staged {
            Some(staged) => staged.exec.flush_l2(),
            None => Ok(()),
        }
    }
}
