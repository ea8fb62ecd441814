//! Shared helpers of the simulator's integration tests (and its benchmark): the PTX module
//! header, a device, host <-> device copies, launch shorthands, fault expectations; an
//! `.entry` builder ([`entry`]), a "lanes" harness that runs an instruction snippet once per
//! thread on per-thread inputs ([`lanes`]), IEEE helpers for the references ([`ieee`]),
//! the tiled matmul kernel ([`matmul`]) and synthetic MUFU tables ([`mufu`]).
//!
//! Every kernel the tests run is hand-written PTX in the shape NVRTC emits
//! (`ld.param.u64`, `cvta.to.global.u64`, `mov.u32 %r1, %tid.x;`, `$L__BB0_n:` labels), so
//! the tests need neither NVRTC nor a GPU.

#![allow(dead_code)]

pub mod entry;
pub mod ieee;
pub mod lanes;
pub mod matmul;
pub mod mufu;

// Not every test uses both.
#[allow(unused_imports)]
pub use entry::{in_out, out_only, Entry};

use linattn_ptxsim::{
    Arg, Checker, Device, Fault, LaunchConfig, LaunchStats, Module, SimArch, SimError,
};

/// The module header NVRTC 13 writes for sm_90.
pub const HEADER: &str = "//\n\
// Hand-written in the style of the NVIDIA NVVM Compiler output\n\
//\n\
\n\
.version 9.0\n\
.target sm_90\n\
.address_size 64\n\
\n";

/// `body` (one or more `.entry` definitions) behind the module header.
pub fn ptx(body: &str) -> String {
    format!("{HEADER}{body}")
}

/// A simulated H100 with 256 MiB of device memory.
pub fn device() -> Device {
    Device::new(SimArch::SM90, 256 << 20)
}

/// Loads `text`, panicking with the parser's message and the text if it does not parse.
pub fn load(dev: &Device, text: &str) -> Module {
    dev.load(text)
        .unwrap_or_else(|e| panic!("the test PTX does not load: {e}\n{text}"))
}

/// A module of one kernel, loaded on a device: launches by grid and block size.
pub struct Loaded {
    pub dev: Device,
    pub module: Module,
    /// The PTX text (for [`line_of`]).
    pub text: String,
    pub kernel: String,
}

impl Loaded {
    /// `text` (one `.entry`) on a fresh [`device`].
    pub fn new(text: String) -> Loaded {
        Loaded::on(device(), text)
    }

    /// `text` (one `.entry`) on `dev`.
    pub fn on(dev: Device, text: String) -> Loaded {
        let module = load(&dev, &text);
        let names = module.kernel_names();
        assert_eq!(names.len(), 1, "one kernel per test module: {names:?}");
        let kernel = names[0].to_string();
        Loaded {
            dev,
            module,
            text,
            kernel,
        }
    }

    /// A 1-D launch of `grid` CTAs of `block` threads.
    pub fn launch(&self, grid: u32, block: u32, args: &[Arg]) -> Result<LaunchStats, SimError> {
        self.launch_with(&config(grid, block), args)
    }

    pub fn launch_with(
        &self,
        config: &LaunchConfig,
        args: &[Arg],
    ) -> Result<LaunchStats, SimError> {
        self.dev.launch(&self.module, &self.kernel, config, args)
    }

    /// The 1-based line of the text that contains `needle` (see [`line_of`]).
    pub fn line_of(&self, needle: &str) -> u32 {
        line_of(&self.text, needle)
    }

    /// An output buffer of `words` 32-bit words (see [`output`]).
    pub fn output(&self, words: usize) -> u64 {
        output(&self.dev, words)
    }

    pub fn download_u32(&self, ptr: u64, n: usize) -> Vec<u32> {
        download_u32(&self.dev, ptr, n)
    }

    pub fn download_f32(&self, ptr: u64, n: usize) -> Vec<f32> {
        download_f32(&self.dev, ptr, n)
    }

    /// One launch of a kernel whose only parameter is an output buffer: a fresh one of
    /// `words` words, zero-filled when `zeroed` (else never written: reading it is an
    /// initcheck fault).
    pub fn run_with_output(self, grid: u32, block: u32, words: usize, zeroed: bool) -> OutputRun {
        let out = if zeroed {
            self.dev.alloc_zeroed(4 * words as u64).expect("alloc")
        } else {
            self.output(words)
        };
        let result = self.launch(grid, block, &[Arg::U64(out)]);
        OutputRun {
            k: self,
            out,
            result,
        }
    }
}

/// A launch by [`Loaded::run_with_output`].
pub struct OutputRun {
    pub k: Loaded,
    pub out: u64,
    pub result: Result<LaunchStats, SimError>,
}

