#!/usr/bin/env python3
"""File-level import circles of a Rust crate.

Reads every .rs file of the library under <crate>/src, maps each to its module path
(src/a/b.rs and src/a/b/mod.rs are `a::b`), and draws an edge from a file to every file it
names: through `crate::`, `super::` or `self::` paths, or paths starting at a child module
the file declares (`use record::X` beside `mod record;`) or at a file module it imports
(`results::schema::Cell` after `use crate::results;`), in `use` trees and inline paths
alike. Inline `mod x { ... }` blocks such as `mod tests` are followed, so their `super` is
the file itself. A path points at the deepest file module it spells out:
`crate::results::schema::Cell` is an edge to results/schema.rs, `crate::results::Cell` one
to results/mod.rs (a re-export counts as the import it is). A `#[macro_export]` macro sits
at the crate root but is defined elsewhere: `crate::m` of such a macro `m` is an edge to the
file that defines it, not to lib.rs, which neither holds nor re-exports it. `mod x;` is not
an edge: a parent owning a child is not an import.

Prints each strongly connected component of more than one file and the edges that close
it; exits 1 when there is one. Usage: scripts/import_cycles.py crates/linattn-lab [...]
"""

import re
import sys
from pathlib import Path

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
# A path that starts at crate/super/self, e.g. `crate::a::b`, `super::super::x`.
PATH_RE = re.compile(rf"\b(crate|super|self)((?:\s*::\s*{IDENT})+)")
# A `use` item's tree: `use crate::a::{b, c::{d, e as f}, *};`.
USE_RE = re.compile(r"\buse\s+([^;]*);")
CHILD_MOD_RE = re.compile(rf"\bmod\s+({IDENT})\s*;")
INLINE_MOD_RE = re.compile(rf"\bmod\s+({IDENT})\s*\{{")
# `#[macro_export] macro_rules! name`, other attributes allowed in between.
EXPORTED_MACRO_RE = re.compile(
    rf"#\[\s*macro_export\s*\]\s*(?:#\[[^\]]*\]\s*)*macro_rules!\s*({IDENT})"
)


def strip_comments_and_strings(text):
    """Blanks out comments, string and char literals (keeping newlines and braces' places)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    out.append("\n" if text[i] == "\n" else "")
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:]) and (i == 0 or not text[i - 1].isalnum()):
            hashes = re.match(r"r(#*)\"", text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            end = n if end < 0 else end + 1 + len(hashes)
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:]):
            i += len(re.match(r"'(\\.|[^\\'])'", text[i:]).group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand_use_tree(tree):
    """The paths a use tree names, as segment lists: `a::{b, c::{d, self}, *}` gives
    [a, b], [a, c, d], [a, c], [a]. `as` renames and globs end a path where they stand."""
    tree = re.sub(r"\s+", "", re.sub(r"\s+as\s+\w+", "", tree)).lstrip(":")

    def parse(text, i):
        """Paths of the tree starting at text[i], and the index after it."""
        prefix = []
        while i < len(text):
            m = re.match(IDENT + "|\\*", text[i:])
            if m:
                word = m.group(0)
                i += len(word)
                if word not in ("*", "self"):
                    prefix.append(word)
                if text.startswith("::", i):
                    i += 2
                    continue
                return [prefix], i
            if text[i] == "{":
                paths, i = [], i + 1
                while i < len(text) and text[i] != "}":
                    sub, i = parse(text, i)
                    paths += [prefix + p for p in sub]
                    if i < len(text) and text[i] == ",":
                        i += 1
                return paths or [prefix], i + 1
            break
        return [prefix], i

    paths, _ = parse(tree, 0)
    return paths


def file_modules(src):
    """{module path tuple: file} for every .rs file of the library crate under src."""
    mods = {}
    for f in src.rglob("*.rs"):
        rel = f.relative_to(src).with_suffix("")
        parts = list(rel.parts)
        # Binary roots (main.rs beside lib.rs, src/bin/) are crates of their own.
        if parts[0] == "bin" or (parts == ["main"] and (src / "lib.rs").exists()):
            continue
        if parts[-1] == "mod" or (len(parts) == 1 and parts[0] in ("lib", "main")):
            parts = parts[:-1]
        mods[tuple(parts)] = f
    return mods


def inline_scopes(text):
    """For each character offset's line: the inline `mod` names enclosing it (outermost first).

    Returns a function offset -> tuple of names."""
    spans = []  # (start, end, name)
    for m in INLINE_MOD_RE.finditer(text):
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        spans.append((m.start(), j, m.group(1)))

    def at(offset):
        return tuple(name for s, e, name in sorted(spans) if s <= offset < e)

    return at


def exported_macros(mods):
    """{name: file module} of every `#[macro_export]` macro of the crate."""
    found = {}
    for m, f in mods.items():
        for name in EXPORTED_MACRO_RE.findall(strip_comments_and_strings(f.read_text())):
            found[name] = m
    return found


def spell(head, segs, here, scope):
    """The path as module segments from the crate root."""
    if head == "crate":
        base = ()
    else:
        base = here + scope
        if head == "super":
            base = base[:-1]
    while segs and segs[0] == "super":
        base, segs = base[:-1], segs[1:]
    return base + tuple(segs)


def resolve(head, segs, here, scope, mods, macros):
    """The file module a path names, or None when it leaves the crate's files."""
    if head == "crate" and len(segs) == 1 and segs[0] in macros and (segs[0],) not in mods:
        return macros[segs[0]]
    full = spell(head, segs, here, scope)
    # The deepest file module that is a prefix of the path.
    for k in range(len(full), -1, -1):
        if full[:k] in mods:
            return full[:k]
    return None


