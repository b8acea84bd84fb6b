#!/usr/bin/env python3
"""Checks the library's HIP ABI table (src/runtime/hip/abi.rs, written for one runtime version)
against that version's real HIP headers.

  probe.py --table TABLE.json --include DIR --work DIR [--label TEXT]

What the compiler can check is compiled with g++ -Wall -Wextra -Werror against the headers, then
run: each prototype the library loads assigned to a pointer of the type the library assumes (C++
converts no function pointer type to another implicitly), the size of each C type the library stands in for, the size and each
field's offset and size of every struct it builds or reads, and each constant it uses. What only
the declarations tell is read from clang's AST of the headers: each parameter's name, so that two
parameters of one type passed in the wrong order fail, whether each function is declared at all,
and which kind of node every hipGraphNodeType enumerator means to the library.

Prints one line per finding and a summary; exits 1 on any mismatch.
"""
import argparse
import json
import os
import re
import subprocess
import sys


def ast_of(include, clang):
    """Functions (name -> [(param, type)]) and hipGraphNodeType (name -> value) of the headers."""
    src = '#include <hip/hip_runtime_api.h>\n'
    cmd = [clang, '-x', 'c++', '-std=c++17', '-D__HIP_PLATFORM_AMD__', '-isystem', include,
           '-fsyntax-only', '-Xclang', '-ast-dump=json', '-']
    out = subprocess.run(cmd, input=src, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f'probe: clang could not parse the headers in {include}:\n{out.stderr}')
    functions, node_types = {}, {}

    def constant(expr):
        """The value clang folded an initializer to (under casts when the enum is unsigned)."""
        if 'value' in expr:
            return int(expr['value'])
        for c in expr.get('inner', []):
            v = constant(c)
            if v is not None:
                return v
        return None

    def enum_values(decl):
        value = -1
        for c in decl.get('inner', []):
            if c.get('kind') != 'EnumConstantDecl':
                continue
            explicit = constant(c)
            value = explicit if explicit is not None else value + 1
            yield c['name'], value

    def walk(node):
        for c in node.get('inner', []) or []:
            kind = c.get('kind')
            if kind == 'FunctionDecl' and 'name' in c:
                params = [(p.get('name', ''), p['type']['qualType'])
                          for p in c.get('inner', []) if p.get('kind') == 'ParmVarDecl']
                functions.setdefault(c['name'], params)
            elif kind == 'EnumDecl' and any(e.get('name', '').startswith('hipGraphNodeType')
                                           for e in c.get('inner', []) or []):
                node_types.update(enum_values(c))
            elif kind in ('LinkageSpecDecl', 'NamespaceDecl'):
                walk(c)
    walk(json.loads(out.stdout))
    return functions, node_types


def header_version(include, cxx):
    src = '#include <hip/hip_version.h>\nHIP_VERSION\n'
    out = subprocess.run([cxx, '-E', '-P', '-I', include, '-x', 'c++', '-'], input=src,
                         capture_output=True, text=True, check=True)
    expr = out.stdout.strip().splitlines()[-1]
    if not re.fullmatch(r'[\d\s()*+]+', expr):
        sys.exit(f'probe: unexpected HIP_VERSION in {include}: {expr}')
    return eval(expr)  # digits, spaces, parentheses, * and + only (checked above)


def cxx_checks(table, declared):
    """Static assertions and prototype assignments: compiled, never linked (nothing runs)."""
    out = ['#include <hip/hip_runtime_api.h>', '#include <cstddef>', '']
    for name, size in table['type_sizes']:
        out.append(f'static_assert(sizeof({name}) == {size}, "sizeof({name}) is not {size} as the library assumes");')
    for s in table['structs']:
        n = s['name']
        out.append(f'static_assert(sizeof({n}) == {s["size"]}, "sizeof({n}) is not {s["size"]} as the library assumes");')
        for path, offset, size in s['fields']:
            out.append(f'static_assert(offsetof({n}, {path}) == {offset}, "offsetof({n}, {path}) is not {offset} as the library assumes");')
            out.append(f'static_assert(sizeof((({n}*)nullptr)->{path}) == {size}, "sizeof {n}::{path} is not {size} as the library assumes");')
    for name, value in table['constants']:
        out.append(f'static_assert((long long)({name}) == {value}, "{name} is not {value} as the library assumes");')
    out.append('')
    for f in table['functions']:
        if f['name'] not in declared:
            continue
        args = ', '.join(t for _, t in f['params']) or 'void'
        # Exact: no conversion between function pointer types is implicit, and of C++ overloads
        # (hipMalloc has templates) only one of exactly this type is taken.
        out.append(f'[[maybe_unused]] static {f["ret"]} (*rcb_{f["name"]})({args}) = &{f["name"]};')
    return '\n'.join(out) + '\n'


