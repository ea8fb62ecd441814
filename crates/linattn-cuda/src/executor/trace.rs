//! Launch traces of the simulator: everything a run asked of the executor (allocations,
//! uploads, fills, copies, launches with their PTX and arguments), written to a folder and
//! replayed later on a fresh simulated device, without the forms or kernels that made it.
//!
//! Why: the calibration tests hold the simulator's counters and model against a hardware
//! export of particular kernels (bench-results/h100/). A trace keeps exactly those kernels,
//! their launch shapes and their input bytes, so the tests keep measuring the simulator
//! after the kernels themselves change.
//!
//! Folder: `trace.json` (the operations, buffers by id, pointers as buffer + offset),
//! `ptx/<hash>.ptx` (each module once), `blobs/<hash>.bin` (each uploaded byte string once).
//! Hashes are 64-bit FNV-1a in hex, checked on read.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use linattn_core::AttnError;
use linattn_ptxsim::{Arg, Device, LaunchConfig, Module, SimArch};
use serde::{Deserialize, Serialize};

use super::seam::KernelArg;
use super::sim_launch::{sim_error, LaunchRecord, PtxLines};

/// Bumped when the folder's layout changes.
pub const TRACE_SCHEMA: u32 = 1;

/// A pointer as a trace holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BufferPtr {
    pub buffer: u32,
    pub offset: u64,
}

/// A kernel argument as a trace holds it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceArg {
    Ptr(BufferPtr),
    Null,
    I32(i32),
    U32(u32),
    I64(i64),
    F32(f32),
}

/// One thing the run asked of the executor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceOp {
    Alloc {
        buffer: u32,
        bytes: u64,
        zeroed: bool,
    },
    Free {
        buffer: u32,
    },
    Upload {
        to: BufferPtr,
        blob: String,
        bytes: u64,
    },
    Fill {
        to: BufferPtr,
        bytes: u64,
    },
    Copy {
        to: BufferPtr,
        from: BufferPtr,
        bytes: u64,
    },
    /// Launches after this belong to `phase` of `backend` (what the profile reports).
    Phase {
        backend: String,
        phase: String,
    },
    Launch {
        module: String,
        entry: String,
        label: String,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        dynamic_shared: u32,
        static_shared: u64,
        registers: u32,
        args: Vec<TraceArg>,
    },
}

/// `trace.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceFile {
    pub schema: u32,
    /// The simulated architecture the run used (`sm_90`).
    pub arch: String,
    /// Free text: what made the trace (commit, command).
    pub source: String,
    pub ops: Vec<TraceOp>,
}

/// A trace being recorded: the ops and the content they refer to.
#[derive(Debug, Default)]
pub struct Recorder {
    ops: Vec<TraceOp>,
    /// Live allocations: start address → (buffer id, bytes).
    live: BTreeMap<u64, (u32, u64)>,
    next_buffer: u32,
    modules: HashMap<String, Arc<str>>,
    blobs: HashMap<String, Vec<u8>>,
    /// The first address a traced operation could not place (reported at the end).
    error: Option<String>,
}

