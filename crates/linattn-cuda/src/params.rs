//! Typed kernel launches: one argument struct per kernel entry point.
//!
//! A positional argument list (`[q, k, v, states, n, ...]`) lets the executor's PTX signature
//! check catch a wrong count or a float where an int belongs, but not two buffers swapped.
//! Every entry point therefore has a struct, declared with
//! [`kernel_params!`](crate::kernel_params!), whose fields carry the names of the kernel's
//! parameters in the `.cu` source, in signature order; the struct turns itself into the
//! executor's [`KernelArg`] list. `tests/kernel_params.rs`
//! holds every struct against its kernel: the field names against the parameter names of the
//! source, and the field kinds against the PTX `.entry` signature of every variant.

use linattn_core::AttnError;

use crate::executor::{Executor, Kernel, KernelArg, Launch};
use crate::memory::DeviceBuffer;
use crate::runtime::KernelVariant;

/// A device pointer argument: a buffer's address, or null for a parameter the kernel does
/// not read in this configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ptr(pub u64);

impl Ptr {
    pub const NULL: Ptr = Ptr(0);
}

impl<T> From<&DeviceBuffer<T>> for Ptr {
    fn from(buffer: &DeviceBuffer<T>) -> Ptr {
        Ptr(buffer.address())
    }
}

impl<T> From<&mut DeviceBuffer<T>> for Ptr {
    fn from(buffer: &mut DeviceBuffer<T>) -> Ptr {
        Ptr(buffer.address())
    }
}

impl<T> From<Option<&DeviceBuffer<T>>> for Ptr {
    fn from(buffer: Option<&DeviceBuffer<T>>) -> Ptr {
        buffer.map_or(Ptr::NULL, Ptr::from)
    }
}

/// `ptr(&buffer)`: shorthand for `Ptr::from(&buffer)` in struct literals.
pub fn ptr(buffer: impl Into<Ptr>) -> Ptr {
    buffer.into()
}

/// What a kernel parameter is, as the PTX signature and the C source both show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParamKind {
    /// A pointer (64-bit address).
    Ptr,
    /// C `int` (flags included).
    I32,
    /// C `unsigned`.
    U32,
    /// C `long long` / `la_index_t`.
    I64,
    /// C `float`.
    F32,
}

impl ParamKind {
    /// Bytes in the parameter buffer.
    pub fn bytes(self) -> u32 {
        match self {
            ParamKind::Ptr | ParamKind::I64 => 8,
            ParamKind::I32 | ParamKind::U32 | ParamKind::F32 => 4,
        }
    }

    pub fn is_float(self) -> bool {
        self == ParamKind::F32
    }
}

/// A value that can be one kernel parameter.
pub trait Param: Copy {
    const KIND: ParamKind;
    fn arg(self) -> KernelArg;
}

/// `Param` for a Rust type: its kind and how it becomes a [`KernelArg`].
macro_rules! param {
    ($($ty:ty => $kind:ident, |$v:ident| $arg:expr;)*) => {$(
        impl Param for $ty {
            const KIND: ParamKind = ParamKind::$kind;
            fn arg(self) -> KernelArg {
                let $v = self;
                $arg
            }
        }
    )*};
}

param! {
    Ptr => Ptr, |p| KernelArg::Ptr(p.0);
    i32 => I32, |v| KernelArg::I32(v);
    // C `int` flags.
    bool => I32, |v| KernelArg::I32(i32::from(v));
    u32 => U32, |v| KernelArg::U32(v);
    i64 => I64, |v| KernelArg::I64(v);
    f32 => F32, |v| KernelArg::F32(v);
}

/// The signature of one entry point as its argument struct states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamSpec {
    pub entry: &'static str,
    /// Parameter names, in signature order.
    pub names: &'static [&'static str],
    pub kinds: &'static [ParamKind],
}

/// The argument struct of one kernel entry point.
pub trait KernelParams {
    /// The entry point, and its parameters in signature order.
    const SPEC: ParamSpec;
    /// The executor's argument list, in signature order.
    fn args(&self) -> Vec<KernelArg>;
}

