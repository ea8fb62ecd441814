//! Parsing of list flags: sizes written as numbers or powers (`2^10`), comma-separated
//! lists, power-of-two sweeps.

use linattn_core::AttnError;

pub(super) fn invalid(msg: String) -> AttnError {
    AttnError::InvalidArgument(msg)
}

/// `1024` or `2^10`.
pub(super) fn parse_size(text: &str, what: &str) -> Result<usize, AttnError> {
    let t = text.trim();
    let value = if let Some((base, exp)) = t.split_once('^') {
        let base: usize = base.trim().parse().map_err(|_| {
            invalid(format!(
                "{what}: '{t}' is not a number or a power like 2^10"
            ))
        })?;
        let exp: u32 = exp
            .trim()
            .parse()
            .map_err(|_| invalid(format!("{what}: '{t}' has a bad exponent")))?;
        base.checked_pow(exp)
            .ok_or_else(|| invalid(format!("{what}: '{t}' overflows")))?
    } else {
        t.parse::<usize>().map_err(|_| {
            invalid(format!(
                "{what}: '{t}' is not a number or a power like 2^10"
            ))
        })?
    };
    if value == 0 {
        return Err(invalid(format!("{what}: must be positive, got {t}")));
    }
    Ok(value)
}

/// The comma-separated items of `text` (blanks skipped) through `parse`; an empty list is
/// an error naming `what`.
pub(super) fn split_list<T>(
    text: &str,
    what: &str,
    parse: impl Fn(&str) -> Result<T, AttnError>,
) -> Result<Vec<T>, AttnError> {
    let values: Vec<T> = text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(parse)
        .collect::<Result<_, _>>()?;
    if values.is_empty() {
        return Err(invalid(format!("{what}: empty list")));
    }
    Ok(values)
}

pub(crate) fn parse_size_list(text: &str, what: &str) -> Result<Vec<usize>, AttnError> {
    Ok(dedup_sorted(split_list(text, what, |s| {
        parse_size(s, what)
    })?))
}

pub(super) fn dedup_sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v.dedup();
    v
}

pub(super) fn parse_list<T: std::str::FromStr<Err = AttnError>>(
    text: &str,
    what: &str,
) -> Result<Vec<T>, AttnError> {
    split_list(text, what, str::parse)
}

/// [`parse_list`] keeping the first occurrence of each value, in the order given.
pub(super) fn parse_unique<T: std::str::FromStr<Err = AttnError> + PartialEq>(
    text: &str,
    what: &str,
) -> Result<Vec<T>, AttnError> {
    let mut unique = Vec::new();
    for value in parse_list::<T>(text, what)? {
        if !unique.contains(&value) {
            unique.push(value);
        }
    }
    Ok(unique)
}

/// The sequence lengths of a sweep: the `--n` list when given, else the powers of two from
/// `--n-min` to `--n-max` (each defaulting to its `defaults` entry).
pub(super) fn seq_lengths(
    n: Option<&str>,
    n_min: Option<&str>,
    n_max: Option<&str>,
    defaults: (&str, &str),
) -> Result<Vec<usize>, AttnError> {
    match n {
        Some(list) => parse_size_list(list, "--n"),
        None => power_sweep(
            parse_size(n_min.unwrap_or(defaults.0), "--n-min")?,
            parse_size(n_max.unwrap_or(defaults.1), "--n-max")?,
        ),
    }
}

/// Powers of two from `min` to `max` inclusive.
pub(super) fn power_sweep(min: usize, max: usize) -> Result<Vec<usize>, AttnError> {
    for (name, v) in [("--n-min", min), ("--n-max", max)] {
        if !v.is_power_of_two() {
            return Err(invalid(format!("{name} must be a power of two, got {v}")));
        }
    }
    if min > max {
        return Err(invalid(format!("--n-min {min} exceeds --n-max {max}")));
    }
    let mut out = Vec::new();
    let mut n = min;
    while n <= max {
        out.push(n);
        match n.checked_mul(2) {
            Some(next) => n = next,
            None => break,
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_numbers_and_powers() {
        assert_eq!(parse_size("2^10", "n").unwrap(), 1024);
        assert_eq!(parse_size(" 4096 ", "n").unwrap(), 4096);
        assert!(parse_size("0", "n").is_err());
        assert!(parse_size("2^99", "n").is_err());
        assert!(parse_size("abc", "n").is_err());
        assert_eq!(
            parse_size_list("2^12,256,256", "n").unwrap(),
            vec![256, 4096]
        );
        assert_eq!(
            power_sweep(256, 4096).unwrap(),
            vec![256, 512, 1024, 2048, 4096]
        );
        assert!(power_sweep(300, 4096).is_err());
        assert!(power_sweep(4096, 256).is_err());
    }
}
