//! One PTX instruction statement → [`Instr`].

use super::lex::{split_operands, Statement};
use super::scope::Scope;
use crate::error::{parse_error, SimError};
use crate::ir::{
    Address, AtomOp, BinOp, BoolOp, Cmp, FloatMode, Instr, IntRounding, MmaInput, MmaOperands, Op,
    Reg, Rounding, ShflMode, Space, Src, Ty, UnOp,
};

/// The opcode split into base and modifiers, plus the operand texts.
struct Parts<'a> {
    s: &'a Statement,
    scope: &'a Scope<'a>,
    base: &'a str,
    mods: Vec<&'a str>,
    operands: Vec<String>,
}

impl Parts<'_> {
    fn fail(&self, message: impl Into<String>) -> SimError {
        parse_error(self.s.line, &self.s.text, message)
    }

    fn has(&self, modifier: &str) -> bool {
        self.mods.contains(&modifier)
    }

    /// The last modifier that is a type (instructions end with their type).
    fn ty(&self) -> Result<Ty, SimError> {
        self.mods
            .iter()
            .rev()
            .find_map(|m| Ty::parse(m))
            .ok_or_else(|| self.fail("instruction without a type"))
    }

    /// All type modifiers in order (cvt has two, mma four).
    fn types(&self) -> Vec<Ty> {
        self.mods.iter().filter_map(|m| Ty::parse(m)).collect()
    }

    fn operand(&self, k: usize) -> Result<&str, SimError> {
        self.operands
            .get(k)
            .map(String::as_str)
            .ok_or_else(|| self.fail(format!("missing operand {}", k + 1)))
    }

    fn count(&self, n: usize) -> Result<(), SimError> {
        if self.operands.len() == n {
            Ok(())
        } else {
            Err(self.fail(format!(
                "expected {n} operands, found {}",
                self.operands.len()
            )))
        }
    }

    fn reg(&self, text: &str) -> Result<Reg, SimError> {
        self.scope
            .reg(text.trim())
            .ok_or_else(|| self.fail(format!("unknown register {text}")))
    }

    fn dst(&self, k: usize) -> Result<Reg, SimError> {
        self.reg(self.operand(k)?)
    }

    fn src_text(&self, text: &str, ty: Ty) -> Result<Src, SimError> {
        self.scope
            .src(text, ty)
            .ok_or_else(|| self.fail(format!("bad operand {text}")))
    }

    fn src(&self, k: usize, ty: Ty) -> Result<Src, SimError> {
        self.src_text(self.operand(k)?, ty)
    }

    fn address(&self, k: usize) -> Result<Address, SimError> {
        let text = self.operand(k)?;
        self.scope
            .address(text)
            .ok_or_else(|| self.fail(format!("bad address {text}")))
    }

    /// `{%a, %b, ...}` → the element texts (a plain operand is a list of one).
    fn vector(&self, k: usize) -> Result<Vec<String>, SimError> {
        let text = self.operand(k)?;
        Ok(
            match text.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
                Some(inner) => inner.split(',').map(|e| e.trim().to_string()).collect(),
                None => vec![text.to_string()],
            },
        )
    }

    fn float_mode(&self) -> Result<FloatMode, SimError> {
        let mut rounding = Rounding::Nearest;
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
        }
        Ok(FloatMode {
            rounding,
            ftz: self.has("ftz"),
            sat: self.has("sat"),
        })
    }

    fn space(&self) -> Space {
        if self.has("global") {
            Space::Global
        } else if self.has("shared") {
            Space::Shared
        } else if self.has("param") {
            Space::Param
        } else {
            Space::Generic
        }
    }

    fn reject(&self, unsupported: &[&str]) -> Result<(), SimError> {
        for m in unsupported {
            if self.has(m) {
                return Err(self.fail(format!(".{m} is not simulated")));
            }
        }
        Ok(())
    }
}

/// Decodes one instruction statement.
pub(super) fn decode(s: &Statement, scope: &Scope<'_>) -> Result<Instr, SimError> {
    let mut text = s.text.trim();
    let mut guard = None;
    if let Some(rest) = text.strip_prefix('@') {
        let (pred, rest) = rest
            .split_once(char::is_whitespace)
            .ok_or_else(|| parse_error(s.line, &s.text, "guard without an instruction"))?;
        let (negate, name) = match pred.strip_prefix('!') {
            Some(name) => (true, name),
            None => (false, pred),
        };
        let reg = scope
            .reg(name)
            .ok_or_else(|| parse_error(s.line, &s.text, format!("unknown predicate {name}")))?;
        guard = Some((reg, negate));
        text = rest.trim();
    }
    let (opcode, operand_text) = match text.split_once(char::is_whitespace) {
        Some((o, rest)) => (o, rest.trim()),
        None => (text, ""),
    };
    let mut pieces = opcode.split('.');
    let base = pieces.next().unwrap_or_default();
    let parts = Parts {
        s,
        scope,
        base,
        mods: pieces.collect(),
        operands: split_operands(operand_text),
    };
    let op = decode_op(&parts)?;
    Ok(Instr {
        guard,
        class: op.class(),
        fp32_flops: op.fp32_flops(),
        op,
        line: s.line,
    })
}