/// 64-bit FNV-1a of `bytes`, in hex: the content's file name.
pub fn content_hash(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

impl Recorder {
    fn place(&mut self, address: u64, what: &str) -> Option<BufferPtr> {
        let found = self
            .live
            .range(..=address)
            .next_back()
            .filter(|(start, (_, bytes))| address < **start + (*bytes).max(1))
            .map(|(start, (id, _))| BufferPtr {
                buffer: *id,
                offset: address - start,
            });
        if found.is_none() && self.error.is_none() {
            self.error = Some(format!(
                "{what} at address {address:#x} is outside every allocation made while \
                 tracing (start the trace before the buffers are allocated)"
            ));
        }
        found
    }

    pub fn alloc(&mut self, address: u64, bytes: u64, zeroed: bool) {
        let buffer = self.next_buffer;
        self.next_buffer += 1;
        self.live.insert(address, (buffer, bytes));
        self.ops.push(TraceOp::Alloc {
            buffer,
            bytes,
            zeroed,
        });
    }

    pub fn free(&mut self, address: u64) {
        if let Some((buffer, _)) = self.live.remove(&address) {
            self.ops.push(TraceOp::Free { buffer });
        }
    }

    pub fn upload(&mut self, address: u64, data: &[u8]) {
        if let Some(to) = self.place(address, "an upload") {
            let blob = content_hash(data);
            self.blobs
                .entry(blob.clone())
                .or_insert_with(|| data.to_vec());
            self.ops.push(TraceOp::Upload {
                to,
                blob,
                bytes: data.len() as u64,
            });
        }
    }

    pub fn fill(&mut self, address: u64, bytes: u64) {
        if let Some(to) = self.place(address, "a fill") {
            self.ops.push(TraceOp::Fill { to, bytes });
        }
    }

    pub fn copy(&mut self, dst: u64, src: u64, bytes: u64) {
        if let (Some(to), Some(from)) = (self.place(dst, "a copy"), self.place(src, "a copy")) {
            self.ops.push(TraceOp::Copy { to, from, bytes });
        }
    }

    pub fn phase(&mut self, backend: &str, phase: &str) {
        self.ops.push(TraceOp::Phase {
            backend: backend.into(),
            phase: phase.into(),
        });
    }

    /// One launch of `record`'s kernel from the module `ptx`.
    pub fn launch(&mut self, ptx: &Arc<str>, record: &LaunchRecord, args: &[KernelArg]) {
        let module = content_hash(ptx.as_bytes());
        self.modules
            .entry(module.clone())
            .or_insert_with(|| ptx.clone());
        let args = args
            .iter()
            .map(|a| match *a {
                KernelArg::Ptr(0) => TraceArg::Null,
                KernelArg::Ptr(p) => self
                    .place(p, "a kernel argument")
                    .map_or(TraceArg::Null, TraceArg::Ptr),
                KernelArg::I32(v) => TraceArg::I32(v),
                KernelArg::U32(v) => TraceArg::U32(v),
                KernelArg::I64(v) => TraceArg::I64(v),
                KernelArg::F32(v) => TraceArg::F32(v),
            })
            .collect();
        self.ops.push(TraceOp::Launch {
            module,
            entry: record.entry.clone(),
            label: record.label.clone(),
            grid: record.grid,
            block: record.block,
            dynamic_shared: record.dynamic_shared,
            static_shared: record.static_shared,
            registers: record.registers,
            args,
        });
    }

    /// Writes the folder `dir` (created; `trace.json` last, through a temporary file, so a
    /// folder with a `trace.json` is whole).
    pub fn write(self, dir: &Path, arch: &str, source: &str) -> Result<(), AttnError> {
        if let Some(e) = self.error {
            return Err(AttnError::State(format!("trace not written: {e}")));
        }
        let io = |what: &str, e: std::io::Error| AttnError::Io(format!("{what}: {e}"));
        for sub in ["ptx", "blobs"] {
            std::fs::create_dir_all(dir.join(sub))
                .map_err(|e| io(&format!("creating {}", dir.join(sub).display()), e))?;
        }
        for (hash, ptx) in &self.modules {
            let path = dir.join("ptx").join(format!("{hash}.ptx"));
            std::fs::write(&path, ptx.as_bytes())
                .map_err(|e| io(&path.display().to_string(), e))?;
        }
        for (hash, data) in &self.blobs {
            let path = dir.join("blobs").join(format!("{hash}.bin"));
            std::fs::write(&path, data).map_err(|e| io(&path.display().to_string(), e))?;
        }
        let file = TraceFile {
            schema: TRACE_SCHEMA,
            arch: arch.into(),
            source: source.into(),
            ops: self.ops,
        };
        let text = serde_json::to_string_pretty(&file)
            .map_err(|e| AttnError::State(format!("trace.json: {e}")))?;
        let tmp = dir.join(".trace.json.tmp");
        std::fs::write(&tmp, text).map_err(|e| io(&tmp.display().to_string(), e))?;
        std::fs::rename(&tmp, dir.join("trace.json")).map_err(|e| io("renaming trace.json", e))
    }
}

/// The launches of one phase of a replayed trace.
#[derive(Debug, Clone)]
pub struct ReplayedPhase {
    pub backend: String,
    pub phase: String,
    pub launches: Vec<LaunchRecord>,
}

fn read_checked(path: &Path, hash: &str) -> Result<Vec<u8>, AttnError> {
    let data = std::fs::read(path)
        .map_err(|e| AttnError::Io(format!("trace: reading {}: {e}", path.display())))?;
    if content_hash(&data) != hash {
        return Err(AttnError::InvalidArgument(format!(
            "trace: {} does not hash to its name (changed or truncated)",
            path.display()
        )));
    }
    Ok(data)
}

fn read_file(dir: &Path) -> Result<TraceFile, AttnError> {
    let path = dir.join("trace.json");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| AttnError::Io(format!("trace: reading {}: {e}", path.display())))?;
    let file: TraceFile = serde_json::from_str(&text)
        .map_err(|e| AttnError::InvalidArgument(format!("trace: {}: {e}", path.display())))?;
    if file.schema != TRACE_SCHEMA {
        return Err(AttnError::InvalidArgument(format!(
            "trace: {} has schema {}, this build reads {TRACE_SCHEMA}",
            path.display(),
            file.schema
        )));
    }
    Ok(file)
}

