//! Typed errors: what went wrong, where in the PTX, and for the checkers, which thread of
//! which CTA touched which address; and which checkers run.

use std::fmt;

pub use crate::exec::schedule::Schedule;

/// Which checker reported a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Checker {
    /// Every global and shared access inside a live allocation and aligned to its size.
    Memcheck,
    /// Shared-memory accesses of different threads with no barrier ordering them.
    Racecheck,
    /// Reads of device or shared memory never written.
    Initcheck,
    /// Barriers and warp collectives reached by part of the threads they need.
    Synccheck,
    /// Global-memory accesses of one launch that nothing orders: threads of one CTA with no
    /// barrier between them, different CTAs, stores to data read through `ld.global.nc`.
    Globalcheck,
}

impl fmt::Display for Checker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Checker::Memcheck => "memcheck",
            Checker::Racecheck => "racecheck",
            Checker::Initcheck => "initcheck",
            Checker::Synccheck => "synccheck",
            Checker::Globalcheck => "globalcheck",
        })
    }
}

/// Which checkers run, and in which order the warps of a CTA run between synchronisation
/// points. Memcheck and synccheck cannot be turned off: an access outside memory or a
/// barrier that can never complete stops the kernel either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checks {
    pub racecheck: bool,
    pub initcheck: bool,
    pub globalcheck: bool,
    /// Not a checker: a schedule other than the default shows what a kernel computes when
    /// its unsynchronised warps run in another order.
    pub schedule: Schedule,
}

impl Default for Checks {
    fn default() -> Self {
        Checks {
            racecheck: true,
            initcheck: true,
            globalcheck: true,
            schedule: Schedule::InOrder,
        }
    }
}

/// Where a fault happened: kernel, PTX line and instruction, CTA and thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    pub kernel: String,
    pub line: u32,
    pub instruction: String,
    pub cta: [u32; 3],
    pub thread: [u32; 3],
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [cx, cy, cz] = self.cta;
        let [tx, ty, tz] = self.thread;
        write!(
            f,
            "{} at PTX line {} `{}`, CTA ({cx},{cy},{cz}) thread ({tx},{ty},{tz})",
            self.kernel, self.line, self.instruction
        )
    }
}

/// A checker's report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub checker: Checker,
    pub site: Site,
    /// The address involved, if any (global: device address; shared: offset in the CTA's
    /// shared window).
    pub address: Option<u64>,
    pub detail: String,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.checker, self.site)?;
        if let Some(address) = self.address {
            write!(f, ", address {address:#x}")?;
        }
        write!(f, ": {}", self.detail)
    }
}

/// Everything the simulator can refuse or report.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// The PTX text could not be parsed (or uses something the simulator does not model).
    #[error("PTX line {line}: {message} (`{text}`)")]
    Parse {
        line: u32,
        text: String,
        message: String,
    },
    /// No kernel of that name in the module.
    #[error("no kernel '{name}' in the module (it has: {known})")]
    NoKernel { name: String, known: String },
    /// The launch itself is invalid: shape, limits, parameters.
    #[error("launch of {kernel}: {reason}")]
    Launch { kernel: String, reason: String },
    /// A checker found a fault while the kernel ran.
    #[error("{0}")]
    Fault(Box<Fault>),
    /// Host-side memory operation on a bad address or size.
    #[error("device memory: {0}")]
    Memory(String),
    /// More device memory requested than the simulated device has free.
    #[error("out of simulated device memory: {requested} bytes requested, {free} free of {total}")]
    OutOfMemory {
        requested: u64,
        free: u64,
        total: u64,
    },
}

impl SimError {
    pub fn fault(checker: Checker, site: Site, address: Option<u64>, detail: String) -> Self {
        SimError::Fault(Box::new(Fault {
            checker,
            site,
            address,
            detail,
        }))
    }

    /// The checker that reported this, if it is a fault.
    pub fn checker(&self) -> Option<Checker> {
        match self {
            SimError::Fault(fault) => Some(fault.checker),
            _ => None,
        }
    }
}

/// A [`SimError::Parse`] at `line`, quoting (the start of) the statement `text`.
pub(crate) fn parse_error(line: u32, text: &str, message: impl Into<String>) -> SimError {
    SimError::Parse {
        line,
        text: text.chars().take(160).collect(),
        message: message.into(),
    }
}