fn bin_op(base: &str) -> Option<BinOp> {
    Some(match base {
        "add" => BinOp::Add,
        "sub" => BinOp::Sub,
        "mul" => BinOp::MulLo,
        "min" => BinOp::Min,
        "max" => BinOp::Max,
        "and" => BinOp::And,
        "or" => BinOp::Or,
        "xor" => BinOp::Xor,
        "shl" => BinOp::Shl,
        "shr" => BinOp::Shr,
        "div" => BinOp::Div,
        "rem" => BinOp::Rem,
        _ => return None,
    })
}

fn un_op(base: &str) -> Option<UnOp> {
    Some(match base {
        "neg" => UnOp::Neg,
        "abs" => UnOp::Abs,
        "not" => UnOp::Not,
        "popc" => UnOp::Popc,
        "clz" => UnOp::Clz,
        "brev" => UnOp::Brev,
        "rcp" => UnOp::Rcp,
        "sqrt" => UnOp::Sqrt,
        "rsqrt" => UnOp::Rsqrt,
        "ex2" => UnOp::Ex2,
        "lg2" => UnOp::Lg2,
        "sin" => UnOp::Sin,
        "cos" => UnOp::Cos,
        "tanh" => UnOp::Tanh,
        _ => return None,
    })
}

fn decode_op(p: &Parts<'_>) -> Result<Op, SimError> {
    p.reject(&["cc", "rnd"])?;
    match p.base {
        "mov" => decode_mov(p),
        "mul" if p.has("wide") => {
            p.count(3)?;
            let ty = p.ty()?;
            Ok(Op::MulWide {
                ty,
                d: p.dst(0)?,
                a: p.src(1, ty)?,
                b: p.src(2, ty)?,
            })
        }
        "and" | "or" | "xor" if p.ty()? == Ty::Pred => {
            p.count(3)?;
            let op = match p.base {
                "and" => BoolOp::And,
                "or" => BoolOp::Or,
                _ => BoolOp::Xor,
            };
            Ok(Op::PredLogic {
                op,
                d: p.dst(0)?,
                a: p.src(1, Ty::Pred)?,
                b: p.src(2, Ty::Pred)?,
            })
        }
        "not" if p.ty()? == Ty::Pred => {
            p.count(2)?;
            Ok(Op::PredNot {
                d: p.dst(0)?,
                a: p.src(1, Ty::Pred)?,
            })
        }
        base if bin_op(base).is_some() => {
            p.count(3)?;
            let ty = p.ty()?;
            let op = match (bin_op(base), p.has("hi")) {
                (Some(BinOp::MulLo), true) => BinOp::MulHi,
                (Some(op), _) => op,
                (None, _) => unreachable!("guarded by is_some"),
            };
            // Shift amounts are always .u32.
            let b_ty = if matches!(op, BinOp::Shl | BinOp::Shr) {
                Ty::U32
            } else {
                ty
            };
            Ok(Op::Bin {
                op,
                ty,
                mode: p.float_mode()?,
                d: p.dst(0)?,
                a: p.src(1, ty)?,
                b: p.src(2, b_ty)?,
            })
        }
        "mad" | "fma" => {
            p.count(4)?;
            let ty = p.ty()?;
            let (d, a, b, c) = (p.dst(0)?, p.src(1, ty)?, p.src(2, ty)?, p.src(3, ty)?);
            if ty.is_float() {
                Ok(Op::Fma {
                    ty,
                    mode: p.float_mode()?,
                    d,
                    a,
                    b,
                    c: p.src(3, ty)?,
                })
            } else {
                let wide = p.has("wide");
                let c = if wide { p.src(3, wide_of(ty))? } else { c };
                Ok(Op::Mad {
                    ty,
                    hi: p.has("hi"),
                    wide,
                    d,
                    a,
                    b,
                    c,
                })
            }
        }
        base if un_op(base).is_some() => {
            p.count(2)?;
            let ty = p.ty()?;
            Ok(Op::Un {
                op: un_op(base).unwrap_or(UnOp::Neg),
                ty,
                mode: p.float_mode()?,
                d: p.dst(0)?,
                a: p.src(1, ty)?,
            })
        }
        "cvt" => decode_cvt(p),
        "setp" => decode_setp(p),
        "selp" => {
            p.count(4)?;
            let ty = p.ty()?;
            Ok(Op::Selp {
                ty,
                d: p.dst(0)?,
                a: p.src(1, ty)?,
                b: p.src(2, ty)?,
                p: p.src(3, Ty::Pred)?,
            })
        }
        "bfi" => {
            p.count(5)?;
            let ty = p.ty()?;
            Ok(Op::Bfi {
                ty,
                d: p.dst(0)?,
                a: p.src(1, ty)?,
                b: p.src(2, ty)?,
                pos: p.src(3, Ty::U32)?,
                len: p.src(4, Ty::U32)?,
            })
        }
        "bfe" => {
            p.count(4)?;
            let ty = p.ty()?;
            Ok(Op::Bfe {
                ty,
                d: p.dst(0)?,
                a: p.src(1, ty)?,
                pos: p.src(2, Ty::U32)?,
                len: p.src(3, Ty::U32)?,
            })
        }
        "ld" | "ldu" => decode_ld(p),
        "st" => decode_st(p),
        "cvta" => {
            p.count(2)?;
            let space = p.space();
            if !matches!(space, Space::Global | Space::Shared) {
                return Err(p.fail("cvta to or from this space is not simulated"));
            }
            Ok(Op::Cvta {
                to_generic: !p.has("to"),
                space,
                d: p.dst(0)?,
                a: p.src(1, Ty::U64)?,
            })
        }
        "atom" | "red" => decode_atom(p),
        "bra" => {
            p.count(1)?;
            let label = p.operand(0)?;
            let target = p
                .scope
                .label(label)
                .ok_or_else(|| p.fail(format!("unknown label {label}")))?;
            Ok(Op::Bra { target })
        }
        "ret" | "exit" => Ok(Op::Ret),
        "bar" | "barrier" if p.has("warp") => {
            p.count(1)?;
            Ok(Op::WarpSync {
                mask: p.src(0, Ty::U32)?,
            })
        }
        "bar" | "barrier" => {
            p.reject(&["arrive", "red"])?;
            if p.operands.len() != 1 {
                return Err(p.fail("bar.sync with a thread count is not simulated"));
            }
            Ok(Op::BarSync {
                id: p.src(0, Ty::U32)?,
            })
        }
        "shfl" => decode_shfl(p),
        "mma" => decode_mma(p),
        "membar" | "fence" => Err(p.fail("memory fences are not simulated")),
        _ => Err(p.fail(format!("unknown instruction {}", p.base))),
    }
}

