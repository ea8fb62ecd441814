//! `mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32`: the golden register
//! vectors (tests/data/mma_m16n8k16_golden.json, copied from
//! shared/reference/mma_m16n8k16_golden.json), random matrices packed on the host with the
//! PTX ISA fragment layout and checked against an f64 product, and the warp-wide `.aligned`
//! requirement (synccheck).

mod common;

use common::*;
use linattn_ptxsim::{Arg, Checker, SimError};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Input {
    F16,
    Bf16,
}

impl Input {
    fn name(self) -> &'static str {
        match self {
            Input::F16 => "f16",
            Input::Bf16 => "bf16",
        }
    }

    /// The 16-bit encoding of `x`, which must be exactly representable.
    fn encode(self, x: f32) -> u16 {
        let (bits, back) = match self {
            Input::F16 => {
                let h = half::f16::from_f32(x);
                (h.to_bits(), h.to_f32())
            }
            Input::Bf16 => {
                let h = half::bf16::from_f32(x);
                (h.to_bits(), h.to_f32())
            }
        };
        assert_eq!(back, x, "{x} is not exact in {}", self.name());
        bits
    }
}

/// Thread `tid` loads `a[4 tid..]`, `b[2 tid..]` (.b32) and `c[4 tid..]` (.f32), runs one
/// mma, and stores `d[4 tid..]`. Each warp of the block computes its own tile.
fn mma_kernel(input: Input) -> String {
    let ty = input.name();
    Entry {
        name: "mma_tile",
        params: &[("u64", "%rd1"), ("u64", "%rd2"), ("u64", "%rd3"), ("u64", "%rd4")],
        regs: &[("b32", 8), ("f32", 9), ("b64", 16)],
        body: &format!(
            r#"	cvta.to.global.u64 	%rd5, %rd1;
	cvta.to.global.u64 	%rd6, %rd2;
	cvta.to.global.u64 	%rd7, %rd3;
	cvta.to.global.u64 	%rd8, %rd4;
	mov.u32 	%r1, %tid.x;
	mul.wide.u32 	%rd9, %r1, 16;
	add.s64 	%rd10, %rd5, %rd9;
	ld.global.nc.u32 	%r2, [%rd10];
	ld.global.nc.u32 	%r3, [%rd10+4];
	ld.global.nc.u32 	%r4, [%rd10+8];
	ld.global.nc.u32 	%r5, [%rd10+12];
	mul.wide.u32 	%rd11, %r1, 8;
	add.s64 	%rd12, %rd6, %rd11;
	ld.global.nc.u32 	%r6, [%rd12];
	ld.global.nc.u32 	%r7, [%rd12+4];
	add.s64 	%rd13, %rd7, %rd9;
	ld.global.nc.f32 	%f1, [%rd13];
	ld.global.nc.f32 	%f2, [%rd13+4];
	ld.global.nc.f32 	%f3, [%rd13+8];
	ld.global.nc.f32 	%f4, [%rd13+12];
	mma.sync.aligned.m16n8k16.row.col.f32.{ty}.{ty}.f32 {{%f5, %f6, %f7, %f8}}, {{%r2, %r3, %r4, %r5}}, {{%r6, %r7}}, {{%f1, %f2, %f3, %f4}};
	add.s64 	%rd14, %rd8, %rd9;
	st.global.f32 	[%rd14], %f5;
	st.global.f32 	[%rd14+4], %f6;
	st.global.f32 	[%rd14+8], %f7;
	st.global.f32 	[%rd14+12], %f8;
	ret;
"#
        ),
        ..Entry::default()
    }
    .ptx()
}

/// Per-thread fragments of one launch.
struct Fragments {
    a: Vec<u32>,
    b: Vec<u32>,
    c: Vec<f32>,
}

/// Runs the mma kernel with `block` threads; returns d (4 per thread) or the error.
fn run_mma(input: Input, block: u32, f: &Fragments) -> Result<Vec<f32>, SimError> {
    run_mma_text(mma_kernel(input), block, f)
}

/// Runs `text` (the mma kernel or a variant) like [`run_mma`].
fn run_mma_text(text: String, block: u32, f: &Fragments) -> Result<Vec<f32>, SimError> {
    let k = Loaded::new(text);
    let dev = &k.dev;
    let (pa, pb, pc) = (
        upload_u32(dev, &f.a),
        upload_u32(dev, &f.b),
        upload_f32(dev, &f.c),
    );
    let pd = k.output(4 * block as usize);
    k.launch(1, block, &[pa, pb, pc, pd].map(Arg::U64))?;
    Ok(k.download_f32(pd, 4 * block as usize))
}

