"""Every AST the package builds goes through pysource.parse (one lock: CPython 3.11's AST
constructor is not safe for two threads at once)."""

from __future__ import annotations

import re
import threading
from pathlib import Path

from davinci_kernel import pysource

PKG = Path(__file__).resolve().parents[1] / "davinci_kernel"


def test_no_module_calls_ast_parse_directly():
    direct = [str(p.relative_to(PKG)) for p in PKG.rglob("*.py")
              if p.name != "pysource.py" and re.search(r"\bast\.parse\(|PyCF_ONLY_AST", p.read_text())]
    assert direct == []


def test_threads_parse_side_by_side():
    nested = "x = " + "(" * 40 + "1" + ")" * 40 + "\n" + "def f():\n    return [i for i in range(3)]\n" * 50
    errors: list = []

    def work():
        try:
            for _ in range(200):
                assert len(pysource.parse(nested).body) == 51
        except BaseException as e:  # noqa: BLE001 - collected for the assertion below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
