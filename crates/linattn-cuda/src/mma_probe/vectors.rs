//! The probe's test vectors, `d = c + Σ_k a_k·b_k` over k = 0..15, in the style of Fasi,
//! Higham, Mikaitis and Pranesh (PeerJ CS 7:e330, 2021): each designed vector makes the
//! candidate models of [`super::Candidate`] disagree in one respect.
//!
//! * kept bits: 16 products of 2^-(23+j) into c = 1 survive only if 24 + j bits are kept
//!   below the leading bit of the largest term (j = 1..4 separate 24 / 25 / 26 / 27 / exact).
//! * block size: c = 16 cancelled by a product at k = 0, a product of 2^-24 at k = s: it is
//!   lost if aligned with the 16s (same block) and survives if its block starts after them
//!   (s = 4 separates blocks of 4 from 8; s = 8, 8 from 16); also with the small product
//!   first, where the next block's alignment drops the accumulator that carries it.
//! * alignment before cancellation: the small product in the cancelling block (s = 1).
//! * final rounding: exact sums a tie or just off one (nearest and toward zero part), with
//!   and without a carry out of the top bit, of either sign.
//! * alignment: a leading product 1.5·1.5, whose value's exponent is one above its operands',
//!   then small products that survive only if the terms align on the operands' exponents.
//! * carries: 16 products of nearly 1 into nearly 1 (four carry bits), and 2^24 − 1 + 16.
//!
//! Then seeded random vectors: small products into a large accumulator, near-cancelling
//! accumulators, and wide exponent ranges. Designed values need at most 8 significant bits so
//! both f16 and bf16 hold them; every a and b is a normal number of its type ([`Input`]: the
//! two input types, here because the vectors are written in them).

use linattn_core::SeededRng;
use linattn_ptxsim::exec::mma_accumulate::Product;

/// The mma's input type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Input {
    F16,
    Bf16,
}

impl Input {
    pub const ALL: [Input; 2] = [Input::F16, Input::Bf16];

    pub fn name(self) -> &'static str {
        match self {
            Input::F16 => "f16",
            Input::Bf16 => "bf16",
        }
    }

    /// The value of `bits`.
    pub fn value(self, bits: u16) -> f32 {
        match self {
            Input::F16 => half::f16::from_bits(bits).to_f32(),
            Input::Bf16 => half::bf16::from_bits(bits).to_f32(),
        }
    }

    /// The least normal exponent: where the tensor cores align a subnormal operand.
    pub fn min_exponent(self) -> i32 {
        match self {
            Input::F16 => -14,
            Input::Bf16 => -126,
        }
    }

    /// `x`'s bits when `x` is exactly a normal number (or zero) of this type.
    pub fn exact_bits(self, x: f32) -> Option<u16> {
        let bits = match self {
            Input::F16 => half::f16::from_f32(x).to_bits(),
            Input::Bf16 => half::bf16::from_f32(x).to_bits(),
        };
        let back = self.value(bits);
        let normal = back == 0.0 || back.is_normal() && self.is_normal(bits);
        (back.to_bits() == x.to_bits() && normal).then_some(bits)
    }

    /// Whether `bits` is a normal number of this type (tensor cores may treat subnormal
    /// inputs their own way; the designed vectors avoid them).
    fn is_normal(self, bits: u16) -> bool {
        let exponent = match self {
            Input::F16 => (bits >> 10) & 0x1f,
            Input::Bf16 => (bits >> 7) & 0xff,
        };
        let all_ones = match self {
            Input::F16 => 0x1f,
            Input::Bf16 => 0xff,
        };
        exponent != 0 && exponent != all_ones
    }
}

/// One vector: the accumulator and the 16 A and B elements of one dot product.
#[derive(Debug, Clone, PartialEq)]
pub struct Vector {
    /// What it tests (designed vectors) or `random <family>`.
    pub label: String,
    /// Designed (true) or random.
    pub designed: bool,
    pub c: f32,
    /// A's row, bit patterns of the input type.
    pub a: [u16; 16],
    /// B's column, bit patterns of the input type.
    pub b: [u16; 16],
}

