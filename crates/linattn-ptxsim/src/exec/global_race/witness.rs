//! What globalcheck records and reports, and its rules: the kinds of access, one access as
//! a witness, the faults, and which pairs of accesses conflict (both levels use them).

use crate::exec::race::Race;

/// How a lane touches global memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Read,
    NcRead,
    Write,
    Atomic,
}

impl Kind {
    pub(super) fn bit(self) -> u8 {
        match self {
            Kind::Read => 1,
            Kind::NcRead => 2,
            Kind::Write => 4,
            Kind::Atomic => 8,
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Read => "read",
            Kind::NcRead => "ld.global.nc read",
            Kind::Write => "write",
            Kind::Atomic => "atomic",
        }
    }

    pub(super) fn reads(self) -> bool {
        matches!(self, Kind::Read | Kind::NcRead)
    }

    pub(super) fn modifies(self) -> bool {
        matches!(self, Kind::Write | Kind::Atomic)
    }
}

/// Whether accesses `a` and `b` of different CTAs conflict: not both reads, not both
/// atomics, not two writes of the same value.
pub(super) fn across_ctas(a: Witness, b: Witness) -> bool {
    let same_value =
        a.kind == Kind::Write && b.kind == Kind::Write && a.value.is_some() && a.value == b.value;
    let both_read = a.kind.reads() && b.kind.reads();
    let both_atomic = a.kind == Kind::Atomic && b.kind == Kind::Atomic;
    !(both_read || both_atomic || same_value)
}

/// Whether `a` and `b` break `.nc`'s promise, whoever did them.
pub(super) fn breaks_nc(a: Kind, b: Kind) -> bool {
    (a == Kind::NcRead && b.modifies()) || (b == Kind::NcRead && a.modifies())
}

/// One access as the report names it: CTA (linear index in the grid), linear thread id in
/// the CTA, instruction index and kind.
#[derive(Clone, Copy, Debug)]
pub struct Witness {
    pub cta: u32,
    pub tid: u16,
    pub instr: u32,
    pub kind: Kind,
    /// The 16 bits a write stored in the half, when it covered it.
    pub value: Option<u32>,
}

/// What globalcheck found.
#[derive(Clone, Copy, Debug)]
pub enum GlobalFault {
    /// Two threads of this CTA in one barrier interval (the race tracker's rules).
    InCta { this: Kind, tid: u16, race: Race },
    /// Against an access of another CTA, or a store against an `.nc` read.
    Launch { this: Kind, other: Witness },
}
