"""Pulling structure out of what models really send.

Covers: removing thinking (``<think>…</think>``, or an unclosed ``<think>`` that used
the whole reply), listing fenced code blocks (closed or cut off at the end), finding the
Python source that defines a given class even without fences, and finding one named tool
call written as a ``<tool_call>`` block, a fenced or bare JSON object, an OpenAI-style
``{"function": {...}}`` entry, or a Python-style call ``name(key=value, ...)``.
Does not cover: what the arguments mean (each role's parser checks them).
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any, Optional

from ..pysource import parse as parse_source

_THINK = re.compile(r"<think>.*?</think>", re.S)
_FENCE = re.compile(r"```[ \t]*([\w+.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)


def strip_think(text: str) -> tuple[str, bool]:
    """(answer, thinking_was_unclosed). A reply that never closed ``<think>`` has no answer."""
    text = _THINK.sub("", text or "")
    if "<think>" in text:
        return text.split("<think>", 1)[0], True
    if "</think>" in text:  # template put the opening tag in the prompt
        text = text.split("</think>", 1)[1]
    return text, False


def code_blocks(text: str) -> list[tuple[str, str]]:
    """[(language, body)] of fenced blocks in order; a last unclosed fence counts."""
    return [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(text)]


def defines(source: str, name: str) -> bool:
    """Whether ``source`` defines a class or function ``name`` (syntax errors: a text check)."""
    try:
        tree = parse_source(source)
    except SyntaxError:
        return re.search(rf"^\s*(class|def)\s+{name}\b", source, re.M) is not None
    return any(isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == name for n in ast.walk(tree))


def unfenced_python(text: str) -> Optional[str]:
    """The longest tail of ``text`` starting at a Python-looking line that parses, trimmed
    of trailing prose; None when nothing parses."""
    lines = text.splitlines()
    starts = [i for i, ln in enumerate(lines) if re.match(r"(import |from \S+ import |@|class |def )", ln)]
    for s in starts:
        for e in range(len(lines), s, -1):
            chunk = "\n".join(lines[s:e])
            try:
                parse_source(chunk)
            except SyntaxError:
                continue
            return chunk + "\n"
    return None


# --------------------------------------------------------------------------- tool calls
def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError, ValueError):
        return None


def json_values(text: str) -> list[Any]:
    """JSON values in ``text``: ``<tool_call>`` blocks, fenced blocks, then bare objects."""
    found = [_loads(m.group(1)) for m in re.finditer(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", text, re.S)]
    found += [_loads(body) for lang, body in code_blocks(text) if lang in ("", "json", "tool_call")]
    dec = json.JSONDecoder()
    i = text.find("{")
    while i != -1:
        try:
            obj, end = dec.raw_decode(text, i)
            found.append(obj)
            i = text.find("{", end)
        except json.JSONDecodeError:
            i = text.find("{", i + 1)
    return [f for f in found if f is not None]


def _arguments(obj: Any, name: str, key: str) -> Optional[dict]:
    if isinstance(obj, list):
        for item in obj:
            args = _arguments(item, name, key)
            if args is not None:
                return args
        return None
    if not isinstance(obj, dict):
        return None
    if key in obj:
        return obj
    if isinstance(obj.get("function"), dict):
        return _arguments(obj["function"], name, key)
    if "tool_calls" in obj:
        return _arguments(obj["tool_calls"], name, key)
    if obj.get("name", name) != name:
        return None
    for k in ("arguments", "parameters", "args", "input"):
        val = obj.get(k)
        val = _loads(val) if isinstance(val, str) else val
        if isinstance(val, dict) and key in val:
            return val
    return None


def _python_call(text: str, name: str) -> Optional[dict]:
    """``name(think="...", new_skills=[...])`` written as Python, literals only."""
    for m in re.finditer(rf"\b{name}\s*\(", text):
        start = m.start()
        depth, end = 0, None
        for j in range(m.end() - 1, len(text)):
            c = text[j]
            depth += c == "("
            depth -= c == ")"
            if depth == 0:
                end = j + 1
                break
        if end is None:
            continue
        try:
            call = parse_source(text[start:end], mode="eval").body
            if isinstance(call, ast.Call):
                return {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg}
        except (SyntaxError, ValueError):
            continue
    return None


def find_tool_call(reply: Any, name: str, key: str) -> Optional[dict]:
    """The arguments of the first ``name`` tool call whose arguments carry ``key``."""
    if isinstance(reply, (dict, list)):
        return _arguments(reply, name, key)
    text, _ = strip_think(str(reply or ""))
    for obj in json_values(text):
        args = _arguments(obj, name, key)
        if args is not None:
            return args
    return _python_call(text, name)
