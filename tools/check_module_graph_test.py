#!/usr/bin/env python3
"""Tests of tools/check_module_graph.py on small fake trees written to a temporary directory."""

import io
import os
import sys
import tempfile
import textwrap
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_module_graph  # noqa: E402

# Two modules: a links and includes b. The link spans lines, with a comment naming a library that
# must not count, and a test's DEPS count as links too.
CLEAN = {
    "src/a/CMakeLists.txt": """\
        add_library(sovai_a STATIC a.cc)
        target_link_libraries(sovai_a
          PUBLIC sovai_b  # not sovai_c
          PRIVATE Threads::Threads)
        sovai_test(NAME a_test LABELS unit DEPS sovai_a sovai_b_extra SRCS a_test.cc)
        """,
    "src/a/a.cc": """\
        #include "a/a.h"
        #include "b/b.h"
        #include <vector>
        """,
    "src/a/a.h": "#pragma once\n",
    "src/b/CMakeLists.txt": """\
        add_library(sovai_b STATIC b.cc internal/x.cc)
        add_library(sovai_b_extra STATIC extra.cc)
        """,
    "src/b/b.h": '#pragma once\n#include "b/internal/x.h"\n',
    "src/b/internal/x.h": "#pragma once\n",
    "src/README.md": """\
        # Map

        | Module | Libraries | What |
        |---|---|---|
        | [`a/`](a/) | `sovai_a` | the a module, see `a/a.h` |
        | [`b/`](b/) | `sovai_b`, `sovai_b_extra` | the b module |

        ```modules
        # a comment
        a -> b: a calls b
        ```
        """,
}


class CheckModuleGraphTest(unittest.TestCase):
    def run_check(self, files):
        with tempfile.TemporaryDirectory() as root:
            for path, text in files.items():
                full = os.path.join(root, path)
                os.makedirs(os.path.dirname(full), exist_ok=True)
                with open(full, "w", encoding="utf-8") as f:
                    f.write(textwrap.dedent(text))
            out = io.StringIO()
            code = check_module_graph.check(root, out=out)
            return code, out.getvalue()

    def test_clean_tree_passes(self):
        code, out = self.run_check(CLEAN)
        self.assertEqual(code, 0, out)
        self.assertIn("2 modules, 3 libraries, 1 edges, all declared, acyclic", out)

    def test_undeclared_link_and_include_fail_naming_both(self):
        files = dict(CLEAN)
        files["src/c/CMakeLists.txt"] = "add_library(sovai_c STATIC c.cc)\n"
        files["src/c/c.h"] = "#pragma once\n"
        files["src/a/CMakeLists.txt"] = CLEAN["src/a/CMakeLists.txt"].replace(
            "PUBLIC sovai_b  # not sovai_c", "PUBLIC sovai_b\n  sovai_c")
        files["src/a/a.cc"] = CLEAN["src/a/a.cc"] + '#include "c/c.h"\n'
        files["src/README.md"] = CLEAN["src/README.md"].replace(
            "| [`b/`](b/)", "| [`c/`](c/) | `sovai_c` | c |\n        | [`b/`](b/)").replace(
            "a -> b: a calls b", "a -> b: a calls b\n        b -> c: never made")
        code, out = self.run_check(files)
        self.assertEqual(code, 1, out)
        self.assertIn("src/a/CMakeLists.txt:4: undeclared edge a -> c (links sovai_c (sovai_a))",
                      out)
        self.assertIn('src/a/a.cc:4: undeclared edge a -> c (#include "c/c.h")', out)
        # And the declared edge that nothing makes.
        self.assertIn("b -> c is declared but no link or #include makes it", out)

    def test_foreign_internal_include_fails_even_when_the_edge_is_declared(self):
        files = dict(CLEAN)
        files["src/a/a.cc"] = CLEAN["src/a/a.cc"] + '#include "b/internal/x.h"\n'
        code, out = self.run_check(files)
        self.assertEqual(code, 1, out)
        self.assertIn('src/a/a.cc:4: includes "b/internal/x.h", a private header of b', out)
        self.assertNotIn("b/b.h", out)  # b's own internal include is fine

    def test_cycle_fails(self):
        files = dict(CLEAN)
        files["src/b/b.cc"] = '#include "a/a.h"\n'
        files["src/README.md"] = CLEAN["src/README.md"].replace(
            "a -> b: a calls b", "a -> b: a calls b\n        b -> a: and back")
        code, out = self.run_check(files)
        self.assertEqual(code, 1, out)
        self.assertIn("the declared graph has a cycle: a -> b -> a", out)

    def test_forbidden_path_fails_through_a_declared_edge(self):
        files = dict(CLEAN)
        files["src/README.md"] = CLEAN["src/README.md"].replace(
            "a -> b: a calls b",
            "a -> b: a calls b\n        group low = a\n        forbid low -> b: a must not use b")
        code, out = self.run_check(files)
        self.assertEqual(code, 1, out)
        self.assertIn("forbidden path a -> b (a must not use b)", out)

    def test_edge_without_reason_and_unknown_module_fail(self):
        files = dict(CLEAN)
        files["src/README.md"] = CLEAN["src/README.md"].replace(
            "a -> b: a calls b", "a -> b\n        a -> b: a calls b\n        a -> zz: gone")
        code, out = self.run_check(files)
        self.assertEqual(code, 1, out)
        self.assertIn("every edge needs its reason", out)
        self.assertIn("'zz' is not a module", out)

    def test_module_missing_from_graph_fails(self):
        files = dict(CLEAN)
        files["src/d/CMakeLists.txt"] = "add_library(sovai_d STATIC d.cc)\n"
        files["src/README.md"] = CLEAN["src/README.md"].replace(
            "| [`b/`](b/)", "| [`d/`](d/) | `sovai_d` | d |\n        | [`b/`](b/)")
        code, out = self.run_check(files)
        self.assertEqual(code, 1, out)
        self.assertIn("module d is not in the ```modules graph", out)

    def test_library_named_for_another_module_fails(self):
        files = dict(CLEAN)
        files["src/b/CMakeLists.txt"] += "add_library(sovai_a_stray STATIC s.cc)\n"
        code, out = self.run_check(files)
        self.assertEqual(code, 1, out)
        self.assertIn("library sovai_a_stray is defined in src/b/ but not named sovai_b", out)

    def test_library_table_must_match_the_cmake_files(self):
        files = dict(CLEAN)
        files["src/README.md"] = CLEAN["src/README.md"].replace(
            "`sovai_b`, `sovai_b_extra`", "`sovai_b`, `sovai_b_old`")
        code, out = self.run_check(files)
        self.assertEqual(code, 1, out)
        self.assertIn("b/ builds sovai_b_extra, which its row does not list", out)
        self.assertIn("b/'s row lists sovai_b_old, which no CMake file defines", out)

    def test_readme_path_that_does_not_exist_fails(self):
        files = dict(CLEAN)
        files["src/README.md"] = CLEAN["src/README.md"].replace("`a/a.h`", "`a/gone.h:12`")
        code, out = self.run_check(files)
        self.assertEqual(code, 1, out)
        self.assertIn("src/README.md:5: names src/a/gone.h, which does not exist", out)


if __name__ == "__main__":
    unittest.main()