def edges_of(path, here, mods, macros):
    text = strip_comments_and_strings(path.read_text())
    scope_at = inline_scopes(text)
    found = set()

    def add(head, segs, offset):
        target = resolve(head, segs, here, scope_at(offset), mods, macros)
        if target is not None and target != here:
            found.add(target)

    def segments(s):
        return [p for p in re.split(r"\s*::\s*", s.strip()) if p]

    # Names that stand for a file module in this file's paths: children it declares
    # (`mod cell;`), and file modules it imports (`use crate::results;`), as {name: module}.
    # A child is named from the file's own module, also inside an inline `mod tests` that
    # reaches it through `use super::*`.
    modules = {child: here + (child,) for child in CHILD_MOD_RE.findall(text)}

    for m in USE_RE.finditer(text):
        for path in expand_use_tree(m.group(1)):
            if path and path[0] in ("crate", "super", "self"):
                add(path[0], path[1:], m.start())
                full = spell(path[0], path[1:], here, scope_at(m.start()))
                if len(path) > 1 and full in mods and full != here:
                    modules.setdefault(path[-1], full)
            elif path and path[0] in modules:
                add("crate", list(modules[path[0]]) + path[1:], m.start())
    for m in PATH_RE.finditer(text):
        add(m.group(1), segments(m.group(2)), m.start())
    # Inline paths through those names: `cell::run(...)` beside `mod cell;`, or
    # `results::schema::Cell` after `use crate::results;`.
    for name, module in modules.items():
        for m in re.finditer(rf"(?<![\w:])({name}(?:\s*::\s*{IDENT})+)", text):
            add("crate", list(module) + segments(m.group(1))[1:], m.start())
    return found


def strongly_connected(graph):
    """Tarjan's algorithm, iterative; components in reverse topological order."""
    index, low, on_stack, stack, comps, counter = {}, {}, set(), [], [], [0]

    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                comps.append(comp)
    return comps


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    status = 0
    for crate in argv[1:]:
        src = Path(crate) / "src"
        mods = file_modules(src)
        macros = exported_macros(mods)
        graph = {m: edges_of(f, m, mods, macros) for m, f in mods.items()}
        name = lambda m: str(mods[m].relative_to(src))
        circles = [sorted(c, key=name) for c in strongly_connected(graph) if len(c) > 1]
        n_edges = sum(len(e) for e in graph.values())
        print(f"{crate}: {len(mods)} files, {n_edges} import edges, {len(circles)} circle(s)")
        for comp in circles:
            status = 1
            members = set(comp)
            print(f"  circle of {len(comp)} files: {', '.join(name(m) for m in comp)}")
            for m in comp:
                for t in sorted(graph[m] & members, key=name):
                    print(f"    {name(m)} -> {name(t)}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
