//! What an entry's instructions may name: its registers (`.reg` ranges and single names),
//! labels, parameters, shared and global symbols, and the special registers.

use std::collections::HashMap;

use super::lex::{parse_float, parse_int, Statement};
use crate::error::{parse_error, SimError};
use crate::ir::{Address, Bank, Reg, Special, Src, Ty};

/// Register names of one entry: `%r<N>` ranges by prefix, plus single names.
#[derive(Default)]
pub(super) struct Registers {
    ranges: HashMap<String, (Bank, u32, u32)>,
    single: HashMap<String, Reg>,
    /// Registers declared per bank: predicates, 32-bit, 64-bit.
    pub(super) counts: [u32; 3],
}

impl Registers {
    fn bank_of(ty: Ty) -> Bank {
        match ty {
            Ty::Pred => Bank::Pred,
            t if t.bytes() == 8 => Bank::R64,
            _ => Bank::R32,
        }
    }

    fn slot(bank: Bank) -> usize {
        match bank {
            Bank::Pred => 0,
            Bank::R32 => 1,
            Bank::R64 => 2,
        }
    }

    pub(super) fn declare(&mut self, s: &Statement) -> Result<(), SimError> {
        // .reg .f32 %f<647>;   .reg .b32 %r1, %r2;
        let rest = s.text.trim_start_matches(".reg").trim();
        let (ty_word, names) = rest
            .split_once(char::is_whitespace)
            .ok_or_else(|| parse_error(s.line, &s.text, "bad .reg"))?;
        let ty = ty_word
            .strip_prefix('.')
            .and_then(Ty::parse)
            .ok_or_else(|| parse_error(s.line, &s.text, "bad .reg type"))?;
        let bank = Self::bank_of(ty);
        for name in names.split(',').map(str::trim) {
            if let Some((prefix, count)) = name.split_once('<') {
                let count: u32 = count
                    .trim_end_matches('>')
                    .parse()
                    .map_err(|_| parse_error(s.line, &s.text, "bad register count"))?;
                let base = self.counts[Self::slot(bank)];
                self.counts[Self::slot(bank)] += count;
                self.ranges.insert(prefix.to_string(), (bank, base, count));
            } else {
                let index = self.counts[Self::slot(bank)];
                self.counts[Self::slot(bank)] += 1;
                self.single.insert(name.to_string(), Reg { bank, index });
            }
        }
        Ok(())
    }

    fn get(&self, name: &str) -> Option<Reg> {
        if let Some(reg) = self.single.get(name) {
            return Some(*reg);
        }
        let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return None;
        }
        let (prefix, number) = name.split_at(name.len() - digits);
        let number: u32 = number.parse().ok()?;
        let &(bank, base, count) = self.ranges.get(prefix)?;
        (number < count).then_some(Reg {
            bank,
            index: base + number,
        })
    }
}

/// What an instruction's operands may name.
pub(crate) struct Scope<'a> {
    pub(super) regs: Registers,
    pub(super) labels: HashMap<String, u32>,
    pub(super) params: HashMap<String, u32>,
    /// Shared symbols → offset in the CTA's shared window.
    pub(super) shared: HashMap<String, u64>,
    pub(super) globals: &'a HashMap<String, u64>,
}

impl Scope<'_> {
    pub(crate) fn reg(&self, name: &str) -> Option<Reg> {
        self.regs.get(name)
    }

    pub(crate) fn label(&self, name: &str) -> Option<u32> {
        self.labels.get(name).copied()
    }

    /// A symbol used as a value (`mov.u64 %rd, sym`): its address.
    fn symbol(&self, name: &str) -> Option<u64> {
        self.shared
            .get(name)
            .or_else(|| self.globals.get(name))
            .copied()
    }

    /// A source operand of type `ty`.
    pub(crate) fn src(&self, text: &str, ty: Ty) -> Option<Src> {
        let t = text.trim();
        if let Some(special) = special(t) {
            return Some(Src::Special(special));
        }
        if t.starts_with('%') {
            return self.reg(t).map(Src::Reg);
        }
        if ty.is_float() {
            if let Some(x) = parse_float(t) {
                return Some(Src::Imm(match ty.bytes() {
                    8 => x.to_bits(),
                    _ => u64::from((x as f32).to_bits()),
                }));
            }
        }
        if let Some(bits) = parse_int(t) {
            let bits = match ty.bytes() {
                1 => bits & 0xff,
                2 => bits & 0xffff,
                4 => bits & 0xffff_ffff,
                _ => bits,
            };
            return Some(Src::Imm(bits));
        }
        self.symbol(t).map(Src::Imm)
    }

    /// `[reg]`, `[reg+imm]`, `[reg+-imm]`, `[symbol]`, `[symbol+imm]`, `[imm]`.
    pub(crate) fn address(&self, text: &str) -> Option<Address> {
        let inner = text.trim().strip_prefix('[')?.strip_suffix(']')?.trim();
        let (base, offset) = match inner.find('+') {
            Some(at) => (
                inner[..at].trim(),
                parse_int(inner[at + 1..].trim())? as i64,
            ),
            // `get`: an empty `[]` (or a multi-byte first character) must not panic.
            None => match inner.get(1..).and_then(|rest| rest.find('-')) {
                Some(at) => (
                    inner[..at + 1].trim(),
                    (parse_int(inner[at + 2..].trim())? as i64).wrapping_neg(),
                ),
                None => (inner, 0),
            },
        };
        if base.starts_with('%') {
            return Some(Address {
                base: Some(self.reg(base)?),
                offset,
            });
        }
        if let Some(&param) = self.params.get(base) {
            return Some(Address {
                base: None,
                offset: i64::from(param) + offset,
            });
        }
        if let Some(address) = self.symbol(base) {
            return Some(Address {
                base: None,
                offset: address as i64 + offset,
            });
        }
        parse_int(base).map(|a| Address {
            base: None,
            offset: a as i64 + offset,
        })
    }
}

fn special(name: &str) -> Option<Special> {
    let axis = |s: &str| match s {
        "x" => Some(0u8),
        "y" => Some(1),
        "z" => Some(2),
        _ => None,
    };
    if let Some((base, dim)) = name.split_once('.') {
        let a = axis(dim)?;
        return Some(match base {
            "%tid" => Special::Tid(a),
            "%ntid" => Special::Ntid(a),
            "%ctaid" => Special::Ctaid(a),
            "%nctaid" => Special::Nctaid(a),
            _ => return None,
        });
    }
    match name {
        "%laneid" => Some(Special::LaneId),
        "%warpid" => Some(Special::WarpId),
        "%nwarpid" => Some(Special::NWarpId),
        "%clock" => Some(Special::Clock),
        "%clock64" => Some(Special::Clock64),
        _ => None,
    }
}