/// The simulated architecture the trace in `dir` was recorded on.
pub fn arch(dir: &Path) -> Result<SimArch, AttnError> {
    let file = read_file(dir)?;
    SimArch::by_name(&file.arch)
        .ok_or_else(|| AttnError::InvalidArgument(format!("trace: unknown arch '{}'", file.arch)))
}

/// Replays the trace in `dir` on a fresh simulated device with counters (and the latency
/// clocks) on and no checkers: the launches of each phase, as a profile records them, with
/// `ptx_lines` each with its warp instructions per line of its PTX text
/// ([`LaunchRecord::ptx_lines`]).
pub fn replay(dir: &Path, ptx_lines: bool) -> Result<Vec<ReplayedPhase>, AttnError> {
    let file = read_file(dir)?;
    let arch = arch(dir)?;
    let needed: u64 = file
        .ops
        .iter()
        .map(|op| match op {
            TraceOp::Alloc { bytes, .. } => *bytes,
            _ => 0,
        })
        .sum();
    let device = Device::new(arch, needed + (64 << 20)).with_checks(linattn_ptxsim::Checks {
        racecheck: false,
        initcheck: false,
        globalcheck: false,
        ..linattn_ptxsim::Checks::default()
    });
    device.count_memory(true);
    device.count_source_lines(ptx_lines);
    let mut buffers: HashMap<u32, u64> = HashMap::new();
    let mut modules: HashMap<String, (Module, std::sync::Arc<str>)> = HashMap::new();
    let mut phases: Vec<ReplayedPhase> = Vec::new();
    let at = |buffers: &HashMap<u32, u64>, p: &BufferPtr| -> Result<u64, AttnError> {
        buffers.get(&p.buffer).map(|a| a + p.offset).ok_or_else(|| {
            AttnError::InvalidArgument(format!("trace: buffer {} used but not live", p.buffer))
        })
    };
    for op in &file.ops {
        match op {
            TraceOp::Alloc {
                buffer,
                bytes,
                zeroed,
            } => {
                let address = if *zeroed {
                    device.alloc_zeroed(*bytes)
                } else {
                    device.alloc(*bytes)
                }
                .map_err(sim_error)?;
                buffers.insert(*buffer, address);
            }
            TraceOp::Free { buffer } => {
                if let Some(address) = buffers.remove(buffer) {
                    device.free(address).map_err(sim_error)?;
                }
            }
            TraceOp::Upload { to, blob, bytes } => {
                let data = read_checked(&dir.join("blobs").join(format!("{blob}.bin")), blob)?;
                if data.len() as u64 != *bytes {
                    return Err(AttnError::InvalidArgument(format!(
                        "trace: blob {blob} holds {} bytes, the upload {bytes}",
                        data.len()
                    )));
                }
                device.write(at(&buffers, to)?, &data).map_err(sim_error)?;
            }
            TraceOp::Fill { to, bytes } => {
                device
                    .fill(at(&buffers, to)?, *bytes, 0)
                    .map_err(sim_error)?;
            }
            TraceOp::Copy { to, from, bytes } => {
                device
                    .copy(at(&buffers, to)?, at(&buffers, from)?, *bytes)
                    .map_err(sim_error)?;
            }
            TraceOp::Phase { backend, phase } => phases.push(ReplayedPhase {
                backend: backend.clone(),
                phase: phase.clone(),
                launches: Vec::new(),
            }),
            TraceOp::Launch {
                module,
                entry,
                label,
                grid,
                block,
                dynamic_shared,
                static_shared,
                registers,
                args,
            } => {
                if !modules.contains_key(module) {
                    let ptx = read_checked(&dir.join("ptx").join(format!("{module}.ptx")), module)?;
                    let ptx = String::from_utf8(ptx).map_err(|_| {
                        AttnError::InvalidArgument(format!("trace: module {module} is not text"))
                    })?;
                    let loaded = device.load(&ptx).map_err(sim_error)?;
                    modules.insert(module.clone(), (loaded, ptx.into()));
                }
                let (loaded, ptx) = &modules[module];
                let args = args
                    .iter()
                    .map(|a| {
                        Ok(match a {
                            TraceArg::Ptr(p) => Arg::U64(at(&buffers, p)?),
                            TraceArg::Null => Arg::U64(0),
                            TraceArg::I32(v) => Arg::I32(*v),
                            TraceArg::U32(v) => Arg::U32(*v),
                            TraceArg::I64(v) => Arg::I64(*v),
                            TraceArg::F32(v) => Arg::F32(*v),
                        })
                    })
                    .collect::<Result<Vec<Arg>, AttnError>>()?;
                let config = LaunchConfig {
                    grid: [grid.0, grid.1, grid.2],
                    block: [block.0, block.1, block.2],
                    dynamic_shared_bytes: *dynamic_shared,
                };
                let stats = device
                    .launch(loaded, entry, &config, &args)
                    .map_err(sim_error)?;
                // Launches before the first phase (staging) run but are not reported.
                let Some(phase) = phases.last_mut() else {
                    continue;
                };
                phase.launches.push(LaunchRecord {
                    entry: entry.clone(),
                    label: label.clone(),
                    grid: *grid,
                    block: *block,
                    dynamic_shared: *dynamic_shared,
                    static_shared: *static_shared,
                    registers: *registers,
                    counters: stats.counters,
                    sampled: None,
                    source_lines: None,
                    ptx_lines: match &stats.instr_counts {
                        Some(counts) => Some(PtxLines {
                            lines: loaded.ptx_lines(entry, counts).map_err(sim_error)?,
                            ptx: ptx.clone(),
                        }),
                        None => None,
                    },
                });
            }
        }
    }
    Ok(phases)
}