// ---------------------------------------------------------------------------------------
// Fragment layout, written from the PTX ISA ("Matrix Fragments for mma.m16n8k16 with
// floating point type"): groupID = lane >> 2, threadID_in_group = lane % 4.
//   A (16x16, row): a0,a1 = (g, 2t..2t+1)   a2,a3 = (g+8, 2t..2t+1)
//                   a4,a5 = (g, 2t+8..+9)   a6,a7 = (g+8, 2t+8..+9)
//   B (16x8, col):  b0,b1 = (k = 2t..2t+1, n = g)   b2,b3 = (k = 2t+8..+9, n = g)
//   C, D (16x8):    c0,c1 = (g, 2t..2t+1)   c2,c3 = (g+8, 2t..2t+1)
// A .b32 register holds two consecutive elements: the lower-numbered one in bits 0..15.
// ---------------------------------------------------------------------------------------

type MatA = [[f32; 16]; 16];
type MatB = [[f32; 8]; 16];
type MatC = [[f32; 8]; 16];

fn pack(input: Input, low: f32, high: f32) -> u32 {
    u32::from(input.encode(low)) | (u32::from(input.encode(high)) << 16)
}

fn a_regs(input: Input, a: &MatA, lane: usize) -> [u32; 4] {
    let (g, t) = (lane / 4, lane % 4);
    let pair = |row: usize, col: usize| pack(input, a[row][col], a[row][col + 1]);
    [
        pair(g, 2 * t),
        pair(g + 8, 2 * t),
        pair(g, 2 * t + 8),
        pair(g + 8, 2 * t + 8),
    ]
}

fn b_regs(input: Input, b: &MatB, lane: usize) -> [u32; 2] {
    let (g, t) = (lane / 4, lane % 4);
    [
        pack(input, b[2 * t][g], b[2 * t + 1][g]),
        pack(input, b[2 * t + 8][g], b[2 * t + 9][g]),
    ]
}

fn c_regs(c: &MatC, lane: usize) -> [f32; 4] {
    let (g, t) = (lane / 4, lane % 4);
    [
        c[g][2 * t],
        c[g][2 * t + 1],
        c[g + 8][2 * t],
        c[g + 8][2 * t + 1],
    ]
}

/// (row, col) of d0..d3 of `lane`.
fn d_position(lane: usize, i: usize) -> (usize, usize) {
    let (g, t) = (lane / 4, lane % 4);
    (if i < 2 { g } else { g + 8 }, 2 * t + (i & 1))
}

fn reference(a: &MatA, b: &MatB, c: &MatC) -> [[f64; 8]; 16] {
    let mut d = [[0f64; 8]; 16];
    for (r, row) in d.iter_mut().enumerate() {
        for (n, value) in row.iter_mut().enumerate() {
            let mut sum = f64::from(c[r][n]);
            for k in 0..16 {
                sum += f64::from(a[r][k]) * f64::from(b[k][n]);
            }
            *value = sum;
        }
    }
    d
}

fn fragments(input: Input, tiles: &[(MatA, MatB, MatC)]) -> Fragments {
    let mut f = Fragments {
        a: Vec::new(),
        b: Vec::new(),
        c: Vec::new(),
    };
    for (a, b, c) in tiles {
        for lane in 0..32 {
            f.a.extend(a_regs(input, a, lane));
            f.b.extend(b_regs(input, b, lane));
            f.c.extend(c_regs(c, lane));
        }
    }
    f
}

// ---------------------------------------------------------------------------------------
// Golden vectors.
// ---------------------------------------------------------------------------------------

fn golden() -> Value {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = manifest.join("tests/data/mma_m16n8k16_golden.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "the mma golden vectors are missing: cannot read {} ({e}). Copy \
             shared/reference/mma_m16n8k16_golden.json there; this test must not pass \
             without them.",
            path.display()
        )
    });
    // The in-repo copy must not drift from the shared reference where that is present.
    let shared = manifest.join("../../../shared/reference/mma_m16n8k16_golden.json");
    if let Ok(reference) = std::fs::read_to_string(&shared) {
        assert!(
            reference == text,
            "tests/data/mma_m16n8k16_golden.json differs from {}: copy it again",
            shared.display()
        );
    }
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: bad JSON: {e}", path.display()))
}

fn hex(v: &Value) -> u32 {
    let s = v.as_str().expect("hex string");
    u32::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex register")
}

fn float(v: &Value) -> f32 {
    let x = v.as_f64().expect("number");
    assert_eq!(f64::from(x as f32), x, "{x} is not an f32");
    x as f32
}