fn wide_of(ty: Ty) -> Ty {
    match ty {
        Ty::S16 => Ty::S32,
        Ty::U16 => Ty::U32,
        Ty::S32 => Ty::S64,
        _ => Ty::U64,
    }
}

fn decode_mov(p: &Parts<'_>) -> Result<Op, SimError> {
    p.count(2)?;
    let ty = p.ty()?;
    let dst = p.vector(0)?;
    let src = p.vector(1)?;
    match (dst.len(), src.len()) {
        (1, 1) => Ok(Op::Mov {
            ty,
            d: p.reg(&dst[0])?,
            a: p.src_text(&src[0], ty)?,
        }),
        (n, 1) => Ok(Op::Unpack {
            part_bytes: ty.bytes() / n as u32,
            d: dst.iter().map(|d| p.reg(d)).collect::<Result<_, _>>()?,
            a: p.src_text(&src[0], ty)?,
        }),
        (1, n) => {
            let part_ty = match ty.bytes() / n as u32 {
                1 => Ty::B8,
                2 => Ty::B16,
                4 => Ty::B32,
                _ => return Err(p.fail("bad vector mov")),
            };
            Ok(Op::Pack {
                part_bytes: part_ty.bytes(),
                d: p.reg(&dst[0])?,
                a: src
                    .iter()
                    .map(|s| p.src_text(s, part_ty))
                    .collect::<Result<_, _>>()?,
            })
        }
        _ => Err(p.fail("bad vector mov")),
    }
}

