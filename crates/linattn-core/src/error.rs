use thiserror::Error;

/// Why a backend cannot run a problem. Not a failure: the harness shows it as
/// `skipped: <reason>` (no GPU) or `unsupported: <reason>` (head dim too large, ...).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Unsupported {
    /// The hardware or driver this backend needs is absent (no libcuda, no device, no NVRTC).
    #[error("skipped: {0}")]
    Unavailable(String),
    /// The backend exists here but does not handle this problem (head dim, map, causality...).
    #[error("unsupported: {0}")]
    Problem(String),
}

impl Unsupported {
    /// True when the backend cannot run at all on this machine (as opposed to this problem).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Unsupported::Unavailable(_))
    }
}

/// Every error linattn reports. Each names the problem; none of them is a panic.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum AttnError {
    #[error("shape mismatch: {0}")]
    ShapeMismatch(String),
    #[error("empty dimension: {0} is zero")]
    EmptyDim(&'static str),
    #[error("non-finite input: {tensor} holds {value} at flat index {index}")]
    NonFinite {
        tensor: &'static str,
        index: usize,
        value: f64,
    },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error(transparent)]
    Unsupported(#[from] Unsupported),
    #[error("out of memory on {device}: needed {requested_bytes} bytes ({detail})")]
    OutOfMemory {
        device: String,
        requested_bytes: u64,
        detail: String,
    },
    #[error("size overflow: {0}")]
    SizeOverflow(String),
    #[error("CUDA error: {0}")]
    Cuda(String),
    #[error("kernel compilation failed: {0}")]
    Compile(String),
    /// A checker of the PTX simulator (memcheck, racecheck, initcheck, synccheck) stopped a
    /// kernel: the text names kernel, PTX line, CTA, thread and address.
    #[error("kernel fault: {0}")]
    KernelFault(String),
    #[error("backend state: {0}")]
    State(String),
    #[error("I/O error: {0}")]
    Io(String),
    #[error("bad file {path}: {reason}")]
    BadFile { path: String, reason: String },
    #[error("non-finite output from {backend}: {detail}")]
    NonFiniteOutput { backend: String, detail: String },
}

impl AttnError {
    /// True when what is missing is the machine's (no GPU, no driver, no NVRTC), not the
    /// input's: the binary exits with its own code for it.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, AttnError::Unsupported(Unsupported::Unavailable(_)))
    }

    /// The binary's exit code convention: 2 for input the user can fix, 1 otherwise (and 3
    /// for [`AttnError::is_unavailable`], checked first).
    pub fn is_user_error(&self) -> bool {
        matches!(
            self,
            AttnError::ShapeMismatch(_)
                | AttnError::EmptyDim(_)
                | AttnError::NonFinite { .. }
                | AttnError::InvalidArgument(_)
                | AttnError::BadFile { .. }
                | AttnError::SizeOverflow(_)
                | AttnError::Unsupported(_)
        )
    }
}

impl From<std::io::Error> for AttnError {
    fn from(e: std::io::Error) -> Self {
        AttnError::Io(e.to_string())
    }
}