fn matrix<const R: usize, const C: usize>(v: &Value) -> [[f32; C]; R] {
    let rows = v.as_array().expect("matrix rows");
    assert_eq!(rows.len(), R);
    std::array::from_fn(|r| {
        let row = rows[r].as_array().expect("matrix row");
        assert_eq!(row.len(), C);
        std::array::from_fn(|c| float(&row[c]))
    })
}

fn golden_cases(input: Input) -> usize {
    let json = golden();
    let cases = json["cases"].as_array().expect("cases");
    let mut checked = 0;
    for case in cases.iter().filter(|c| c["dtype"] == input.name()) {
        let lanes = case["lanes"].as_array().expect("lanes");
        assert_eq!(lanes.len(), 32);
        let mut f = Fragments {
            a: Vec::new(),
            b: Vec::new(),
            c: Vec::new(),
        };
        let mut expected = Vec::new();
        for (l, lane) in lanes.iter().enumerate() {
            assert_eq!(lane["lane"].as_u64(), Some(l as u64));
            f.a.extend(lane["a"].as_array().expect("a").iter().map(hex));
            f.b.extend(lane["b"].as_array().expect("b").iter().map(hex));
            f.c.extend(lane["c"].as_array().expect("c").iter().map(float));
            expected.extend(lane["d"].as_array().expect("d").iter().map(float));
        }
        // Our own packing of the case's matrices gives the same registers (two derivations
        // of the ISA layout agree).
        let (a, b, c): (MatA, MatB, MatC) =
            (matrix(&case["A"]), matrix(&case["B"]), matrix(&case["C"]));
        let ours = fragments(input, &[(a, b, c)]);
        assert_eq!(
            ours.a,
            f.a,
            "A registers of {} case {}",
            input.name(),
            case["case"]
        );
        assert_eq!(
            ours.b,
            f.b,
            "B registers of {} case {}",
            input.name(),
            case["case"]
        );
        assert_eq!(
            ours.c,
            f.c,
            "C registers of {} case {}",
            input.name(),
            case["case"]
        );

        let d = run_mma(input, 32, &f)
            .unwrap_or_else(|e| panic!("{} case {}: {e}", input.name(), case["case"]));
        for (k, (got, want)) in d.iter().zip(&expected).enumerate() {
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "{} case {}: lane {} d{}: {got} != golden {want}",
                input.name(),
                case["case"],
                k / 4,
                k % 4
            );
        }
        checked += 1;
    }
    checked
}

#[test]
fn golden_vectors_f16() {
    assert!(
        golden_cases(Input::F16) > 0,
        "no f16 case in the golden file"
    );
}

#[test]
fn golden_vectors_bf16() {
    assert!(
        golden_cases(Input::Bf16) > 0,
        "no bf16 case in the golden file"
    );
}

// ---------------------------------------------------------------------------------------
// Random matrices.
// ---------------------------------------------------------------------------------------

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// k / 8 for k in -16..=16: exact in f16, bf16 and every partial sum.
    fn eighth(&mut self) -> f32 {
        (self.next() % 33) as f32 / 8.0 - 2.0
    }

    /// Any finite value of `input` in about [-4, 4], full mantissa.
    fn any(&mut self, input: Input) -> f32 {
        let bits = self.next();
        let sign = if bits & 1 != 0 { -1.0 } else { 1.0 };
        let mantissa = 1.0 + (bits >> 8) as f32 / (1u64 << 56) as f32;
        let x = sign * mantissa * 2f32.powi(((bits >> 1) % 4) as i32 - 2);
        match input {
            Input::F16 => half::f16::from_f32(x).to_f32(),
            Input::Bf16 => half::bf16::from_f32(x).to_f32(),
        }
    }
}

fn random_tile(rng: &mut Rng, mut value: impl FnMut(&mut Rng) -> f32) -> (MatA, MatB, MatC) {
    let a: MatA = std::array::from_fn(|_| std::array::from_fn(|_| value(rng)));
    let b: MatB = std::array::from_fn(|_| std::array::from_fn(|_| value(rng)));
    let c: MatC = std::array::from_fn(|_| std::array::from_fn(|_| 4.0 * value(rng)));
    (a, b, c)
}

