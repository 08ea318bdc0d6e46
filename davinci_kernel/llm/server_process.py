"""Starting, watching and stopping a generation server (vLLM or SGLang) in its own venv.

Covers: the command line and environment a server is started with (``server_command``:
vLLM's OpenAI server with the log-probs of the sampling distribution, the development
endpoints that reload weights, eager mode, and on a CPU-only build a 1 GiB KV cache;
SGLang's ``launch_server``), ``ServerProcess`` (start from a given interpreter on a free
loopback port, log to a file in the run folder, wait for ``/health`` with a timeout while
noticing an early exit, stop the whole process group), and ``wait_healthy`` for a server
somebody else started. A failure is a one-line ``UsageError`` that names the log file.

Does not cover: the requests made to a healthy server (``server_client.py``) or weight
sync (``rl/weight_sync.py``).
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Optional

from ..config import RLConfig, choices_of
from ..errors import UsageError

KINDS = tuple(k for k in choices_of(RLConfig, "generator") if k != "local")  # declared once: rl.generator's choices


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(kind: str, python: str, model_dir: str | Path, port: int, served_name: str,
                   dtype: str = "float32", max_model_len: int = 4096, lora_rank: int = 0,
                   extra: str = "") -> tuple[list[str], dict[str, str]]:
    """(argv, extra environment) that serve ``model_dir`` on 127.0.0.1:``port``."""
    if kind == "vllm":
        argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
                "--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(port),
                "--dtype", dtype, "--max-model-len", str(max_model_len), "--enforce-eager",
                "--logprobs-mode", "processed_logprobs", "--disable-log-stats"]
        env = {"VLLM_SERVER_DEV_MODE": "1"}
        if lora_rank > 0:
            argv += ["--enable-lora", "--max-lora-rank", str(max(8, lora_rank)), "--max-loras", "1"]
            env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"))
    elif kind == "sglang":
        argv = [python, "-m", "sglang.launch_server", "--model-path", str(model_dir),
                "--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(port),
                "--dtype", dtype, "--context-length", str(max_model_len)]
        env = {}
        if lora_rank > 0:
            argv += ["--enable-lora", "--max-lora-rank", str(lora_rank)]
    else:
        raise UsageError(f"generation server '{kind}': use one of {', '.join(KINDS)}")
    return argv + shlex.split(extra), env


def _get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - a URL the user configured
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def wait_healthy(url: str, timeout_s: float, proc: Optional[subprocess.Popen] = None,
                 log_path: Optional[Path] = None) -> float:
    """Seconds until ``url``/health answered 200; a ``UsageError`` when the timeout passes or
    ``proc`` exits first (the line names the log's last words)."""
    t0 = time.monotonic()
    while True:
        if proc is not None and proc.poll() is not None:
            raise UsageError(f"the generation server exited with code {proc.returncode} before it was healthy"
                             f"{_tail(log_path)}")
        try:
            status, _ = _get(url.rstrip("/") + "/health", timeout=5.0)
            if status == 200:
                return time.monotonic() - t0
        except (OSError, urllib.error.URLError):
            pass
        if time.monotonic() - t0 > timeout_s:
            where = f"; its log: {log_path}" if log_path else ""
            raise UsageError(f"the generation server at {url} was not healthy within {timeout_s:.0f} s "
                             f"(rl.generator_timeout_s){where}")
        time.sleep(0.5)


def _tail(log_path: Optional[Path]) -> str:
    if log_path is None or not Path(log_path).is_file():
        return ""
    lines = [ln.strip() for ln in Path(log_path).read_text(errors="replace").splitlines() if ln.strip()]
    last = lines[-1][:200] if lines else "(empty)"
    return f"; last log line: {last} (log: {log_path})"


class ServerProcess:
    """A server this process started; ``stop()`` ends it and its children (also on exit)."""

    def __init__(self, kind: str, python: str, model_dir: str | Path, log_dir: str | Path, served_name: str,
                 dtype: str = "float32", max_model_len: int = 4096, lora_rank: int = 0, extra: str = "",
                 port: Optional[int] = None):
        py = Path(python).expanduser()
        if not (py.is_file() and os.access(py, os.X_OK)):
            raise UsageError(f"rl.generator_python={python}: no such interpreter (give the python of the venv "
                             f"that has {kind} installed, e.g. .venv-vllm/bin/python)")
        self.kind = kind
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv, env = server_command(kind, str(py), model_dir, self.port, served_name, dtype, max_model_len,
                                   lora_rank, extra)
        self.log_path = Path(log_dir) / f"{kind}-server.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        full_env = dict(os.environ)
        full_env.pop("PYTHONPATH", None)  # the server's venv imports its own packages only
        full_env.update(env)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, env=full_env,
                                     stdin=subprocess.DEVNULL, start_new_session=True)

    def wait(self, timeout_s: float) -> float:
        try:
            return wait_healthy(self.url, timeout_s, self.proc, self.log_path)
        except BaseException:
            self.stop()
            raise

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, grace_s: float = 10.0) -> None:
        if self.proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if not self._log.closed:
            self._log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
