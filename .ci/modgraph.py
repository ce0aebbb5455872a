"""The module graph of a crate's `src/` tree, file by file, for `.ci/no-cycles` (see its
docstring for the rules): a tokenizer that strips comments and literals, the module tree read
from the root down its `mod` declarations, paths resolved module by module to the file that
defines the item, and the strongly connected components of the file graph."""
import os
import re

# ---------------------------------------------------------------------------------------------
# The module graph: tokens
# ---------------------------------------------------------------------------------------------

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RAW_STR = re.compile(r'(?:b|c)?r(#*)"')
_NUMBER = re.compile(r"[0-9][0-9A-Za-z_]*")


class Tok:
    __slots__ = ("kind", "text", "line", "file")

    def __init__(self, kind, text, line, file):
        self.kind, self.text, self.line, self.file = kind, text, line, file

    def __repr__(self):
        return f"{self.kind}:{self.text}@{self.line}"


def tokenize(text, file):
    """Rust tokens without comments; a string literal is one `str` token (its value is kept only
    for `#[path]` and `include!`), a character literal one `char` token, a lifetime one `life`."""
    toks = []
    i, n, line = 0, len(text), 1

    def add(kind, value, at_line):
        toks.append(Tok(kind, value, at_line, file))

    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
            continue
        if c.isspace():
            i += 1
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    if text[j] == "\n":
                        line += 1
                    j += 1
            i = j
            continue
        m = _RAW_STR.match(text, i)
        if m:
            close = '"' + m.group(1)
            j = text.find(close, m.end())
            j = n if j < 0 else j
            value = text[m.end() : j]
            add("str", value, line)
            line += value.count("\n")
            i = j + len(close)
            continue
        if c == '"' or (c in "bc" and text.startswith('"', i + 1)):
            start_line = line
            j = i + (1 if c == '"' else 2)
            buf = []
            while j < n and text[j] != '"':
                if text[j] == "\\":
                    buf.append(text[j : j + 2])
                    if text[j + 1 : j + 2] == "\n":
                        line += 1
                    j += 2
                    continue
                if text[j] == "\n":
                    line += 1
                buf.append(text[j])
                j += 1
            add("str", "".join(buf), start_line)
            i = j + 1
            continue
        if c == "'" or (c == "b" and text.startswith("'", i + 1)):
            q = i if c == "'" else i + 1
            if text.startswith("\\", q + 1):
                j = text.find("'", q + 3)
                add("char", "", line)
                i = n if j < 0 else j + 1
                continue
            if q + 2 < n and text[q + 2] == "'" and text[q + 1] != "\n":
                add("char", "", line)
                i = q + 3
                continue
            m = _IDENT.match(text, q + 1)
            if m:
                add("life", m.group(0), line)
                i = m.end()
                continue
            add("punct", "'", line)
            i = q + 1
            continue
        if c == "r" and text.startswith("r#", i):
            m = _IDENT.match(text, i + 2)
            if m:
                add("ident", m.group(0), line)
                i = m.end()
                continue
        if c == "$" and text.startswith("$crate", i) and not _IDENT.match(text, i + 6):
            add("ident", "$crate", line)
            i += 6
            continue
        m = _IDENT.match(text, i)
        if m:
            add("ident", m.group(0), line)
            i = m.end()
            continue
        m = _NUMBER.match(text, i)
        if m:
            add("num", m.group(0), line)
            i = m.end()
            continue
        if text.startswith("::", i):
            add("punct", "::", line)
            i += 2
            continue
        add("punct", c, line)
        i += 1
    return toks


# ---------------------------------------------------------------------------------------------
# The module graph: modules, items, imports, paths
# ---------------------------------------------------------------------------------------------

ITEM_KEYWORDS = {"fn", "struct", "enum", "union", "trait", "type", "const", "static"}
PATH_STARTS = {"crate", "$crate", "super", "self"}
BRACKETS = {"(": ")", "[": "]", "{": "}"}