/// Runs `tiles` (one per warp) and compares each d with the f64 product: exactly when
/// `exact`, else within one f32 ulp.
fn check_random(input: Input, tiles: &[(MatA, MatB, MatC)], exact: bool) {
    let f = fragments(input, tiles);
    let block = 32 * tiles.len() as u32;
    let d = run_mma(input, block, &f).unwrap_or_else(|e| panic!("{e}"));
    for (w, (a, b, c)) in tiles.iter().enumerate() {
        let want = reference(a, b, c);
        for lane in 0..32 {
            for i in 0..4 {
                let (r, n) = d_position(lane, i);
                let got = d[128 * w + 4 * lane + i];
                let ideal = want[r][n];
                if exact {
                    assert_eq!(
                        f64::from(got),
                        ideal,
                        "{} warp {w} D[{r}][{n}] (lane {lane} d{i})",
                        input.name()
                    );
                } else {
                    let rounded = ideal as f32;
                    let ulp = f32::from_bits(rounded.abs().to_bits() + 1) - rounded.abs();
                    assert!(
                        (got - rounded).abs() <= ulp,
                        "{} warp {w} D[{r}][{n}] (lane {lane} d{i}): {got} vs {ideal}",
                        input.name()
                    );
                }
            }
        }
    }
}

/// `count` tiles from a generator seeded with `seed`.
fn random_tiles(
    seed: u64,
    count: usize,
    value: impl Fn(&mut Rng) -> f32,
) -> Vec<(MatA, MatB, MatC)> {
    let mut rng = Rng(seed);
    (0..count).map(|_| random_tile(&mut rng, &value)).collect()
}

#[test]
fn random_eighths_are_exact_f16() {
    check_random(Input::F16, &random_tiles(1, 3, Rng::eighth), true);
}

#[test]
fn random_eighths_are_exact_bf16() {
    check_random(Input::Bf16, &random_tiles(2, 3, Rng::eighth), true);
}

#[test]
fn random_full_mantissa_within_one_ulp_f16() {
    let tiles = random_tiles(3, 4, |r| r.any(Input::F16));
    check_random(Input::F16, &tiles, false);
}

#[test]
fn random_full_mantissa_within_one_ulp_bf16() {
    let tiles = random_tiles(4, 4, |r| r.any(Input::Bf16));
    check_random(Input::Bf16, &tiles, false);
}

#[test]
fn identity_picks_out_the_layout() {
    // A = I, C = 0: D = B, element for element. A wrong A, B or D layout moves values to
    // the wrong place.
    let a: MatA = std::array::from_fn(|r| std::array::from_fn(|c| f32::from(u8::from(r == c))));
    let b: MatB = std::array::from_fn(|k| std::array::from_fn(|n| (k * 8 + n) as f32));
    let c: MatC = [[0.0; 8]; 16];
    let f = fragments(Input::F16, &[(a, b, c)]);
    let d = run_mma(Input::F16, 32, &f).unwrap_or_else(|e| panic!("{e}"));
    for lane in 0..32 {
        for i in 0..4 {
            let (r, n) = d_position(lane, i);
            assert_eq!(d[4 * lane + i], (r * 8 + n) as f32, "lane {lane} d{i}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// .sync.aligned: the whole warp.
// ---------------------------------------------------------------------------------------

#[test]
fn mma_by_a_partial_warp_is_a_synccheck_fault() {
    // A block of 16 threads: lanes 16..31 of the only warp do not exist.
    let mut rng = Rng(5);
    let tile = random_tile(&mut rng, Rng::eighth);
    let mut f = fragments(Input::F16, &[tile]);
    f.a.truncate(16 * 4);
    f.b.truncate(16 * 2);
    f.c.truncate(16 * 4);
    let text = mma_kernel(Input::F16);
    let fault = expect_fault(
        run_mma(Input::F16, 16, &f).map(|_| Default::default()),
        Checker::Synccheck,
    );
    assert_eq!(fault.site.line, line_of(&text, "mma.sync.aligned"));
    assert_eq!(fault.site.kernel, "mma_tile");
}

#[test]
fn mma_in_a_branch_taken_by_half_the_warp_is_a_synccheck_fault() {
    // Lanes 16..31 return before the mma.
    let text = mma_kernel(Input::Bf16)
        .replace(
            "\tmov.u32 \t%r1, %tid.x;\n",
            "\tmov.u32 \t%r1, %tid.x;\n\tsetp.gt.u32 \t%p1, %r1, 15;\n\t@%p1 bra \t$L__BB0_2;\n",
        )
        .replace("\tret;\n", "$L__BB0_2:\n\tret;\n")
        .replace(
            "\t.reg .b32 \t%r<8>;",
            "\t.reg .pred \t%p<2>;\n\t.reg .b32 \t%r<8>;",
        );
    assert!(text.contains("@%p1 bra"), "the branch was inserted");
    let mut rng = Rng(6);
    let f = fragments(Input::Bf16, &[random_tile(&mut rng, Rng::eighth)]);
    let fault = expect_fault(
        run_mma_text(text.clone(), 32, &f).map(|_| Default::default()),
        Checker::Synccheck,
    );
    assert_eq!(fault.site.line, line_of(&text, "mma.sync.aligned"));
    assert!(fault.site.thread[0] < 16, "{fault}");
}