impl OutputRun {
    /// The launch stopped with a fault of `checker` (see [`expect_fault`]).
    pub fn fault(self, checker: Checker) -> Fault {
        expect_fault(self.result, checker)
    }

    /// The launch stopped with a fault of `checker` at the line of the kernel holding
    /// `needle`, by thread `thread` (see [`assert_at`]); the fault.
    pub fn fault_at(self, checker: Checker, needle: &str, thread: [u32; 3]) -> Fault {
        let line = self.k.line_of(needle);
        let fault = self.fault(checker);
        assert_at(&fault, line, thread);
        fault
    }

    /// The launch passed; the first `n` words of the output.
    pub fn words(self, n: usize) -> Vec<u32> {
        expect_ok(self.result);
        self.k.download_u32(self.out, n)
    }

    /// The launch passed; the first `n` words of the output as f32.
    pub fn floats(self, n: usize) -> Vec<f32> {
        expect_ok(self.result);
        self.k.download_f32(self.out, n)
    }
}

/// A 1-D launch.
pub fn config(grid: u32, block: u32) -> LaunchConfig {
    config_3d([grid, 1, 1], [block, 1, 1])
}

/// A launch without dynamic shared memory.
pub fn config_3d(grid: [u32; 3], block: [u32; 3]) -> LaunchConfig {
    LaunchConfig {
        grid,
        block,
        dynamic_shared_bytes: 0,
    }
}

pub fn upload_u32(dev: &Device, data: &[u32]) -> u64 {
    let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    let ptr = dev.alloc(bytes.len() as u64).expect("alloc");
    dev.write(ptr, &bytes).expect("write");
    ptr
}

pub fn upload_f32(dev: &Device, data: &[f32]) -> u64 {
    let bits: Vec<u32> = data.iter().map(|v| v.to_bits()).collect();
    upload_u32(dev, &bits)
}

/// An output buffer of `n` 32-bit words, allocated without initialisation (a kernel that
/// read it before writing would be an initcheck fault).
pub fn output(dev: &Device, words: usize) -> u64 {
    dev.alloc(4 * words as u64).expect("alloc")
}

pub fn download_u32(dev: &Device, ptr: u64, n: usize) -> Vec<u32> {
    download_words::<4>(dev, ptr, n)
        .into_iter()
        .map(u32::from_le_bytes)
        .collect()
}

pub fn download_f32(dev: &Device, ptr: u64, n: usize) -> Vec<f32> {
    download_u32(dev, ptr, n)
        .into_iter()
        .map(f32::from_bits)
        .collect()
}

pub fn download_u64(dev: &Device, ptr: u64, n: usize) -> Vec<u64> {
    download_words::<8>(dev, ptr, n)
        .into_iter()
        .map(u64::from_le_bytes)
        .collect()
}

/// `n` words of `B` bytes from `ptr`.
fn download_words<const B: usize>(dev: &Device, ptr: u64, n: usize) -> Vec<[u8; B]> {
    let mut bytes = vec![0u8; B * n];
    dev.read(ptr, &mut bytes).expect("read");
    bytes
        .chunks_exact(B)
        .map(|c| c.try_into().expect("B bytes"))
        .collect()
}

/// The launch passed; its stats.
pub fn expect_ok(result: Result<LaunchStats, SimError>) -> LaunchStats {
    result.unwrap_or_else(|e| panic!("the launch should pass, it failed: {e}"))
}

/// The launch stopped with a fault of `checker`; the fault.
pub fn expect_fault(result: Result<LaunchStats, SimError>, checker: Checker) -> Fault {
    match result {
        Err(SimError::Fault(fault)) if fault.checker == checker => *fault,
        Err(other) => panic!("expected a {checker} fault, got: {other}"),
        Ok(stats) => panic!(
            "expected a {checker} fault, but the launch passed ({} warp instructions)",
            stats.counters.warp_instructions
        ),
    }
}

/// The fault is reported at PTX line `line`, by thread `thread` of its CTA.
pub fn assert_at(fault: &Fault, line: u32, thread: [u32; 3]) {
    assert_eq!(
        (fault.site.line, fault.site.thread),
        (line, thread),
        "(line, thread) of {fault}"
    );
}

/// The fault's detail says `words`.
pub fn assert_says(fault: &Fault, words: &str) {
    assert!(
        fault.detail.contains(words),
        "the detail should say `{words}`: {fault}"
    );
}

/// The 1-based line of `text` that contains `needle` (which must occur on exactly one line).
pub fn line_of(text: &str, needle: &str) -> u32 {
    let hits: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains(needle))
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(
        hits.len(),
        1,
        "`{needle}` should be on exactly one line of the test PTX, found on lines {hits:?}"
    );
    hits[0] as u32
}
