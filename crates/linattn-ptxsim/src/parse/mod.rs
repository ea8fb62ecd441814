//! PTX text → [`Program`]: module directives, `.global` variables, entries with their
//! parameters, registers, shared variables, labels and decoded instructions.
//!
//! Anything the simulator does not model (`.func`/`call`, `.local`, `.const` banks,
//! textures, an unknown opcode or modifier) is a [`SimError::Parse`] naming the line.

mod instr;
mod layout;
pub mod lex;
mod scope;

pub use layout::Placement;

use std::collections::HashMap;

use crate::error::{parse_error, SimError};
use crate::ir::{GlobalVar, Kernel, Param, Program, SourceLoc, Ty};
use lex::{parse_float, parse_int, Statement, StatementKind};
use scope::{Registers, Scope};

/// Parses a whole module. `place_global` gives each module-scope `.global` variable its
/// device address (the caller allocates and initialises it). Shared variables are laid out
/// as declared.
pub fn parse_program(
    text: &str,
    place_global: &mut dyn FnMut(&GlobalVar) -> Result<u64, SimError>,
) -> Result<Program, SimError> {
    parse_program_placed(text, Placement::Declared, place_global)
}

/// [`parse_program`] with the kernels' shared variables laid out as `placement` says.
pub fn parse_program_placed(
    text: &str,
    placement: Placement,
    place_global: &mut dyn FnMut(&GlobalVar) -> Result<u64, SimError>,
) -> Result<Program, SimError> {
    let statements = lex::statements(text);
    let mut program = Program {
        target: String::new(),
        version: String::new(),
        kernels: HashMap::new(),
        globals: Vec::new(),
        files: HashMap::new(),
    };
    let mut module = ModuleScope::default();
    let mut i = 0;
    while i < statements.len() {
        let s = &statements[i];
        i += 1;
        match s.kind {
            StatementKind::Plain => module_directive(s, &mut program, &mut module, place_global)?,
            StatementKind::Open if s.text.contains(".entry") => {
                let body_start = i;
                let mut depth = 1;
                while i < statements.len() && depth > 0 {
                    match statements[i].kind {
                        StatementKind::Open => depth += 1,
                        StatementKind::Close => depth -= 1,
                        _ => {}
                    }
                    i += 1;
                }
                if depth > 0 {
                    return Err(parse_error(s.line, &s.text, "entry body is not closed"));
                }
                let kernel = build_kernel(s, &statements[body_start..i - 1], &module, placement)?;
                program.kernels.insert(kernel.name.clone(), kernel);
            }
            StatementKind::Open if s.text.contains(".func") => {
                return Err(parse_error(
                    s.line,
                    &s.text,
                    "device functions (.func) are not simulated: kernels must be fully inlined",
                ))
            }
            _ => {
                return Err(parse_error(
                    s.line,
                    &s.text,
                    "unexpected statement at module scope",
                ))
            }
        }
    }
    if program.target.is_empty() {
        return Err(parse_error(1, "", "no .target directive"));
    }
    Ok(program)
}

/// Module-scope names an entry may refer to.
#[derive(Default)]
struct ModuleScope {
    globals: HashMap<String, u64>,
    /// Module-scope `.shared` variables: (size, align).
    shared: Vec<(String, u32, u32)>,
    /// `.extern .shared` arrays (dynamic shared memory): name → align.
    dynamic: HashMap<String, u32>,
}