class Module:
    def __init__(self, name, file, parent, child_dir, inline, is_pub=True):
        self.name = name
        self.is_pub = is_pub  # `pub mod` (any `pub(...)`), for glob imports from outside
        self.file = file  # the file whose text holds this module's items
        self.parent = parent
        self.child_dir = child_dir  # where `mod x;` looks for x.rs / x/mod.rs
        self.inline = inline
        self.children = {}
        self.items = {}  # name -> declared `pub` (any `pub(...)`)
        self.exported_macros = {}  # crate root only: `#[macro_export]` name -> defining file
        self.imports = []  # (segments, binding or "*" or "_", Tok of the leaf, declared `pub`)
        self.paths = []  # (segments, Tok): paths outside `use`
        self.idents = set()  # every identifier mentioned (for glob imports)

    def is_within(self, other):
        """True if this module is `other` or inside it (it sees `other`'s private names)."""
        m = self
        while m is not None:
            if m is other:
                return True
            m = m.parent
        return False

    def root(self):
        m = self
        while m.parent is not None:
            m = m.parent
        return m


def attr_is_test(attr):
    """`#[cfg(test)]` or `#[cfg(all(..., test, ...))]`: the item exists only in test builds."""
    words = [t.text for t in attr]
    if words == ["cfg", "(", "test", ")"]:
        return True
    return words[:4] == ["cfg", "(", "all", "("] and "test" in words and "not" not in words and "any" not in words


def attr_path(attr):
    words = [t.text for t in attr]
    if len(attr) == 3 and words[0] == "path" and words[1] == "=" and attr[2].kind == "str":
        return attr[2].text
    return None


def matching(toks, i):
    """Index just past the bracket group that opens at toks[i]."""
    stack = [BRACKETS[toks[i].text]]
    j = i + 1
    while j < len(toks) and stack:
        t = toks[j]
        if t.kind == "punct":
            if t.text in BRACKETS:
                stack.append(BRACKETS[t.text])
            elif t.text == stack[-1]:
                stack.pop()
        j += 1
    return j


def skip_item(toks, i):
    """Index just past the item starting at toks[i] (attributes already consumed)."""
    j = i
    while j < len(toks):
        t = toks[j]
        if t.kind == "punct" and t.text == ";":
            return j + 1
        if t.kind == "punct" and t.text == "{":
            end = matching(toks, j)
            # `const X: T = Foo { .. };` ends at the `;` after the braces.
            if end < len(toks) and toks[end].kind == "punct" and toks[end].text == ";":
                return end + 1
            return end
        if t.kind == "punct" and t.text in "([":
            j = matching(toks, j)
            continue
        j += 1
    return j


def parse_use_tree(toks, i, prefix, out):
    """Parses one use tree at toks[i]; appends (segments, binding, leaf token); returns the index
    after it."""
    segs = list(prefix)
    if toks[i].text == "::":
        segs = ["::"]
        i += 1
    while i < len(toks):
        t = toks[i]
        if t.kind == "punct" and t.text == "{":
            i += 1
            while i < len(toks) and toks[i].text != "}":
                if toks[i].text == ",":
                    i += 1
                    continue
                i = parse_use_tree(toks, i, segs, out)
            return i + 1
        if t.kind == "punct" and t.text == "*":
            out.append((segs, "*", t))
            return i + 1
        if t.kind != "ident":
            # `$name` in a macro template, or something this reader does not know: stop here.
            return i + 1
        group_self = t.text == "self" and bool(segs)  # `use a::{self, B}`: the module `a`
        if group_self:
            leaf_segs, binding = segs, segs[-1]
        else:
            segs = segs + [t.text]
            leaf_segs, binding = segs, t.text
        i += 1
        if i < len(toks) and toks[i].text == "::" and not group_self:
            i += 1
            continue
        if i + 1 < len(toks) and toks[i].text == "as":
            binding = toks[i + 1].text
            i += 2
        out.append((leaf_segs, binding, t))
        return i
    return i


def read_path(toks, i):
    """The path segments starting at toks[i] (an identifier followed by `::`)."""
    segs = [toks[i].text]
    j = i + 1
    while j + 1 < len(toks) and toks[j].text == "::" and toks[j + 1].kind == "ident":
        segs.append(toks[j + 1].text)
        j += 2
    return segs, j