#[cfg(test)]
mod tests {
    use super::*;
    use linattn_ptxsim::Counters;

    /// Each thread stores its %tid.x to out[tid].
    const PTX: &str = ".version 8.0\n.target sm_90\n.address_size 64\n\
        .visible .entry tid_store(.param .u64 out)\n{\n\
        .reg .b32 %r<2>;\n.reg .b64 %rd<5>;\n\
        ld.param.u64 %rd1, [out];\ncvta.to.global.u64 %rd2, %rd1;\n\
        mov.u32 %r1, %tid.x;\nmul.wide.u32 %rd3, %r1, 4;\nadd.s64 %rd4, %rd2, %rd3;\n\
        st.global.u32 [%rd4], %r1;\nret;\n}\n";

    fn record(entry: &str) -> LaunchRecord {
        LaunchRecord {
            entry: entry.into(),
            label: "test.cu[]".into(),
            grid: (1, 1, 1),
            block: (32, 1, 1),
            dynamic_shared: 0,
            static_shared: 0,
            registers: 8,
            counters: Counters::default(),
            source_lines: None,
            ptx_lines: None,
            sampled: None,
        }
    }

    fn recorded() -> Recorder {
        let mut r = Recorder::default();
        r.alloc(0x10_000, 256, true);
        r.upload(0x10_000 + 128, &[7u8; 16]);
        r.phase("sim/test", "forward");
        let ptx: Arc<str> = Arc::from(PTX);
        r.launch(&ptx, &record("tid_store"), &[KernelArg::Ptr(0x10_000)]);
        r
    }

