//! One warp: 32 lanes of registers stored lane-contiguous per register (so one warp
//! instruction is a loop over 32 lanes the compiler vectorises), per-lane program counters,
//! and the masks of lanes that exited or wait at a barrier or a warp collective.

use crate::ir::{Bank, Reg, Special, Src, Ty};

pub const LANES: usize = 32;

/// `[f(0), f(1), …]`: what `std::array::from_fn` does, as a plain loop the compiler inlines
/// and vectorises (from_fn's closure calls stay out of line in these hot paths).
#[inline(always)]
pub fn each<T: Copy + Default, const N: usize>(mut f: impl FnMut(usize) -> T) -> [T; N] {
    let mut out = [T::default(); N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = f(i);
    }
    out
}
pub type Lanes32 = [u32; LANES];
pub type Lanes64 = [u64; LANES];

/// Values of the special registers that do not depend on the lane.
#[derive(Clone, Copy)]
pub struct Uniforms {
    pub ntid: [u32; 3],
    pub ctaid: [u32; 3],
    pub nctaid: [u32; 3],
    pub nwarps: u32,
    /// How `.approx` functions and `mma` accumulation are computed.
    pub numerics: crate::exec::numerics::Numerics,
    /// How `mma` sums.
    pub mma: crate::exec::numerics::MmaModel,
}

pub struct Warp {
    /// Index of the warp in its CTA.
    pub index: u32,
    /// Lanes that exist (the last warp of a CTA may be partial).
    pub valid: u32,
    pub r32: Vec<Lanes32>,
    pub r64: Vec<Lanes64>,
    /// One bit per lane per predicate register.
    pub preds: Vec<u32>,
    pub pc: [u32; LANES],
    pub exited: u32,
    /// Lanes parked at a warp collective (`shfl.sync`, `mma.sync`, `bar.warp.sync`); their
    /// `pc` is that instruction.
    pub collective: u32,
    /// Lanes parked at `bar.sync`; their `pc` is that instruction.
    pub barrier: u32,
    /// Number of `bar.warp.sync` (and `bar.sync`) this warp completed: the warp's clock,
    /// which stamps every shared access for racecheck.
    pub wsync: u32,
    /// Racecheck's order among the lanes (see [`Warp::warp_sync`]): an access lane `a` made
    /// at clock `t` happens before lane `b`'s next access iff `known[b][a] > t`. One row per
    /// lane once [`Warp::reset`] ran (on the heap: warps are moved in and out of their CTA).
    pub known: Vec<[u32; LANES]>,
    /// %tid.{x,y,z} per lane.
    pub tid: [Lanes32; 3],
    /// What `%clock64` reads: the issue cycle of the instruction being run (set by the CTA
    /// loop: the latency model's clock, or a count of issued instructions without it).
    pub clock: u64,
}

impl Warp {
    pub fn new(regs: (u32, u32, u32)) -> Warp {
        Warp {
            index: 0,
            valid: 0,
            r32: vec![[0; LANES]; regs.1 as usize],
            r64: vec![[0; LANES]; regs.2 as usize],
            preds: vec![0; regs.0 as usize],
            pc: [0; LANES],
            exited: 0,
            collective: 0,
            barrier: 0,
            wsync: 0,
            known: Vec::new(),
            tid: [[0; LANES]; 3],
            clock: 0,
        }
    }

    /// Prepares the warp for warp `index` of a CTA with `block` threads per dimension.
    pub fn reset(&mut self, index: u32, block: [u32; 3]) {
        let threads = block[0] * block[1] * block[2];
        let first = index * LANES as u32;
        self.index = index;
        self.valid = 0;
        for lane in 0..LANES as u32 {
            let linear = first + lane;
            if linear < threads {
                self.valid |= 1 << lane;
            }
            let l = lane as usize;
            self.tid[0][l] = linear % block[0];
            self.tid[1][l] = (linear / block[0]) % block[1];
            self.tid[2][l] = linear / (block[0] * block[1]);
        }
        self.r32.iter_mut().for_each(|r| *r = [0; LANES]);
        self.r64.iter_mut().for_each(|r| *r = [0; LANES]);
        self.preds.iter_mut().for_each(|p| *p = 0);
        self.pc = [0; LANES];
        self.exited = !self.valid;
        self.collective = 0;
        self.barrier = 0;
        self.wsync = 0;
        self.clock = 0;
        self.known.clear();
        self.known.resize(LANES, [0; LANES]);
    }

