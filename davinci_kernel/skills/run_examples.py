"""Run the ``## Example`` code of skills and report which ones pass their own check.

Covers: writing each skill's Python example to a file (Triton needs real source
files), running it as ``__main__`` so its check block executes, and reporting per
skill ``ok`` / ``skipped`` / ``failed`` with the error's last line. On a machine
without CUDA the examples run under the Triton interpreter (``TRITON_INTERPRET=1``,
set before anything imports triton) and examples that build CUDA extensions are
skipped. Run it in a fresh process: ``python -m davinci_kernel.skills.run_examples
[FILES or DIR ...] [--json]`` (default: the bundled seed sources).

Does not cover: timing (``bench/skills_speedup.py``) or untrusted code: this runs
skill examples in the current process, which is fine for the project's own seed
library and for tests, not for model-written skills (those go through the
evaluator's sandbox).
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
import time
import traceback
from contextlib import redirect_stdout
from pathlib import Path


def _has_cuda() -> bool:
    if os.environ.get("TRITON_INTERPRET") == "1":
        return False
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - no torch means no CUDA
        return False


def run_one(path: Path, workdir: Path, cuda: bool) -> dict:
    import runpy

    from .markdown import example_blocks, read_skill_file

    skill, _ = read_skill_file(path)
    blocks = [code for lang, code in example_blocks(skill.content) if lang in ("python", "py")]
    if not blocks:
        return {"name": skill.name, "status": "failed", "error": "no python example", "seconds": 0.0}
    code = "\n\n".join(blocks)
    if "load_inline" in code and not cuda:
        return {"name": skill.name, "status": "skipped", "error": "needs CUDA (load_inline)", "seconds": 0.0}
    src = workdir / f"{skill.name}.py"
    src.write_text(code, encoding="utf-8")
    t0 = time.perf_counter()
    buf = io.StringIO()
    try:
        with redirect_stdout(buf):
            runpy.run_path(str(src), run_name="__main__")
        ok = "ok" in buf.getvalue().split()
        status, err = ("ok", None) if ok else ("failed", "check did not print 'ok'")
    except BaseException as e:  # noqa: BLE001 - report every failure of an example
        status = "failed"
        tb = traceback.format_exception(type(e), e, e.__traceback__)
        err = (tb[-1].strip() if tb else repr(e))[:500]
    return {"name": skill.name, "status": status, "error": err, "seconds": round(time.perf_counter() - t0, 3)}


def _paths(args: list[str]) -> list[Path]:
    if not args:
        args = [str(Path(__file__).parent / "seed")]
    out: list[Path] = []
    for a in args:
        p = Path(a)
        out += sorted(p.glob("*.md")) if p.is_dir() else [p]
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in argv
    argv = [a for a in argv if a != "--json"]
    cuda = _has_cuda()
    if not cuda:
        os.environ["TRITON_INTERPRET"] = "1"
    results = []
    with tempfile.TemporaryDirectory(prefix="dvk_examples_") as tmp:
        sys.path.insert(0, tmp)
        for p in _paths(argv):
            results.append(run_one(p, Path(tmp), cuda))
    if as_json:
        print(json.dumps({"device": "cuda" if cuda else "cpu (triton interpreter)", "results": results}))
    else:
        for r in results:
            print(f"{r['status']:8s} {r['name']:40s} {r['seconds']:6.2f}s  {r['error'] or ''}")
    return 0 if all(r["status"] != "failed" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