fn decode_cvt(p: &Parts<'_>) -> Result<Op, SimError> {
    let types = p.types();
    let [dty, sty] = types[..] else {
        return Err(p.fail("cvt needs a destination and a source type"));
    };
    let mode = p.float_mode()?;
    let int_rounding = p.mods.iter().find_map(|m| match *m {
        "rni" => Some(IntRounding::Nearest),
        "rzi" => Some(IntRounding::Zero),
        "rmi" => Some(IntRounding::Down),
        "rpi" => Some(IntRounding::Up),
        _ => None,
    });
    let rounding = p
        .mods
        .iter()
        .any(|m| matches!(*m, "rn" | "rz" | "rm" | "rp"))
        .then_some(mode.rounding);
    if matches!(dty, Ty::F16x2 | Ty::Bf16x2) {
        p.count(3)?;
        if rounding != Some(Rounding::Nearest) {
            return Err(p.fail("packed cvt is simulated with .rn only"));
        }
        return Ok(Op::CvtPack {
            dty,
            sat: mode.sat,
            d: p.dst(0)?,
            a: p.src(1, sty)?,
            b: p.src(2, sty)?,
        });
    }
    p.count(2)?;
    Ok(Op::Cvt {
        dty,
        sty,
        rounding,
        int_rounding,
        ftz: mode.ftz,
        sat: mode.sat,
        d: p.dst(0)?,
        a: p.src(1, sty)?,
    })
}

fn decode_setp(p: &Parts<'_>) -> Result<Op, SimError> {
    let cmp = p
        .mods
        .first()
        .and_then(|m| {
            Some(match *m {
                "eq" => Cmp::Eq,
                "ne" => Cmp::Ne,
                "lt" => Cmp::Lt,
                "le" => Cmp::Le,
                "gt" => Cmp::Gt,
                "ge" => Cmp::Ge,
                "lo" => Cmp::Lo,
                "ls" => Cmp::Ls,
                "hi" => Cmp::Hi,
                "hs" => Cmp::Hs,
                "equ" => Cmp::Equ,
                "neu" => Cmp::Neu,
                "ltu" => Cmp::Ltu,
                "leu" => Cmp::Leu,
                "gtu" => Cmp::Gtu,
                "geu" => Cmp::Geu,
                "num" => Cmp::Num,
                "nan" => Cmp::Nan,
                _ => return None,
            })
        })
        .ok_or_else(|| p.fail("setp without a comparison"))?;
    let bool_op = p.mods.iter().find_map(|m| match *m {
        "and" => Some(BoolOp::And),
        "or" => Some(BoolOp::Or),
        "xor" => Some(BoolOp::Xor),
        _ => None,
    });
    let ty = p.ty()?;
    let (d, d_not) = match p.operand(0)?.split_once('|') {
        Some((a, b)) => (p.reg(a)?, Some(p.reg(b)?)),
        None => (p.dst(0)?, None),
    };
    let combine = match bool_op {
        Some(op) => {
            p.count(4)?;
            let text = p.operand(3)?;
            let src = match text.strip_prefix('!') {
                // `!%p` as the combining operand: encoded as xor with true.
                Some(_) => return Err(p.fail("negated setp combine operand is not simulated")),
                None => p.src_text(text, Ty::Pred)?,
            };
            Some((op, src))
        }
        None => {
            p.count(3)?;
            None
        }
    };
    Ok(Op::Setp {
        cmp,
        ty,
        combine,
        d,
        d_not,
        a: p.src(1, ty)?,
        b: p.src(2, ty)?,
    })
}

fn decode_ld(p: &Parts<'_>) -> Result<Op, SimError> {
    p.count(2)?;
    p.reject(&["local", "const", "tex"])?;
    let ty = p.ty()?;
    let d = p
        .vector(0)?
        .iter()
        .map(|r| p.reg(r))
        .collect::<Result<Vec<_>, _>>()?;
    check_vector(p, d.len())?;
    Ok(Op::Ld {
        space: p.space(),
        ty,
        nc: p.has("nc") || p.base == "ldu",
        d,
        addr: p.address(1)?,
    })
}

fn decode_st(p: &Parts<'_>) -> Result<Op, SimError> {
    p.count(2)?;
    p.reject(&["local", "const", "param"])?;
    let ty = p.ty()?;
    let a = p
        .vector(1)?
        .iter()
        .map(|r| p.src_text(r, ty))
        .collect::<Result<Vec<_>, _>>()?;
    check_vector(p, a.len())?;
    Ok(Op::St {
        space: p.space(),
        ty,
        a,
        addr: p.address(0)?,
    })
}

fn check_vector(p: &Parts<'_>, elements: usize) -> Result<(), SimError> {
    let declared = if p.has("v2") {
        2
    } else if p.has("v4") {
        4
    } else if p.has("v8") {
        return Err(p.fail(".v8 accesses are not simulated"));
    } else {
        1
    };
    if declared == elements {
        Ok(())
    } else {
        Err(p.fail(format!("vector width {declared} but {elements} registers")))
    }
}

