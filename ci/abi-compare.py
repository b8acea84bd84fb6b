#!/usr/bin/env python3
"""The rules of docs/c-api.md's "What a release may change" applied to two recordings of the C ABI, as ci/abi.sh
makes them: an ABI corpus written by libabigail's abidw (XML: the exports with their symbol
versions, the SONAME, every function's signature and every type of include/rocm_cmdbuf.h) and a
list of its constants (`NAME VALUE` a line, `#` lines aside: every #define of the header, which
libabigail never sees).

    python3 ci/abi-compare.py compare OLD.abi OLD-CONSTANTS NEW.abi NEW-CONSTANTS
    python3 ci/abi-compare.py check NEW.abi

`compare` prints what changed from OLD to NEW, each change marked compatible (an addition) or
incompatible, and exits 0 when nothing changed, 1 when every change is compatible, 2 when one is
not, 3 when it cannot judge them. Compatible are: an export, a function, a type or a constant
added; fields appended to a sized struct, each starting at or past the struct's old size (a
caller of the old header sets `struct_size` to that size, and the bytes before it include the old
tail padding, which such a caller never sets); a constant named `*_VERSION` (a layout version:
RCB_COUNTERS_VERSION) raised. Everything else is incompatible: a removal, a function whose
signature changed, a typedef that changed, a sized struct whose existing fields changed name,
offset or type or whose new fields start inside its old size, a record (any other struct) that
changed at all, a constant whose value changed, another SONAME. Types are compared by name where
they are used (a field of type `const rcb_kernel_arg *` is that text), and each named type of the
header on its own, so a change to a record reached through a sized struct is a change to that
record.

`check` checks the list of sized structs against the corpus: each is a struct of the header
beginning with `uint32_t struct_size`, every struct beginning so is on it, and none is embedded
by value in another struct (its growth would move what follows); it prints each sized struct's
tail padding, where no later field may go. Exits 0, or 2 with what is wrong.

The sized structs are those the library declares with `sized_struct!` in src/ffi/ (the list it
checks `struct_size` against); read from there, never written twice.
"""
import glob
import os
import re
import sys
import xml.etree.ElementTree as ET

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TYPE_TAGS = {
    "type-decl",
    "typedef-decl",
    "class-decl",
    "union-decl",
    "enum-decl",
    "pointer-type-def",
    "qualified-type-def",
    "array-type-def",
    "function-type",
}


def fail(message):
    """A corpus or tree this script cannot judge: exit 3, never a verdict."""
    print("ci/abi-compare.py: " + message, file=sys.stderr)
    sys.exit(3)


def sized_structs():
    names = set()
    for path in sorted(glob.glob(os.path.join(ROOT, "src", "ffi", "*.rs"))):
        with open(path, encoding="utf-8") as f:
            names.update(re.findall(r"^sized_struct!\((rcb_[a-z0-9_]+),", f.read(), re.M))
    if not names:
        fail("no sized_struct!(rcb_...) in src/ffi/*.rs")
    return names


