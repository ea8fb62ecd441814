//! Loads, stores and atomics for the active lanes of a warp, with memcheck (bounds and
//! alignment), initcheck, the shared-memory racecheck shadow and globalcheck.

use super::global_race::{CtaShadow, Kind, LaunchShadow, Names};
use super::memory::{AccessError, Allocation, MemoryView};
use super::race::Accessor;
use super::shared::{SharedFault, SharedMemory};
use super::warp::{each, lanes, Lanes64, Uniforms, Warp, LANES};
use crate::counters::{distinct_sectors, shared_wavefronts, Counters};
use crate::error::Checker;
use crate::ir::{Address, AtomOp, Bank, Reg, Space, Src, Ty};
use crate::ptxas::Counting;

/// Widest vector access (`.v4`); the parser refuses wider ones.
pub const MAX_VECTOR: usize = 4;

/// Generic addresses of the CTA's shared window start here (what `cvta.shared` returns).
pub const SHARED_WINDOW: u64 = 0x0000_1000_0000_0000;

/// A memory fault for one lane, before it is dressed with kernel, line and CTA.
pub struct LaneFault {
    pub checker: Checker,
    pub lane: usize,
    pub address: Option<u64>,
    pub detail: String,
}

/// What loads and stores need besides the warp.
pub struct MemoryCtx<'a> {
    pub global: &'a MemoryView,
    pub shared: &'a mut SharedMemory,
    pub params: &'a [u8],
    pub bar_epoch: u32,
    pub instr: u32,
    /// How this instruction's access is counted (ptxas' vectorisation and reuse).
    pub counting: Counting,
    pub uniforms: &'a Uniforms,
    /// Whether reads of never-written global memory are reported (`Checks::initcheck`).
    pub initcheck: bool,
    /// Where memory counters go, when the device counts them.
    pub counters: Option<&'a mut Counters>,
    /// globalcheck's shadows, when it runs.
    pub globalcheck: Option<GlobalCheck<'a>>,
}

/// What globalcheck needs for one access: the CTA and launch levels, the CTA's linear index
/// in the grid, and the names for its reports.
pub struct GlobalCheck<'a> {
    pub shadow: &'a mut CtaShadow,
    pub launch: &'a LaunchShadow,
    pub cta: u32,
    pub names: Names<'a>,
}

/// Where one lane's access goes.
enum Target<'a> {
    Global(&'a Allocation, u64),
    Shared(usize),
    Param(usize),
}

impl<'a> MemoryCtx<'a> {
    fn fault(&self, checker: Checker, lane: usize, address: u64, detail: String) -> LaneFault {
        LaneFault {
            checker,
            lane,
            address: Some(address),
            detail,
        }
    }

