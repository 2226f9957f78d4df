#!/usr/bin/env python3
"""Checks the module graph declared in src/README.md against the code (python3 stdlib only).

The declared graph is the fenced ```modules block of src/README.md: one line per allowed edge,
`module -> dependency: why`, `* -> base: why` for an edge every module may make, `group NAME = m...`
and `forbid GROUP|module... -> GROUP|module...: why` for paths that must never exist. The module
table of the same README names the libraries each folder builds.

It fails (exit 1), naming the file:line that makes each problem, when
  * a target of src/<m>/ links (target_link_libraries, sovai_test DEPS) a library of another
    module, or a file of src/<m>/ includes "<other>/...", and the edge m -> other is not declared;
  * a file includes another module's "<other>/internal/..." header (declared or not);
  * a declared edge is made by no link and no include (the map would say something untrue);
  * the declared graph has a cycle, or lets a forbidden path through (checked transitively);
  * a folder of src/ is missing from the graph, or the graph names a module that has no folder;
  * a library is not named sovai_<module>[_<part>], or the module table's libraries differ from
    what the CMake files define;
  * the README names a path under src/ (in backticks) that does not exist.

Usage: tools/check_module_graph.py [--root DIR] [--print]
  --root DIR  the checkout to check (default: the one this script is in)
  --print     print the edges the code makes, with one place that makes each, and exit 0
"""

import argparse
import os
import re
import sys
from collections import defaultdict

SOURCE_EXTENSIONS = (".h", ".cc", ".cu", ".cuh")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
EDGE_RE = re.compile(r"^(\S+)\s*->\s*(\S+)\s*:\s*(\S.*)$")
GROUP_RE = re.compile(r"^group\s+(\w+)\s*=\s*(.+)$")
FORBID_RE = re.compile(r"^forbid\s+(.+?)\s*->\s*(.+?)\s*:\s*(\S.*)$")
LIBRARY_RE = re.compile(r"\bsovai_\w+")
# A path under src/ as the README names it: `exec/s3_client.cc`, `model/llama.h:97`, `serve/`.
README_PATH_RE = re.compile(r"`((?:src/)?([a-z_]+)/[\w./-]*?)(?::\d+)?`")


class Problems:
    """Collects problems as 'where: what' lines, in the order found."""

    def __init__(self):
        self.lines = []

    def add(self, where, what):
        self.lines.append(f"{where}: {what}")


def rel(root, path):
    return os.path.relpath(path, root)


# --- CMake ------------------------------------------------------------------------------------


def cmake_tokens(text):
    """Yields (token, line) for a CMake file's text, comments removed, quotes kept as one token."""
    line = 1
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif c == "#":
            while i < n and text[i] != "\n":
                i += 1
        elif c in "()":
            yield c, line
            i += 1
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                if text[j] == "\\":
                    j += 1
                j += 1
            token = text[i + 1 : j]
            yield token, line
            line += token.count("\n")
            i = j + 1
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] not in '()#"':
                j += 1
            yield text[i:j], line
            i = j


def cmake_commands(path):
    """Yields (command name lower-cased, [(arg, line)...]) for each command call in the file."""
    with open(path, encoding="utf-8", errors="replace") as f:
        tokens = list(cmake_tokens(f.read()))
    i = 0
    while i < len(tokens):
        name, _ = tokens[i]
        if i + 1 < len(tokens) and tokens[i + 1][0] == "(" and re.fullmatch(r"\w+", name):
            depth = 0
            args = []
            j = i + 1
            while j < len(tokens):
                tok = tokens[j]
                if tok[0] == "(":
                    depth += 1
                    if depth > 1:
                        args.append(tok)
                elif tok[0] == ")":
                    depth -= 1
                    if depth == 0:
                        break
                    args.append(tok)
                else:
                    args.append(tok)
                j += 1
            yield name.lower(), args
            i = j + 1
        else:
            i += 1


def cmake_files(root, modules):
    """(module or None, path) of every CMake file that defines or links module libraries."""
    files = []
    for module in modules:
        for dirpath, _, names in os.walk(os.path.join(root, "src", module)):
            for name in sorted(names):
                if name == "CMakeLists.txt" or name.endswith(".cmake"):
                    files.append((module, os.path.join(dirpath, name)))
    # web/ builds the panel's embedded files into sovai_panel_assets (owned by name).
    web = os.path.join(root, "web", "CMakeLists.txt")
    if os.path.exists(web):
        files.append((None, web))
    return files


def module_of_library(name, modules):
    """The module a library belongs to by its name: the longest m with sovai_<m>[_...]."""
    best = None
    for m in modules:
        if name == f"sovai_{m}" or name.startswith(f"sovai_{m}_"):
            if best is None or len(m) > len(best):
                best = m
    return best


