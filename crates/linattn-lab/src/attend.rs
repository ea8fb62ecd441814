use linattn_core::AttnError;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct AttendArgs {}

pub fn run(_args: AttendArgs) -> Result<ExitCode, AttnError> {
    Err(AttnError::State("attend: under construction".into()))
}