class Crate:
    def __init__(self, name, base):
        self.name = name
        self.base = base  # paths are reported relative to this directory
        self.files = set()
        self.modules = []
        self.problems = []

    def rel(self, path):
        return os.path.relpath(path, self.base)

    def load(self, path):
        with open(path, encoding="utf-8") as f:
            return f.read()

    def add_root(self, path):
        path = os.path.abspath(path)
        root = Module("crate", path, None, os.path.dirname(path), inline=False)
        self.parse_file(root, path)

    def parse_file(self, mod, path):
        self.files.add(path)
        self.modules.append(mod)
        toks = tokenize(self.load(path), path)
        self.parse_body(mod, toks, 0, top=True)

    def parse_body(self, mod, toks, i, top=False):
        """Parses the items of `mod` from toks[i] to the `}` that closes it (or the end of the
        file); returns the index after it."""
        depth = 0
        attrs = []
        vis = False  # a `pub` is waiting for its item
        while i < len(toks):
            t = toks[i]
            x = t.text
            if t.kind == "punct":
                if x == "#" and i + 1 < len(toks) and toks[i + 1].text in ("[", "!"):
                    inner = toks[i + 1].text == "!"
                    open_at = i + 2 if inner else i + 1
                    if open_at < len(toks) and toks[open_at].text == "[":
                        end = matching(toks, open_at)
                        attr = toks[open_at + 1 : end - 1]
                        if inner and depth == 0 and attr_is_test(attr):
                            # `#![cfg(test)]`: the whole module is a test module.
                            mod.imports.clear()
                            mod.paths.clear()
                            return len(toks) if top else self.close(toks, i)
                        if not inner:
                            attrs.append(attr)
                        i = end
                        continue
                if x == "{":
                    depth += 1
                elif x == "}":
                    if depth == 0 and not top:
                        return i + 1
                    depth -= 1
                if x in ";{}":
                    attrs = []
                    vis = False
                i += 1
                continue
            if t.kind != "ident":
                i += 1
                continue
            mod.idents.add(x)
            if any(attr_is_test(a) for a in attrs):
                # A test-only item: skipped whole.
                attrs = []
                i = skip_item(toks, i)
                continue
            nxt = toks[i + 1] if i + 1 < len(toks) else None
            if x == "pub":
                vis = True
                if nxt is not None and nxt.text == "(":
                    # A visibility (`pub(crate)`, `pub(in crate::x)`) names no item it uses.
                    i = matching(toks, i + 1)
                    continue
                i += 1
                continue
            if x == "mod" and nxt is not None and nxt.kind == "ident" and i + 2 < len(toks):
                after = toks[i + 2].text
                path_attr = next((p for p in map(attr_path, attrs) if p), None)
                attrs = []
                is_pub, vis = vis, False
                if after == ";":
                    self.declare_file(mod, nxt, path_attr, is_pub)
                    i += 3
                    continue
                if after == "{":
                    child = Module(nxt.text, mod.file, mod, os.path.join(mod.child_dir, nxt.text), inline=True, is_pub=is_pub)
                    if path_attr:
                        child.child_dir = os.path.join(mod.child_dir, path_attr)
                    mod.children[nxt.text] = child
                    self.modules.append(child)
                    i = self.parse_body(child, toks, i + 3)
                    continue
            if x == "use":
                out = []
                j = parse_use_tree(toks, i + 1, [], out)
                while j < len(toks) and toks[j].text != ";":
                    j += 1
                mod.imports.extend((segs, binding, leaf, vis) for segs, binding, leaf in out)
                for segs, binding, leaf in out:
                    mod.idents.update(s for s in segs if s not in PATH_STARTS)
                attrs = []
                vis = False
                i = j + 1
                continue
            if x == "extern" and nxt is not None and nxt.text == "crate":
                i = skip_item(toks, i)
                continue
            if x == "macro_rules" and nxt is not None and nxt.text == "!" and i + 2 < len(toks):
                name = toks[i + 2].text
                mod.items[name] = False
                if any([a.text for a in attr] == ["macro_export"] for attr in attrs):
                    mod.root().exported_macros[name] = mod.file  # `crate::name!` from anywhere
                attrs = []
                # The body is a template: only its `$crate::` / `crate::` paths count.
                j = i + 3
                if j < len(toks) and toks[j].text in BRACKETS:
                    end = matching(toks, j)
                    for k in range(j, end):
                        if toks[k].text in ("$crate", "crate") and k + 1 < end and toks[k + 1].text == "::":
                            mod.paths.append((read_path(toks, k)[0], toks[k]))
                    i = end
                    continue
                i = j
                continue
            if x == "include" and nxt is not None and nxt.text == "!" and i + 3 < len(toks) and toks[i + 3].kind == "str":
                inc = os.path.join(os.path.dirname(t.file), toks[i + 3].text)
                if os.path.isfile(inc):
                    self.files.add(os.path.abspath(inc))
                    toks[i : i + 5] = tokenize(self.load(inc), os.path.abspath(inc))
                    continue
            if depth == 0 and x in ITEM_KEYWORDS and nxt is not None and nxt.kind == "ident":
                name = nxt.text
                if x == "static" and name == "mut" and i + 2 < len(toks):
                    name = toks[i + 2].text
                if not (x == "const" and name in ("fn", "unsafe", "async", "extern")) and name != "_":
                    mod.items[name] = vis
                    vis = False
            if x in PATH_STARTS and nxt is not None and nxt.text == "::":
                segs, j = read_path(toks, i)
                mod.paths.append((segs, t))
                mod.idents.update(segs)
                i = j
                continue
            i += 1
        return i

    def close(self, toks, i):
        # Skip the rest of an inline module that is `#![cfg(test)]`: to its closing brace.
        depth = 0
        while i < len(toks):
            if toks[i].text == "{":
                depth += 1
            elif toks[i].text == "}":
                if depth == 0:
                    return i + 1
                depth -= 1
            i += 1
        return i

    def declare_file(self, mod, name_tok, path_attr, is_pub):
        name = name_tok.text
        if path_attr:
            base = mod.child_dir if mod.inline else os.path.dirname(mod.file)
            candidates = [os.path.join(base, path_attr)]
        else:
            candidates = [os.path.join(mod.child_dir, name + ".rs"), os.path.join(mod.child_dir, name, "mod.rs")]
        for c in candidates:
            if os.path.isfile(c):
                c = os.path.abspath(c)
                # A mod.rs file (and a #[path] file) keeps its children beside it, foo.rs in foo/.
                if os.path.basename(c) == "mod.rs" or path_attr:
                    child_dir = os.path.dirname(c)
                else:
                    child_dir = os.path.join(os.path.dirname(c), name)
                child = Module(name, c, mod, child_dir, inline=False, is_pub=is_pub)
                mod.children[name] = child
                self.parse_file(child, c)
                return
        self.problems.append(f"{self.rel(name_tok.file)}:{name_tok.line}: `mod {name};` has no file ({', '.join(self.rel(c) for c in candidates)})")