    #[test]
    fn pointers_become_buffer_and_offset() {
        let mut r = recorded();
        r.alloc(0x20_000, 64, false);
        assert_eq!(
            r.place(0x20_000 + 63, "x"),
            Some(BufferPtr {
                buffer: 1,
                offset: 63
            })
        );
        assert_eq!(r.place(0x20_000 + 64, "x"), None);
        assert!(r.error.as_deref().is_some_and(|e| e.contains("0x20040")));
    }

    #[test]
    fn a_written_trace_replays_the_launch_with_its_counters() {
        let dir = tempfile::tempdir().unwrap();
        recorded().write(dir.path(), "sm_90", "test").unwrap();
        let phases = replay(dir.path(), false).unwrap();
        assert_eq!(phases.len(), 1);
        assert_eq!(
            (phases[0].backend.as_str(), phases[0].phase.as_str()),
            ("sim/test", "forward")
        );
        let launch = &phases[0].launches[0];
        assert_eq!(launch.entry, "tid_store");
        assert_eq!(launch.registers, 8);
        // 32 lanes × 4 bytes: one request, four sectors.
        assert_eq!(launch.counters.global_store_requests, 1);
        assert_eq!(launch.counters.global_store_sectors, 4);
        assert!(launch.ptx_lines.is_none());
    }

    #[test]
    fn a_replay_counts_ptx_lines_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        recorded().write(dir.path(), "sm_90", "test").unwrap();
        let phases = replay(dir.path(), true).unwrap();
        let launch = &phases[0].launches[0];
        let counted = launch.ptx_lines.as_ref().expect("counted");
        assert_eq!(&*counted.ptx, PTX);
        let lines = &counted.lines;
        // One warp: 7 instructions (ld.param .. ret), each at its own line of PTX.
        assert_eq!(lines.total(), launch.counters.warp_instructions);
        assert_eq!(lines.lines.len(), 7);
        let store = PTX
            .lines()
            .position(|l| l.starts_with("st.global"))
            .unwrap() as u32
            + 1;
        assert!(lines.lines.iter().any(|l| l.line == store
            && l.file == linattn_ptxsim::PTX_TEXT
            && l.warp_instructions == 1));
    }

    #[test]
    fn a_changed_blob_or_an_escaping_pointer_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        recorded().write(dir.path(), "sm_90", "test").unwrap();
        let blob = dir
            .path()
            .join("blobs")
            .join(format!("{}.bin", content_hash(&[7u8; 16])));
        std::fs::write(&blob, [8u8; 16]).unwrap();
        let e = replay(dir.path(), false).unwrap_err().to_string();
        assert!(e.contains("does not hash to its name"), "{e}");

        let mut r = recorded();
        r.upload(0x90_000, &[1]);
        let e = r
            .write(tempfile::tempdir().unwrap().path(), "sm_90", "t")
            .unwrap_err();
        assert!(e.to_string().contains("outside every allocation"), "{e}");
    }
}