/// Declares the module of a kernel file's argument structs: one struct per entry point, its
/// field names the parameter names of the `.cu` source in signature order (checked by
/// `tests/kernel_params.rs`), and the module's `SPECS` (every struct's [`ParamSpec`]) and
/// `ENTRIES` (the entry names, for the file's variants), both in declaration order. An entry
/// declared with another's parameter list (one `.cu` macro declaring both) is
/// `struct B => "b" = A;`: a newtype of A's struct, so a launch reads `B(A { .. })`.
///
/// ```ignore
/// kernel_params! {
///     /// The argument structs of causal_chunked.cu.
///     pub mod params;
///     /// `cc_scan`: exclusive scan over chunk states.
///     pub struct Scan => "cc_scan" { states: Ptr, num_chunks: i32, chunk_decay: f32, reverse: bool }
///     pub struct BackwardDq => "cc_backward_dq" { /* ... */ }
///     pub struct BackwardDk => "cc_backward_dk" = BackwardDq;
/// }
/// ```
#[macro_export]
macro_rules! kernel_params {
    (
        $(#[$module_meta:meta])*
        $module_vis:vis mod $module:ident;
        $($items:tt)*
    ) => {
        $(#[$module_meta])*
        $module_vis mod $module {
            #[allow(unused_imports)]
            use $crate::params::Ptr;

            $crate::kernel_params!(@items [] $($items)*);
        }
    };
    // Every item declared: the module's lists.
    (@items [$(($name:ident, $entry:literal))*]) => {
        /// Every entry point's signature, in declaration order.
        pub const SPECS: [$crate::params::ParamSpec; [$($entry),*].len()] =
            [$(<$name as $crate::params::KernelParams>::SPEC),*];
        /// Every entry point's name, in declaration order.
        pub const ENTRIES: [&str; [$($entry),*].len()] = [$($entry),*];
    };
    (@items [$($done:tt)*]
        $(#[$meta:meta])*
        $vis:vis struct $name:ident => $entry:literal { $($field:ident : $ty:ty),* $(,)? }
        $($rest:tt)*
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy)]
        $vis struct $name { $(pub $field: $ty),* }

        impl $crate::params::KernelParams for $name {
            const SPEC: $crate::params::ParamSpec = $crate::params::ParamSpec {
                entry: $entry,
                names: &[$(stringify!($field)),*],
                kinds: &[$(<$ty as $crate::params::Param>::KIND),*],
            };
            fn args(&self) -> Vec<$crate::executor::KernelArg> {
                vec![$($crate::params::Param::arg(self.$field)),*]
            }
        }

        $crate::kernel_params!(@items [$($done)* ($name, $entry)] $($rest)*);
    };
    (@items [$($done:tt)*]
        $(#[$meta:meta])*
        $vis:vis struct $name:ident => $entry:literal = $base:ident;
        $($rest:tt)*
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy)]
        $vis struct $name(pub $base);

        impl $crate::params::KernelParams for $name {
            const SPEC: $crate::params::ParamSpec = $crate::params::ParamSpec {
                entry: $entry,
                ..<$base as $crate::params::KernelParams>::SPEC
            };
            fn args(&self) -> Vec<$crate::executor::KernelArg> {
                $crate::params::KernelParams::args(&self.0)
            }
        }

        $crate::kernel_params!(@items [$($done)* ($name, $entry)] $($rest)*);
    };
}

/// Launches `params`' entry point, resolved in `variant` (compiled and loaded on first use).
pub fn launch<P: KernelParams>(
    exec: &dyn Executor,
    variant: &KernelVariant,
    launch: &Launch,
    params: &P,
) -> Result<(), AttnError> {
    let kernel = exec.kernel(variant, P::SPEC.entry)?;
    exec.launch(&kernel, launch, &params.args())
}

/// Launches an already resolved `kernel`, which must be `params`' entry point.
pub fn launch_kernel<P: KernelParams>(
    exec: &dyn Executor,
    kernel: &Kernel,
    launch: &Launch,
    params: &P,
) -> Result<(), AttnError> {
    if kernel.entry != P::SPEC.entry {
        return Err(AttnError::State(format!(
            "arguments of {} passed to kernel {}",
            P::SPEC.entry,
            kernel.entry
        )));
    }
    exec.launch(kernel, launch, &params.args())
}
