//! The simulated device: memory, modules, launches.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::arch::SimArch;
use crate::counters::Counters;
use crate::error::{Checks, SimError};
use crate::exec::cta::LaunchCtx;
use crate::exec::global_race::LaunchShadow;
use crate::exec::memory::GlobalMemory;
use crate::exec::numerics::{MmaModel, Numerics};
use crate::exec::schedule::Schedule;
use crate::ir::{Kernel, Program, Ty};
use crate::parse::{parse_program_placed, Placement};
use crate::sample::{run_rows, sampled_run, sum_rows, Sampled};
use crate::source_lines::SourceLines;

/// A kernel argument as the host passes it (by value).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arg {
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
}

impl Arg {
    fn bytes(&self) -> Vec<u8> {
        match *self {
            Arg::U32(v) => v.to_le_bytes().to_vec(),
            Arg::I32(v) => v.to_le_bytes().to_vec(),
            Arg::U64(v) => v.to_le_bytes().to_vec(),
            Arg::I64(v) => v.to_le_bytes().to_vec(),
            Arg::F32(v) => v.to_le_bytes().to_vec(),
            Arg::F64(v) => v.to_le_bytes().to_vec(),
        }
    }

    fn is_float(&self) -> bool {
        matches!(self, Arg::F32(_) | Arg::F64(_))
    }
}

/// Grid, block and shared memory of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub dynamic_shared_bytes: u32,
}

/// What a launch did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaunchStats {
    pub ctas: u64,
    pub counters: Counters,
    /// Host time the simulation took (not a GPU time).
    pub wall: Duration,
    /// Set when only some CTAs ran and the counters were scaled (`Device::launch_sampled`).
    pub sampled: Option<Sampled>,
    /// Warp instructions per instruction of the kernel (index in `Kernel::instrs`), scaled as
    /// the counters are, when [`Device::count_source_lines`] is on: per source line through
    /// [`Module::source_lines`].
    pub instr_counts: Option<Vec<u64>>,
}

/// A loaded PTX module.
#[derive(Debug, Clone)]
pub struct Module {
    program: Arc<Program>,
    /// Registers per thread ptxas allocated, per kernel ([`Module::set_registers`]).
    registers: HashMap<String, u32>,
}

impl Module {
    /// The warp instructions of `counts` (per instruction of `kernel`, as
    /// [`LaunchStats::instr_counts`] gives them) summed per CUDA source line, by class;
    /// instructions without a `.loc` (PTX compiled without `-lineinfo`) under no line.
    pub fn source_lines(&self, kernel: &str, counts: &[u64]) -> Result<SourceLines, SimError> {
        let k = self.kernel(kernel)?;
        Ok(SourceLines::of(k, &self.program.files, counts))
    }

    /// The warp instructions of `counts` summed per line of the PTX text
    /// ([`SourceLines::of_ptx`]), by class.
    pub fn ptx_lines(&self, kernel: &str, counts: &[u64]) -> Result<SourceLines, SimError> {
        Ok(SourceLines::of_ptx(self.kernel(kernel)?, counts))
    }

    pub fn kernel(&self, name: &str) -> Result<&Kernel, SimError> {
        self.program.kernels.get(name).ok_or_else(|| {
            let mut known: Vec<&str> = self.program.kernels.keys().map(String::as_str).collect();
            known.sort_unstable();
            SimError::NoKernel {
                name: name.to_string(),
                known: known.join(", "),
            }
        })
    }

    pub fn kernel_names(&self) -> Vec<&str> {
        self.program.kernels.keys().map(String::as_str).collect()
    }

    pub fn target(&self) -> &str {
        &self.program.target
    }

    /// Records that ptxas allocated `registers` per thread to `kernel` (its resource report:
    /// PTX's virtual registers say nothing of it). Launches of the kernel then check its
    /// CTA against the register file as the hardware allocates it ([`SimArch::check_registers`]);
    /// without it they do not.
    pub fn set_registers(&mut self, kernel: &str, registers: u32) -> Result<(), SimError> {
        self.kernel(kernel)?;
        self.registers.insert(kernel.to_string(), registers);
        Ok(())
    }

    /// The registers per thread recorded for `kernel`, if any.
    pub fn registers(&self, kernel: &str) -> Option<u32> {
        self.registers.get(kernel).copied()
    }
}

/// One simulated GPU.
pub struct Device {
    arch: SimArch,
    memory: RwLock<GlobalMemory>,
    checks: Checks,
    numerics: Numerics,
    /// `mma`'s accumulation model when not the numerics mode's own.
    mma_model: Option<MmaModel>,
    /// Layout of shared variables in modules loaded from now on.
    placement: Placement,
    /// Whether launches keep the memory counters (sectors, wavefronts, unique sectors).
    count_memory: std::sync::atomic::AtomicBool,
    /// Whether launches keep warp instructions per kernel instruction.
    count_lines: std::sync::atomic::AtomicBool,
}