def scan_cmake(root, modules, problems):
    """Returns (libraries {name: module}, link edges {(a, b): [where...]})."""
    files = cmake_files(root, modules)
    commands = [(m, p, list(cmake_commands(p))) for m, p in files]

    libraries = {}
    for folder, path, calls in commands:
        for name, args in calls:
            if name != "add_library" or not args:
                continue
            lib, line = args[0]
            owner = module_of_library(lib, modules)
            where = f"{rel(root, path)}:{line}"
            if folder is not None and owner != folder:
                problems.add(where, f"library {lib} is defined in src/{folder}/ but not named "
                                    f"sovai_{folder} or sovai_{folder}_<part>")
                owner = folder
            if owner is None:
                problems.add(where,
                             f"library {lib} belongs to no module (name it sovai_<module>_...)")
                continue
            libraries[lib] = owner

    edges = defaultdict(list)
    for folder, path, calls in commands:
        for name, args in calls:
            if name == "target_link_libraries" and args:
                target, deps = args[0][0], args[1:]
            elif name == "sovai_test":
                target, deps = None, args
            else:
                continue
            source = libraries.get(target, folder)
            if source is None:
                continue
            for dep, line in deps:
                owner = libraries.get(dep)
                if owner is not None and owner != source:
                    edges[(source, owner)].append(
                        f"{rel(root, path)}:{line}: links {dep}"
                        + (f" ({target})" if target else ""))
    return libraries, edges


# --- #include ---------------------------------------------------------------------------------


def scan_includes(root, modules, problems):
    """Returns include edges {(a, b): [where...]}; adds a problem per foreign internal/ include."""
    edges = defaultdict(list)
    for module in modules:
        for dirpath, _, names in os.walk(os.path.join(root, "src", module)):
            for name in sorted(names):
                if not name.endswith(SOURCE_EXTENSIONS):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, text in enumerate(f, 1):
                        match = INCLUDE_RE.match(text)
                        if not match:
                            continue
                        parts = match.group(1).split("/")
                        if len(parts) < 2 or parts[0] not in modules or parts[0] == module:
                            continue
                        where = f"{rel(root, path)}:{number}"
                        if "internal" in parts[1:-1]:
                            problems.add(where, f'includes "{match.group(1)}", a private header '
                                                f"of {parts[0]} (internal/ is for {parts[0]} only)")
                        edges[(module, parts[0])].append(
                            f'{where}: #include "{match.group(1)}"')
    return edges


# --- The declared graph -----------------------------------------------------------------------