impl Vector {
    /// The 16 exact products a_k·b_k, with their operands' exponents.
    pub fn products(&self, input: Input) -> [Product; 16] {
        std::array::from_fn(|k| {
            Product::new(
                input.value(self.a[k]),
                input.value(self.b[k]),
                input.min_exponent(),
            )
        })
    }

    /// c + Σ a_k·b_k, exactly while the terms span under 53 bits (for reading).
    pub fn exact_sum(&self, input: Input) -> f64 {
        let products = self.products(input);
        f64::from(self.c) + products.iter().map(|t| t.value).sum::<f64>()
    }
}

/// The random vectors of each family per input type.
pub const RANDOM_SMALL_INTO_LARGE: usize = 192;
pub const RANDOM_CANCELLING: usize = 64;
pub const RANDOM_WIDE: usize = 64;

/// Designed, then random vectors for `input` (the random ones from `seed`).
pub fn all_vectors(input: Input, seed: u64) -> Result<Vec<Vector>, String> {
    let mut all = designed(input)?;
    all.extend(random(input, seed));
    Ok(all)
}

fn p(e: i32) -> f64 {
    2f64.powi(e)
}

/// `value` as a·b, both exact normal numbers of `input`: b a power of two near the square
/// root of |value|, a the rest.
fn factor(input: Input, value: f64) -> Option<(u16, u16)> {
    if value == 0.0 {
        return Some((0, 0));
    }
    let e = value.abs().log2().floor() as i32;
    // Powers of two from the middle out, within f16's normal range (bf16's is wider).
    let mut tries: Vec<i32> = (-14..=15).collect();
    tries.sort_by_key(|&eb| (eb - e.div_euclid(2)).abs());
    tries.into_iter().find_map(|eb| {
        let b = p(eb);
        let a = value / b;
        let (a32, b32) = (a as f32, b as f32);
        (f64::from(a32) == a)
            .then(|| Some((input.exact_bits(a32)?, input.exact_bits(b32)?)))
            .flatten()
    })
}

/// Nonzero products of a designed vector, as (k, value).
type Products<'a> = &'a [(usize, f64)];

/// A designed vector: `products` as (k, value); the other products are 0·0.
fn vector(input: Input, label: &str, c: f64, products: &[(usize, f64)]) -> Result<Vector, String> {
    let c32 = c as f32;
    if f64::from(c32) != c {
        return Err(format!("{label}: c = {c:e} is not an f32"));
    }
    let mut v = Vector {
        label: label.to_string(),
        designed: true,
        c: c32,
        a: [0; 16],
        b: [0; 16],
    };
    for &(k, value) in products {
        let (a, b) = factor(input, value).ok_or_else(|| {
            format!(
                "{label}: product {value:e} is no product of two {}",
                input.name()
            )
        })?;
        v.a[k] = a;
        v.b[k] = b;
    }
    Ok(v)
}