    fn accessor<'w>(&self, w: &'w Warp, lane: usize) -> Accessor<'w> {
        Accessor {
            tid: w.linear_tid(lane) as u16,
            wsync: w.wsync,
            known: &w.known[lane],
            bar: self.bar_epoch,
            instr: self.instr,
        }
    }

    /// Resolves one lane's address for an access of `size` bytes (a whole vector: it must be
    /// aligned to its full size, as PTX requires).
    #[inline]
    fn target(
        &self,
        space: Space,
        address: u64,
        size: u32,
        lane: usize,
        last: &mut Option<&'a Allocation>,
    ) -> Result<Target<'a>, LaneFault> {
        let misaligned = |what: &str| {
            self.fault(
                Checker::Memcheck,
                lane,
                address,
                format!("misaligned {size}-byte {what} access"),
            )
        };
        let shared = |offset: u64| {
            if offset % u64::from(size) != 0 {
                Err(misaligned("shared"))
            } else if offset + u64::from(size) > self.shared.len() as u64 {
                Err(self.fault(
                    Checker::Memcheck,
                    lane,
                    offset,
                    format!(
                        "{size}-byte shared access past the CTA's {} shared bytes",
                        self.shared.len()
                    ),
                ))
            } else {
                Ok(Target::Shared(offset as usize))
            }
        };
        match space {
            Space::Shared => shared(address),
            Space::Param => {
                let end = address.checked_add(u64::from(size));
                if end.is_some_and(|e| e <= self.params.len() as u64) {
                    Ok(Target::Param(address as usize))
                } else {
                    Err(self.fault(
                        Checker::Memcheck,
                        lane,
                        address,
                        format!(
                            "parameter access past the {} parameter bytes",
                            self.params.len()
                        ),
                    ))
                }
            }
            Space::Generic if (SHARED_WINDOW..SHARED_WINDOW + (1 << 32)).contains(&address) => {
                shared(address - SHARED_WINDOW)
            }
            Space::Global | Space::Generic => {
                // Most lanes of a warp touch the allocation the previous lane did.
                if let Some(a) = *last {
                    if address >= a.base
                        && address + u64::from(size) <= a.end()
                        && address % u64::from(size) == 0
                    {
                        return Ok(Target::Global(a, address - a.base));
                    }
                }
                let global: &'a MemoryView = self.global;
                match global.find(address, size) {
                    Ok((allocation, offset)) => {
                        *last = Some(allocation);
                        Ok(Target::Global(allocation, offset))
                    }
                    Err(AccessError::Misaligned) => Err(misaligned("global")),
                    Err(AccessError::Unmapped(why)) => Err(self.fault(
                        Checker::Memcheck,
                        lane,
                        address,
                        format!("{size}-byte global access {why}"),
                    )),
                }
            }
        }
    }

    fn shared_fault(&self, w: &Warp, lane: usize, offset: usize, fault: SharedFault) -> LaneFault {
        match fault {
            SharedFault::Uninitialised => self.fault(
                Checker::Initcheck,
                lane,
                offset as u64,
                "shared memory read before any thread of the CTA wrote it".into(),
            ),
            SharedFault::Race(super::race::Race {
                this_is_write,
                other_is_write,
                other_tid,
                other_instr,
            }) => {
                let kind = |write: bool| if write { "write" } else { "read" };
                let other = match other_tid {
                    Some(t) => format!("thread {} (warp {})", t, t / 32),
                    None => "several threads".into(),
                };
                self.fault(
                    Checker::Racecheck,
                    lane,
                    offset as u64,
                    format!(
                        "{} races with a {} by {other} at instruction #{other_instr} in the same \
                         barrier interval (no bar.sync{} orders them)",
                        kind(this_is_write),
                        kind(other_is_write),
                        if other_tid.is_some_and(|t| t / 32 == w.index as u16) {
                            " or bar.warp.sync"
                        } else {
                            ""
                        }
                    ),
                )
            }
        }
    }

    /// globalcheck of one lane's access of `size` bytes at device address `address`
    /// (`stored`: the bytes a write stores).
    #[inline]
    fn check_global(
        &mut self,
        w: &Warp,
        lane: usize,
        address: u64,
        size: u32,
        kind: Kind,
        stored: Option<&[u8]>,
    ) -> Result<(), LaneFault> {
        let who = self.accessor(w, lane);
        let Some(g) = self.globalcheck.as_mut() else {
            return Ok(());
        };
        match g
            .shadow
            .access(g.launch, g.cta, address, size, kind, stored, who)
        {
            Ok(()) => Ok(()),
            Err(fault) => Err(LaneFault {
                checker: Checker::Globalcheck,
                lane,
                address: Some(address),
                detail: fault.describe(&g.names),
            }),
        }
    }

    /// Memory counters of one request: sectors (global) or wavefronts (shared), and the
    /// unique sectors of the launch; a request ptxas fuses with its neighbour counts once,
    /// at the width of both, and one it drops not at all.
    fn count(&mut self, space: Space, addresses: &Lanes64, mask: u32, total: u32, store: bool) {
        let Some(c) = self.counters.as_deref_mut() else {
            return;
        };
        if mask == 0 {
            return;
        }
        let fused: Lanes64;
        let (addresses, total) = match self.counting {
            Counting::Own => (addresses, total),
            Counting::Folded | Counting::Reused => return,
            Counting::Fused { delta, bytes } => {
                fused = each(|l| addresses[l].wrapping_add(delta as u64));
                (&fused, bytes)
            }
        };
        let first = addresses[mask.trailing_zeros() as usize];
        let shared = space == Space::Shared
            || (space == Space::Generic
                && (SHARED_WINDOW..SHARED_WINDOW + (1 << 32)).contains(&first));
        if shared {
            let (wavefronts, ideal) = shared_wavefronts(addresses, mask, total, !store);
            if store {
                c.shared_store_requests += 1;
                c.shared_store_wavefronts += wavefronts;
                c.shared_store_ideal_wavefronts += ideal;
            } else {
                c.shared_load_requests += 1;
                c.shared_load_wavefronts += wavefronts;
                c.shared_load_ideal_wavefronts += ideal;
            }
            return;
        }
        if space == Space::Param {
            return;
        }
        let sectors = distinct_sectors(addresses, mask, total);
        let bytes = u64::from(mask.count_ones()) * u64::from(total);
        if store {
            c.global_store_requests += 1;
            c.global_store_sectors += sectors;
            c.global_store_bytes += bytes;
        } else {
            c.global_load_requests += 1;
            c.global_load_sectors += sectors;
            c.global_load_bytes += bytes;
        }
        for lane in lanes(mask) {
            self.global.mark(addresses[lane], total, store);
        }
    }

    /// `ld.space[.nc].[vN.]ty {d...}, [addr]` (N ≤ 4).
    #[allow(clippy::too_many_arguments)]
    pub fn load(
        &mut self,
        w: &mut Warp,
        space: Space,
        ty: Ty,
        nc: bool,
        d: &[Reg],
        addr: &Address,
        mask: u32,
    ) -> Result<(), LaneFault> {
        let size = ty.bytes();
        let n = d.len().min(MAX_VECTOR);
        let total = size * n as u32;
        let base = addr.base.map(|r| w.read64(&Src::Reg(r), self.uniforms));
        let addresses: Lanes64 = each(|l| lane_address(addr, &base, l));
        self.count(space, &addresses, mask, total, false);
        // The common case, 32-bit elements from shared memory into 32-bit registers, without
        // per-lane dispatch: validate every lane, update the shadow, then gather.
        if space == Space::Shared && size == 4 && d.iter().all(|r| r.bank != Bank::R64) {
            let len = self.shared.len() as u64;
            if let Some(lane) = lanes(mask).find(|&l| {
                addresses[l] % u64::from(total) != 0 || addresses[l] + u64::from(total) > len
            }) {
                return match self.target(space, addresses[lane], total, lane, &mut None) {
                    Err(f) => Err(f),
                    Ok(_) => unreachable!("the lane failed the same bounds and alignment check"),
                };
            }
            if self.shared.tracked() {
                for lane in lanes(mask) {
                    let who = self.accessor(w, lane);
                    let o = addresses[lane] as usize;
                    if let Err(f) = self.shared.on_read(o, total, who) {
                        return Err(self.shared_fault(w, lane, o, f));
                    }
                }
            }
            let mut values = [[0u32; LANES]; MAX_VECTOR];
            for lane in lanes(mask) {
                let o = addresses[lane] as usize;
                for (k, value) in values.iter_mut().take(n).enumerate() {
                    value[lane] = self.shared.load32(o + 4 * k);
                }
            }
            for (reg, value) in d.iter().zip(&values) {
                w.write32(*reg, value, mask);
            }
            return Ok(());
        }
        let mut values = [[0u64; LANES]; MAX_VECTOR];
        let mut last = None;
        for lane in lanes(mask) {
            let address = addresses[lane];
            match self.target(space, address, total, lane, &mut last)? {
                Target::Param(o) => {
                    for (k, value) in values.iter_mut().take(n).enumerate() {
                        let at = o + k * size as usize;
                        let mut bytes = [0u8; 8];
                        bytes[..size as usize]
                            .copy_from_slice(&self.params[at..at + size as usize]);
                        value[lane] = extend(u64::from_le_bytes(bytes), ty);
                    }
                }
                Target::Shared(o) => {
                    let who = self.accessor(w, lane);
                    if let Err(f) = self.shared.on_read(o, total, who) {
                        return Err(self.shared_fault(w, lane, o, f));
                    }
                    for (k, value) in values.iter_mut().take(n).enumerate() {
                        value[lane] = extend(self.shared.load(o + k * size as usize, size), ty);
                    }
                }
                Target::Global(allocation, o) => {
                    let kind = if nc { Kind::NcRead } else { Kind::Read };
                    self.check_global(w, lane, address, total, kind, None)?;
                    for (k, value) in values.iter_mut().take(n).enumerate() {
                        let at = o + u64::from(size) * k as u64;
                        let (v, written) = allocation.load(at, size);
                        if !written && self.initcheck {
                            return Err(self.fault(
                                Checker::Initcheck,
                                lane,
                                allocation.base + at,
                                format!(
                                    "{size}-byte global read of memory never written (allocation \
                                     of {} bytes at {:#x})",
                                    allocation.bytes, allocation.base
                                ),
                            ));
                        }
                        value[lane] = extend(v, ty);
                    }
                }
            }
        }
        for (reg, value) in d.iter().zip(&values) {
            w.write64(*reg, value, mask);
        }
        Ok(())
    }

    /// `st.space.[vN.]ty [addr], {a...}` (N ≤ 4).
    pub fn store(
        &mut self,
        w: &mut Warp,
        space: Space,
        ty: Ty,
        a: &[Src],
        addr: &Address,
        mask: u32,
    ) -> Result<(), LaneFault> {
        let size = ty.bytes();
        let n = a.len().min(MAX_VECTOR);
        let total = size * n as u32;
        let base = addr.base.map(|r| w.read64(&Src::Reg(r), self.uniforms));
        let mut values = [[0u64; LANES]; MAX_VECTOR];
        for (value, src) in values.iter_mut().zip(a) {
            *value = w.read64(src, self.uniforms);
        }
        let addresses: Lanes64 = each(|l| lane_address(addr, &base, l));
        self.count(space, &addresses, mask, total, true);
        let mut last = None;
        for lane in lanes(mask) {
            let address = addresses[lane];
            match self.target(space, address, total, lane, &mut last)? {
                Target::Param(_) => {
                    return Err(self.fault(
                        Checker::Memcheck,
                        lane,
                        address,
                        "store to kernel parameters".into(),
                    ))
                }
                Target::Shared(o) => {
                    let who = self.accessor(w, lane);
                    if let Err(f) = self.shared.on_write(o, total, who, false) {
                        return Err(self.shared_fault(w, lane, o, f));
                    }
                    for (k, value) in values.iter().take(n).enumerate() {
                        self.shared.store(o + k * size as usize, size, value[lane]);
                    }
                }
                Target::Global(allocation, o) => {
                    if self.globalcheck.is_some() {
                        // The bytes stored: two writes of the same value do not race.
                        let mut bytes = [0u8; 8 * MAX_VECTOR];
                        let width = size as usize;
                        for (k, value) in values.iter().take(n).enumerate() {
                            let le = value[lane].to_le_bytes();
                            bytes[k * width..(k + 1) * width].copy_from_slice(&le[..width]);
                        }
                        let stored = Some(&bytes[..total as usize]);
                        self.check_global(w, lane, address, total, Kind::Write, stored)?;
                    }
                    for (k, value) in values.iter().take(n).enumerate() {
                        allocation.store(o + u64::from(size) * k as u64, size, value[lane]);
                    }
                }
            }
        }
        Ok(())
    }

    /// `atom.space.op.ty d, [addr], b[, c]`, lanes in ascending order.
    #[allow(clippy::too_many_arguments)]
    pub fn atomic(
        &mut self,
        w: &mut Warp,
        space: Space,
        op: AtomOp,
        ty: Ty,
        d: Reg,
        addr: &Address,
        b: &Src,
        c: Option<&Src>,
        mask: u32,
    ) -> Result<(), LaneFault> {
        let base = addr.base.map(|r| w.read64(&Src::Reg(r), self.uniforms));
        let vb = w.read32(b, self.uniforms);
        let vc = c.map(|c| w.read32(c, self.uniforms));
        let mut old = [0u64; LANES];
        let mut last = None;
        for lane in lanes(mask) {
            let address = lane_address(addr, &base, lane);
            let f = |x: u32| atom_apply(op, ty, x, vb[lane], vc.map_or(0, |c| c[lane]));
            old[lane] = match self.target(space, address, 4, lane, &mut last)? {
                Target::Param(_) => {
                    return Err(self.fault(
                        Checker::Memcheck,
                        lane,
                        address,
                        "atomic on kernel parameters".into(),
                    ))
                }
                Target::Shared(o) => {
                    let who = self.accessor(w, lane);
                    if let Err(fault) = self.shared.on_write(o, 4, who, true) {
                        return Err(self.shared_fault(w, lane, o, fault));
                    }
                    let x = self.shared.load(o, 4) as u32;
                    self.shared.store(o, 4, u64::from(f(x)));
                    u64::from(x)
                }
                Target::Global(allocation, o) => {
                    self.check_global(w, lane, address, 4, Kind::Atomic, None)?;
                    let (x, written) = allocation.update(o, f);
                    if !written && self.initcheck {
                        return Err(self.fault(
                            Checker::Initcheck,
                            lane,
                            address,
                            "atomic on global memory never written".into(),
                        ));
                    }
                    u64::from(x)
                }
            };
        }
        if d.index != u32::MAX {
            w.write64(d, &old, mask);
        }
        Ok(())
    }
}

