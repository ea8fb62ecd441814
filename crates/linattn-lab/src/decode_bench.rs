//! The decode benchmark: time per generated token and the bytes carried between tokens,
//! against the context length, for streaming linear-attention decoders next to softmax
//! decoding with a KV cache ([`crate::kv_cache`]). The RNN claim (SPEC §2, §3 "recurrent")
//! is that the linear rows stay flat while the softmax rows grow linearly with the context.
//!
//! For each decoder the context is built once, incrementally: prefill up to the first length,
//! time the tokens, prefill on to the next length, and so on. Each linear decoder is timed two
//! ways, two rows of the table ("path" in the JSON):
//! * `stream` — the tokens staged once where the decoder reads them (device buffers on a
//!   GPU), then per repeat `steps` tokens of [`Decoder::run_stream`] (one launch each, no
//!   copy, no wait) and the final [`Decoder::finish_stream`]; a sample is that wall time over
//!   `steps`. What a caller that keeps its tokens on the device pays.
//! * `per-call` — [`Decoder::step`] per token, each sample one token: upload, launch,
//!   download. What a host-driven caller pays.
//!
//! A linear decoder's timed steps stay in its state (its size and step cost do not depend on
//! the context); the KV cache drops each timed token again, so every softmax sample attends
//! over exactly context + 1 tokens. Only decoding is timed; inputs are drawn before. All times
//! are host wall time: on the simulator (`sim/...`) that is the simulator's own run time, not
//! a GPU time. Run by `linattn bench --mode decode`.

use crate::decode_model::{model_token, DecodeModel};
use crate::display::fmt_bytes;
use crate::kv_cache::KvCache;
use crate::plot::{log_log_svg, Point, Quantity, Series};
use crate::stats::SampleStats;
use linattn_core::{AttnError, Causality, DecodeSpec, Decoder, FeatureMap, Inputs, Problem, Shape};
use serde::Serialize;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

/// Name of the softmax baseline in the table and the JSON.
pub(crate) const SOFTMAX_KV: &str = "cpu/softmax-kv-cache/f32";
/// Tokens per prefill call while building a context (bounds the f64 input buffers).
const PREFILL_CHUNK: usize = 1 << 15;

/// How a linear decoder's tokens were fed (see the module comment).
pub(crate) const PATH_STREAM: &str = "stream";
pub(crate) const PATH_PER_CALL: &str = "per-call";

/// One (backend, path, context) cell.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct DecodeCell {
    pub backend: String,
    /// `stream` or `per-call` (the KV cache steps per call on the host).
    pub path: &'static str,
    pub context: usize,
    /// Per generated token, in microseconds; `None` when the cell did not run.
    pub time_us: Option<SampleStats>,
    /// Every sample, microseconds per token, in the order taken (a `stream` sample averages
    /// one run of `steps` tokens).
    pub samples_us: Vec<f64>,
    /// Bytes carried from one token to the next: the (S, z) state, or the KV cache.
    pub carried_bytes: Option<u64>,
    /// `ok`, or why the cell did not run (`out of memory: ...`).
    pub status: String,
    /// For the stream of a `sim/*` decoder: the latency model's time of one token on the
    /// simulated part (modelled, not measured).
    pub model: Option<DecodeModel>,
}

#[derive(Debug, Serialize)]
struct DecodeReport<'a> {
    kind: &'static str,
    /// Device, commit, build profile, date: what makes the file self-describing.
    environment: crate::results::Environment,
    batch: usize,
    heads: usize,
    d: usize,
    m: usize,
    map: String,
    /// What the times are: host wall time (see `path` of each cell).
    clock: &'static str,
    steps: usize,
    repeats: usize,
    host_threads: usize,
    cells: &'a [DecodeCell],
}

