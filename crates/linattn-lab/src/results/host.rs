//! What the machine and the build say about themselves: CPU model, memory, commit, rustc,
//! date; the GPU side is filled in by the caller.

use std::fs;
use std::process::Command;

use super::schema::Environment;

/// Output of a command's stdout, trimmed, when it ran and succeeded.
fn command_output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!text.is_empty()).then_some(text)
}

/// The commit the binary was built from, "-dirty" when its sources differed from it
/// (build.rs), "unknown" for a build outside a git checkout.
pub const BUILD_COMMIT: &str = concat!(
    env!("LINATTN_BUILD_COMMIT"),
    env!("LINATTN_BUILD_DIRTY_SUFFIX")
);

pub fn cpu_model() -> String {
    fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .and_then(|rest| rest.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

pub fn host_memory_bytes() -> Option<u64> {
    linattn_core::HostMemory::total()
}

/// What the GPU side can say about itself (filled by the bench from linattn-cuda).
#[derive(Debug, Clone, Default)]
pub struct GpuEnvironment {
    pub name: String,
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
    pub nvrtc_version: Option<String>,
    pub memory_bytes: Option<u64>,
}

/// The environment of this process; `gpu` when a GPU was used.
pub fn probe_environment(gpu: Option<GpuEnvironment>) -> Environment {
    let cpu = cpu_model();
    let mut env = Environment {
        producer: "linattn".into(),
        device_name: cpu.clone(),
        cpu_model: cpu,
        cpu_cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        host_memory_bytes: host_memory_bytes(),
        commit: BUILD_COMMIT.to_string(),
        rustc_version: command_output("rustc", &["-V"]),
        build_profile: if cfg!(debug_assertions) {
            "debug".into()
        } else {
            "release".into()
        },
        date: rfc3339_utc(std::time::SystemTime::now()),
        command_line: std::env::args().collect(),
        ..Environment::default()
    };
    if let Some(gpu) = gpu {
        env.device_name = gpu.name;
        env.driver_version = gpu.driver_version;
        env.cuda_version = gpu.cuda_version;
        env.nvrtc_version = gpu.nvrtc_version;
        env.gpu_memory_bytes = gpu.memory_bytes;
    }
    env
}

/// Civil date (year, month, day) of a day count since 1970-01-01 (proleptic Gregorian;
/// the era arithmetic of H. Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `2026-11-22T04:39:00Z`.
pub fn rfc3339_utc(t: std::time::SystemTime) -> String {
    let secs = match t.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    };
    let (y, mo, d) = civil_from_days(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}Z",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

#[cfg(test)]
mod tests {
    use super::rfc3339_utc;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn dates_are_rfc3339_utc() {
        assert_eq!(rfc3339_utc(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        // 2000-02-29 12:34:56 UTC (leap day) = 951827696
        let t = UNIX_EPOCH + Duration::from_secs(951_827_696);
        assert_eq!(rfc3339_utc(t), "2000-02-29T12:34:56Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_798_761_599);
        assert_eq!(rfc3339_utc(t), "2026-12-31T23:59:59Z");
    }
}