    /// A `bar.warp.sync` completed by the lanes of `members` (every one of them arrived).
    ///
    /// It orders the members' earlier accesses before the members' later ones, and nothing
    /// for the other lanes (PTX ISA, `bar.warp.sync`: memory ordering "among threads
    /// participating in barrier"); ordering is transitive through lanes the syncs share.
    /// That is a vector clock per lane, with one twist: the components are not per-lane
    /// counters but numbers of the warp's syncs, which the simulator completes one at a time,
    /// so one clock (`wsync`) numbers them all. Sync `s` gets number `wsync + 1`; each member
    /// learns what every member knew (component-wise max), and that every member's accesses
    /// up to now are ordered before sync `s` (component = `s`). An access at clock `t`
    /// (syncs up to `t` done) then happens before lane `b`'s iff `known[b][a] > t`. Stamps of
    /// different lanes being comparable is what lets the shadow summarise many readers of a
    /// granule by a lane mask and the latest stamp.
    pub fn warp_sync(&mut self, members: u32) {
        self.wsync += 1;
        let mut join = [0u32; LANES];
        for l in lanes(members) {
            for (j, k) in join.iter_mut().zip(&self.known[l]) {
                *j = (*j).max(*k);
            }
        }
        for m in lanes(members) {
            join[m] = self.wsync;
        }
        for l in lanes(members) {
            self.known[l] = join;
        }
    }

    /// Lanes that can run now.
    #[inline]
    pub fn runnable(&self) -> u32 {
        !(self.exited | self.collective | self.barrier)
    }

    /// Linear thread id within the CTA of `lane`.
    #[inline]
    pub fn linear_tid(&self, lane: usize) -> u32 {
        self.index * LANES as u32 + lane as u32
    }

    fn special(&self, s: Special, u: &Uniforms) -> Lanes32 {
        match s {
            Special::Tid(a) => self.tid[a as usize],
            Special::Ntid(a) => [u.ntid[a as usize]; LANES],
            Special::Ctaid(a) => [u.ctaid[a as usize]; LANES],
            Special::Nctaid(a) => [u.nctaid[a as usize]; LANES],
            Special::LaneId => each(|l| l as u32),
            Special::WarpId => [self.index; LANES],
            Special::NWarpId => [u.nwarps; LANES],
            Special::Clock | Special::Clock64 => [self.clock as u32; LANES],
        }
    }

    /// A source as 32-bit lanes (64-bit registers truncated, predicates as 0/1).
    #[inline]
    pub fn read32(&self, s: &Src, u: &Uniforms) -> Lanes32 {
        match *s {
            Src::Reg(Reg {
                bank: Bank::R32,
                index,
            }) => self.r32[index as usize],
            Src::Reg(Reg {
                bank: Bank::R64,
                index,
            }) => {
                let r = &self.r64[index as usize];
                each(|l| r[l] as u32)
            }
            Src::Reg(Reg {
                bank: Bank::Pred,
                index,
            }) => {
                let p = self.preds[index as usize];
                each(|l| (p >> l) & 1)
            }
            Src::Imm(v) => [v as u32; LANES],
            Src::Special(sp) => self.special(sp, u),
        }
    }

    /// A source as 64-bit lanes (32-bit registers zero-extended).
    #[inline]
    pub fn read64(&self, s: &Src, u: &Uniforms) -> Lanes64 {
        match *s {
            Src::Reg(Reg {
                bank: Bank::R64,
                index,
            }) => self.r64[index as usize],
            Src::Imm(v) => [v; LANES],
            Src::Special(Special::Clock64) => [self.clock; LANES],
            _ => {
                let v = self.read32(s, u);
                each(|l| u64::from(v[l]))
            }
        }
    }

