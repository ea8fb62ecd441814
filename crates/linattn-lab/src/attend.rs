//! `linattn attend`: one backend on q, k, v (and dO) read from `.npy` files; writes O (and
//! dQ, dK, dV) as `.npy` in the inputs' dtype. Everything is validated before anything runs:
//! names of maps, forms and precisions, the files, their shapes and their values.

use crate::npy::{read_npy, write_npy, NpyArray, NpyDtype};
use crate::registry;
use linattn_core::{
    Algorithm, AttnError, Backend, Causality, FeatureMap, Form, Inputs, Precision, Problem, Tensor,
    Unsupported, DEFAULT_EPS,
};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args)]
#[command(after_help = "\
Choosing the backend:
  --backend takes an exact name (cpu-ref/causal_recurrent/f64, cpu/causal_recurrent/f32, \
cuda/causal_chunked/f16, ...) or a family, the part before the first '/' (cpu-ref, cpu, \
cuda). With a family, --form and --precision pick the member:
    --form       quadratic | noncausal | recurrent | cumsum | chunked | softmax
                 (default: recurrent when causal, noncausal when non-causal)
    --precision  f64 | f32 | f16 | bf16 (default: the dtype of the .npy inputs)
  e.g. `--backend cpu --form recurrent --precision f32` is cpu/causal_recurrent/f32.
  When several members still match, the one without a '+variant' suffix wins.

Inputs: 4-D .npy arrays, '<f4' or '<f8', all of one dtype: q and k [B, H, N, D], \
v (and dO) [B, H, N, M]; C order, or Fortran order (converted). Outputs o.npy (and dq.npy, \
dk.npy, dv.npy with --d-out) in the same dtype, C order. Bad input exits with status 2 and \
names the file and the problem: shapes that disagree, empty dims, NaN/Inf, another dtype, \
truncated or misaligned data, unknown names, and what the backend does not take (head dims, \
B·H or N beyond its kernels' grid limits).")]
pub struct AttendArgs {
    #[command(flatten)]
    qkv: QkvPaths,
    /// ∂L/∂O, [B, H, N, M]: when given, the backward runs and dq, dk, dv are written.
    #[arg(long = "d-out", value_name = "PATH")]
    d_out: Option<PathBuf>,
    /// Directory for o.npy (and dq.npy, dk.npy, dv.npy); created if missing.
    #[arg(long = "out-dir", value_name = "DIR")]
    out_dir: PathBuf,
    /// Backend name, or a family (cpu-ref, cpu, cuda) narrowed by --form and --precision.
    #[arg(long, value_name = "NAME")]
    backend: String,
    /// Form of linear attention (or `softmax`), when --backend names a family.
    #[arg(long)]
    form: Option<String>,
    /// Storage precision, when --backend names a family.
    #[arg(long)]
    precision: Option<String>,
    /// Causal attention: position i sees j ≤ i (the default).
    #[arg(long, conflicts_with = "non_causal")]
    causal: bool,
    /// Non-causal attention: every position sees every position.
    #[arg(long = "non-causal")]
    non_causal: bool,
    #[command(flatten)]
    math: MathArgs,
}

impl AttendArgs {
    /// The backend as given (a name or a family), for the binary to tell whether it runs
    /// CUDA kernels.
    pub(crate) fn backend(&self) -> &str {
        &self.backend
    }
}

/// `--map`, `--eps`, `--decay`, `--favor-seed` (shared by `attend` and `decode`).
#[derive(clap::Args)]
pub(crate) struct MathArgs {
    /// Feature map: elu+1, relu, softmax, 1+cos, favor[:R], identity, efficient.
    #[arg(long, default_value = "elu+1")]
    map: String,
    /// ε added to every normaliser.
    #[arg(long, default_value_t = DEFAULT_EPS)]
    pub eps: f64,
    /// λ of the decayed state S_i = λ S_{i−1} + φ(k_i) v_iᵀ, in (0, 1]; 1 is no decay.
    #[arg(long, default_value_t = 1.0)]
    pub decay: f64,
    /// Seed of the FAVOR+ projection (favor map only).
    #[arg(long = "favor-seed")]
    favor_seed: Option<u64>,
}

impl MathArgs {
    /// `--map` with `--favor-seed` applied (an error for a map other than favor).
    pub(crate) fn map(&self) -> Result<FeatureMap, AttnError> {
        let mut map: FeatureMap = self.map.parse()?;
        if let (FeatureMap::Favor { seed, .. }, Some(s)) = (&mut map, self.favor_seed) {
            *seed = s;
        } else if self.favor_seed.is_some() {
            return Err(AttnError::InvalidArgument(format!(
                "--favor-seed applies to the favor map only, not {map}"
            )));
        }
        Ok(map)
    }
}

/// `--q`, `--k`, `--v`: the .npy operands (shared by `attend` and `decode`).
#[derive(clap::Args)]
pub(crate) struct QkvPaths {
    /// Queries, [B, H, N, D].
    #[arg(long, value_name = "PATH")]
    q: PathBuf,
    /// Keys, [B, H, N, D].
    #[arg(long, value_name = "PATH")]
    k: PathBuf,
    /// Values, [B, H, N, M].
    #[arg(long, value_name = "PATH")]
    v: PathBuf,
}

/// What `--form` asks for: a linear form or the softmax baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wanted {
    Linear(Form),
    Softmax,
}

