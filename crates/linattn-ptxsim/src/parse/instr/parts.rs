//! The operand side of decoding: one statement's opcode split into base and modifiers, its
//! operand texts, and their resolution against the kernel's registers and labels.

use crate::error::{parse_error, SimError};
use crate::ir::{Address, FloatMode, Reg, Rounding, Space, Src, Ty};
use crate::parse::lex::Statement;
use crate::parse::scope::Scope;

/// The opcode split into base and modifiers, plus the operand texts.
pub(super) struct Parts<'a> {
    pub(super) s: &'a Statement,
    pub(super) scope: &'a Scope<'a>,
    pub(super) base: &'a str,
    pub(super) mods: Vec<&'a str>,
    pub(super) operands: Vec<String>,
}

impl Parts<'_> {
    pub(super) fn fail(&self, message: impl Into<String>) -> SimError {
        parse_error(self.s.line, &self.s.text, message)
    }

    pub(super) fn has(&self, modifier: &str) -> bool {
        self.mods.contains(&modifier)
    }

    /// The last modifier that is a type (instructions end with their type).
    pub(super) fn ty(&self) -> Result<Ty, SimError> {
        self.mods
            .iter()
            .rev()
            .find_map(|m| Ty::parse(m))
            .ok_or_else(|| self.fail("instruction without a type"))
    }

    /// All type modifiers in order (cvt has two, mma four).
    pub(super) fn types(&self) -> Vec<Ty> {
        self.mods.iter().filter_map(|m| Ty::parse(m)).collect()
    }

    pub(super) fn operand(&self, k: usize) -> Result<&str, SimError> {
        self.operands
            .get(k)
            .map(String::as_str)
            .ok_or_else(|| self.fail(format!("missing operand {}", k + 1)))
    }

    /// The type of an instruction that must have `n` operands (the count is checked first).
    pub(super) fn typed(&self, n: usize) -> Result<Ty, SimError> {
        self.count(n)?;
        self.ty()
    }

    pub(super) fn count(&self, n: usize) -> Result<(), SimError> {
        if self.operands.len() == n {
            Ok(())
        } else {
            Err(self.fail(format!(
                "expected {n} operands, found {}",
                self.operands.len()
            )))
        }
    }

    pub(super) fn reg(&self, text: &str) -> Result<Reg, SimError> {
        self.scope
            .reg(text.trim())
            .ok_or_else(|| self.fail(format!("unknown register {text}")))
    }

    pub(super) fn dst(&self, k: usize) -> Result<Reg, SimError> {
        self.reg(self.operand(k)?)
    }

    pub(super) fn src_text(&self, text: &str, ty: Ty) -> Result<Src, SimError> {
        self.scope
            .src(text, ty)
            .ok_or_else(|| self.fail(format!("bad operand {text}")))
    }

    pub(super) fn src(&self, k: usize, ty: Ty) -> Result<Src, SimError> {
        self.src_text(self.operand(k)?, ty)
    }

    /// The form `op d, a, b, ...`: operand 0 as the destination, operands `1..=N` as
    /// sources of type `ty`.
    pub(super) fn dst_srcs<const N: usize>(&self, ty: Ty) -> Result<(Reg, [Src; N]), SimError> {
        let d = self.dst(0)?;
        let srcs: Vec<Src> = (1..=N).map(|k| self.src(k, ty)).collect::<Result<_, _>>()?;
        let srcs = srcs
            .try_into()
            .unwrap_or_else(|_| unreachable!("N sources"));
        Ok((d, srcs))
    }

    pub(super) fn address(&self, k: usize) -> Result<Address, SimError> {
        let text = self.operand(k)?;
        self.scope
            .address(text)
            .ok_or_else(|| self.fail(format!("bad address {text}")))
    }

    /// `{%a, %b, ...}` → the element texts (a plain operand is a list of one).
    pub(super) fn vector(&self, k: usize) -> Result<Vec<String>, SimError> {
        let text = self.operand(k)?;
        Ok(
            match text.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
                Some(inner) => inner.split(',').map(|e| e.trim().to_string()).collect(),
                None => vec![text.to_string()],
            },
        )
    }

    pub(super) fn float_mode(&self) -> Result<FloatMode, SimError> {
        let mut rounding = Rounding::Nearest;
        let mut explicit = false;
        for m in &self.mods {
            rounding = match *m {
                "rn" => Rounding::Nearest,
                "rz" => Rounding::Zero,
                "rm" => Rounding::Down,
                "rp" => Rounding::Up,
                "approx" => Rounding::Approx,
                "full" => Rounding::Full,
                _ => continue,
            };
            explicit = true;
        }
        Ok(FloatMode {
            rounding,
            ftz: self.has("ftz"),
            sat: self.has("sat"),
            contractible: !explicit,
        })
    }

    /// The value of the first of `choices` whose modifier the instruction has.
    pub(super) fn pick<T: Copy>(&self, choices: &[(&str, T)]) -> Option<T> {
        (choices.iter())
            .find(|(modifier, _)| self.has(modifier))
            .map(|&(_, value)| value)
    }

    pub(super) fn space(&self) -> Space {
        let spaces = [
            ("global", Space::Global),
            ("shared", Space::Shared),
            ("param", Space::Param),
        ];
        self.pick(&spaces).unwrap_or(Space::Generic)
    }

    pub(super) fn reject(&self, unsupported: &[&str]) -> Result<(), SimError> {
        for m in unsupported {
            if self.has(m) {
                return Err(self.fail(format!(".{m} is not simulated")));
            }
        }
        Ok(())
    }
}