impl Device {
    /// A device of `arch` with `memory_bytes` of global memory.
    pub fn new(arch: SimArch, memory_bytes: u64) -> Device {
        Device {
            arch,
            memory: RwLock::new(GlobalMemory::new(memory_bytes)),
            checks: Checks::default(),
            numerics: Numerics::default(),
            mma_model: None,
            placement: Placement::Declared,
            count_memory: std::sync::atomic::AtomicBool::new(false),
            count_lines: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether later launches keep their warp instructions per kernel instruction
    /// ([`LaunchStats::instr_counts`]), for a profile by source line. Counted once per CTA
    /// into the launch's totals; the other counters are the same either way.
    pub fn count_source_lines(&self, on: bool) {
        self.count_lines
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether later launches keep the memory counters of [`Counters`] (global sectors,
    /// shared wavefronts, unique sectors): they cost a pass over the lanes of every memory
    /// instruction. Instruction counts are always kept.
    pub fn count_memory(&self, on: bool) {
        self.count_memory
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn with_checks(mut self, checks: Checks) -> Device {
        self.checks = checks;
        self
    }

    /// How later launches compute `.approx` functions and `mma` accumulation, and (in
    /// [`Numerics::AsCompiled`]) whether modules loaded from now on run the multiply-adds
    /// ptxas fuses as one FFMA (default [`Numerics::Exact`]).
    pub fn with_numerics(mut self, numerics: Numerics) -> Device {
        self.numerics = numerics;
        self
    }

    pub fn numerics(&self) -> Numerics {
        self.numerics
    }

    /// How later launches sum `mma`, whatever the numerics mode (default: the mode's own,
    /// [`Numerics::mma_model`]).
    pub fn with_mma_model(mut self, model: MmaModel) -> Device {
        self.mma_model = Some(model);
        self
    }

    /// The `mma` model launches use.
    pub fn mma_model(&self) -> MmaModel {
        self.mma_model.unwrap_or(self.numerics.mma_model())
    }

    /// The order in which later launches run the warps of a CTA (see [`Schedule`]).
    pub fn with_schedule(mut self, schedule: Schedule) -> Device {
        self.checks.schedule = schedule;
        self
    }

    /// Lays out the shared variables of modules loaded from now on as `placement` says
    /// ([`Placement::Adversarial`]: at their declared alignment and no more, so an access
    /// wider than a variable's `.align` faults).
    pub fn with_shared_placement(mut self, placement: Placement) -> Device {
        self.placement = placement;
        self
    }

    pub fn shared_placement(&self) -> Placement {
        self.placement
    }

    pub fn arch(&self) -> SimArch {
        self.arch
    }

    pub fn checks(&self) -> Checks {
        self.checks
    }

    fn memory(&self) -> std::sync::RwLockReadGuard<'_, GlobalMemory> {
        self.memory.read().unwrap_or_else(|p| p.into_inner())
    }

    fn memory_mut(&self) -> std::sync::RwLockWriteGuard<'_, GlobalMemory> {
        self.memory.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Parses PTX and places its `.global` variables in device memory.
    pub fn load(&self, ptx: &str) -> Result<Module, SimError> {
        let mut memory = self.memory_mut();
        let mut program = parse_program_placed(ptx, self.placement, &mut |var| {
            let address = memory.alloc(var.init.len() as u64, true)?;
            memory.write(address, &var.init)?;
            Ok(address)
        })?;
        // As compiled: the multiply-adds ptxas fuses run fused (ptxas::contract).
        if self.numerics == Numerics::AsCompiled {
            for kernel in program.kernels.values_mut() {
                crate::ptxas::contract::apply(&mut kernel.instrs);
            }
        }
        Ok(Module {
            program: Arc::new(program),
            registers: HashMap::new(),
        })
    }

    /// `bytes` of device memory whose contents are undefined (initcheck flags reads before
    /// writes).
    pub fn alloc(&self, bytes: u64) -> Result<u64, SimError> {
        self.memory_mut().alloc(bytes, false)
    }

    /// `bytes` of zeroed device memory.
    pub fn alloc_zeroed(&self, bytes: u64) -> Result<u64, SimError> {
        self.memory_mut().alloc(bytes, true)
    }

    pub fn free(&self, address: u64) -> Result<(), SimError> {
        self.memory_mut().free(address)
    }

    pub fn write(&self, address: u64, data: &[u8]) -> Result<(), SimError> {
        self.memory().write(address, data)
    }

    pub fn read(&self, address: u64, out: &mut [u8]) -> Result<(), SimError> {
        self.memory().read(address, out)
    }

    pub fn fill(&self, address: u64, bytes: u64, value: u8) -> Result<(), SimError> {
        self.memory().fill(address, bytes, value)
    }

    /// Device-to-device copy.
    pub fn copy(&self, dst: u64, src: u64, bytes: u64) -> Result<(), SimError> {
        let memory = self.memory();
        let mut chunk = vec![0u8; bytes.min(1 << 22) as usize];
        let mut done = 0;
        while done < bytes {
            let n = (bytes - done).min(chunk.len() as u64) as usize;
            memory.read(src + done, &mut chunk[..n])?;
            memory.write(dst + done, &chunk[..n])?;
            done += n as u64;
        }
        Ok(())
    }

    /// (free, total) bytes.
    pub fn memory_info(&self) -> (u64, u64) {
        let memory = self.memory();
        (memory.capacity() - memory.used(), memory.capacity())
    }

    /// Runs `kernel` of `module` over the grid. CTAs run in parallel on the host's cores;
    /// the first fault (lowest CTA index within the first wave that has one) is returned.
    pub fn launch(
        &self,
        module: &Module,
        kernel: &str,
        config: &LaunchConfig,
        args: &[Arg],
    ) -> Result<LaunchStats, SimError> {
        self.launch_sampled(module, kernel, config, args, None)
    }

    /// [`Device::launch`], but with `sample = Some(n)` and more than `n` rows of grid y, only
    /// the CTAs of `n` rows of grid y (every x and z of them) run, and the counters are
    /// scaled to the whole grid (see [`crate::sample`]): for profiles only, since the rows
    /// not run write nothing. Counters are exact when the rows do identical work up to
    /// offsets, which the run checks: if the sampled rows' counters differ, every row runs.
    pub fn launch_sampled(
        &self,
        module: &Module,
        kernel: &str,
        config: &LaunchConfig,
        args: &[Arg],
        sample: Option<u32>,
    ) -> Result<LaunchStats, SimError> {
        let start = Instant::now();
        let k = module.kernel(kernel)?;
        let params = pack_params(k, args)?;
        let shared_bytes = self.check_config(k, config, module.registers(kernel))?;
        let memory = self.memory();
        let view = memory.view();
        let count_memory = self.count_memory.load(std::sync::atomic::Ordering::Relaxed);
        // globalcheck's launch level lives (and its memory goes) with the launch.
        let globals = (self.checks.globalcheck).then(|| LaunchShadow::new(view.spans()));
        let instr_counts: Option<Vec<std::sync::atomic::AtomicU64>> = self
            .count_lines
            .load(std::sync::atomic::Ordering::Relaxed)
            .then(|| k.instrs.iter().map(|_| Default::default()).collect());
        let ctx = LaunchCtx {
            kernel: k,
            params: &params,
            memory: &view,
            grid: config.grid,
            block: config.block,
            shared_bytes,
            checks: self.checks,
            globals: globals.as_ref(),
            count_memory,
            // The issue clocks cost what the memory counters do: kept with them only.
            latency: count_memory.then_some(self.arch.latency),
            numerics: self.numerics,
            mma: self.mma_model(),
            instr_counts: instr_counts.as_deref(),
        };
        let [gx, gy, gz] = config.grid.map(u64::from);
        let total = gx * gy * gz;
        let all_rows: Vec<u32> = (0..config.grid[1]).collect();
        let (counters, sampled) = match sample.filter(|&n| u64::from(n) < gy) {
            None => {
                let rows = run_rows(&ctx, config.grid, &all_rows)?;
                (sum_rows(&rows), None)
            }
            Some(n) => sampled_run(&ctx, config.grid, n, &view)?,
        };
        let mut counters = counters;
        if ctx.count_memory && sampled.is_none() {
            let (loaded, stored) = view.touched_sectors();
            counters.unique_load_sectors = loaded;
            counters.unique_store_sectors = stored;
        }
        // Scaled as the counters: the sampled rows' sum × gy / rows (exact where the rows did
        // the same work, each count then a multiple of the rows).
        let (num, den) = match &sampled {
            Some(s) if s.scaled => (gy, s.rows.len() as u64),
            _ => (1, 1),
        };
        let instr_counts = instr_counts.map(|counts| {
            counts
                .into_iter()
                .map(|n| n.into_inner() * num / den.max(1))
                .collect()
        });
        Ok(LaunchStats {
            ctas: total,
            counters,
            wall: start.elapsed(),
            sampled,
            instr_counts,
        })
    }

    /// Checks grid, block, registers (when known) and shared memory against the kernel and
    /// the architecture (the shared limits count the declared layout, as ptxas does);
    /// returns the CTA's total shared bytes in the placed layout.
    fn check_config(
        &self,
        k: &Kernel,
        config: &LaunchConfig,
        registers: Option<u32>,
    ) -> Result<u32, SimError> {
        let a = &self.arch;
        let fail = |reason: String| SimError::Launch {
            kernel: k.name.clone(),
            reason,
        };
        let [bx, by, bz] = config.block;
        let [gx, gy, gz] = config.grid;
        if config.grid.contains(&0) || config.block.contains(&0) {
            return Err(fail(format!(
                "empty grid ({gx},{gy},{gz}) or block ({bx},{by},{bz})"
            )));
        }
        for (axis, (&g, &max)) in config.grid.iter().zip(&a.max_grid_dims).enumerate() {
            if g > max {
                return Err(fail(format!(
                    "grid dimension {} = {g} exceeds {max} on {}",
                    ["x", "y", "z"][axis],
                    a.name
                )));
            }
        }
        for (axis, (&b, &max)) in config.block.iter().zip(&a.max_block_dims).enumerate() {
            if b > max {
                return Err(fail(format!(
                    "block dimension {} = {b} exceeds {max}",
                    ["x", "y", "z"][axis]
                )));
            }
        }
        let threads = u64::from(bx) * u64::from(by) * u64::from(bz);
        if threads > u64::from(a.max_threads_per_block) {
            return Err(fail(format!(
                "{threads} threads per block (max {})",
                a.max_threads_per_block
            )));
        }
        if let Some(max) = k.max_threads {
            if threads > max.iter().map(|&m| u64::from(m)).product::<u64>() {
                return Err(fail(format!(
                    "{threads} threads per block but the kernel declares .maxntid {max:?}"
                )));
            }
        }
        if let Some(per_thread) = registers {
            a.check_registers(threads as u32, per_thread)
                .map_err(|why| fail(format!("too many resources requested: {why}")))?;
        }
        if let Some(req) = k.required_threads {
            if req != config.block {
                return Err(fail(format!(
                    "block {:?} but the kernel declares .reqntid {req:?}",
                    config.block
                )));
            }
        }
        if k.static_shared_bytes > a.max_static_shared {
            return Err(fail(format!(
                "{} bytes of static shared memory (max {})",
                k.static_shared_bytes, a.max_static_shared
            )));
        }
        let dynamic = u64::from(config.dynamic_shared_bytes);
        let (total, placed) = if k.uses_dynamic_shared || dynamic > 0 {
            (
                u64::from(k.dynamic_shared_offset) + dynamic,
                u64::from(k.placed_dynamic_offset) + dynamic,
            )
        } else {
            (
                u64::from(k.static_shared_bytes),
                u64::from(k.placed_shared_bytes),
            )
        };
        if total > u64::from(a.max_shared_optin) {
            return Err(fail(format!(
                "{total} bytes of shared memory (static {} + dynamic {}) exceed the {} bytes \
                 {} allows a CTA",
                k.static_shared_bytes, config.dynamic_shared_bytes, a.max_shared_optin, a.name
            )));
        }
        u32::try_from(placed).map_err(|_| fail(format!("{placed} bytes of shared memory")))
    }
}

/// Packs `args` into the parameter buffer, checking count, sizes and float/integer kind.
fn pack_params(k: &Kernel, args: &[Arg]) -> Result<Vec<u8>, SimError> {
    let fail = |reason: String| SimError::Launch {
        kernel: k.name.clone(),
        reason,
    };
    if args.len() != k.params.len() {
        return Err(fail(format!(
            "the kernel takes {} parameters, {} given",
            k.params.len(),
            args.len()
        )));
    }
    let mut buffer = vec![0u8; k.param_bytes as usize];
    for (i, (param, arg)) in k.params.iter().zip(args).enumerate() {
        let bytes = arg.bytes();
        if bytes.len() as u32 != param.bytes {
            return Err(fail(format!(
                "parameter {i} ({}) is {} bytes, the argument {arg:?} is {}",
                param.name,
                param.bytes,
                bytes.len()
            )));
        }
        let float_param = matches!(param.ty, Ty::F32 | Ty::F64);
        if float_param != arg.is_float() {
            return Err(fail(format!(
                "parameter {i} ({}) is .{:?}, the argument is {arg:?}",
                param.name, param.ty
            )));
        }
        let at = param.offset as usize;
        buffer[at..at + bytes.len()].copy_from_slice(&bytes);
    }
    Ok(buffer)
}
