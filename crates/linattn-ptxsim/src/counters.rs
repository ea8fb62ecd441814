//! What a launch executed, counted at warp granularity, with the vocabulary of Nsight
//! Compute: instructions by class, active lanes, global requests and the 32-byte sectors they
//! touch (and the unique sectors of the launch: the DRAM traffic an infinite L2 would see),
//! shared-memory requests and the wavefronts they take (bank conflicts), mma operations.
//!
//! Instruction counts are always kept; the memory counters (sectors, wavefronts, unique
//! sectors) only when the device counts them (`Device::with_counters`), since they cost a
//! pass over the lanes of every memory instruction.

use crate::instr_class::InstrClass;

/// Floating-point operations of one `mma.m16n8k16`: 2 · 16 · 8 · 16.
pub const MMA_FLOPS: u64 = 2 * 16 * 8 * 16;

/// Where the cycles of a CTA's critical path went, exactly: the warp that exits last spends
/// each cycle of its clock issuing one instruction, waiting for an operand (by the class of
/// the instruction that produced it), waiting for its earlier global stores before a global
/// load, or at a `bar.sync` (for the slowest warp, plus the barrier's cost). The parts sum to
/// the path (`exec::clock`'s rules; a model, not a measurement).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PathBreakdown {
    pub issue: u64,
    /// Per [`InstrClass::ALL`] entry: cycles waited on a value that class produced.
    pub operand_wait: [u64; 13],
    pub store_drain: u64,
    pub barrier: u64,
}

impl PathBreakdown {
    /// The sum of the parts: the warp's clock.
    pub fn total(&self) -> u64 {
        self.issue + self.operand_wait.iter().sum::<u64>() + self.store_drain + self.barrier
    }
}

/// Counts of one launch (or a sum of launches).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Warp-level instructions issued (one per group of lanes executing one instruction).
    pub warp_instructions: u64,
    /// Thread-level instructions (active lanes summed over warp instructions).
    pub thread_instructions: u64,
    /// Per [`InstrClass::ALL`] entry: warp and thread instructions.
    pub warp_by_class: [u64; 13],
    pub thread_by_class: [u64; 13],
    /// fp32 floating-point operations (lanes × ops; fma counts 2).
    pub fp32_flops: u64,
    /// `mma.sync` executions (warp level).
    pub mma: u64,
    /// Warp arrivals at `bar.sync`.
    pub barriers: u64,
    /// Global load / store requests (warp instructions), the distinct 32-byte sectors each
    /// touched (summed over requests), and the bytes the active lanes asked for.
    pub global_load_requests: u64,
    pub global_load_sectors: u64,
    pub global_load_bytes: u64,
    pub global_store_requests: u64,
    pub global_store_sectors: u64,
    pub global_store_bytes: u64,
    /// Distinct sectors read / written by the whole launch (an infinite L2's DRAM traffic).
    pub unique_load_sectors: u64,
    pub unique_store_sectors: u64,
    /// Shared load / store requests, the wavefronts they took (32 banks of 4 bytes, 64-bit
    /// accesses in two half-warp phases, 128-bit in four quarter-warp phases), and the
    /// wavefronts a conflict-free access pattern would have taken (one per phase with active
    /// lanes).
    pub shared_load_requests: u64,
    pub shared_load_wavefronts: u64,
    pub shared_load_ideal_wavefronts: u64,
    pub shared_store_requests: u64,
    pub shared_store_wavefronts: u64,
    pub shared_store_ideal_wavefronts: u64,
    /// The longest CTA critical path of the launch, in cycles, from the warp issue clocks
    /// (`exec::clock`); 0 unless the memory counters are kept. Over a sum of launches, the
    /// largest (the model uses it per launch).
    pub critical_path_cycles: u64,
    /// The parts of that longest path (`critical_path.total() == critical_path_cycles`).
    pub critical_path: PathBreakdown,
}

