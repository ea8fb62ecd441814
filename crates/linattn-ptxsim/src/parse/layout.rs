//! Where a kernel's `.shared` variables go in its CTA's shared memory.
//!
//! PTX promises a variable only its `.align` (the type's size without one). ptxas and the
//! driver usually place it better: the first variable at offset 0 is aligned to everything,
//! and a `.align 4` array that happens to start on 16 bytes passes a `ld.shared.v4` cast
//! that the next layout change may break. [`Placement::Adversarial`] takes the promise
//! literally: each variable lands on a multiple of its alignment that is *not* a multiple of
//! twice it, so any access wider than the declared alignment faults as misaligned.

/// How the simulator lays out shared variables (`Device::with_shared_placement`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Placement {
    /// In order of declaration, each at the next multiple of its alignment (what ptxas
    /// does for the kernels seen so far).
    #[default]
    Declared,
    /// In order of declaration, each at the next offset ≡ align (mod 2·align): aligned as
    /// declared and to nothing more. Dynamic shared memory keeps the 16-byte minimum the
    /// simulator gives it in both placements, and is offset the same way from there.
    Adversarial,
}

/// One kernel's layout being built: the variables placed so far end at `declared_end` in
/// the declared layout, `placed_end` in the one `placement` makes.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    placement: Placement,
    pub declared_end: u64,
    pub placed_end: u64,
}

impl Layout {
    pub fn new(placement: Placement) -> Layout {
        Layout {
            placement,
            declared_end: 0,
            placed_end: 0,
        }
    }

    /// Places a variable of `size` bytes aligned to `align`; its offset in the placed layout.
    pub fn place(&mut self, size: u32, align: u32) -> u64 {
        let align = u64::from(align.max(1));
        self.declared_end = self.declared_end.div_ceil(align) * align + u64::from(size);
        let at = self.placement.offset(self.placed_end, align);
        self.placed_end = at + u64::from(size);
        at
    }

    /// Where dynamic shared memory aligned to `align` starts after the static variables:
    /// (declared, placed).
    pub fn dynamic(&self, align: u32) -> (u64, u64) {
        let align = u64::from(align.max(1));
        (
            Placement::Declared.offset(self.declared_end, align),
            self.placement.offset(self.placed_end, align),
        )
    }
}

impl Placement {
    /// The first offset at or after `end` where this placement puts something aligned to
    /// `align` (a power of two).
    fn offset(self, end: u64, align: u64) -> u64 {
        match self {
            Placement::Declared => end.div_ceil(align) * align,
            Placement::Adversarial => {
                let twice = 2 * align;
                // The next multiple of 2·align, plus align; or the one before it if that one
                // is still at or after `end`.
                let at = end.div_ceil(twice) * twice + align;
                if at >= twice + align && at - twice >= end {
                    at - twice
                } else {
                    at
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adversarial_offsets_are_aligned_to_align_and_not_to_twice_it() {
        for align in [1u64, 2, 4, 8, 16] {
            for end in 0..100u64 {
                let at = Placement::Adversarial.offset(end, align);
                assert!(at >= end, "{align} {end}");
                assert_eq!(at % (2 * align), align, "{align} {end} → {at}");
                // The first such offset: the previous candidate is before `end`.
                assert!(at < end + 2 * align, "{align} {end} → {at}");
            }
        }
    }

    #[test]
    fn layouts_track_both_ends() {
        let mut l = Layout::new(Placement::Adversarial);
        assert_eq!(l.place(64, 4), 4);
        assert_eq!(l.place(16, 16), 80);
        assert_eq!((l.declared_end, l.placed_end), (80, 96));
        assert_eq!(l.dynamic(16), (80, 112));
        let mut d = Layout::new(Placement::Declared);
        assert_eq!(d.place(64, 4), 0);
        assert_eq!(d.place(16, 16), 64);
        assert_eq!(d.dynamic(16), (80, 80));
    }
}
