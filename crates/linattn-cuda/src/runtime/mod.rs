//! What every linattn-cuda module (and linattn-softmax) builds on, by concern:
//!
//! * [`probe`] — is NVRTC loadable, is there a CUDA device (cheap, cached, never panics).
//! * [`provision`] — the binary installs the pinned NVRTC wheel into the user cache once.
//! * [`variant`] — [`KernelVariant`] (source and its headers + `-D` defines + entry points), [`Arch`], the
//!   shared `-D` vocabulary ([`storage_define`], [`map_define`], [`head_dim_class`]).
//! * [`nvrtc`] — [`compile`] (PTX + cubin + ptxas report, cached in the process and on disk).
//!
//! Devices are reached through [`crate::executor::Executor`] (a GPU or the PTX simulator);
//! device buffers live in [`crate::memory`].

pub mod nvrtc;
pub mod probe;
pub mod provision;
mod sync;
pub mod variant;

use linattn_core::AttnError;

pub use nvrtc::{
    compile, file_text, nvrtc_options, parse_ptxas_log, CompiledKernel, PtxasReport, PRELUDE,
};
pub use probe::{
    gpu_available, nvrtc_available, nvrtc_locatable, nvrtc_search_dirs, nvrtc_version,
};
pub use variant::{
    check_head_dim, head_dim_class, map_define, storage_define, Arch, KernelHeader, KernelVariant,
    HEAD_DIM_CLASSES, MAX_HEAD_DIM, MIN_HEAD_DIM,
};

pub(crate) use sync::lock;

/// Blocks of `per_block` covering `n` items (for 1-D grids), as u32.
pub fn blocks_for(n: usize, per_block: usize) -> Result<u32, AttnError> {
    let blocks = n.div_ceil(per_block.max(1)).max(1);
    u32::try_from(blocks).map_err(|_| AttnError::SizeOverflow(format!("{blocks} blocks")))
}

/// A host count as the `int` kernels take, or `SizeOverflow`.
pub fn as_i32(what: &str, n: usize) -> Result<i32, AttnError> {
    i32::try_from(n).map_err(|_| AttnError::SizeOverflow(format!("{what} = {n} exceeds i32")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use linattn_core::{FeatureMap, Precision, Unsupported};

    const LOG: &str = "\
ptxas info    : 0 bytes gmem
ptxas info    : Function properties for la_helper
ptxas         .     16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'la_fast' for 'sm_90'
ptxas info    : Function properties for la_fast
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 4096 bytes smem, 400 bytes cmem[0]
ptxas info    : Compile time = 4.075 ms
ptxas info    : Compiling entry function 'la_heavy' for 'sm_90'
ptxas info    : Function properties for la_heavy
ptxas         .     264 bytes stack frame, 132 bytes spill stores, 128 bytes spill loads
ptxas info    : Used 255 registers, used 0 barriers, 372 bytes cmem[0]
";

    #[test]
    fn ptxas_log_gives_one_report_per_entry_point() {
        let reports = parse_ptxas_log(LOG);
        assert_eq!(
            reports,
            vec![
                PtxasReport {
                    kernel: "la_fast".into(),
                    registers: 40,
                    spill_stores_bytes: 0,
                    spill_loads_bytes: 0,
                    shared_bytes: 4096,
                    stack_frame_bytes: 0,
                },
                PtxasReport {
                    kernel: "la_heavy".into(),
                    registers: 255,
                    spill_stores_bytes: 132,
                    spill_loads_bytes: 128,
                    shared_bytes: 0,
                    stack_frame_bytes: 264,
                },
            ]
        );
        assert!(!reports[0].spills());
        assert!(reports[1].spills());
    }

    #[test]
    fn ptxas_parser_ignores_unrelated_text() {
        assert!(parse_ptxas_log("").is_empty());
        assert!(parse_ptxas_log("warning: something\nUsed registers").is_empty());
    }

    #[test]
    fn head_dims_are_multiples_of_16_from_16_to_256() {
        for dim in (16..=256).step_by(16) {
            assert_eq!(check_head_dim("head dim D", dim), Ok(()), "D = {dim}");
        }
        for dim in [0, 8, 15, 17, 40, 50, 100, 257, 272, 512] {
            let error = check_head_dim("head dim D", dim).expect_err("must be refused");
            assert!(
                matches!(&error, Unsupported::Problem(text) if text.contains(&format!("D = {dim}"))),
                "{error}"
            );
        }
    }

    #[test]
    fn head_dim_classes_round_up() {
        let class = |d| head_dim_class("C", d).ok();
        assert_eq!(class(16), Some(32));
        assert_eq!(class(48), Some(64));
        assert_eq!(class(65), Some(128));
        assert_eq!(class(80), Some(128));
        assert_eq!(class(96), Some(128));
        assert_eq!(class(256), Some(256));
        assert_eq!(class(257), None);
        assert_eq!(class(0), None);
    }

    #[test]
    fn storage_defines_cover_gpu_precisions_only() {
        assert_eq!(storage_define(Precision::F16).map(|d| d.1), Ok("1".into()));
        assert!(storage_define(Precision::F64).is_err());
        assert!(map_define(&FeatureMap::Softmax).is_none());
        assert_eq!(map_define(&FeatureMap::Relu).map(|d| d.1), Some("2".into()));
    }

    #[test]
    fn variant_label_lists_defines() {
        let variant = KernelVariant::new("x.cu", "")
            .define("LA_STORAGE", 1)
            .define("LA_MAP", 2);
        assert_eq!(variant.label(), "x.cu[LA_STORAGE=1,LA_MAP=2]");
    }
}
