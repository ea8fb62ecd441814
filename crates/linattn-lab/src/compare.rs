use linattn_core::AttnError;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct CompareArgs {}

pub fn run(_args: CompareArgs) -> Result<ExitCode, AttnError> {
    Err(AttnError::State("compare: under construction".into()))
}