fn module_directive(
    s: &Statement,
    program: &mut Program,
    module: &mut ModuleScope,
    place_global: &mut dyn FnMut(&GlobalVar) -> Result<u64, SimError>,
) -> Result<(), SimError> {
    let words: Vec<&str> = s.text.split_whitespace().collect();
    match words.first().copied() {
        Some(".version") => program.version = words.get(1).unwrap_or(&"").to_string(),
        Some(".target") => program.target = words[1..].join(" "),
        Some(".address_size") => {
            if words.get(1) != Some(&"64") {
                return Err(parse_error(
                    s.line,
                    &s.text,
                    "only .address_size 64 is simulated",
                ));
            }
        }
        Some(".file") => {
            // `.file 1 "path"` (optionally `, timestamp, size`).
            let index = words.get(1).and_then(|w| w.parse::<u32>().ok());
            let path = s.text.split('"').nth(1);
            match (index, path) {
                (Some(index), Some(path)) => {
                    program.files.insert(index, path.to_string());
                }
                _ => return Err(parse_error(s.line, &s.text, "malformed .file directive")),
            }
        }
        _ => {
            let decl = VarDecl::parse(s)?;
            match (decl.space.as_str(), decl.external) {
                (".global", false) => {
                    let var = GlobalVar {
                        name: decl.name.clone(),
                        align: decl.align,
                        init: decl.init_bytes(s)?,
                    };
                    let address = place_global(&var)?;
                    module.globals.insert(var.name.clone(), address);
                    program.globals.push(var);
                }
                (".shared", false) => {
                    let size = decl.size();
                    module.shared.push((decl.name, size, decl.align))
                }
                (".shared", true) => {
                    module.dynamic.insert(decl.name, decl.align.max(16));
                }
                _ => {
                    return Err(parse_error(
                        s.line,
                        &s.text,
                        format!("module-scope {} is not simulated", decl.space),
                    ))
                }
            }
        }
    }
    Ok(())
}

/// `[.visible|.extern] .space [.align N] .type name[count] [= init]`.
struct VarDecl {
    space: String,
    external: bool,
    align: u32,
    ty: Ty,
    name: String,
    count: Option<u32>,
    init: Option<String>,
}

impl VarDecl {
    fn parse(s: &Statement) -> Result<VarDecl, SimError> {
        let (decl, init) = match s.text.split_once('=') {
            Some((d, i)) => (d, Some(i.trim().to_string())),
            None => (s.text.as_str(), None),
        };
        let mut space = String::new();
        let mut external = false;
        let mut align = 0;
        let mut ty = None;
        let mut name = None;
        let mut words = decl.split_whitespace();
        while let Some(w) = words.next() {
            match w {
                ".visible" | ".weak" | ".common" => {}
                ".extern" => external = true,
                ".global" | ".shared" | ".const" | ".local" | ".param" => space = w.to_string(),
                ".align" => {
                    align = words
                        .next()
                        .and_then(|a| a.parse().ok())
                        .ok_or_else(|| parse_error(s.line, &s.text, "bad .align"))?
                }
                _ if w.starts_with('.') => {
                    ty =
                        Some(Ty::parse(&w[1..]).ok_or_else(|| {
                            parse_error(s.line, &s.text, format!("unknown type {w}"))
                        })?)
                }
                _ => name = Some(w.to_string()),
            }
        }
        let ty = ty.ok_or_else(|| parse_error(s.line, &s.text, "declaration without a type"))?;
        let name =
            name.ok_or_else(|| parse_error(s.line, &s.text, "declaration without a name"))?;
        let (name, count) = match name.split_once('[') {
            Some((base, rest)) => {
                let inside = rest.trim_end_matches(']');
                let count = if inside.is_empty() {
                    None
                } else {
                    Some(
                        inside
                            .parse()
                            .map_err(|_| parse_error(s.line, &s.text, "bad array size"))?,
                    )
                };
                (base.to_string(), count)
            }
            None => (name, Some(1)),
        };
        let align = if align == 0 { ty.bytes().max(1) } else { align };
        Ok(VarDecl {
            space,
            external,
            align,
            ty,
            name,
            count,
            init,
        })
    }

    fn size(&self) -> u32 {
        self.ty.bytes() * self.count.unwrap_or(0)
    }