impl Counters {
    pub fn add(&mut self, o: &Counters) {
        self.warp_instructions += o.warp_instructions;
        self.thread_instructions += o.thread_instructions;
        for k in 0..self.warp_by_class.len() {
            self.warp_by_class[k] += o.warp_by_class[k];
            self.thread_by_class[k] += o.thread_by_class[k];
        }
        self.fp32_flops += o.fp32_flops;
        self.mma += o.mma;
        self.barriers += o.barriers;
        self.global_load_requests += o.global_load_requests;
        self.global_load_sectors += o.global_load_sectors;
        self.global_load_bytes += o.global_load_bytes;
        self.global_store_requests += o.global_store_requests;
        self.global_store_sectors += o.global_store_sectors;
        self.global_store_bytes += o.global_store_bytes;
        self.unique_load_sectors += o.unique_load_sectors;
        self.unique_store_sectors += o.unique_store_sectors;
        self.shared_load_requests += o.shared_load_requests;
        self.shared_load_wavefronts += o.shared_load_wavefronts;
        self.shared_load_ideal_wavefronts += o.shared_load_ideal_wavefronts;
        self.shared_store_requests += o.shared_store_requests;
        self.shared_store_wavefronts += o.shared_store_wavefronts;
        self.shared_store_ideal_wavefronts += o.shared_store_ideal_wavefronts;
        self.longest_path(o.critical_path_cycles, &o.critical_path);
    }

    /// Keeps `path` (`cycles` long) as the critical path if it is longer than the one held.
    pub fn longest_path(&mut self, cycles: u64, path: &PathBreakdown) {
        if cycles > self.critical_path_cycles {
            self.critical_path_cycles = cycles;
            self.critical_path = *path;
        }
    }

    /// Every additive counter × `num` / `den` (a sampled launch scaled to its grid); the
    /// critical path, a maximum, is kept.
    pub fn scaled(&self, num: u64, den: u64) -> Counters {
        let f = |v: u64| v * num / den.max(1);
        let mut c = *self;
        c.warp_instructions = f(c.warp_instructions);
        c.thread_instructions = f(c.thread_instructions);
        c.warp_by_class = c.warp_by_class.map(f);
        c.thread_by_class = c.thread_by_class.map(f);
        c.fp32_flops = f(c.fp32_flops);
        c.mma = f(c.mma);
        c.barriers = f(c.barriers);
        c.global_load_requests = f(c.global_load_requests);
        c.global_load_sectors = f(c.global_load_sectors);
        c.global_load_bytes = f(c.global_load_bytes);
        c.global_store_requests = f(c.global_store_requests);
        c.global_store_sectors = f(c.global_store_sectors);
        c.global_store_bytes = f(c.global_store_bytes);
        c.unique_load_sectors = f(c.unique_load_sectors);
        c.unique_store_sectors = f(c.unique_store_sectors);
        c.shared_load_requests = f(c.shared_load_requests);
        c.shared_load_wavefronts = f(c.shared_load_wavefronts);
        c.shared_load_ideal_wavefronts = f(c.shared_load_ideal_wavefronts);
        c.shared_store_requests = f(c.shared_store_requests);
        c.shared_store_wavefronts = f(c.shared_store_wavefronts);
        c.shared_store_ideal_wavefronts = f(c.shared_store_ideal_wavefronts);
        c
    }

    /// Counts one warp instruction of class `class` run by `active` lanes.
    #[inline]
    pub fn instruction(&mut self, class: InstrClass, active: u32) {
        let lanes = u64::from(active.count_ones());
        self.warp_instructions += 1;
        self.thread_instructions += lanes;
        self.warp_by_class[class as usize] += 1;
        self.thread_by_class[class as usize] += lanes;
    }

    /// Warp instructions of `class`.
    pub fn warp(&self, class: InstrClass) -> u64 {
        self.warp_by_class[class as usize]
    }

    /// Active lanes per warp instruction, as a fraction of 32.
    pub fn lane_utilisation(&self) -> f64 {
        self.thread_instructions as f64 / (32.0 * self.warp_instructions.max(1) as f64)
    }

    /// Bytes the lanes used per byte of the sectors they touched (1 = perfectly coalesced).
    pub fn global_sector_efficiency(&self) -> f64 {
        let used = (self.global_load_bytes + self.global_store_bytes) as f64;
        let touched = 32.0 * (self.global_load_sectors + self.global_store_sectors) as f64;
        if touched == 0.0 {
            1.0
        } else {
            used / touched
        }
    }

    /// Wavefronts per conflict-free wavefront (1 = no bank conflicts).
    pub fn shared_conflict_factor(&self) -> f64 {
        let ideal = (self.shared_load_ideal_wavefronts + self.shared_store_ideal_wavefronts) as f64;
        let actual = (self.shared_load_wavefronts + self.shared_store_wavefronts) as f64;
        if ideal == 0.0 {
            1.0
        } else {
            actual / ideal
        }
    }

    /// Bytes an infinite L2 would move to and from DRAM.
    pub fn unique_dram_bytes(&self) -> u64 {
        32 * (self.unique_load_sectors + self.unique_store_sectors)
    }
}