impl Wanted {
    fn parse(s: &str) -> Result<Wanted, AttnError> {
        if s.eq_ignore_ascii_case("softmax") {
            Ok(Wanted::Softmax)
        } else {
            s.parse::<Form>().map(Wanted::Linear).map_err(|_| {
                AttnError::InvalidArgument(format!(
                    "unknown form '{s}' (expected quadratic, noncausal, recurrent, cumsum, \
                     chunked or softmax)"
                ))
            })
        }
    }
    fn matches(self, algorithm: Algorithm) -> bool {
        match (self, algorithm) {
            (Wanted::Softmax, Algorithm::Softmax) => true,
            (Wanted::Linear(f), Algorithm::Linear(g)) => f == g,
            _ => false,
        }
    }
}

/// The problem described by the flags, with the shape still to come from the files.
struct Options {
    causality: Causality,
    map: FeatureMap,
    form: Option<Wanted>,
    precision: Option<Precision>,
}

fn parse_options(args: &AttendArgs) -> Result<Options, AttnError> {
    let map = args.math.map()?;
    let causality = if args.non_causal {
        Causality::NonCausal
    } else {
        Causality::Causal
    };
    let form = args.form.as_deref().map(Wanted::parse).transpose()?;
    let precision = args
        .precision
        .as_deref()
        .map(str::parse::<Precision>)
        .transpose()?;
    Ok(Options {
        causality,
        map,
        form,
        precision,
    })
}

/// Reads the operands; they must share one dtype.
fn read_inputs(args: &AttendArgs) -> Result<(Inputs, NpyDtype), AttnError> {
    read_operands(&args.qkv, args.d_out.as_deref())
}

/// The operands' files by role.
fn operand_files(args: &AttendArgs) -> Vec<(&'static str, &Path)> {
    let mut files = vec![
        ("q", args.qkv.q.as_path()),
        ("k", args.qkv.k.as_path()),
        ("v", args.qkv.v.as_path()),
    ];
    files.extend(args.d_out.as_deref().map(|path| ("d_out", path)));
    files
}

