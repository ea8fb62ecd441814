//! Basic blocks of a kernel, their dominators and which blocks reach which: what the
//! counting plan needs to know that a repeated load always follows its first one and what
//! may run between them.

use crate::ir::{Instr, Op};

/// Basic blocks, their successors, dominators and reachability.
pub(super) struct Cfg {
    /// Block of each instruction, and each block's instruction range.
    pub(super) block_of: Vec<usize>,
    pub(super) ranges: Vec<(usize, usize)>,
    /// `dom[b]` has bit a when block a dominates b.
    dom: Vec<Vec<u64>>,
    /// `reach[a]` has bit b when b can be reached from a along at least one edge.
    reach: Vec<Vec<u64>>,
}

fn bit(set: &[u64], i: usize) -> bool {
    set[i / 64] >> (i % 64) & 1 == 1
}

fn set_bit(set: &mut [u64], i: usize) {
    set[i / 64] |= 1 << (i % 64);
}

impl Cfg {
    pub(super) fn new(instrs: &[Instr]) -> Cfg {
        let n = instrs.len();
        let mut leader = vec![false; n + 1];
        leader[0] = true;
        for (i, ins) in instrs.iter().enumerate() {
            match ins.op {
                Op::Bra { target } => {
                    leader[(target as usize).min(n)] = true;
                    leader[i + 1] = true;
                }
                Op::Ret => leader[i + 1] = true,
                _ => {}
            }
        }
        let mut ranges = Vec::new();
        let mut block_of = vec![0; n];
        let mut start = 0;
        leader[n] = true;
        for (i, &starts) in leader.iter().enumerate().skip(1) {
            if starts {
                if start < i {
                    ranges.push((start, i));
                }
                start = i;
            }
        }
        for (b, &(s, e)) in ranges.iter().enumerate() {
            block_of[s..e].iter_mut().for_each(|x| *x = b);
        }
        let blocks = ranges.len();
        let succ: Vec<Vec<usize>> = ranges
            .iter()
            .map(|&(_, e)| {
                let last = &instrs[e - 1];
                let next = (e < n).then(|| block_of[e]);
                match last.op {
                    Op::Bra { target } => {
                        let t = (target as usize) < n;
                        let to = t.then(|| block_of[target as usize]);
                        match last.guard {
                            None => to.into_iter().collect(),
                            Some(_) => to.into_iter().chain(next).collect(),
                        }
                    }
                    Op::Ret if last.guard.is_none() => Vec::new(),
                    _ => next.into_iter().collect(),
                }
            })
            .collect();
        let words = blocks.div_ceil(64).max(1);
        let mut reach = vec![vec![0u64; words]; blocks];
        for (b, row) in reach.iter_mut().enumerate() {
            let mut stack = succ[b].clone();
            while let Some(x) = stack.pop() {
                if !bit(row, x) {
                    set_bit(row, x);
                    stack.extend(&succ[x]);
                }
            }
        }
        // Dominators, iteratively: dom(entry) = {entry}, dom(b) = {b} ∪ ⋂ dom(preds).
        let mut preds = vec![Vec::new(); blocks];
        for (b, s) in succ.iter().enumerate() {
            for &x in s {
                preds[x].push(b);
            }
        }
        let full = vec![u64::MAX; words];
        let mut dom = vec![full.clone(); blocks];
        if blocks > 0 {
            dom[0] = vec![0; words];
            set_bit(&mut dom[0], 0);
        }
        let mut changed = true;
        while changed {
            changed = false;
            for b in 1..blocks {
                let mut next = if preds[b].is_empty() {
                    vec![0; words]
                } else {
                    full.clone()
                };
                for &p in &preds[b] {
                    next.iter_mut().zip(&dom[p]).for_each(|(x, y)| *x &= y);
                }
                set_bit(&mut next, b);
                if next != dom[b] {
                    dom[b] = next;
                    changed = true;
                }
            }
        }
        Cfg {
            block_of,
            ranges,
            dom,
            reach,
        }
    }

    /// Whether every execution of instruction `j` comes after one of instruction `i`.
    pub(super) fn dominates(&self, i: usize, j: usize) -> bool {
        let (a, b) = (self.block_of[i], self.block_of[j]);
        if a == b {
            i < j
        } else {
            bit(&self.dom[b], a)
        }
    }

    /// The instructions any path from `i` to `j` (excluding both) may execute: the rest of
    /// `i`'s block, the start of `j`'s, and every block on a path between them.
    pub(super) fn between(&self, i: usize, j: usize) -> Vec<(usize, usize)> {
        let (a, b) = (self.block_of[i], self.block_of[j]);
        let on_path = |x: usize| bit(&self.reach[a], x) && bit(&self.reach[x], b);
        if a == b && !on_path(a) {
            return vec![(i + 1, j)];
        }
        let mut spans = vec![(i + 1, self.ranges[a].1), (self.ranges[b].0, j)];
        for x in 0..self.ranges.len() {
            if on_path(x) {
                spans.push(self.ranges[x]);
            }
        }
        spans
    }
}
