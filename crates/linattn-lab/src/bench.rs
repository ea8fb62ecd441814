use linattn_core::AttnError;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct BenchArgs {}

pub fn run(_args: BenchArgs) -> Result<ExitCode, AttnError> {
    Err(AttnError::State("bench: under construction".into()))
}