/// One lane's address: its base register plus the offset, or the absolute offset.
#[inline]
fn lane_address(addr: &Address, base: &Option<Lanes64>, lane: usize) -> u64 {
    match base {
        Some(b) => b[lane].wrapping_add(addr.offset as u64),
        None => addr.offset as u64,
    }
}

/// Widens a loaded value by its type (sign-extends signed integers).
#[inline]
fn extend(raw: u64, ty: Ty) -> u64 {
    match (ty.bytes(), ty.is_signed()) {
        (1, true) => raw as u8 as i8 as i64 as u64,
        (2, true) => raw as u16 as i16 as i64 as u64,
        (4, true) => raw as u32 as i32 as i64 as u64,
        _ => raw,
    }
}

fn atom_apply(op: AtomOp, ty: Ty, x: u32, b: u32, c: u32) -> u32 {
    let f = |v: u32| f32::from_bits(v);
    match (op, ty) {
        (AtomOp::Add, Ty::F32) => (f(x) + f(b)).to_bits(),
        (AtomOp::Add, _) => x.wrapping_add(b),
        (AtomOp::Min, Ty::S32) => (x as i32).min(b as i32) as u32,
        (AtomOp::Max, Ty::S32) => (x as i32).max(b as i32) as u32,
        (AtomOp::Min, Ty::F32) => super::float::min(f(x), f(b)).to_bits(),
        (AtomOp::Max, Ty::F32) => super::float::max(f(x), f(b)).to_bits(),
        (AtomOp::Min, _) => x.min(b),
        (AtomOp::Max, _) => x.max(b),
        (AtomOp::Exch, _) => b,
        (AtomOp::Cas, _) => {
            if x == b {
                c
            } else {
                x
            }
        }
        (AtomOp::And, _) => x & b,
        (AtomOp::Or, _) => x | b,
        (AtomOp::Xor, _) => x ^ b,
        (AtomOp::Inc, _) => {
            if x >= b {
                0
            } else {
                x + 1
            }
        }
        (AtomOp::Dec, _) => {
            if x == 0 || x > b {
                b
            } else {
                x - 1
            }
        }
    }
}
