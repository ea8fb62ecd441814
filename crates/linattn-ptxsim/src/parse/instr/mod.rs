//! One PTX instruction statement → [`Instr`]: the guard and opcode here, each instruction
//! family's operands in a child module.

mod arith;
mod collective;
mod control;
mod memory;
mod moves;
mod parts;
mod predicate;

use super::lex::{split_operands, Statement};
use super::scope::Scope;
use crate::error::{parse_error, SimError};
use crate::ir::{Instr, Op, Ty};
use parts::Parts;

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

fn decode_op(p: &Parts<'_>) -> Result<Op, SimError> {
    p.reject(&["cc", "rnd"])?;
    match p.base {
        "mov" => moves::decode_mov(p),
        "mul" if p.has("wide") => arith::decode_mul_wide(p),
        "and" | "or" | "xor" if p.ty()? == Ty::Pred => predicate::decode_pred_logic(p),
        "not" if p.ty()? == Ty::Pred => predicate::decode_pred_not(p),
        base if arith::bin_op(base).is_some() => arith::decode_bin(p),
        "mad" | "fma" => arith::decode_mad(p),
        base if arith::un_op(base).is_some() => arith::decode_un(p),
        "cvt" => moves::decode_cvt(p),
        "setp" => predicate::decode_setp(p),
        "selp" => predicate::decode_selp(p),
        "bfi" => arith::decode_bfi(p),
        "bfe" => arith::decode_bfe(p),
        "ld" | "ldu" => memory::decode_ld(p),
        "st" => memory::decode_st(p),
        "cvta" => memory::decode_cvta(p),
        "atom" | "red" => memory::decode_atom(p),
        "bra" => control::decode_bra(p),
        "ret" | "exit" => Ok(Op::Ret),
        "bar" | "barrier" => control::decode_bar(p),
        "shfl" => collective::decode_shfl(p),
        "mma" => collective::decode_mma(p),
        "membar" | "fence" => Err(p.fail("memory fences are not simulated")),
        _ => Err(p.fail(format!("unknown instruction {}", p.base))),
    }
}
