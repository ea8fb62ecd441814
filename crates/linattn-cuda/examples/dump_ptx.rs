//! Writes the PTX of every kernel variant, as NVRTC emits it for the simulator and a GPU, to
//! a directory (default `target/ptx`): one file per variant, named by its label.
//!
//! ```text
//! cargo run --release -p linattn-cuda --example dump_ptx -- [dir] [sm_80|sm_90]
//! ```

use std::process::ExitCode;

use linattn_cuda::runtime::{compile, Arch};

fn main() -> ExitCode {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "target/ptx".into());
    let arch = match std::env::args().nth(2).as_deref() {
        Some("sm_80") => Arch::SM80,
        None | Some("sm_90") => Arch::SM90,
        Some(other) => {
            eprintln!("error: unknown arch {other} (sm_80 or sm_90)");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("error: cannot create {dir}: {e}");
        return ExitCode::from(2);
    }
    for variant in linattn_cuda::kernel_variants() {
        let file = format!(
            "{dir}/{}.ptx",
            variant.label().replace(['[', ']', ',', '='], "_")
        );
        let written = compile(&variant, arch)
            .map_err(|e| e.to_string())
            .and_then(|c| std::fs::write(&file, &c.ptx).map_err(|e| e.to_string()));
        if let Err(e) = written {
            eprintln!("error: {}: {e}", variant.label());
            return ExitCode::FAILURE;
        }
        println!("{file}");
    }
    ExitCode::SUCCESS
}
