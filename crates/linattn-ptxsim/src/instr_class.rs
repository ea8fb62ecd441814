//! Instruction classes, as a kernel engineer reads a profile: the vocabulary the counters
//! count in. Which class a decoded operation has is the IR's business (`ir::Op::class`).

/// Instruction classes, as a kernel engineer reads a profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum InstrClass {
    /// f32/f64 add, mul, fma, min, max, neg, abs, compare and select on floats.
    Fp32,
    /// Integer and bitwise arithmetic, moves, predicate logic, integer compare and select,
    /// parameter loads.
    Integer,
    /// `cvt`, `cvta`: type and address-space conversions.
    Conversion,
    /// Special functions and IEEE division: ex2, lg2, rsqrt, rcp, sqrt, sin, cos, tanh, div.
    SpecialFunction,
    /// `mma.sync` (tensor cores).
    Mma,
    GlobalLoad,
    GlobalStore,
    SharedLoad,
    SharedStore,
    Atomic,
    /// `shfl.sync`.
    Shuffle,
    /// `bar.sync`, `bar.warp.sync`.
    Barrier,
    /// Branches and returns.
    Control,
}

impl InstrClass {
    pub const ALL: [InstrClass; 13] = [
        InstrClass::Fp32,
        InstrClass::Integer,
        InstrClass::Conversion,
        InstrClass::SpecialFunction,
        InstrClass::Mma,
        InstrClass::GlobalLoad,
        InstrClass::GlobalStore,
        InstrClass::SharedLoad,
        InstrClass::SharedStore,
        InstrClass::Atomic,
        InstrClass::Shuffle,
        InstrClass::Barrier,
        InstrClass::Control,
    ];

    pub fn name(self) -> &'static str {
        match self {
            InstrClass::Fp32 => "fp32",
            InstrClass::Integer => "integer",
            InstrClass::Conversion => "conversion",
            InstrClass::SpecialFunction => "special",
            InstrClass::Mma => "mma",
            InstrClass::GlobalLoad => "global_load",
            InstrClass::GlobalStore => "global_store",
            InstrClass::SharedLoad => "shared_load",
            InstrClass::SharedStore => "shared_store",
            InstrClass::Atomic => "atomic",
            InstrClass::Shuffle => "shuffle",
            InstrClass::Barrier => "barrier",
            InstrClass::Control => "control",
        }
    }
}