/// Distinct 32-byte sectors touched by the active lanes' accesses of `bytes` each (aligned,
/// so one access stays within one sector up to 32 bytes).
#[inline]
pub fn distinct_sectors(addresses: &[u64; 32], mask: u32, bytes: u32) -> u64 {
    let mut sectors = [u64::MAX; 64];
    let mut n = 0usize;
    let mut m = mask;
    while m != 0 {
        let lane = m.trailing_zeros() as usize;
        m &= m - 1;
        let first = addresses[lane] / 32;
        let last = (addresses[lane] + u64::from(bytes.max(1)) - 1) / 32;
        for s in first..=last {
            if !sectors[..n].contains(&s) && n < sectors.len() {
                sectors[n] = s;
                n += 1;
            }
        }
    }
    n as u64
}

/// (wavefronts, conflict-free wavefronts) of a shared access of `bytes` per lane (the whole
/// vector) at `offsets`. The shared data path moves 128 bytes (32 banks × 4 bytes) per
/// wavefront, so lanes are served in phases: all 32 for ≤ 4 bytes, half-warps for 8,
/// quarter-warps for 16; in a phase each bank serves one distinct 4-byte word per wavefront
/// (lanes reading the same word share it).
///
/// Loads whose lanes come in pairs reading one address (lane n and n^1 everywhere, or n and
/// n^2; a warp-uniform address is both) have their return registers packed two lanes at a
/// time, so a pair counts once and the phases double: 64-bit in one phase, 128-bit in two
/// half-warps. Sources: the answer in NVIDIA's developer forum thread "Unexpected shared
/// memory bank conflict" (forums.developer.nvidia.com/t/77228, CC 7.x: such an LDS.128 takes
/// 2 requests instead of 4, the 128-byte-a-cycle return path packing the pairs' registers);
/// "Discrepancy in LDS.128 wavefronts" (t/373160), measured with Nsight Compute on an A10 and
/// an H100: a 128-bit load where lanes n and n^16 share addresses is not paired (8
/// wavefronts), one with 16 lanes per address is (2). The H100 run of 2026-11-25
/// (bench-results/h100) agrees: the recurrent scan's warp-uniform `ld.shared.v4.f32` take 2
/// wavefronts each, the chunked state passes' `LDS.64` of lane pairs (ptxas-fused, see
/// `ptxas`) 1. Stores are not packed (their wavefronts matched the hardware's without it).
pub fn shared_wavefronts(offsets: &[u64; 32], mask: u32, bytes: u32, load: bool) -> (u64, u64) {
    let packed = load && bytes > 4 && (paired(offsets, mask, 1) || paired(offsets, mask, 2));
    let lanes_per_phase = match (bytes, packed) {
        (0..=4, _) | (5..=8, true) => 32,
        (5..=8, false) | (_, true) => 16,
        _ => 8,
    };
    let words_per_lane = u64::from(bytes.div_ceil(4).max(1));
    let (mut total, mut ideal) = (0u64, 0u64);
    for phase in 0..32 / lanes_per_phase {
        let lanes =
            (u64::from(mask) >> (phase * lanes_per_phase) & ((1u64 << lanes_per_phase) - 1)) as u32;
        if lanes == 0 {
            continue;
        }
        // Distinct words per bank, at most 32 lanes × 4 words.
        let mut words = [u64::MAX; 128];
        let mut n = 0usize;
        let mut m = lanes;
        while m != 0 {
            let lane = phase * lanes_per_phase + m.trailing_zeros() as usize;
            m &= m - 1;
            let first = offsets[lane] / 4;
            for w in first..first + words_per_lane {
                if !words[..n].contains(&w) {
                    words[n] = w;
                    n += 1;
                }
            }
        }
        let mut per_bank = [0u64; 32];
        for w in &words[..n] {
            per_bank[(w % 32) as usize] += 1;
        }
        // At most 32 distinct words in a phase (packed: half the lanes' addresses), so a
        // conflict-free phase is one wavefront.
        ideal += 1;
        total += per_bank.iter().copied().max().unwrap_or(0).max(1);
    }
    (total, ideal)
}