EXT = ("ext", None)
NONE = ("none", None)


def lookup(mod, name, guard, viewer=None):
    """What `name` means inside `mod`: ("mod", Module), ("item", file), EXT or NONE. With a
    `viewer` (the module whose glob import looks into `mod`), private names of `mod` count only
    if the viewer is `mod` or inside it."""
    key = (id(mod), name)
    if key in guard:
        return NONE
    guard = guard | {key}

    def seen(is_pub):
        return is_pub or viewer is None or viewer.is_within(mod)

    if name in mod.children and seen(mod.children[name].is_pub):
        return ("mod", mod.children[name])
    if name in mod.items and seen(mod.items[name]):
        return ("item", mod.file)
    if name in mod.exported_macros:
        return ("item", mod.exported_macros[name])
    for segs, binding, _, is_pub in mod.imports:
        if binding == name and seen(is_pub):
            t = resolve(mod, segs, guard)
            if t != NONE:
                return t
    for segs, binding, _, is_pub in mod.imports:
        if binding == "*" and seen(is_pub):
            base = resolve(mod, segs, guard)
            if base[0] == "mod":
                t = lookup(base[1], name, guard, viewer=mod)
                if t != NONE:
                    return t
    return NONE


def resolve(ctx, segs, guard=frozenset()):
    """Where the path `segs`, written in module `ctx`, leads."""
    s0 = segs[0]
    if s0 == "::":
        return EXT
    if s0 in ("crate", "$crate"):
        cur, rest = ctx.root(), segs[1:]
    elif s0 == "super":
        cur, k = ctx, 0
        while k < len(segs) and segs[k] == "super":
            cur = cur.parent
            if cur is None:
                return NONE
            k += 1
        rest = segs[k:]
    elif s0 == "self":
        cur, rest = ctx, segs[1:]
    else:
        t = lookup(ctx, s0, guard)
        if t == NONE:
            return EXT  # another crate, std, core, or a prelude name
        if t[0] != "mod":
            return t
        cur, rest = t[1], segs[1:]
    for seg in rest:
        t = lookup(cur, seg, guard)
        if t[0] == "mod":
            cur = t[1]
            continue
        if t != NONE:
            return t
        return ("item", cur.file)  # not found (made by a macro?): the deepest module's file
    return ("mod", cur)


