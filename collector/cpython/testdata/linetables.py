"""Prints the line tables of code objects, and the lines CPython itself
gives their instructions, for collector/cpython's line table decoders to
be checked against (CPython 3.10 to 3.13).

Usage: linetables.py MODULE... (or "cases": code compiled from a source
made to stress the tables: long jumps of lines and of bytecode, lines
that go back, instructions of no line). One JSON object a line:
{"name", "firstlineno", "linetable" (hex), "codelen" (bytes of
instructions), "ranges": [[start, end, line or -1], ...] from co_lines()}.
"""

import importlib
import json
import sys


def cases_source():
    parts = ["def long_gaps(a):", "    x = a"]
    parts += [""] * 300  # a jump of 301 lines: more than a signed byte
    parts += ["    y = x + 1", "    return y"]
    parts += ["", "def long_line(a):"]
    # One line of many instructions: more than 254 bytes of bytecode.
    parts += ["    return (" + ", ".join(["a"] * 400) + ")"]
    parts += ["", "def going_back(items):", "    total = 0", "    for item in items:",
              "        total += (", "            item", "            *", "            2", "        )",
              "    return total"]
    parts += ["", "def cleanup(path):", "    try:", "        with open(path) as f:",
              "            return f.read()", "    finally:", "        print('done')"]
    parts += ["", "class Decorated:", "    @staticmethod", "    def method(", "        a,", "        b,",
              "    ):", "        return [x for x in range(a)", "                if x > b]"]
    parts += [""] * 2000
    parts += ["def far_down(a):", "    return lambda b: a + b"]
    return "\n".join(parts) + "\n"


def code_objects(code):
    yield code
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            yield from code_objects(const)


def modules(names):
    for name in names:
        if name == "cases":
            yield compile(cases_source(), "<cases>", "exec")
            continue
        module = importlib.import_module(name)
        with open(module.__file__, "rb") as f:
            yield compile(f.read(), module.__file__, "exec")


for top in modules(sys.argv[1:]):
    for code in code_objects(top):
        ranges = [[start, end, -1 if line is None else line] for start, end, line in code.co_lines()]
        print(json.dumps({
            "name": getattr(code, "co_qualname", code.co_name),
            "firstlineno": code.co_firstlineno,
            "linetable": code.co_linetable.hex(),
            "codelen": len(code.co_code),
            "ranges": ranges,
        }))