    /// A source as 64-bit lanes sign- or zero-extended from `ty`'s width (floats: raw bits).
    #[inline]
    pub fn read_ext(&self, s: &Src, ty: Ty, u: &Uniforms) -> Lanes64 {
        match ty.bytes() {
            8 => self.read64(s, u),
            4 if ty.is_signed() => {
                let v = self.read32(s, u);
                each(|l| v[l] as i32 as i64 as u64)
            }
            4 => {
                let v = self.read32(s, u);
                each(|l| u64::from(v[l]))
            }
            2 if ty.is_signed() => {
                let v = self.read32(s, u);
                each(|l| v[l] as u16 as i16 as i64 as u64)
            }
            2 => {
                let v = self.read32(s, u);
                each(|l| u64::from(v[l] as u16))
            }
            _ if ty.is_signed() => {
                let v = self.read32(s, u);
                each(|l| v[l] as u8 as i8 as i64 as u64)
            }
            _ => {
                let v = self.read32(s, u);
                each(|l| u64::from(v[l] as u8))
            }
        }
    }

    /// Predicate source as a lane mask.
    #[inline]
    pub fn read_pred(&self, s: &Src, u: &Uniforms) -> u32 {
        match *s {
            Src::Reg(Reg {
                bank: Bank::Pred,
                index,
            }) => self.preds[index as usize],
            Src::Imm(v) => {
                if v != 0 {
                    u32::MAX
                } else {
                    0
                }
            }
            _ => {
                let v = self.read32(s, u);
                (0..LANES).fold(0, |m, l| m | (u32::from(v[l] != 0) << l))
            }
        }
    }

    #[inline]
    pub fn write32(&mut self, d: Reg, v: &Lanes32, mask: u32) {
        match d.bank {
            Bank::R32 => blend(&mut self.r32[d.index as usize], v, mask),
            Bank::R64 => {
                let wide: Lanes64 = each(|l| u64::from(v[l]));
                blend(&mut self.r64[d.index as usize], &wide, mask);
            }
            Bank::Pred => {
                let bits = (0..LANES).fold(0u32, |m, l| m | (u32::from(v[l] != 0) << l));
                self.write_pred(d, bits, mask);
            }
        }
    }

    #[inline]
    pub fn write64(&mut self, d: Reg, v: &Lanes64, mask: u32) {
        match d.bank {
            Bank::R64 => blend(&mut self.r64[d.index as usize], v, mask),
            _ => {
                let narrow: Lanes32 = each(|l| v[l] as u32);
                self.write32(d, &narrow, mask);
            }
        }
    }

    /// Writes lanes truncated to `ty`'s width (16-bit values keep the upper half zero).
    #[inline]
    pub fn write_ty(&mut self, d: Reg, ty: Ty, v: &Lanes64, mask: u32) {
        match ty.bytes() {
            8 => self.write64(d, v, mask),
            4 => self.write32(d, &each(|l| v[l] as u32), mask),
            2 => self.write32(d, &each(|l| v[l] as u32 & 0xffff), mask),
            _ => self.write32(d, &each(|l| v[l] as u32 & 0xff), mask),
        }
    }

    #[inline]
    pub fn write_pred(&mut self, d: Reg, bits: u32, mask: u32) {
        let p = &mut self.preds[d.index as usize];
        *p = (*p & !mask) | (bits & mask);
    }
}

#[inline]
fn blend<T: Copy>(dst: &mut [T; LANES], v: &[T; LANES], mask: u32) {
    if mask == u32::MAX {
        *dst = *v;
    } else {
        for l in 0..LANES {
            if mask >> l & 1 != 0 {
                dst[l] = v[l];
            }
        }
    }
}

/// Lanes of `mask`, lowest first.
#[inline]
pub fn lanes(mask: u32) -> impl Iterator<Item = usize> {
    let mut m = mask;
    std::iter::from_fn(move || {
        if m == 0 {
            None
        } else {
            let l = m.trailing_zeros() as usize;
            m &= m - 1;
            Some(l)
        }
    })
}