/// Runs the benchmark and writes `decode.json`, `decode.md` and two SVG plots into `out_dir`
/// (which the caller has created and checked writable).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    backends: &[String],
    contexts: &[usize],
    (batch, heads): (usize, usize),
    d: usize,
    m: usize,
    steps: usize,
    repeats: usize,
    out_dir: &Path,
) -> Result<ExitCode, AttnError> {
    if steps == 0 || repeats == 0 {
        return Err(AttnError::InvalidArgument(
            "steps and repeats must be ≥ 1".into(),
        ));
    }
    let map = FeatureMap::EluPlusOne;
    let problem = Problem::new(Shape::new(batch, heads, 1, d, m), Causality::Causal, map);
    let spec = DecodeSpec::from_problem(&problem)?;
    spec.validate()?;
    let mut decoders = Vec::new();
    for name in backends {
        let decoder = crate::decode::resolve_decoder(name, None)?;
        decoder.supports(&spec)?;
        decoders.push(decoder);
    }

    let mut cells = Vec::new();
    for decoder in &mut decoders {
        cells.extend(bench_linear(
            decoder.as_mut(),
            &spec,
            contexts,
            steps,
            repeats,
        )?);
    }
    cells.extend(bench_kv_cache(&spec, contexts, steps, repeats)?);

    let report = DecodeReport {
        kind: "decode-bench",
        environment: crate::results::probe_environment(None),
        batch: spec.batch,
        heads: spec.heads,
        d,
        m,
        map: map.label(),
        clock: "host wall time per generated token (on sim/* the simulator's, not a GPU's)",
        steps,
        repeats,
        host_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        cells: &cells,
    };
    crate::results::write_json_atomic(&out_dir.join("decode.json"), &report)?;
    let table = markdown(&cells, contexts, steps);
    crate::results::write_bytes_atomic(&out_dir.join("decode.md"), table.as_bytes())?;
    for (file, quantity) in [
        ("decode-time.svg", Quantity::Time),
        ("decode-bytes.svg", Quantity::Memory),
    ] {
        let svg = plot(&cells, quantity)?;
        crate::results::write_bytes_atomic(&out_dir.join(file), svg.as_bytes())?;
    }
    println!("{table}");
    println!("wrote    {}", out_dir.display());
    Ok(ExitCode::SUCCESS)
}

/// `n` tokens of seeded inputs for `spec` (seed per call site, so contexts differ).
fn tokens(spec: &DecodeSpec, n: usize, seed: u64) -> Result<Inputs, AttnError> {
    Inputs::random(
        Shape::new(spec.batch, spec.heads, n, spec.dk, spec.dv),
        seed,
        false,
    )
}

fn stats_us(samples: &[f64]) -> Option<SampleStats> {
    SampleStats::of(samples)
}

/// Both paths of one decoder at every context: the stream first, then per call.
fn bench_linear(
    decoder: &mut dyn Decoder,
    spec: &DecodeSpec,
    contexts: &[usize],
    steps: usize,
    repeats: usize,
) -> Result<Vec<DecodeCell>, AttnError> {
    decoder.reset(spec)?;
    let step_tokens: Vec<Inputs> = (0..steps)
        .map(|i| tokens(spec, 1, 0xdec0 + i as u64))
        .collect::<Result<_, _>>()?;
    decoder.stage_stream(&tokens(spec, steps, 0xdec0)?)?;
    let mut filled = 0usize;
    let mut cells = Vec::new();
    for &context in contexts {
        while filled < context {
            let chunk = (context - filled).min(PREFILL_CHUNK);
            decoder.prefill(&tokens(spec, chunk, filled as u64)?)?;
            filled += chunk;
        }
        // One untimed token: the first launch after a prefill waits for its copies.
        decoder.run_stream(0, 1)?;
        decoder.finish_stream(false)?;
        let mut stream = Vec::with_capacity(repeats);
        for _ in 0..repeats {
            let t0 = Instant::now();
            decoder.run_stream(0, steps)?;
            decoder.finish_stream(false)?;
            stream.push(t0.elapsed().as_secs_f64() * 1e6 / steps as f64);
        }
        let mut per_call = Vec::with_capacity(steps * repeats);
        for _ in 0..repeats {
            for token in &step_tokens {
                let t0 = Instant::now();
                decoder.step(token)?;
                per_call.push(t0.elapsed().as_secs_f64() * 1e6);
            }
        }
        let model = model_token(decoder, spec, 0)?;
        filled += 2 * steps * repeats + 1 + usize::from(model.is_some());
        let carried = decoder.export_state()?.bytes();
        for (path, samples) in [(PATH_STREAM, stream), (PATH_PER_CALL, per_call)] {
            cells.push(DecodeCell {
                backend: decoder.name().to_string(),
                path,
                context,
                time_us: stats_us(&samples),
                samples_us: samples,
                carried_bytes: Some(carried),
                status: "ok".into(),
                model: model.clone().filter(|_| path == PATH_STREAM),
            });
        }
    }
    Ok(cells)
}