/// Whether every active lane n whose partner n ^ `xor` is active reads the partner's address.
fn paired(offsets: &[u64; 32], mask: u32, xor: usize) -> bool {
    (0..32)
        .all(|n| mask >> n & 1 == 0 || mask >> (n ^ xor) & 1 == 0 || offsets[n] == offsets[n ^ xor])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lanes(f: impl Fn(u64) -> u64) -> [u64; 32] {
        std::array::from_fn(|l| f(l as u64))
    }

    #[test]
    fn coalescing_from_first_principles() {
        // Stride-1 f32: 128 bytes, 4 sectors; stride-32 f32: one sector per lane.
        assert_eq!(distinct_sectors(&lanes(|l| 4 * l), u32::MAX, 4), 4);
        assert_eq!(distinct_sectors(&lanes(|l| 128 * l), u32::MAX, 4), 32);
        // Broadcast: one sector; half a warp: 2 sectors.
        assert_eq!(distinct_sectors(&lanes(|_| 64), u32::MAX, 4), 1);
        assert_eq!(distinct_sectors(&lanes(|l| 4 * l), 0xffff, 4), 2);
        // 16-byte vectors, stride 16: 512 bytes, 16 sectors.
        assert_eq!(distinct_sectors(&lanes(|l| 16 * l), u32::MAX, 16), 16);
    }

    #[test]
    fn bank_conflicts_from_first_principles() {
        // Conflict-free: consecutive words; broadcast of one word.
        assert_eq!(
            shared_wavefronts(&lanes(|l| 4 * l), u32::MAX, 4, false),
            (1, 1)
        );
        assert_eq!(shared_wavefronts(&lanes(|_| 0), u32::MAX, 4, false), (1, 1));
        // Stride 32 words: all 32 lanes in bank 0, distinct words: 32-way conflict.
        assert_eq!(
            shared_wavefronts(&lanes(|l| 128 * l), u32::MAX, 4, false),
            (32, 1)
        );
        // Stride 2 words: 2-way conflict.
        assert_eq!(
            shared_wavefronts(&lanes(|l| 8 * l), u32::MAX, 4, false),
            (2, 1)
        );
        // 64-bit consecutive: two half-warp phases, conflict-free.
        assert_eq!(
            shared_wavefronts(&lanes(|l| 8 * l), u32::MAX, 8, false),
            (2, 2)
        );
        // 128-bit consecutive: four quarter-warp phases, conflict-free.
        assert_eq!(
            shared_wavefronts(&lanes(|l| 16 * l), u32::MAX, 16, false),
            (4, 4)
        );
        // Half the lanes: one phase of 64-bit accesses.
        assert_eq!(
            shared_wavefronts(&lanes(|l| 8 * l), 0xffff, 8, false),
            (1, 1)
        );
    }

    #[test]
    fn loads_of_lane_pairs_pack_two_lanes_per_return() {
        let uniform = lanes(|_| 64);
        // A warp-uniform 128-bit load: two half-warp wavefronts, not four; a store of the
        // same addresses still takes four.
        assert_eq!(shared_wavefronts(&uniform, u32::MAX, 16, true), (2, 2));
        assert_eq!(shared_wavefronts(&uniform, u32::MAX, 16, false), (4, 4));
        // A warp-uniform 64-bit load: one wavefront.
        assert_eq!(shared_wavefronts(&uniform, u32::MAX, 8, true), (1, 1));
        // Lanes n and n^1 share (8 lanes per address, 4 addresses): one wavefront.
        assert_eq!(
            shared_wavefronts(&lanes(|l| 8 * (l / 8)), u32::MAX, 8, true),
            (1, 1)
        );
        // Lanes n and n^2 share: 128-bit, 16 distinct addresses, two half-warps.
        let n2 = lanes(|l| 16 * ((l & 1) | (l >> 2) << 1));
        assert_eq!(shared_wavefronts(&n2, u32::MAX, 16, true), (2, 2));
        // Lane n and n^16 share (no pairs): quarter-warps, each 8 lanes at a 32-byte stride,
        // 2-way: 8 wavefronts (the forum's "access pattern 1"); 16 lanes per address (its
        // "pattern 2") are pairs: 2.
        assert_eq!(
            shared_wavefronts(&lanes(|l| 32 * (l % 16)), u32::MAX, 16, true),
            (8, 4)
        );
        assert_eq!(
            shared_wavefronts(&lanes(|l| 32 * (l / 16)), u32::MAX, 16, true),
            (2, 2)
        );
        // 32-bit loads are unchanged: distinct consecutive words, one wavefront.
        assert_eq!(
            shared_wavefronts(&lanes(|l| 4 * l), u32::MAX, 4, true),
            (1, 1)
        );
    }
}
