use linattn_core::AttnError;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct ReportArgs {}

pub fn run(_args: ReportArgs) -> Result<ExitCode, AttnError> {
    Err(AttnError::State("report: under construction".into()))
}