fn bench_kv_cache(
    spec: &DecodeSpec,
    contexts: &[usize],
    steps: usize,
    repeats: usize,
) -> Result<Vec<DecodeCell>, AttnError> {
    let (d, m) = (spec.dk, spec.dv);
    let mut caches: Vec<KvCache> = (0..spec.bh()).map(|_| KvCache::new(d, m)).collect();
    let step_tokens: Vec<Inputs> = (0..steps)
        .map(|i| tokens(spec, 1, 0xdec0 + i as u64))
        .collect::<Result<_, _>>()?;
    let mut o = vec![0f32; m];
    let mut cells = Vec::new();
    let mut failed: Option<String> = None;
    for &context in contexts {
        let cell = |samples_us: Vec<f64>, carried_bytes, status: String| DecodeCell {
            backend: SOFTMAX_KV.into(),
            path: PATH_PER_CALL,
            context,
            time_us: stats_us(&samples_us),
            samples_us,
            carried_bytes,
            status,
            model: None,
        };
        if let Some(reason) = &failed {
            cells.push(cell(Vec::new(), None, reason.clone()));
            continue;
        }
        let grown = (|| -> Result<(), AttnError> {
            while caches[0].len() < context {
                let chunk = (context - caches[0].len()).min(PREFILL_CHUNK);
                let x = tokens(spec, chunk, caches[0].len() as u64)?;
                for (bh, cache) in caches.iter_mut().enumerate() {
                    cache.extend(&to_f32(x.k.head(bh)), &to_f32(x.v.head(bh)))?;
                }
            }
            Ok(())
        })();
        if let Err(e @ AttnError::OutOfMemory { .. }) = grown {
            failed = Some(e.to_string());
            caches.iter_mut().for_each(|c| *c = KvCache::new(d, m));
            cells.push(cell(Vec::new(), None, e.to_string()));
            continue;
        }
        grown?;
        let mut samples = Vec::with_capacity(steps * repeats);
        for _ in 0..repeats {
            for token in &step_tokens {
                let (q, k, v) = (token.q.to_f32(), token.k.to_f32(), token.v.to_f32());
                let t0 = Instant::now();
                for (bh, cache) in caches.iter_mut().enumerate() {
                    let (qr, vr) = (bh * d..(bh + 1) * d, bh * m..(bh + 1) * m);
                    cache.step(&q[qr.clone()], &k[qr], &v[vr], &mut o)?;
                }
                samples.push(t0.elapsed().as_secs_f64() * 1e6);
                // Undo the token so the next sample sees the same context again.
                caches.iter_mut().for_each(|c| c.truncate(context));
            }
        }
        // What a step at this context carries: the cache of context + 1 tokens.
        let token_bytes = ((d + m) * 4) as u64;
        let bytes = caches.iter().map(|c| c.bytes() + token_bytes).sum();
        cells.push(cell(samples, Some(bytes), "ok".into()));
    }
    Ok(cells)
}

fn to_f32(x: &[f64]) -> Vec<f32> {
    x.iter().map(|&a| a as f32).collect()
}

impl DecodeCell {
    /// The column and plot series of the cell: the backend, and the path of a linear decoder.
    fn series(&self) -> String {
        if self.backend == SOFTMAX_KV {
            self.backend.clone()
        } else {
            format!("{} ({})", self.backend, self.path)
        }
    }
}

