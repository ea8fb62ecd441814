//! C = A·B (n × n, n a multiple of 16) with 16×16 shared-memory tiles, as NVRTC compiles the
//! textbook kernel: racecheck's classic bug (tests/racecheck.rs) and the simulator's
//! barrier-heavy benchmark (benches/throughput.rs).

use super::{config_3d, upload_f32, Entry};
use linattn_ptxsim::{Arg, Device, LaunchConfig};

pub const TILE: u32 = 16;

/// Load a tile of A and of B, `bar.sync`, 16 FMAs from shared memory, then `trailing` (the
/// second `bar.sync`, or nothing) before the next iteration overwrites the tiles.
/// Parameters: A, B, C, n.
pub fn kernel(trailing: &str) -> String {
    let mut inner = String::new();
    for k in 0..TILE {
        inner.push_str(&format!(
            "\tld.shared.f32 \t%f{a}, [%rd11+{ao}];\n\tld.shared.f32 \t%f{b}, [%rd13+{bo}];\n\tfma.rn.f32 \t%f1, %f{a}, %f{b}, %f1;\n",
            a = 4 + 2 * k,
            b = 5 + 2 * k,
            ao = 4 * k,
            bo = 4 * TILE * k
        ));
    }
    let body = format!(
        r#"	cvta.to.global.u64 	%rd4, %rd1;
	cvta.to.global.u64 	%rd20, %rd2;
	cvta.to.global.u64 	%rd21, %rd3;
	mov.u32 	%r2, %tid.x;
	mov.u32 	%r3, %tid.y;
	mov.u32 	%r4, %ctaid.x;
	mov.u32 	%r5, %ctaid.y;
	shl.b32 	%r6, %r5, 4;
	add.s32 	%r7, %r6, %r3;
	shl.b32 	%r8, %r4, 4;
	add.s32 	%r9, %r8, %r2;
	shl.b32 	%r10, %r3, 4;
	add.s32 	%r11, %r10, %r2;
	mul.wide.u32 	%rd5, %r11, 4;
	mov.u64 	%rd6, _ZZ6matmulE2As;
	add.s64 	%rd7, %rd6, %rd5;
	mov.u64 	%rd8, _ZZ6matmulE2Bs;
	add.s64 	%rd9, %rd8, %rd5;
	mul.wide.u32 	%rd10, %r3, 64;
	add.s64 	%rd11, %rd6, %rd10;
	mul.wide.u32 	%rd12, %r2, 4;
	add.s64 	%rd13, %rd8, %rd12;
	mad.lo.s32 	%r12, %r7, %r1, %r2;
	mul.wide.u32 	%rd14, %r12, 4;
	add.s64 	%rd15, %rd4, %rd14;
	mad.lo.s32 	%r13, %r3, %r1, %r9;
	mul.wide.u32 	%rd16, %r13, 4;
	add.s64 	%rd17, %rd20, %rd16;
	shl.b32 	%r14, %r1, 6;
	cvt.u64.u32 	%rd18, %r14;
	mov.f32 	%f1, 0f00000000;
	mov.u32 	%r15, 0;

$L__BB0_1:
	ld.global.nc.f32 	%f2, [%rd15];
	st.shared.f32 	[%rd7], %f2;  // store of the A tile
	ld.global.nc.f32 	%f3, [%rd17];
	st.shared.f32 	[%rd9], %f3;  // store of the B tile
	bar.sync 	0;
{inner}	{trailing}
	add.s64 	%rd15, %rd15, 64;
	add.s64 	%rd17, %rd17, %rd18;
	add.s32 	%r15, %r15, 16;
	setp.lt.u32 	%p1, %r15, %r1;
	@%p1 bra 	$L__BB0_1;

	mad.lo.s32 	%r16, %r7, %r1, %r9;
	mul.wide.u32 	%rd19, %r16, 4;
	add.s64 	%rd22, %rd21, %rd19;
	st.global.f32 	[%rd22], %f1;
	ret;
"#
    );
    Entry {
        name: "matmul",
        params: &[
            ("u64", "%rd1"),
            ("u64", "%rd2"),
            ("u64", "%rd3"),
            ("u32", "%r1"),
        ],
        regs: &[("pred", 2), ("b32", 20), ("f32", 40), ("b64", 24)],
        decls: "// demoted variable
            .shared .align 4 .b8 _ZZ6matmulE2As[1024];
            // demoted variable
            .shared .align 4 .b8 _ZZ6matmulE2Bs[1024];",
        body: &body,
        ..Entry::default()
    }
    .ptx()
}

/// One product to run: A and B (small integers, so every partial sum is exact), and the
/// launch that writes C to `c`.
pub struct Problem {
    pub n: usize,
    pub a: Vec<f32>,
    pub b: Vec<f32>,
    pub c: u64,
    pub config: LaunchConfig,
    pub args: Vec<Arg>,
}

impl Problem {
    /// A and B uploaded to `dev`, C allocated without initialisation.
    pub fn new(dev: &Device, n: usize) -> Problem {
        assert_eq!(n % TILE as usize, 0);
        let a: Vec<f32> = (0..n * n).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
        let b: Vec<f32> = (0..n * n).map(|i| ((i * 5) % 13) as f32 - 6.0).collect();
        let (pa, pb) = (upload_f32(dev, &a), upload_f32(dev, &b));
        let c = dev.alloc(4 * (n * n) as u64).expect("alloc");
        let tiles = n as u32 / TILE;
        Problem {
            n,
            a,
            b,
            c,
            config: config_3d([tiles, tiles, 1], [TILE, TILE, 1]),
            args: vec![Arg::U64(pa), Arg::U64(pb), Arg::U64(c), Arg::U32(n as u32)],
        }
    }

    /// Every `row_step`-th row of `c` is exactly A·B.
    pub fn check(&self, c: &[f32], row_step: usize) {
        let n = self.n;
        for (r, row) in c.chunks_exact(n).enumerate().step_by(row_step) {
            for (col, &v) in row.iter().enumerate() {
                let want: f32 = (0..n)
                    .map(|k| self.a[r * n + k] * self.b[k * n + col])
                    .sum();
                assert_eq!(v, want, "C[{r}][{col}]");
            }
        }
    }
}
