use linattn_core::AttnError;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct CheckArgs {}

pub fn run(_args: CheckArgs) -> Result<ExitCode, AttnError> {
    Err(AttnError::State("check: under construction".into()))
}
