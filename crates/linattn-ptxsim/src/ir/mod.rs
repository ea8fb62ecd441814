//! The decoded program: what the parser produces and the executor runs.
//!
//! Every PTX instruction becomes one [`Instr`] with its operands resolved once: registers to
//! slots of one of three banks (predicates, 32-bit, 64-bit), labels to instruction indices,
//! parameters to byte offsets, shared symbols to offsets in the CTA's shared window, global
//! symbols to device addresses. The executor then never looks at a name again.

mod op_info;

use std::collections::HashMap;

use crate::instr_class::InstrClass;

/// Scalar types of PTX as far as the executor cares (sizes and interpretation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ty {
    B16,
    B32,
    B64,
    U16,
    U32,
    U64,
    S16,
    S32,
    S64,
    F16,
    Bf16,
    F32,
    F64,
    F16x2,
    Bf16x2,
    Pred,
    U8,
    S8,
    B8,
}

impl Ty {
    pub fn parse(text: &str) -> Option<Ty> {
        Some(match text {
            "b8" => Ty::B8,
            "u8" => Ty::U8,
            "s8" => Ty::S8,
            "b16" => Ty::B16,
            "b32" => Ty::B32,
            "b64" => Ty::B64,
            "u16" => Ty::U16,
            "u32" => Ty::U32,
            "u64" => Ty::U64,
            "s16" => Ty::S16,
            "s32" => Ty::S32,
            "s64" => Ty::S64,
            "f16" => Ty::F16,
            "bf16" => Ty::Bf16,
            "f32" => Ty::F32,
            "f64" => Ty::F64,
            "f16x2" => Ty::F16x2,
            "bf16x2" => Ty::Bf16x2,
            "pred" => Ty::Pred,
            _ => return None,
        })
    }

    /// Size in bytes (predicates: 0).
    pub fn bytes(self) -> u32 {
        match self {
            Ty::B8 | Ty::U8 | Ty::S8 => 1,
            Ty::B16 | Ty::U16 | Ty::S16 | Ty::F16 | Ty::Bf16 => 2,
            Ty::B32 | Ty::U32 | Ty::S32 | Ty::F32 | Ty::F16x2 | Ty::Bf16x2 => 4,
            Ty::B64 | Ty::U64 | Ty::S64 | Ty::F64 => 8,
            Ty::Pred => 0,
        }
    }

    pub fn is_signed(self) -> bool {
        matches!(self, Ty::S8 | Ty::S16 | Ty::S32 | Ty::S64)
    }

    pub fn is_float(self) -> bool {
        matches!(
            self,
            Ty::F16 | Ty::Bf16 | Ty::F32 | Ty::F64 | Ty::F16x2 | Ty::Bf16x2
        )
    }

    pub fn is_wide(self) -> bool {
        self.bytes() == 8
    }
}

/// Register banks: predicates are one bit per lane, everything up to 32 bits lives in the
/// 32-bit bank (16-bit registers use its low half), 64-bit registers in the 64-bit bank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bank {
    Pred,
    R32,
    R64,
}

/// A register slot: bank and index within the bank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reg {
    pub bank: Bank,
    pub index: u32,
}

/// Special registers the kernels read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Special {
    Tid(u8),
    Ntid(u8),
    Ctaid(u8),
    Nctaid(u8),
    LaneId,
    WarpId,
    NWarpId,
    /// `%clock` / `%clock64`: the warp's issue cycle under the latency model (else the
    /// number of instructions it has issued); probes time chains with them.
    Clock,
    Clock64,
}

/// A source operand.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Src {
    Reg(Reg),
    /// Raw bits of an immediate (floats as their bit pattern in the instruction's type).
    Imm(u64),
    Special(Special),
}

/// State spaces of loads, stores and atomics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Space {
    Global,
    Shared,
    Param,
    /// A generic address (resolved per lane to shared or global).
    Generic,
}

/// `[base + offset]` address: a register (or absolute symbol address) plus a constant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Address {
    pub base: Option<Reg>,
    pub offset: i64,
}

/// Binary operations on one type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    MulLo,
    MulHi,
    Min,
    Max,
    And,
    Or,
    Xor,
    Shl,
    Shr,
    Div,
    Rem,
}

/// Unary operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnOp {
    Neg,
    Abs,
    Not,
    Popc,
    Clz,
    Brev,
    /// `rcp` (`approx`: see [`Rounding`] of the instruction).
    Rcp,
    Sqrt,
    Rsqrt,
    Ex2,
    Lg2,
    Sin,
    Cos,
    Tanh,
}

/// IEEE rounding of float results, and the `.approx`/`.full` flavours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rounding {
    /// Round to nearest even (also PTX's default for float add/sub/mul/fma).
    Nearest,
    Zero,
    Down,
    Up,
    /// `.approx`: hardware approximation (simulated as the correctly rounded result).
    Approx,
    /// `.full` division (2 ulp on hardware; simulated correctly rounded).
    Full,
}

/// Rounding of float → integer or float → integral float conversions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntRounding {
    Nearest,
    Zero,
    Down,
    Up,
}

