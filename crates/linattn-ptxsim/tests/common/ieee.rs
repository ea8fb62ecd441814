//! IEEE 754 helpers for the tests' references, written from the standard and independently
//! of the simulator's float code (and of the `half` crate).

/// The f32 with these bits.
pub fn f(bits: u32) -> f32 {
    f32::from_bits(bits)
}

/// The next f32 above `x` (`x` itself for NaN and +∞).
pub fn next_up(x: f32) -> f32 {
    if x.is_nan() || x == f32::INFINITY {
        x
    } else if x == 0.0 {
        f32::from_bits(1)
    } else if x > 0.0 {
        f32::from_bits(x.to_bits() + 1)
    } else {
        f32::from_bits(x.to_bits() - 1)
    }
}

/// The next f32 below `x`.
pub fn next_down(x: f32) -> f32 {
    -next_up(-x)
}

/// Decodes IEEE binary16 bits (independently of the `half` crate).
pub fn f16_value(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exponent = i32::from((bits >> 10) & 0x1f);
    let mantissa = f64::from(bits & 0x3ff);
    match exponent {
        0 => sign * mantissa * 2f64.powi(-24),
        31 if mantissa == 0.0 => sign * f64::INFINITY,
        31 => f64::NAN,
        e => sign * (1.0 + mantissa / 1024.0) * 2f64.powi(e - 15),
    }
}
