//! An `.entry` in the shape NVRTC writes it: the parameter list (`{name}_param_{i}`), the
//! register declarations (`.reg .b32 %r<N>;`), shared declarations, one `ld.param` per
//! parameter in order, then the kernel's own instructions. A test writes only what makes its
//! kernel different.

use super::ptx;

/// One kernel. `..Entry::default()` leaves out what a kernel does not have.
#[derive(Debug, Default, Clone, Copy)]
pub struct Entry<'a> {
    pub name: &'a str,
    /// Per parameter, in order: its type (`u64`, `u32`, `f32`) and the register its
    /// `ld.param` loads it into.
    pub params: &'a [(&'a str, &'a str)],
    /// Performance directives between the parameter list and the body (`.maxntid 256, 1, 1`).
    pub directives: &'a str,
    /// Register banks by type and count: `("b32", 6)` declares `%r<6>`.
    pub regs: &'a [(&'a str, u32)],
    /// Declarations after the registers (`.shared` variables), one per line.
    pub decls: &'a str,
    /// The instructions after the parameter loads, `ret;` included.
    pub body: &'a str,
}

impl Entry<'_> {
    /// The `.entry` alone (modules with more than one entry, or module-scope variables).
    pub fn text(&self) -> String {
        let name = self.name;
        let params: Vec<String> = (self.params.iter().enumerate())
            .map(|(i, (ty, _))| format!("\t.param .{ty} {name}_param_{i}"))
            .collect();
        let mut text = if params.is_empty() {
            format!(".visible .entry {name}()\n")
        } else {
            format!(".visible .entry {name}(\n{}\n)\n", params.join(",\n"))
        };
        if !self.directives.is_empty() {
            text += &format!("{}\n", self.directives);
        }
        text += "{\n";
        for (ty, count) in self.regs {
            text += &format!("\t.reg .{ty} \t{}<{count}>;\n", register_prefix(ty));
        }
        for decl in self.decls.lines().filter(|l| !l.trim().is_empty()) {
            text += &format!("\t{}\n", decl.trim());
        }
        text += "\n";
        for (i, (ty, reg)) in self.params.iter().enumerate() {
            text += &format!("\tld.param.{ty} \t{reg}, [{name}_param_{i}];\n");
        }
        text += self.body.trim_start_matches('\n');
        text += "\n}\n";
        text
    }

    /// The module: the header and the entry.
    pub fn ptx(&self) -> String {
        ptx(&self.text())
    }
}

/// A kernel of two pointer parameters, `in` and `out`, started as NVRTC starts one: both
/// converted to global addresses (`%rd3`, `%rd4`), `%tid.x` in `%r1`, `%rd5 = 4 * tid`;
/// then `body`. The entry alone (see [`ptx`]).
pub fn in_out(name: &str, regs: &[(&str, u32)], body: &str) -> String {
    Entry {
        name,
        params: &[("u64", "%rd1"), ("u64", "%rd2")],
        regs,
        body: &format!(
            "\tcvta.to.global.u64 \t%rd3, %rd1;
\tcvta.to.global.u64 \t%rd4, %rd2;
\tmov.u32 \t%r1, %tid.x;
\tmul.wide.u32 \t%rd5, %r1, 4;
{body}"
        ),
        ..Entry::default()
    }
    .text()
}

/// The module of a kernel whose one parameter, `out`, is loaded into `%rd1`; `decls` and
/// `body` as in [`Entry`].
pub fn out_only(name: &str, regs: &[(&str, u32)], decls: &str, body: &str) -> String {
    Entry {
        name,
        params: &[("u64", "%rd1")],
        regs,
        decls,
        body,
        ..Entry::default()
    }
    .ptx()
}

/// NVRTC's register names per declared type.
fn register_prefix(ty: &str) -> &'static str {
    match ty {
        "pred" => "%p",
        "b16" => "%rs",
        "b32" => "%r",
        "f32" => "%f",
        "b64" => "%rd",
        other => panic!("no register bank for .{other}"),
    }
}