    fn init_bytes(&self, s: &Statement) -> Result<Vec<u8>, SimError> {
        let size = self.size() as usize;
        let mut bytes = vec![0u8; size];
        if let Some(init) = &self.init {
            let values: Vec<&str> = init
                .trim_matches(|c| c == '{' || c == '}')
                .split(',')
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .collect();
            let width = self.ty.bytes() as usize;
            for (k, value) in values.iter().enumerate() {
                let bits = if self.ty.is_float() {
                    let x = parse_float(value)
                        .or_else(|| parse_int(value).map(|v| v as i64 as f64))
                        .ok_or_else(|| parse_error(s.line, &s.text, "bad initialiser"))?;
                    if width == 4 {
                        u64::from((x as f32).to_bits())
                    } else {
                        x.to_bits()
                    }
                } else {
                    parse_int(value)
                        .ok_or_else(|| parse_error(s.line, &s.text, "bad initialiser"))?
                };
                let at = k * width;
                if at + width > size {
                    return Err(parse_error(
                        s.line,
                        &s.text,
                        "initialiser longer than the variable",
                    ));
                }
                bytes[at..at + width].copy_from_slice(&bits.to_le_bytes()[..width]);
            }
        }
        Ok(bytes)
    }
}

/// An entry header: name, parameters, parameter bytes, [`.maxntid`, `.reqntid`].
type Header = (String, Vec<Param>, u32, [Option<[u32; 3]>; 2]);

/// Parameter list and performance directives of an entry header.
fn parse_header(s: &Statement) -> Result<Header, SimError> {
    let text = &s.text;
    let after_entry = text
        .split_once(".entry")
        .ok_or_else(|| parse_error(s.line, text, "no .entry"))?
        .1;
    let open = after_entry.find('(').unwrap_or(after_entry.len());
    let name = after_entry[..open].trim().to_string();
    let (param_text, directives) = if open < after_entry.len() {
        let close = after_entry
            .rfind(')')
            .ok_or_else(|| parse_error(s.line, text, "parameter list not closed"))?;
        (&after_entry[open + 1..close], &after_entry[close + 1..])
    } else {
        ("", after_entry)
    };
    let mut params = Vec::new();
    let mut offset = 0u32;
    for p in param_text
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let decl = VarDecl::parse(&Statement {
            line: s.line,
            text: p.to_string(),
            kind: StatementKind::Plain,
        })?;
        if decl.space != ".param" {
            return Err(parse_error(s.line, p, "kernel parameter must be .param"));
        }
        let bytes = decl.size();
        let align = decl.align.max(1);
        offset = offset.div_ceil(align) * align;
        params.push(Param {
            name: decl.name,
            ty: decl.ty,
            bytes,
            align,
            offset,
        });
        offset += bytes;
    }
    let mut limits = [None, None];
    let mut words = directives.split_whitespace().peekable();
    while let Some(w) = words.next() {
        let slot = match w {
            ".maxntid" => Some(0),
            ".reqntid" => Some(1),
            _ => None,
        };
        let mut dims = [1u32; 3];
        let mut k = 0;
        while let Some(next) = words.peek() {
            if next.starts_with('.') {
                break;
            }
            let value = words.next().unwrap_or_default().trim_end_matches(',');
            if let (Some(_), Ok(v)) = (slot, value.parse::<u32>()) {
                if k < 3 {
                    dims[k] = v;
                }
                k += 1;
            }
        }
        if let Some(slot) = slot {
            limits[slot] = Some(dims);
        }
    }
    Ok((name, params, offset, limits))
}