/// Every designed vector (the module documentation says what each tests).
pub fn designed(input: Input) -> Result<Vec<Vector>, String> {
    let all16 = |value: f64| -> Vec<(usize, f64)> { (0..16).map(|k| (k, value)).collect() };
    let mut out = Vec::new();
    for j in 1..=4 {
        let small = p(-23 - j);
        out.push(vector(
            input,
            &format!("kept bits: 16 x 2^-{} into 1", 23 + j),
            1.0,
            &all16(small),
        )?);
        out.push(vector(
            input,
            &format!("kept bits: 16 x -2^-{} into 1", 23 + j),
            1.0,
            &all16(-small),
        )?);
        out.push(vector(
            input,
            &format!("kept bits: 16 x -2^-{} into -1", 23 + j),
            -1.0,
            &all16(-small),
        )?);
        // One term only: 1 + 2^-(23+j)·1.1b, kept bits and rounding together.
        let one = [(0, 3.0 * p(-24 - j))];
        out.push(vector(
            input,
            &format!("kept bits: 1.5 x 2^-{} into 1", 23 + j),
            1.0,
            &one,
        )?);
    }
    for s in [1usize, 2, 4, 8, 12, 15] {
        out.push(vector(
            input,
            &format!("block: 16 - 16 at k = 0, 2^-24 at k = {s}"),
            16.0,
            &[(0, -16.0), (s, p(-24))],
        )?);
    }
    for s in [2usize, 4, 8] {
        out.push(vector(
            input,
            &format!("block: 16, -16 at k = 0, 1, 2^-24 at k = {s}"),
            0.0,
            &[(0, 16.0), (1, -16.0), (s, p(-24))],
        )?);
        out.push(vector(
            input,
            &format!("block: 2^-24 at k = 0, 16, -16 at k = {s}, {}", s + 1),
            0.0,
            &[(0, p(-24)), (s, 16.0), (s + 1, -16.0)],
        )?);
    }
    let ties: [(&str, f64, Products); 8] = [
        (
            "rounding: (1 + 2^-23) + 2^-24, a tie",
            1.0 + p(-23),
            &[(0, p(-24))],
        ),
        (
            "rounding: -(1 + 2^-23) - 2^-24, a tie",
            -1.0 - p(-23),
            &[(0, -p(-24))],
        ),
        ("rounding: 1 + 0.75 ulp", 1.0, &[(0, 3.0 * p(-25))]),
        (
            "rounding: 1 + 2^-24 + 2^-27, just above a tie",
            1.0,
            &[(0, 9.0 * p(-27))],
        ),
        (
            "rounding: 1 + 2^-24 - 2^-28, just below a tie",
            1.0,
            &[(0, p(-24)), (1, -p(-28))],
        ),
        (
            "rounding: (2 - 2^-23) + 2^-21, carry into a tie",
            2.0 - p(-23),
            &[(0, p(-21))],
        ),
        (
            "rounding: -(2 - 2^-23) - 2^-21, carry into a tie",
            p(-23) - 2.0,
            &[(0, -p(-21))],
        ),
        (
            "rounding: 1 + 2^-24 split over blocks",
            1.0,
            &[(3, p(-25)), (7, p(-26)), (11, p(-27)), (15, p(-27))],
        ),
    ];
    for (label, c, products) in ties {
        out.push(vector(input, label, c, products)?);
    }
    // Alignment: 1.5 · 1.5 = 2.25 has operand exponents 0 + 0 but its value's exponent is
    // 1; 26 bits from 0 keep eight products of 2^-25 (2^-22 in all), 26 bits from 1 drop
    // them. (`vector` factors 2.25 as 1.125 · 2, whose significands' product is under 2.)
    let one_and_half = input
        .exact_bits(1.5)
        .ok_or_else(|| format!("1.5 is no {}", input.name()))?;
    for (label, c, sign) in [
        ("alignment: 1.5 x 1.5, then 8 x 2^-25", 0.0, 1.0),
        ("alignment: 1 + 1.5 x -1.5, then 8 x -2^-25", 1.0, -1.0),
    ] {
        let small: Vec<(usize, f64)> = (1..=8).map(|k| (k, sign * p(-25))).collect();
        let mut v = vector(input, label, c, &small)?;
        v.a[0] = one_and_half;
        // Bit 15 is the sign in both types.
        v.b[0] = if sign < 0.0 {
            one_and_half | 0x8000
        } else {
            one_and_half
        };
        out.push(v);
    }
    out.push(vector(
        input,
        "carries: 16 x (1 - 2^-8) into 1 - 2^-24",
        1.0 - p(-24),
        &all16(1.0 - p(-8)),
    )?);
    out.push(vector(
        input,
        "carries: 16 x 1 into 2^24 - 1",
        p(24) - 1.0,
        &all16(1.0),
    )?);
    out.push(vector(
        input,
        "carries: 16 x -(1 - 2^-8) into -(1 - 2^-24)",
        p(-24) - 1.0,
        &all16(p(-8) - 1.0),
    )?);
    Ok(out)
}