/// Series in the order they first appear.
fn series_names(cells: &[DecodeCell]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for c in cells {
        let name = c.series();
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// Context rows × series columns: median µs per token (relative stdev), bytes carried; a
/// legend of the two paths below.
fn markdown(cells: &[DecodeCell], contexts: &[usize], steps: usize) -> String {
    let names = series_names(cells);
    let mut out = String::from("| context |");
    for n in &names {
        out += &format!(" {n}: µs/token (±rel. stdev) | {n}: bytes carried |");
    }
    out += "\n|---:|";
    out += &"---:|---:|".repeat(names.len());
    out.push('\n');
    for &context in contexts {
        out += &format!("| {context} |");
        for n in &names {
            match cells
                .iter()
                .find(|c| c.series() == *n && c.context == context)
            {
                Some(DecodeCell {
                    time_us: Some(t),
                    carried_bytes: Some(b),
                    ..
                }) => {
                    out += &format!(
                        " {:.2} (±{:.0}%) | {} |",
                        t.median,
                        100.0 * t.rel_stdev,
                        fmt_bytes(*b)
                    )
                }
                Some(c) => out += &format!(" {} | — |", c.status),
                None => out += " — | — |",
            }
        }
        out.push('\n');
    }
    out += &format!(
        "\n(stream): tokens staged once where the decoder reads them, then {steps} tokens of \
         run_stream (one launch each on a device) and one finish_stream, over {steps}. \
         (per-call): step() per token, the inputs uploaded and o downloaded each time. \
         Host wall time; for sim/* that is the simulator's run time, not a GPU time.\n"
    );
    let modelled: Vec<(&DecodeCell, &DecodeModel)> = cells
        .iter()
        .filter_map(|c| c.model.as_ref().map(|m| (c, m)))
        .collect();
    if !modelled.is_empty() {
        out +=
            "\nModelled by the simulator's latency model (one streamed token, not measured):\n\n\
                | backend | context | arch | µs/token | bound | latency µs | DRAM µs | launch µs \
                | DRAM bytes | state bytes (2×) | state share of HBM | CTAs/SM |\n\
                |---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---|\n";
        for (c, m) in modelled {
            out += &format!(
                "| {} | {} | {} | {:.2} | {} | {:.2} | {:.2} | {:.2} | {} | {} | {:.0}% | {} ({}) |\n",
                c.backend,
                c.context,
                m.part,
                m.us_per_token,
                m.bound,
                m.latency_us,
                m.dram_us,
                m.launch_us,
                fmt_bytes(m.dram_bytes),
                fmt_bytes(m.state_bytes),
                100.0 * m.hbm_share,
                m.ctas_per_sm,
                m.occupancy_limiter
            );
        }
    }
    out
}

/// Log-log plot of time per token (`Quantity::Time`, with min–max whiskers) or bytes
/// carried between tokens (`Quantity::Memory`) against the context, a line per backend.
fn plot(cells: &[DecodeCell], quantity: Quantity) -> Result<String, AttnError> {
    let point = |c: &DecodeCell| -> Option<Point> {
        match quantity {
            Quantity::Time => c.time_us.as_ref().map(|t| Point {
                n: c.context as f64,
                value: t.median * 1e-6,
                range: Some((t.min * 1e-6, t.max * 1e-6)),
            }),
            Quantity::Memory => c.carried_bytes.map(|b| Point {
                n: c.context as f64,
                value: b as f64,
                range: None,
            }),
        }
    };
    let series: Vec<Series> = series_names(cells)
        .into_iter()
        .map(|name| {
            let mine = || cells.iter().filter(|c| c.series() == name);
            Series {
                label: name.clone(),
                thin: false,
                points: mine().filter_map(point).collect(),
                stop: mine()
                    .find(|c| c.status.starts_with("out of memory"))
                    .map(|c| (c.context as f64, "OOM")),
            }
        })
        .collect();
    let title = match quantity {
        Quantity::Time => "decode: time per generated token",
        Quantity::Memory => "decode: bytes carried between tokens (state or KV cache)",
    };
    let svg = log_log_svg(title, "context length (tokens)", quantity, &series)?;
    svg.ok_or_else(|| AttnError::State(format!("plot '{title}': no cell ran")))
}