/// Float modifiers of an arithmetic instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FloatMode {
    pub rounding: Rounding,
    pub ftz: bool,
    pub sat: bool,
    /// No rounding modifier was written: ptxas may contract a `mul` into the `add` or `sub`
    /// that uses it (PTX ISA, `mul`/`add`: "mul/add sequences with no rounding modifiers may
    /// be optimized to use fused-multiply-add instructions"; `ptxas/contract.rs`).
    pub contractible: bool,
}

/// Comparison operators of `setp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Lo,
    Ls,
    Hi,
    Hs,
    Equ,
    Neu,
    Ltu,
    Leu,
    Gtu,
    Geu,
    Num,
    Nan,
}

/// Boolean combination of `setp.cmp.bop` and of predicate logic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoolOp {
    And,
    Or,
    Xor,
}

/// `shfl.sync` modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShflMode {
    Up,
    Down,
    Bfly,
    Idx,
}

/// Atomic operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomOp {
    Add,
    Min,
    Max,
    Exch,
    Cas,
    And,
    Or,
    Xor,
    Inc,
    Dec,
}

/// Element type of an `mma` operand pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MmaInput {
    F16,
    Bf16,
}

/// `cvt.{modifiers}.dty.sty d, a`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cvt {
    pub dty: Ty,
    pub sty: Ty,
    /// Float results: rounding of the value; integer results from floats: `int_rounding`.
    pub rounding: Option<Rounding>,
    pub int_rounding: Option<IntRounding>,
    pub ftz: bool,
    pub sat: bool,
    pub d: Reg,
    pub a: Src,
}

/// One decoded operation.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    Mov {
        ty: Ty,
        d: Reg,
        a: Src,
    },
    /// `mov.b32 {%rs1, %rs2}, %r` and friends: split a wide value into parts (low first).
    Unpack {
        part_bytes: u32,
        d: Vec<Reg>,
        a: Src,
    },
    /// `mov.b32 %r, {%rs1, %rs2}`: concatenate parts (first = lowest).
    Pack {
        part_bytes: u32,
        d: Reg,
        a: Vec<Src>,
    },
    Bin {
        op: BinOp,
        ty: Ty,
        mode: FloatMode,
        d: Reg,
        a: Src,
        b: Src,
    },
    /// `mul.wide.{s32,u32}`: 32×32 → 64.
    MulWide {
        ty: Ty,
        d: Reg,
        a: Src,
        b: Src,
    },
    /// `mad.lo` / `mad.hi` / `mad.wide` on integers: a·b + c.
    Mad {
        ty: Ty,
        hi: bool,
        wide: bool,
        d: Reg,
        a: Src,
        b: Src,
        c: Src,
    },
    /// A `mul.f32` folded into the `add.f32` / `sub.f32` that uses it, as ptxas compiles
    /// them (`ptxas/contract.rs`; only in modules a device loads as compiled):
    /// (±a·b) + (±c) with one rounding, round to nearest even.
    FusedMulAdd {
        d: Reg,
        a: Src,
        b: Src,
        c: Src,
        negate_product: bool,
        negate_addend: bool,
    },
    /// `fma` / `mad` on floats: a·b + c with one rounding.
    Fma {
        ty: Ty,
        mode: FloatMode,
        d: Reg,
        a: Src,
        b: Src,
        c: Src,
    },
    Un {
        op: UnOp,
        ty: Ty,
        mode: FloatMode,
        d: Reg,
        a: Src,
    },
    Cvt(Cvt),
    /// `cvt.rn.{f16x2,bf16x2}.f32 d, a, b`: a goes to the upper half, b to the lower.
    CvtPack {
        dty: Ty,
        sat: bool,
        d: Reg,
        a: Src,
        b: Src,
    },
    Setp {
        cmp: Cmp,
        ty: Ty,
        combine: Option<(BoolOp, Src)>,
        d: Reg,
        d_not: Option<Reg>,
        a: Src,
        b: Src,
    },
    Selp {
        ty: Ty,
        d: Reg,
        a: Src,
        b: Src,
        p: Src,
    },
    PredLogic {
        op: BoolOp,
        d: Reg,
        a: Src,
        b: Src,
    },
    PredNot {
        d: Reg,
        a: Src,
    },
    /// `bfi.b32 d, a, b, pos, len`: a's low `len` bits inserted into b at `pos`.
    Bfi {
        ty: Ty,
        d: Reg,
        a: Src,
        b: Src,
        pos: Src,
        len: Src,
    },
    /// `bfe.{u32,s32,...} d, a, pos, len`.
    Bfe {
        ty: Ty,
        d: Reg,
        a: Src,
        pos: Src,
        len: Src,
    },
    Ld {
        space: Space,
        ty: Ty,
        /// Non-coherent (`.nc`): read-only for the whole launch.
        nc: bool,
        d: Vec<Reg>,
        addr: Address,
    },
    St {
        space: Space,
        ty: Ty,
        a: Vec<Src>,
        addr: Address,
    },
    /// `cvta.to.global` / `cvta.global` and friends: address-space conversions.
    Cvta {
        to_generic: bool,
        space: Space,
        d: Reg,
        a: Src,
    },
    Atom {
        space: Space,
        op: AtomOp,
        ty: Ty,
        d: Reg,
        addr: Address,
        b: Src,
        c: Option<Src>,
    },
    Bra {
        target: u32,
    },
    Ret,
    /// `bar.sync id` / `barrier.sync.aligned id` (thread count unsupported).
    BarSync {
        id: Src,
    },
    /// `bar.warp.sync membermask`.
    WarpSync {
        mask: Src,
    },
    Shfl {
        mode: ShflMode,
        d: Reg,
        p: Option<Reg>,
        a: Src,
        b: Src,
        c: Src,
        mask: Src,
    },
    /// `mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32` (boxed: its ten
    /// operands would double the size of every instruction).
    Mma(Box<MmaOperands>),
}