fn decode_atom(p: &Parts<'_>) -> Result<Op, SimError> {
    let ty = p.ty()?;
    let op = p
        .mods
        .iter()
        .find_map(|m| {
            Some(match *m {
                "add" => AtomOp::Add,
                "min" => AtomOp::Min,
                "max" => AtomOp::Max,
                "exch" => AtomOp::Exch,
                "cas" => AtomOp::Cas,
                "and" => AtomOp::And,
                "or" => AtomOp::Or,
                "xor" => AtomOp::Xor,
                "inc" => AtomOp::Inc,
                "dec" => AtomOp::Dec,
                _ => return None,
            })
        })
        .ok_or_else(|| p.fail("atomic without an operation"))?;
    if ty.bytes() != 4 {
        return Err(p.fail("only 32-bit atomics are simulated"));
    }
    // `red` has no destination: operands shift by one.
    let (d, first) = if p.base == "red" {
        (None, 0)
    } else {
        (Some(p.dst(0)?), 1)
    };
    let c = if op == AtomOp::Cas {
        p.count(first + 3)?;
        Some(p.src(first + 2, ty)?)
    } else {
        p.count(first + 2)?;
        None
    };
    let space = p.space();
    if !matches!(space, Space::Global | Space::Shared) {
        return Err(p.fail("atomics are simulated on .global and .shared only"));
    }
    Ok(Op::Atom {
        space,
        op,
        ty,
        d: d.unwrap_or(crate::ir::Reg {
            bank: crate::ir::Bank::R32,
            index: u32::MAX,
        }),
        addr: p.address(first)?,
        b: p.src(first + 1, ty)?,
        c,
    })
}

fn decode_shfl(p: &Parts<'_>) -> Result<Op, SimError> {
    if !p.has("sync") {
        return Err(p.fail("shfl without .sync is not simulated (removed in sm_70+)"));
    }
    p.count(5)?;
    let mode = if p.has("up") {
        ShflMode::Up
    } else if p.has("down") {
        ShflMode::Down
    } else if p.has("bfly") {
        ShflMode::Bfly
    } else if p.has("idx") {
        ShflMode::Idx
    } else {
        return Err(p.fail("shfl without a mode"));
    };
    let (d, pred) = match p.operand(0)?.split_once('|') {
        Some((d, q)) => (p.reg(d)?, Some(p.reg(q)?)),
        None => (p.dst(0)?, None),
    };
    Ok(Op::Shfl {
        mode,
        d,
        p: pred,
        a: p.src(1, Ty::B32)?,
        b: p.src(2, Ty::U32)?,
        c: p.src(3, Ty::U32)?,
        mask: p.src(4, Ty::U32)?,
    })
}

fn decode_mma(p: &Parts<'_>) -> Result<Op, SimError> {
    let shape_ok = p.has("sync") && p.has("aligned") && p.has("m16n8k16");
    let layout_ok = p.has("row") && p.has("col");
    let types = p.types();
    let input = match types[..] {
        [Ty::F32, Ty::F16, Ty::F16, Ty::F32] => MmaInput::F16,
        [Ty::F32, Ty::Bf16, Ty::Bf16, Ty::F32] => MmaInput::Bf16,
        _ => return Err(p.fail("only mma .f32.{f16,bf16}.{f16,bf16}.f32 is simulated")),
    };
    if !shape_ok || !layout_ok {
        return Err(p.fail("only mma.sync.aligned.m16n8k16.row.col is simulated"));
    }
    p.count(4)?;
    let regs = |k: usize, n: usize, ty: Ty| -> Result<Vec<Src>, SimError> {
        let v = p.vector(k)?;
        if v.len() != n {
            return Err(p.fail(format!("mma operand {} needs {n} registers", k + 1)));
        }
        v.iter().map(|r| p.src_text(r, ty)).collect()
    };
    let d = p.vector(0)?;
    if d.len() != 4 {
        return Err(p.fail("mma destination needs 4 registers"));
    }
    let d: Vec<Reg> = d.iter().map(|r| p.reg(r)).collect::<Result<_, _>>()?;
    let a = regs(1, 4, Ty::B32)?;
    let b = regs(2, 2, Ty::B32)?;
    let c = regs(3, 4, Ty::F32)?;
    Ok(Op::Mma(Box::new(MmaOperands {
        input,
        d: [d[0], d[1], d[2], d[3]],
        a: [a[0], a[1], a[2], a[3]],
        b: [b[0], b[1]],
        c: [c[0], c[1], c[2], c[3]],
    })))
}