def parse_declared(readme_path, readme_rel, problems):
    """Parses the ```modules block: (edges {(a, b): line}, wildcards {b: line}, groups, forbids)."""
    edges, wildcards, groups, forbids = {}, {}, {}, []
    with open(readme_path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    start = next((i for i, l in enumerate(lines) if l.strip() == "```modules"), None)
    if start is None:
        problems.add(readme_rel, "no ```modules block (the declared module graph)")
        return edges, wildcards, groups, forbids
    for number in range(start + 2, len(lines) + 1):
        text = lines[number - 1].strip()
        where = f"{readme_rel}:{number}"
        if text == "```":
            break
        if not text or text.startswith("#"):
            continue
        if m := GROUP_RE.match(text):
            groups[m.group(1)] = m.group(2).split()
        elif m := FORBID_RE.match(text):
            forbids.append((m.group(1).split(), m.group(2).split(), m.group(3), where))
        elif m := EDGE_RE.match(text):
            a, b = m.group(1), m.group(2)
            if a == "*":
                wildcards[b] = where
            elif (a, b) in edges:
                problems.add(where, f"{a} -> {b} is declared twice")
            else:
                edges[(a, b)] = where
        else:
            problems.add(where, "not 'a -> b: why', 'group NAME = a b', nor "
                                "'forbid A -> B: why' (every edge needs its reason)")
    else:
        problems.add(readme_rel, "the ```modules block is not closed")
    return edges, wildcards, groups, forbids


def find_cycle(nodes, adjacency):
    """A cycle of the graph as a list of nodes (first == last), or None."""
    state = {}

    def visit(node, stack):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(adjacency.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt, stack)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(nodes):
        if node not in state:
            found = visit(node, [])
            if found:
                return found
    return None


def find_path(adjacency, start, goals):
    """The shortest path from start to any of goals, or None."""
    previous = {start: None}
    queue = [start]
    while queue:
        node = queue.pop(0)
        if node in goals and node != start:
            path = [node]
            while previous[path[-1]] is not None:
                path.append(previous[path[-1]])
            return list(reversed(path))
        for nxt in sorted(adjacency.get(node, ())):
            if nxt not in previous:
                previous[nxt] = node
                queue.append(nxt)
    return None


def expand(names, groups, modules, where, problems):
    out = []
    for name in names:
        if name in groups:
            out.extend(groups[name])
        elif name in modules:
            out.append(name)
        else:
            problems.add(where, f"'{name}' is neither a module nor a group")
    return out


# --- The README's other claims ----------------------------------------------------------------


def check_library_table(readme_path, readme_rel, libraries, modules, problems):
    """Each module-table row `| [`m/`](m/) | ... |` must list exactly the libraries m defines."""
    listed = {}
    with open(readme_path, encoding="utf-8") as f:
        for number, text in enumerate(f, 1):
            m = re.match(r"^\|\s*\[`([a-z_]+)/`\]\([a-z_]+/\)\s*\|([^|]*)\|", text)
            if m:
                listed[m.group(1)] = (set(LIBRARY_RE.findall(m.group(2))), number)
    defined = defaultdict(set)
    for lib, module in libraries.items():
        defined[module].add(lib)
    for module in sorted(modules):
        if module not in listed:
            problems.add(readme_rel, f"the module table has no row for {module}/")
            continue
        names, number = listed[module]
        where = f"{readme_rel}:{number}"
        for lib in sorted(defined[module] - names):
            problems.add(where, f"{module}/ builds {lib}, which its row does not list")
        for lib in sorted(names - defined[module]):
            problems.add(where, f"{module}/'s row lists {lib}, which no CMake file defines")


def check_readme_paths(root, readme_path, readme_rel, modules, problems):
    with open(readme_path, encoding="utf-8") as f:
        for number, text in enumerate(f, 1):
            for m in README_PATH_RE.finditer(text):
                path, module = m.group(1), m.group(2)
                if path.startswith("src/"):
                    path = path[4:]
                if module not in modules:
                    continue
                if not os.path.exists(os.path.join(root, "src", path)):
                    problems.add(f"{readme_rel}:{number}",
                                 f"names src/{path}, which does not exist")


# --- Main -------------------------------------------------------------------------------------


def check(root, print_edges=False, out=sys.stdout):
    """Runs every check on the checkout at root; returns the process exit code."""
    problems = Problems()
    src = os.path.join(root, "src")
    modules = sorted(d for d in os.listdir(src)
                     if os.path.exists(os.path.join(src, d, "CMakeLists.txt")))
    module_set = set(modules)
    readme_path = os.path.join(src, "README.md")
    readme_rel = rel(root, readme_path)

    libraries, link_edges = scan_cmake(root, module_set, problems)
    include_edges = scan_includes(root, module_set, problems)
    made = defaultdict(list)
    for edges in (link_edges, include_edges):
        for edge, wheres in edges.items():
            made[edge].extend(wheres)

    if print_edges:
        for (a, b) in sorted(made):
            print(f"{a} -> {b}  ({len(made[(a, b)])} places, e.g. {made[(a, b)][0]})", file=out)
        return 0

    if not os.path.exists(readme_path):
        print(f"{readme_rel}: missing (it holds the declared module graph)", file=out)
        return 1
    declared, wildcards, groups, forbids = parse_declared(readme_path, readme_rel, problems)

    # Every name in the graph is a module; every module is in the graph.
    mentioned = set()
    for (a, b), where in declared.items():
        for name in (a, b):
            mentioned.add(name)
            if name not in module_set:
                problems.add(where, f"'{name}' is not a module (no src/{name}/CMakeLists.txt)")
    for b, where in wildcards.items():
        mentioned.add(b)
        if b not in module_set:
            problems.add(where, f"'{b}' is not a module (no src/{b}/CMakeLists.txt)")
    for module in modules:
        if module not in mentioned:
            problems.add(readme_rel, f"module {module} is not in the ```modules graph")

    def allowed(a, b):
        return (a, b) in declared or (b in wildcards and a != b)

    for (a, b) in sorted(made):
        if not allowed(a, b):
            for where in made[(a, b)]:
                problems.add(where.split(": ", 1)[0],
                             f"undeclared edge {a} -> {b} ({where.split(': ', 1)[1]}); declare it "
                             f"in {readme_rel} with its reason, or remove it")
    for (a, b), where in sorted(declared.items(), key=lambda kv: kv[1]):
        if (a, b) not in made and a in module_set and b in module_set:
            problems.add(where, f"{a} -> {b} is declared but no link or #include makes it; "
                                "remove the line")

    adjacency = defaultdict(set)
    for (a, b) in declared:
        adjacency[a].add(b)
    for b in wildcards:
        for a in module_set - {b}:
            adjacency[a].add(b)
    cycle = find_cycle(module_set, adjacency)
    if cycle:
        problems.add(readme_rel, "the declared graph has a cycle: " + " -> ".join(cycle))
    for sources, targets, why, where in forbids:
        goals = set(expand(targets, groups, module_set, where, problems))
        for a in expand(sources, groups, module_set, where, problems):
            path = find_path(adjacency, a, goals)
            if path:
                problems.add(where, f"forbidden path {' -> '.join(path)} ({why})")

    check_library_table(readme_path, readme_rel, libraries, module_set, problems)
    check_readme_paths(root, readme_path, readme_rel, module_set, problems)

    for line in problems.lines:
        print(line, file=out)
    if problems.lines:
        print(f"module graph: {len(problems.lines)} problem(s); the graph is the ```modules block "
              f"of {readme_rel}", file=out)
        return 1
    print(f"module graph: {len(modules)} modules, {len(libraries)} libraries, {len(made)} edges, "
          "all declared, acyclic", file=out)
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    parser.add_argument("--print", action="store_true", dest="print_edges")
    args = parser.parse_args()
    return check(os.path.abspath(args.root), args.print_edges)


if __name__ == "__main__":
    sys.exit(main())