/// The operands of an `mma`: 4 f32 results, 4 + 2 registers of packed 16-bit A and B, 4 f32
/// accumulators.
#[derive(Debug, Clone, PartialEq)]
pub struct MmaOperands {
    pub input: MmaInput,
    pub d: [Reg; 4],
    pub a: [Src; 4],
    pub b: [Src; 2],
    pub c: [Src; 4],
}

/// An instruction with its guard and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Instr {
    /// `@%p` (false) / `@!%p` (true).
    pub guard: Option<(Reg, bool)>,
    pub op: Op,
    /// 1-based line in the PTX text.
    pub line: u32,
    /// Its class for the counters, and the fp32 operations one lane performs.
    pub class: InstrClass,
    pub fp32_flops: u32,
}

/// One kernel parameter: its byte offset in the parameter buffer and its size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    pub name: String,
    pub ty: Ty,
    /// Size in bytes (arrays `.b8 name[16]` give 16).
    pub bytes: u32,
    pub align: u32,
    pub offset: u32,
}

/// A kernel (`.entry`) ready to run.
#[derive(Debug, Clone)]
pub struct Kernel {
    pub name: String,
    pub params: Vec<Param>,
    /// Total bytes of the parameter buffer.
    pub param_bytes: u32,
    /// Registers per bank.
    pub preds: u32,
    pub regs32: u32,
    pub regs64: u32,
    /// Static shared bytes (the kernel's own `.shared` variables plus module-scope ones it
    /// uses), laid out from offset 0; dynamic shared memory starts at `dynamic_shared_offset`.
    /// Both as declared (what ptxas reports and the launch limits count).
    pub static_shared_bytes: u32,
    pub dynamic_shared_offset: u32,
    /// The same two in the layout the device's `Placement` made (what the CTA allocates;
    /// equal to the declared ones in `Placement::Declared`).
    pub placed_shared_bytes: u32,
    pub placed_dynamic_offset: u32,
    /// Whether the kernel refers to the `.extern .shared` array at all.
    pub uses_dynamic_shared: bool,
    /// `.maxntid` / `.reqntid`, if declared.
    pub max_threads: Option<[u32; 3]>,
    pub required_threads: Option<[u32; 3]>,
    pub instrs: Vec<Instr>,
    /// How the memory counters count each instruction (what ptxas makes of it), parallel to
    /// `instrs`.
    pub counting: Vec<Counting>,
    /// Source text of each instruction (for error messages), parallel to `instrs`.
    pub text: Vec<String>,
    /// Where each instruction came from in the CUDA source, parallel to `instrs`: the last
    /// `.loc` before it (PTX compiled with `-lineinfo`), else `None`.
    pub locs: Vec<Option<SourceLoc>>,
}

/// A `.loc`: the CUDA source line an instruction was compiled from. For code inlined from a
/// device function it is the function's own line (the innermost), as Nsight Compute's
/// source view attributes it. Line 0 is code the compiler made for no line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceLoc {
    /// The `.file` index (names in [`Program::files`]).
    pub file: u32,
    pub line: u32,
}

/// A module-scope `.global` variable: name, size and initial bytes.
#[derive(Debug, Clone)]
pub struct GlobalVar {
    pub name: String,
    pub align: u32,
    pub init: Vec<u8>,
}

/// A parsed module: its kernels by name and its `.global` variables.
#[derive(Debug, Clone)]
pub struct Program {
    pub target: String,
    pub version: String,
    pub kernels: HashMap<String, Kernel>,
    pub globals: Vec<GlobalVar>,
    /// `.file` index → path, as the compiler named the sources (`-lineinfo` only).
    pub files: HashMap<u32, String>,
}

/// How one instruction's memory access is counted (what ptxas makes of it: `crate::ptxas`
/// plans it; it lives here, with the instructions, so the IR imports nothing above it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counting {
    /// As it stands.
    Own,
    /// For itself and a later partner, as one access of `bytes` per lane at this
    /// instruction's lane addresses plus `delta` (the lower of the two).
    Fused { delta: i64, bytes: u32 },
    /// Counted by the earlier instruction it was fused with.
    Folded,
    /// A shared load ptxas drops (its value is already in registers).
    Reused,
}