fn build_kernel(
    header: &Statement,
    body: &[Statement],
    module: &ModuleScope,
    placement: Placement,
) -> Result<Kernel, SimError> {
    let (name, params, param_bytes, [max_threads, required_threads]) = parse_header(header)?;
    let mut regs = Registers::default();
    let mut labels = HashMap::new();
    let mut shared = HashMap::new();
    let mut layout = layout::Layout::new(placement);
    let mut place = |shared: &mut HashMap<String, u64>, name: &str, size: u32, align: u32| {
        shared.insert(name.to_string(), layout.place(size, align));
    };
    let mut instructions: Vec<&Statement> = Vec::new();
    let mut locs = Vec::new();
    let mut loc = None;
    for s in body {
        match s.kind {
            StatementKind::Label => {
                labels.insert(s.text.clone(), instructions.len() as u32);
            }
            StatementKind::Open | StatementKind::Close => {}
            StatementKind::Plain => {
                let first = s.text.split_whitespace().next().unwrap_or_default();
                match first {
                    ".reg" => regs.declare(s)?,
                    ".shared" => {
                        let decl = VarDecl::parse(s)?;
                        place(&mut shared, &decl.name, decl.size(), decl.align);
                    }
                    ".loc" => loc = Some(parse_loc(s)?),
                    ".pragma" | ".maxnreg" => {}
                    ".local" | ".const" | ".param" => {
                        return Err(parse_error(
                            s.line,
                            &s.text,
                            format!("{first} variables are not simulated"),
                        ))
                    }
                    _ if first.starts_with('.') => {
                        return Err(parse_error(
                            s.line,
                            &s.text,
                            "unknown directive in a kernel body",
                        ))
                    }
                    _ => {
                        instructions.push(s);
                        locs.push(loc);
                    }
                }
            }
        }
    }
    // Module-scope shared variables, only those this kernel names.
    for (var, size, align) in &module.shared {
        if instructions.iter().any(|s| mentions(&s.text, var)) {
            place(&mut shared, var, *size, *align);
        }
    }
    let mut uses_dynamic_shared = false;
    let (mut dynamic_shared_offset, mut placed_dynamic_offset) = layout.dynamic(16);
    for (var, align) in &module.dynamic {
        if instructions.iter().any(|s| mentions(&s.text, var)) {
            (dynamic_shared_offset, placed_dynamic_offset) = layout.dynamic(*align);
            uses_dynamic_shared = true;
        }
    }
    for var in module.dynamic.keys() {
        shared.insert(var.clone(), placed_dynamic_offset);
    }
    let scope = Scope {
        regs,
        labels,
        params: params.iter().map(|p| (p.name.clone(), p.offset)).collect(),
        shared,
        globals: &module.globals,
    };
    let mut instrs = Vec::with_capacity(instructions.len());
    let mut text = Vec::with_capacity(instructions.len());
    for s in instructions {
        instrs.push(instr::decode(s, &scope)?);
        text.push(s.text.clone());
    }
    let fits = |v: u64| {
        u32::try_from(v)
            .map_err(|_| parse_error(header.line, &header.text, "shared memory too large"))
    };
    let static_shared_bytes = fits(layout.declared_end)?;
    let dynamic_shared_offset = fits(dynamic_shared_offset)?;
    let placed_shared_bytes = fits(layout.placed_end)?;
    let placed_dynamic_offset = fits(placed_dynamic_offset)?;
    Ok(Kernel {
        name,
        params,
        param_bytes,
        preds: scope.regs.counts[0],
        regs32: scope.regs.counts[1],
        regs64: scope.regs.counts[2],
        static_shared_bytes,
        dynamic_shared_offset,
        placed_shared_bytes,
        placed_dynamic_offset,
        uses_dynamic_shared,
        max_threads,
        required_threads,
        counting: crate::ptxas::plan(&instrs),
        instrs,
        text,
        locs,
    })
}

/// `.loc file line column[, function_name …, inlined_at …]`: the file and line.
fn parse_loc(s: &Statement) -> Result<SourceLoc, SimError> {
    let mut words = s.text.split_whitespace().skip(1);
    let mut number = || {
        words
            .next()
            .map(|w| w.trim_end_matches(','))
            .and_then(|w| w.parse::<u32>().ok())
    };
    match (number(), number()) {
        (Some(file), Some(line)) => Ok(SourceLoc { file, line }),
        _ => Err(parse_error(s.line, &s.text, "malformed .loc directive")),
    }
}

/// Whether `text` names `symbol` as a whole word.
fn mentions(text: &str, symbol: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$';
    text.match_indices(symbol).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + symbol.len()..].chars().next();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}