/// `e`, from checking the operands read from `files`, with the files named: a shape
/// mismatch lists every file's dims; a NaN or ±Inf names its file and its [b, h, n, d].
fn name_files(e: AttnError, files: &[(&'static str, &Path)], inputs: &Inputs) -> AttnError {
    let tensor = |role: &str| match role {
        "q" => Some(&inputs.q),
        "k" => Some(&inputs.k),
        "v" => Some(&inputs.v),
        _ => inputs.d_out.as_ref(),
    };
    match e {
        AttnError::ShapeMismatch(what) => {
            let listed: Vec<String> = files
                .iter()
                .filter_map(|&(role, path)| {
                    tensor(role).map(|t| format!("{role} {} {:?}", path.display(), t.dims()))
                })
                .collect();
            AttnError::ShapeMismatch(format!("{what}; the files: {}", listed.join(", ")))
        }
        AttnError::NonFinite {
            tensor: role,
            index,
            value,
        } => match files.iter().find(|(r, _)| *r == role) {
            Some(&(_, path)) => {
                // A tensor holding an element has no zero dim: the divisions are by ≥ 1.
                let position = tensor(role).map_or(String::new(), |t| {
                    let [_, h, n, d] = t.dims();
                    let at = [
                        index / (h * n * d),
                        index / (n * d) % h,
                        index / d % n,
                        index % d,
                    ];
                    format!(" = [b, h, n, d] {at:?}")
                });
                AttnError::BadFile {
                    path: path.display().to_string(),
                    reason: format!(
                        "non-finite input: {role} holds {value} at flat index {index}{position}"
                    ),
                }
            }
            None => AttnError::NonFinite {
                tensor: role,
                index,
                value,
            },
        },
        other => other,
    }
}

/// Reads q, k, v (and dO) from .npy files; they must share one dtype.
pub(crate) fn read_operands(
    paths: &QkvPaths,
    d_out_path: Option<&Path>,
) -> Result<(Inputs, NpyDtype), AttnError> {
    let (k_path, v_path) = (paths.k.as_path(), paths.v.as_path());
    let q = read_npy(&paths.q)?;
    let k = read_npy(k_path)?;
    let v = read_npy(v_path)?;
    let d_out = d_out_path.map(read_npy).transpose()?;
    let dtype = q.dtype;
    let named: [(&str, &Path, Option<&NpyArray>); 3] = [
        ("k", k_path, Some(&k)),
        ("v", v_path, Some(&v)),
        ("d_out", d_out_path.unwrap_or(Path::new("")), d_out.as_ref()),
    ];
    for (role, path, array) in named {
        if let Some(array) = array {
            if array.dtype != dtype {
                return Err(AttnError::BadFile {
                    path: path.display().to_string(),
                    reason: format!(
                        "{role} is {} but q is {}: all inputs must share one dtype",
                        array.dtype, dtype
                    ),
                });
            }
        }
    }
    let inputs = Inputs {
        q: q.tensor,
        k: k.tensor,
        v: v.tensor,
        d_out: d_out.map(|a| a.tensor),
    };
    Ok((inputs, dtype))
}

/// The backend `--backend` (with `--form`, `--precision`) names, able to run `problem`.
fn resolve_backend(
    name: &str,
    options: &Options,
    problem: &Problem,
    input_dtype: NpyDtype,
) -> Result<Box<dyn Backend>, AttnError> {
    let all = registry::all_backends();
    let known: Vec<String> = all.iter().map(|b| b.name().to_string()).collect();

    if let Some(pos) = known.iter().position(|n| n == name) {
        if options.form.is_some() || options.precision.is_some() {
            return Err(AttnError::InvalidArgument(format!(
                "--form and --precision choose within a family; '{name}' is already a full \
                 backend name"
            )));
        }
        return all.into_iter().nth(pos).ok_or_else(|| {
            AttnError::State(format!("backend '{name}' vanished from the registry"))
        });
    }

    let family: Vec<Box<dyn Backend>> = all
        .into_iter()
        .filter(|b| registry::family(b.name()) == name)
        .collect();
    if family.is_empty() {
        let mut families: Vec<&str> = known.iter().map(|n| registry::family(n)).collect();
        families.dedup();
        return Err(AttnError::InvalidArgument(format!(
            "unknown backend '{name}' (families: {}; backends: {})",
            families.join(", "),
            known.join(", ")
        )));
    }

    let natural = if problem.causality.is_causal() {
        Form::Recurrent
    } else {
        Form::Noncausal
    };
    let wanted = options.form.unwrap_or(Wanted::Linear(natural));
    let precision = options.precision.unwrap_or(match input_dtype {
        NpyDtype::F64 => Precision::F64,
        NpyDtype::F32 => Precision::F32,
    });
    let mut matching: Vec<Box<dyn Backend>> = family
        .into_iter()
        .filter(|b| wanted.matches(b.info().algorithm) && b.info().precision == precision)
        .collect();
    let describe = |list: &[Box<dyn Backend>]| {
        list.iter()
            .map(|b| b.name().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let wanted_label = match wanted {
        Wanted::Linear(f) => f.label(),
        Wanted::Softmax => "softmax",
    };
    if matching.is_empty() {
        let members: Vec<&String> = known
            .iter()
            .filter(|n| registry::family(n) == name)
            .collect();
        return Err(AttnError::InvalidArgument(format!(
            "no '{name}' backend with form {wanted_label} and precision {precision} \
             (members: {}); pass --form / --precision or a full name",
            members
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    // Several members can share form and precision (one per causality, or variants).
    if matching.len() > 1 {
        let runnable: Vec<Box<dyn Backend>> = std::mem::take(&mut matching)
            .into_iter()
            .filter(|b| !matches!(b.supports(problem), Err(Unsupported::Problem(_))))
            .collect();
        matching = runnable;
        if matching.is_empty() {
            return Err(AttnError::InvalidArgument(format!(
                "no '{name}' backend with form {wanted_label} and precision {precision} runs \
                 {problem}"
            )));
        }
    }
    if matching.len() > 1 {
        let plain: Vec<usize> = (0..matching.len())
            .filter(|&i| !matching[i].name().contains('+'))
            .collect();
        if plain.len() == 1 {
            return Ok(matching.swap_remove(plain[0]));
        }
        return Err(AttnError::InvalidArgument(format!(
            "'{name}' with form {wanted_label} and precision {precision} is ambiguous: {}; \
             pass a full name",
            describe(&matching)
        )));
    }
    matching
        .pop()
        .ok_or_else(|| AttnError::State(format!("backend selection for '{name}' came out empty")))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Refuses a result holding NaN or ±Inf rather than writing it out.
pub(crate) fn check_output(backend: &str, what: &str, t: &Tensor) -> Result<(), AttnError> {
    match t.data().iter().position(|x| !x.is_finite()) {
        None => Ok(()),
        Some(i) => Err(AttnError::NonFiniteOutput {
            backend: backend.to_string(),
            detail: format!("{what} holds {} at flat index {i}", t.data()[i]),
        }),
    }
}

pub fn run(args: AttendArgs) -> Result<ExitCode, AttnError> {
    let options = parse_options(&args)?;
    let (inputs, dtype) = read_inputs(&args)?;
    let files = operand_files(&args);
    let shape = inputs.shape().map_err(|e| name_files(e, &files, &inputs))?;
    let problem = Problem {
        shape,
        causality: options.causality,
        map: options.map,
        eps: args.math.eps,
        decay: args.math.decay,
    };
    inputs
        .validate_for(&problem)
        .map_err(|e| name_files(e, &files, &inputs))?;

    let mut backend = resolve_backend(&args.backend, &options, &problem, dtype)?;
    let name = backend.name().to_string();
    if backend.info().algorithm == Algorithm::Softmax {
        if let Some(ignored) = problem.softmax_ignores() {
            return Err(AttnError::InvalidArgument(format!(
                "{name} is softmax attention and has no {ignored}; drop those options or \
                 pick a linear-attention backend"
            )));
        }
    }
    backend.supports(&problem)?;
    let with_grads = inputs.d_out.is_some();
    if with_grads && backend.info().backward.is_none() {
        return Err(AttnError::InvalidArgument(format!(
            "backend {name} has no backward; drop --d-out or pick another backend"
        )));
    }
    std::fs::create_dir_all(&args.out_dir)
        .map_err(|e| AttnError::Io(format!("cannot create {}: {e}", args.out_dir.display())))?;

    backend.stage(&problem, &inputs)?;
    let forward = backend.run_forward()?;
    let backward = if with_grads {
        Some(backend.run_backward()?)
    } else {
        None
    };
    let output = backend.output()?;
    check_output(&name, "o", &output)?;
    let grads = if with_grads {
        let g = backend.grads()?;
        for (what, t) in [("dq", &g.dq), ("dk", &g.dk), ("dv", &g.dv)] {
            check_output(&name, what, t)?;
        }
        Some(g)
    } else {
        None
    };
    backend.release();
    if output.dims() != shape.v_dims() {
        return Err(AttnError::State(format!(
            "{name} returned O of dims {:?}, expected {:?}",
            output.dims(),
            shape.v_dims()
        )));
    }

    let mut written = Vec::new();
    let mut write = |file: &str, t: &Tensor| -> Result<(), AttnError> {
        let path = args.out_dir.join(file);
        write_npy(&path, t, dtype)?;
        written.push(path.display().to_string());
        Ok(())
    };
    write("o.npy", &output)?;
    if let Some(g) = &grads {
        write("dq.npy", &g.dq)?;
        write("dk.npy", &g.dk)?;
        write("dv.npy", &g.dv)?;
    }

    println!("backend  {name}");
    println!("problem  {problem}");
    print!("forward  {:.3} ms", ms(forward.elapsed));
    if let Some(b) = backward {
        print!(", backward {:.3} ms", ms(b.elapsed));
    }
    println!();
    println!("wrote    {} ({})", written.join(", "), dtype.descr());
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_parse_with_softmax_and_name_the_unknown() {
        assert_eq!(Wanted::parse("softmax").unwrap(), Wanted::Softmax);
        assert_eq!(
            Wanted::parse("recurrent").unwrap(),
            Wanted::Linear(Form::Recurrent)
        );
        let err = Wanted::parse("spiral").unwrap_err().to_string();
        assert!(err.contains("unknown form 'spiral'"), "{err}");
        assert!(Wanted::Softmax.matches(Algorithm::Softmax));
        assert!(!Wanted::Linear(Form::Cumsum).matches(Algorithm::Linear(Form::Chunked)));
    }
}