def cxx_run(table):
    """The pointer-valued macros, compared when it runs (a pointer cast is no constant expression)."""
    out = ['#include <hip/hip_runtime_api.h>', '#include <cstdint>', '#include <cstdio>', '',
           'int main() {', '    int failed = 0;']
    for name, value in table['pointer_constants']:
        out.append(f'    if ((uintptr_t)({name}) != {value}u) {{ std::printf("{name} is %ju, the library passes {value}\\n", '
                   f'(uintmax_t)(uintptr_t)({name})); failed = 1; }}')
    out += ['    return failed;', '}', '']
    return '\n'.join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--table', required=True)
    ap.add_argument('--include', required=True)
    ap.add_argument('--work', required=True)
    ap.add_argument('--label', default='')
    ap.add_argument('--cxx', default=os.environ.get('CXX', 'g++'))
    ap.add_argument('--clang', default='clang++-19')
    a = ap.parse_args()
    table = json.load(open(a.table))
    label = a.label or a.include
    errors, notes = [], []

    version = header_version(a.include, a.cxx)
    if version != table['version']:
        sys.exit(f'probe: the table is for {table["version"]}, the headers in {a.include} are {version}')
    functions, node_types = ast_of(a.include, a.clang)

    # Parameter names and order, and declarations, from the AST.
    declared = set()
    for f in table['functions']:
        name = f['name']
        if name not in functions:
            (errors if f['required'] else notes).append(
                f'{name} ({f["table"]}) is not declared by this header'
                + ('' if f['required'] else '; the library uses it only where the runtime exports it'))
            continue
        declared.add(name)
        theirs = [p for p, _ in functions[name]]
        ours = [p for p, _ in f['params']]
        if len(theirs) != len(ours):
            errors.append(f'{name}: the header declares {len(theirs)} parameters ({", ".join(theirs)}), '
                          f'the library passes {len(ours)} ({", ".join(ours)})')
            continue
        for i, (t, o) in enumerate(zip(theirs, ours)):
            if t != o:
                errors.append(f'{name}: parameter {i + 1} is `{t}` in the header, the library passes `{o}` there '
                              f'(header: {name}({", ".join(theirs)}))')

    # Every node type the header names means to the library what its name says.
    kinds = {raw: kind for raw, kind in table['node_types']}
    meaning = dict(table['node_type_names'])
    if not node_types:
        errors.append('no hipGraphNodeType enum in the header')
    for enumerator, value in sorted(node_types.items(), key=lambda e: e[1]):
        if enumerator.endswith('Count'):
            continue  # a bound, never a node's type
        want = meaning.get(enumerator, 'Other')
        got = kinds.get(value, 'Other')
        if want != got:
            errors.append(f'{enumerator} = {value}: the library takes node type {value} for {got}, not {want}')

    # What the compiler checks.
    os.makedirs(a.work, exist_ok=True)
    # AMD's headers as system headers, as an installed ROCm's are (-I for the system's own, which
    # -isystem would move ahead of the C++ library's wrappers).
    hip_dir = ['-I' if a.include == '/usr/include' else '-isystem', a.include]
    flags = ['-std=c++17', '-Wall', '-Wextra', '-Werror', '-D__HIP_PLATFORM_AMD__', *hip_dir]
    checks, run_src, exe = (os.path.join(a.work, n) for n in ('checks.cpp', 'run.cpp', 'run'))
    with open(checks, 'w') as fh:
        fh.write(cxx_checks(table, declared))
    with open(run_src, 'w') as fh:
        fh.write(cxx_run(table))
    for cmd in ([a.cxx, *flags, '-c', checks, '-o', os.path.join(a.work, 'checks.o')], [a.cxx, *flags, run_src, '-o', exe]):
        cc = subprocess.run(cmd, capture_output=True, text=True)
        if cc.returncode != 0:
            lines = [l.split('error: ', 1)[-1] for l in cc.stderr.splitlines() if 'error: ' in l]
            errors.extend(f'compile: {l}' for l in lines or [cc.stderr])
    if not any(e.startswith('compile:') for e in errors):
        run = subprocess.run([exe], capture_output=True, text=True)
        if run.returncode != 0:
            errors.extend(f'run: {l}' for l in run.stdout.splitlines() or [f'exit {run.returncode}'])

    for n in notes:
        print(f'  note: {n}')
    for e in errors:
        print(f'  MISMATCH: {e}')
    fields = sum(len(s['fields']) for s in table['structs'])
    print(f'{label}: HIP {version}: {len(declared)} prototypes, {len(table["structs"])} structs ({fields} fields), '
          f'{len(table["type_sizes"])} type sizes, {len(table["constants"]) + len(table["pointer_constants"])} constants, '
          f'{len(node_types)} node types: ' + (f'{len(errors)} mismatch(es)' if errors else 'all as the library assumes'))
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())