def visible_names(mod, viewer, guard=frozenset()):
    """The names a glob import of `mod` made in `viewer` brings in."""
    if id(mod) in guard:
        return set()
    guard = guard | {id(mod)}

    def seen(is_pub):
        return is_pub or viewer.is_within(mod)

    names = {n for n, c in mod.children.items() if seen(c.is_pub)}
    names |= {n for n, is_pub in mod.items.items() if seen(is_pub)}
    names |= set(mod.exported_macros)
    for segs, binding, _, is_pub in mod.imports:
        if not seen(is_pub):
            continue
        if binding == "*":
            base = resolve(mod, segs)
            if base[0] == "mod":
                names |= visible_names(base[1], mod, guard)
        elif binding != "_":
            names.add(binding)
    return names


def target_file(t):
    if t[0] == "mod":
        return t[1].file
    if t[0] == "item":
        return t[1]
    return None


def module_edges(crate):
    """{(file, file): [(Tok, text)]} for the crate's files."""
    edges = {}

    def add(src_mod, dst, tok, text):
        if dst is None or dst == src_mod.file:
            return
        edges.setdefault((src_mod.file, dst), []).append((tok, text))

    for mod in crate.modules:
        for segs, binding, leaf, _ in mod.imports:
            text = "use " + "::".join(segs)
            if binding == "*":
                base = resolve(mod, segs)
                text += "::*"
                if base[0] != "mod":
                    add(mod, target_file(base), leaf, text)
                    continue
                hit = False
                for name in sorted(visible_names(base[1], mod) & mod.idents):
                    f = target_file(lookup(base[1], name, frozenset(), viewer=mod))
                    if f is not None and f != mod.file:
                        add(mod, f, leaf, f"{text} ({name})")
                        hit = True
                if not hit:
                    add(mod, base[1].file, leaf, text)
                continue
            if segs[0] not in PATH_STARTS and lookup(mod, segs[0], frozenset()) == NONE:
                continue  # another crate
            add(mod, target_file(resolve(mod, segs)), leaf, text)
        for segs, tok in mod.paths:
            add(mod, target_file(resolve(mod, segs)), tok, "::".join(segs))
    return edges


def sccs(nodes, succ):
    """Tarjan's strongly connected components (iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(sorted(succ.get(start, ()))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(succ.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    out.append(sorted(comp))
    return out


def compact(texts):
    """The uses of one line that lead to one file, in one phrase: `use a::b::{C, D}`,
    `use a::* (C, D)`."""
    texts = list(dict.fromkeys(texts))
    if len(texts) == 1:
        return texts[0]
    globs = [t.split(" (", 1) for t in texts]
    if all(len(g) == 2 for g in globs) and len({g[0] for g in globs}) == 1:
        return f"{globs[0][0]} ({', '.join(g[1].rstrip(')') for g in globs)})"
    heads = [t.rsplit("::", 1) for t in texts]
    if all(len(h) == 2 for h in heads) and len({h[0] for h in heads}) == 1:
        return f"{heads[0][0]}::{{{', '.join(h[1] for h in heads)}}}"
    return "; ".join(texts)


def check_crate(crate):
    """(summary line, [report lines of each circle]) for a loaded crate."""
    edges = module_edges(crate)
    succ = {}
    for a, b in edges:
        succ.setdefault(a, set()).add(b)
    circles = []
    for comp in sccs(crate.files, succ):
        if len(comp) < 2:
            continue
        members = set(comp)
        lines = [f"  {crate.name}: {', '.join(crate.rel(f) for f in comp)}"]
        for (a, b), uses in sorted(edges.items()):
            if a in members and b in members:
                at = {}
                for tok, text in uses:
                    at.setdefault((tok.file, tok.line), []).append(text)
                for (file, line), texts in sorted(at.items()):
                    lines.append(f"    {crate.rel(file)}:{line} -> {crate.rel(b)}  ({compact(texts)})")
        circles.append(lines)
    n_edges = sum(len(v) for v in edges.values())
    summary = f"{crate.name}: {len(crate.files)} files, {len(edges)} file edges ({n_edges} uses), "
    summary += f"{len(circles)} circle{'s' if len(circles) != 1 else ''}" if circles else "no circle"
    return summary, circles, edges
