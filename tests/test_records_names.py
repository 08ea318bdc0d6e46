"""``Stage`` and ``ErrorKind`` in ``records.py`` name every stage and error kind the package
sets or reads: a scan of the package's source for string literals given to or compared
with ``stage`` / ``error_kind`` (keyword arguments, attribute, item and dict assignments,
``.get`` defaults, comparisons, ``fail("kind", ...)`` in the correctness checks and the
``*_ERRORS`` / ``*_STAGES`` sets), the constants themselves (``Stage.DONE``) included."""

import ast
from collections import defaultdict
from pathlib import Path

from davinci_kernel.records import ErrorKind, Stage

PACKAGE = Path(__file__).resolve().parents[1] / "davinci_kernel"
FIELDS = ("stage", "error_kind")
NAMES = {"Stage": Stage, "ErrorKind": ErrorKind}


def _strings(node) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in NAMES:
        value = getattr(NAMES[node.value.id], node.attr)
        return [value] if isinstance(value, str) else []  # Stage.ORDER, ErrorKind.ALL: the lists themselves
    if isinstance(node, ast.IfExp):
        return _strings(node.body) + _strings(node.orelse)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for e in node.elts for s in _strings(e)]
    return []


def _field(node):
    """"stage" / "error_kind" when ``node`` reads one: ``x.stage``, ``x["stage"]``, ``x.get("stage")``."""
    if isinstance(node, ast.Attribute) and node.attr in FIELDS:
        return node.attr
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value in FIELDS:
        return node.slice.value
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
            and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value in FIELDS):
        return node.args[0].value
    return None


def _assigned(tree) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            for kw in n.keywords:
                if kw.arg in FIELDS:
                    out[kw.arg].update(_strings(kw.value))
            if _field(n) and len(n.args) > 1:
                out[_field(n)].update(_strings(n.args[1]))
            if isinstance(n.func, ast.Name) and n.func.id == "fail" and n.args:
                out["error_kind"].update(_strings(n.args[0]))
        elif isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Name) and t.id.endswith(("_ERRORS", "_STAGES")):
                    out["error_kind" if t.id.endswith("_ERRORS") else "stage"].update(_strings(n.value))
                tuples = isinstance(t, ast.Tuple) and isinstance(n.value, ast.Tuple)
                for target, value in (zip(t.elts, n.value.elts) if tuples else [(t, n.value)]):
                    if _field(target):
                        out[_field(target)].update(_strings(value))
        elif isinstance(n, ast.Dict):
            for k, v in zip(n.keys, n.values):
                if isinstance(k, ast.Constant) and k.value in FIELDS:
                    out[k.value].update(_strings(v))
        elif isinstance(n, ast.Compare) and _field(n.left):
            for c in n.comparators:
                out[_field(n.left)].update(_strings(c))
    return out


def _package_names() -> dict[str, dict[str, list[str]]]:
    found: dict[str, dict[str, list[str]]] = {f: defaultdict(list) for f in FIELDS}
    for path in sorted(PACKAGE.rglob("*.py")):
        for f, values in _assigned(ast.parse(path.read_text(encoding="utf-8"))).items():
            for v in values:
                found[f][v].append(str(path.relative_to(PACKAGE)))
    return found


def test_stage_and_error_kind_constants_name_what_the_package_uses():
    found = _package_names()
    assert {"done", "static", "harness", "reference", "missing", "wrong_output", "import_error"} <= (
        set(found["stage"]) | set(found["error_kind"]))  # the scan sees literals in each kind of place
    unknown_stages = {s: where for s, where in found["stage"].items() if s not in Stage.ORDER}
    unknown_kinds = {k: where for k, where in found["error_kind"].items() if k not in ErrorKind.ALL}
    assert not unknown_stages, f"stages missing from records.Stage: {unknown_stages}"
    assert not unknown_kinds, f"error kinds missing from records.ErrorKind: {unknown_kinds}"


def test_every_declared_name_is_used():
    found = _package_names()
    assert len(Stage.ORDER) == len(set(Stage.ORDER))
    assert set(Stage.ORDER) == set(found["stage"])
    assert ErrorKind.ALL == set(found["error_kind"])
