//! Basic blocks of a kernel, their dominators and edges: what the counting plan needs to know
//! that a repeated load always follows its first one and what may run between them.

use crate::ir::{Instr, Op};

/// Basic blocks, their successors, dominators and reachability.
pub(super) struct Cfg {
    /// Block of each instruction, and each block's instruction range.
    pub(super) block_of: Vec<usize>,
    pub(super) ranges: Vec<(usize, usize)>,
    /// `dom[b]` has bit a when block a dominates b.
    dom: Vec<Vec<u64>>,
    /// Successors and predecessors of each block.
    succ: Vec<Vec<usize>>,
    preds: Vec<Vec<usize>>,
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
            succ,
            preds,
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

    /// The instructions a path from `i` to `j` (excluding both) that does not run `i` again
    /// may execute: the rest of `i`'s block, the start of `j`'s, and every block on such a
    /// path. A path that runs `i` again (around a loop holding both) is not counted: the later
    /// run of `i` is then the one `j` follows, and what ran before it does not matter.
    pub(super) fn between(&self, i: usize, j: usize) -> Vec<(usize, usize)> {
        let (a, b) = (self.block_of[i], self.block_of[j]);
        if a == b && i < j {
            return vec![(i + 1, j)];
        }
        // Blocks reached from `a`'s successors, and blocks reaching `b`'s start, never
        // entering `a`: those on a path from `i` to `j` that does not pass `i`.
        let from = self.walk(&self.succ[a], &self.succ, a);
        let to = self.walk(&self.preds[b], &self.preds, a);
        let mut spans = vec![(i + 1, self.ranges[a].1), (self.ranges[b].0, j)];
        for x in 0..self.ranges.len() {
            if bit(&from, x) && bit(&to, x) {
                spans.push(self.ranges[x]);
            }
        }
        spans
    }

    /// The blocks reachable from `start` along `edges` without entering block `avoid`.
    fn walk(&self, start: &[usize], edges: &[Vec<usize>], avoid: usize) -> Vec<u64> {
        let mut seen = vec![0u64; self.ranges.len().div_ceil(64).max(1)];
        let mut stack: Vec<usize> = start.to_vec();
        while let Some(x) = stack.pop() {
            if x != avoid && !bit(&seen, x) {
                set_bit(&mut seen, x);
                stack.extend(&edges[x]);
            }
        }
        seen
    }
}