class Corpus:
    """One abidw corpus: its SONAME, exports, functions and the header's named types."""

    def __init__(self, path):
        root = ET.parse(path).getroot()
        self.soname = root.get("soname", "")
        self.types = {el.get("id"): el for el in root.iter() if el.tag in TYPE_TAGS and el.get("id")}
        self.symbols = set()
        for s in root.iter("elf-symbol"):
            version = s.get("version")
            sep = "@@" if s.get("is-default-version") == "yes" else "@"
            self.symbols.add(s.get("name") + (sep + version if version else ""))
        self.functions = {}
        for f in root.iter("function-decl"):
            if f.get("elf-symbol-id"):
                self.functions[f.get("elf-symbol-id")] = self.params(f)
        self.structs, self.typedefs, self.others = {}, {}, []
        self.last_field_type = {}  # struct -> type id of its last field, for its tail padding
        for el in self.types.values():
            name = el.get("name") or ""
            if not name.startswith("rcb_"):
                continue
            if el.tag == "class-decl":
                if el.get("is-declaration-only") != "yes":
                    self.structs[name] = (int(el.get("size-in-bits")) // 8, self.members(el))
                    if el.findall("data-member"):
                        self.last_field_type[name] = el.findall("data-member")[-1].find("var-decl").get("type-id")
                else:  # opaque (a handle type), unless its definition is recorded too
                    self.structs.setdefault(name, None)
            elif el.tag == "typedef-decl":
                if self.render(el.get("type-id")) != "struct " + name:  # not C's `typedef struct X X`
                    self.typedefs[name] = self.render(el.get("type-id"))
            else:
                self.others.append(f"{el.tag} {name}")

    def members(self, el):
        """(name, byte offset, type) of each field."""
        out = []
        for m in el.findall("data-member"):
            var = m.find("var-decl")
            bits = int(m.get("layout-offset-in-bits"))
            if bits % 8:
                fail(f"bit-field {var.get('name')} in {el.get('name')}: not compared")
            out.append((var.get("name"), bits // 8, self.render(var.get("type-id"))))
        return out

    def params(self, el):
        parts = [self.render(p.get("type-id")) if p.get("is-variadic") != "yes" else "..." for p in el.findall("parameter")]
        return self.render(el.find("return").get("type-id")) + " (" + ", ".join(parts or ["void"]) + ")"

    def render(self, tid):
        """A type as its C text, named types by name (each compared on its own)."""
        el = self.types.get(tid)
        if el is None:
            fail(f"type id {tid} is not in the corpus")
        tag, name = el.tag, el.get("name")
        if tag == "typedef-decl" and self.types.get(el.get("type-id")) is not None:
            target = self.types[el.get("type-id")]
            if target.tag == "class-decl" and target.get("name") == name:
                return "struct " + name  # `typedef struct X X`: abidw records uses either way
        if tag in ("type-decl", "typedef-decl"):
            return name
        if tag == "class-decl" and name and el.get("is-anonymous") != "yes":
            return "struct " + name
        if tag == "class-decl":
            return "struct { " + "; ".join(f"{t} {n} @{o}" for n, o, t in self.members(el)) + " }"
        if tag == "pointer-type-def":
            return self.render(el.get("type-id")) + " *"
        if tag == "qualified-type-def":
            quals = [q for q in ("const", "volatile", "restrict") if el.get(q) == "yes"]
            return self.render(el.get("type-id")) + " " + " ".join(quals)
        if tag == "array-type-def":
            return self.render(el.get("type-id")) + "".join(f"[{s.get('length')}]" for s in el.findall("subrange"))
        if tag == "function-type":
            return "fn " + self.params(el)
        fail(f"{tag} {name or tid}: a kind of type it does not compare; teach it")

    def size(self, tid):
        el = self.types[tid]
        if el.get("size-in-bits"):
            return int(el.get("size-in-bits")) // 8
        return self.size(el.get("type-id"))  # a typedef or a qualifier: the size of what it names


def constants(path):
    """NAME -> value; a missing file (a recording from before constants were listed) is empty."""
    values = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if line.strip() and not line.startswith("#"):
                    parts = line.split()
                    if len(parts) != 2 or not re.fullmatch(r"-?\d+", parts[1]):
                        fail(f"{path}:{number}: not `NAME VALUE`")
                    values[parts[0]] = int(parts[1])
    return values


def field(f):
    return f"{f[2]} {f[0]} at byte {f[1]}"


def compare(old, new, old_constants, new_constants, sized):
    incompatible, compatible = [], []
    if old.soname != new.soname:
        incompatible.append(f"SONAME {old.soname} -> {new.soname}")
    for s in sorted(old.symbols - new.symbols):
        incompatible.append(f"export {s} removed")
    for s in sorted(new.symbols - old.symbols):
        compatible.append(f"export {s} added")
    for f in sorted(old.functions.keys() & new.functions.keys()):
        if old.functions[f] != new.functions[f]:
            incompatible.append(f"function {f}: {old.functions[f]} -> {new.functions[f]}")
    for t in sorted(old.typedefs.keys() - new.typedefs.keys()):
        incompatible.append(f"typedef {t} removed")
    for t in sorted(new.typedefs.keys() - old.typedefs.keys()):
        compatible.append(f"typedef {t} added")
    for t in sorted(old.typedefs.keys() & new.typedefs.keys()):
        if old.typedefs[t] != new.typedefs[t]:
            incompatible.append(f"typedef {t}: {old.typedefs[t]} -> {new.typedefs[t]}")
    for s in sorted(old.structs.keys() - new.structs.keys()):
        incompatible.append(f"struct {s} removed")
    for s in sorted(new.structs.keys() - old.structs.keys()):
        compatible.append(f"struct {s} added")
    for s in sorted(old.structs.keys() & new.structs.keys()):
        was, now = old.structs[s], new.structs[s]
        if was == now:
            continue
        if was is None or now is None:
            incompatible.append(f"struct {s}: {'opaque' if was is None else 'defined'} -> {'opaque' if now is None else 'defined'}")
            continue
        (old_size, old_fields), (new_size, new_fields) = was, now
        if s not in sized:
            changes = [f"size {old_size} -> {new_size} bytes"] if old_size != new_size else []
            for a, b in zip(old_fields, new_fields):
                if a != b:
                    changes.append(f"{field(a)} -> {field(b)}")
            changes += [f"{field(a)} removed" for a in old_fields[len(new_fields) :]]
            changes += [f"{field(b)} added" for b in new_fields[len(old_fields) :]]
            incompatible.append(f"struct {s} (a record: never changes): " + "; ".join(changes))
            continue
        changed = [(a, b) for a, b in zip(old_fields, new_fields) if a != b]
        if changed or len(new_fields) < len(old_fields):
            what = [f"{field(a)} -> {field(b)}" for a, b in changed]
            what += [f"{field(a)} removed" for a in old_fields[len(new_fields) :]]
            incompatible.append(f"struct {s} (sized: fields are only appended): " + "; ".join(what))
            continue
        appended = new_fields[len(old_fields) :]
        inside = [f for f in appended if f[1] < old_size]
        if inside:
            incompatible.append(
                f"struct {s} (sized): " + "; ".join(field(f) for f in inside) + f" inside its old {old_size} bytes, "
                f"where a caller of the old header has struct_size {old_size} and padding it never set; "
                f"a new field starts at byte {old_size} or after"
            )
        elif not appended:
            incompatible.append(f"struct {s} (sized): size {old_size} -> {new_size} bytes with the same fields")
        else:
            compatible.append(
                f"struct {s} (sized): appended " + "; ".join(field(f) for f in appended) + f" (size {old_size} -> {new_size} bytes)"
            )
    for c in sorted(old_constants.keys() - new_constants.keys()):
        incompatible.append(f"constant {c} ({old_constants[c]}) removed")
    for c in sorted(new_constants.keys() - old_constants.keys()):
        compatible.append(f"constant {c} {new_constants[c]} added")
    for c in sorted(old_constants.keys() & new_constants.keys()):
        a, b = old_constants[c], new_constants[c]
        if a != b and c.endswith("_VERSION") and b > a:
            compatible.append(f"constant {c} {a} -> {b} (a layout version, raised)")
        elif a != b:
            incompatible.append(f"constant {c} {a} -> {b}")
    for label, items in (("incompatible", incompatible), ("compatible", compatible)):
        if items:
            print(f"{label}:")
            for item in items:
                print("    " + item)
    return 2 if incompatible else 1 if compatible else 0


def check(corpus, sized):
    errors = [f"{o}: a kind of type ci/abi-compare.py does not compare; teach it" for o in corpus.others]
    for s in sorted(sized):
        layout = corpus.structs.get(s)
        if layout is None:
            errors.append(f"sized_struct!({s}) in src/ffi/, but the header has no struct {s}")
        elif not layout[1] or layout[1][0] != ("struct_size", 0, "uint32_t"):
            errors.append(f"struct {s} is sized (src/ffi/) but does not begin with uint32_t struct_size")
    for s, layout in sorted(corpus.structs.items()):
        if layout and layout[1] and layout[1][0][0] == "struct_size" and s not in sized:
            errors.append(f"struct {s} begins with struct_size but is not declared with sized_struct! in src/ffi/")
        for name, _, t in layout[1] if layout else []:
            if re.sub(r"\[\d+\]", "", t).removeprefix("struct ") in sized:
                errors.append(f"struct {s}: field {name} holds the sized struct {t} by value; hold a pointer")
    for message in errors:
        print(message)
    if errors:
        return 2
    for s in sorted(sized):
        size, fields = corpus.structs[s]
        end = fields[-1][1] + corpus.size(corpus.last_field_type[s])
        if end < size:
            print(f"{s}: {size - end} bytes of tail padding ({end}..{size}), which no later field may use")
    return 0


def main(argv):
    if len(argv) == 6 and argv[1] == "compare":
        old, new = Corpus(argv[2]), Corpus(argv[4])
        return compare(old, new, constants(argv[3]), constants(argv[5]), sized_structs())
    if len(argv) == 3 and argv[1] == "check":
        return check(Corpus(argv[2]), sized_structs())
    print(__doc__, file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv))