/// A random normal number of `input` with exponent in `exponents`, either sign.
fn random_element(input: Input, rng: &mut SeededRng, exponents: (i32, i32)) -> u16 {
    let r = rng.next_u64();
    let span = (exponents.1 - exponents.0 + 1) as u64;
    let e = exponents.0 + ((r >> 32) % span) as i32;
    let sign = ((r >> 63) as u16) << 15;
    match input {
        Input::F16 => sign | (((e + 15) as u16) << 10) | (r as u16 & 0x3ff),
        Input::Bf16 => sign | (((e + 127) as u16) << 7) | (r as u16 & 0x7f),
    }
}

/// A random f32 of either sign with exponent in `exponents` and a full significand.
fn random_f32(rng: &mut SeededRng, exponents: (i32, i32)) -> f32 {
    let r = rng.next_u64();
    let span = (exponents.1 - exponents.0 + 1) as u64;
    let e = exponents.0 + ((r >> 32) % span) as i32;
    let bits = (((r >> 63) as u32) << 31) | (((e + 127) as u32) << 23) | (r as u32 & 0x7f_ffff);
    f32::from_bits(bits)
}

fn random_vector(
    input: Input,
    rng: &mut SeededRng,
    family: &str,
    c: f32,
    exponents: (i32, i32),
) -> Vector {
    Vector {
        label: format!("random {family}"),
        designed: false,
        c,
        a: std::array::from_fn(|_| random_element(input, rng, exponents)),
        b: std::array::from_fn(|_| random_element(input, rng, exponents)),
    }
}

/// The seeded random vectors (the same for a seed on every machine).
pub fn random(input: Input, seed: u64) -> Vec<Vector> {
    let mut rng = SeededRng::new(seed ^ if input == Input::F16 { 0x16 } else { 0xbf16 });
    let mut out = Vec::new();
    for _ in 0..RANDOM_SMALL_INTO_LARGE {
        // Products 2^-20..2^6 into |c| in [1, 512): many bits below c's last.
        let c = random_f32(&mut rng, (0, 8));
        out.push(random_vector(
            input,
            &mut rng,
            "small into large",
            c,
            (-10, 3),
        ));
    }
    for _ in 0..RANDOM_CANCELLING {
        // c the negated sum of the first products (rounded to f32), the rest small.
        let mut v = random_vector(input, &mut rng, "cancelling", 0.0, (-12, 4));
        let products = v.products(input);
        let head = 1 + (rng.next_u64() % 4) as usize;
        let sum: f64 = products[..head].iter().map(|t| t.value).sum();
        v.c = -(sum as f32);
        out.push(v);
    }
    for _ in 0..RANDOM_WIDE {
        let c = random_f32(&mut rng, (-20, 20));
        out.push(random_vector(input, &mut rng, "wide", c, (-14, 12)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn designed_vectors_are_exact_in_both_types() {
        for input in Input::ALL {
            let v = designed(input).unwrap_or_else(|e| panic!("{}: {e}", input.name()));
            assert!(v.len() > 30, "{} designed vectors", v.len());
        }
    }

    #[test]
    fn factors_reproduce_the_products() {
        for input in Input::ALL {
            for value in [3.0 * p(-25), -p(-28), 16.0, 1.0 - p(-8), 9.0 * p(-27)] {
                let (a, b) = factor(input, value).unwrap();
                let got = f64::from(input.value(a)) * f64::from(input.value(b));
                assert_eq!(got, value, "{}", input.name());
            }
            // Nine significant bits fit f16, not bf16.
            assert_eq!(factor(input, 1.0 + p(-8)).is_some(), input == Input::F16);
        }
    }

    #[test]
    fn random_vectors_are_seeded() {
        for input in Input::ALL {
            assert_eq!(random(input, 7), random(input, 7));
            assert_ne!(random(input, 7), random(input, 8));
        }
    }

    #[test]
    fn exact_bits_takes_normal_values_only() {
        assert_eq!(Input::F16.exact_bits(1.0), Some(0x3c00));
        assert_eq!(Input::Bf16.exact_bits(1.0), Some(0x3f80));
        assert_eq!(Input::F16.exact_bits(2f32.powi(-24)), None, "f16 subnormal");
        assert_eq!(Input::Bf16.exact_bits(1.0 + 2f32.powi(-10)), None, "9 bits");
        assert_eq!(Input::F16.exact_bits(-0.0), Some(0x8000));
    }
}
