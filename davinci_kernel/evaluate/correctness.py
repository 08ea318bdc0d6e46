"""Comparing candidate outputs with reference outputs, in the harness process.

Covers: structure, shape and dtype agreement, NaN/Inf (never pass), allclose with the
configured tolerances, and the error statistics the feedback and the precision guard
use (max abs/rel difference, relative L2 error computed in float64). Inputs are plain
CPU tensors rebuilt from raw bytes (transfer.py), so nothing the candidate made can
change how this code behaves. Does not cover: producing the outputs (worker.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch


@dataclass
class Comparison:
    ok: bool = True
    error_kind: Optional[str] = None
    message: str = ""
    max_abs: float = 0.0
    max_rel: float = 0.0
    rel_l2: float = 0.0
    float32: bool = False  # any float32 output (the precision guard applies)
    low_mantissa_share: float = 0.0  # share of nonzero float32 outputs with the low 13 mantissa bits zero
    details: list[str] = field(default_factory=list)


def compare(ref: list, cand: list, atol: float, rtol: float) -> Comparison:
    """Compare leaf lists (tensors or scalar descriptions) from one call each."""
    c = Comparison()
    if len(ref) != len(cand):
        c.ok, c.error_kind = False, "output_structure"
        c.message = f"expected {len(ref)} output tensor(s), got {len(cand)}"
        return c
    sq_err, sq_ref = 0.0, 0.0
    for i, (r, x) in enumerate(zip(ref, cand)):
        where = f"output {i}" if len(ref) > 1 else "output"
        if not isinstance(r, torch.Tensor):
            if isinstance(x, torch.Tensor) or r.get("value") != x.get("value"):
                c.ok, c.error_kind = False, "wrong_output"
                c.message = f"{where}: expected {r.get('value')!r}, got {x if isinstance(x, torch.Tensor) else x.get('value')!r}"
                return c
            continue
        if not isinstance(x, torch.Tensor):
            c.ok, c.error_kind = False, "output_structure"
            c.message = f"{where}: expected a tensor, got {x.get('kind')} {x.get('value', x.get('dtype', ''))}"
            return c
        if tuple(r.shape) != tuple(x.shape):
            c.ok, c.error_kind = False, "shape_mismatch"
            c.message = f"{where}: expected shape {tuple(r.shape)}, got {tuple(x.shape)}"
            return c
        if r.dtype != x.dtype:
            c.ok, c.error_kind = False, "dtype_mismatch"
            c.message = f"{where}: expected dtype {str(r.dtype).replace('torch.', '')}, got {str(x.dtype).replace('torch.', '')}"
            return c
        if r.dtype == torch.float32:
            c.float32 = True
            nz = x[x != 0]
            if nz.numel() >= 64:
                share = float(((nz.view(torch.int32) & 0x1FFF) == 0).float().mean())
                c.low_mantissa_share = max(c.low_mantissa_share, share)
        if r.numel() == 0:
            continue
        if not torch.isfinite(x).all():
            bad = int((~torch.isfinite(x)).sum())
            c.ok, c.error_kind = False, "nan_inf"
            c.message = f"{where}: {bad} of {x.numel()} values are NaN/Inf"
            return c
        if not r.dtype.is_floating_point:
            if not torch.equal(r, x):
                c.ok, c.error_kind = False, "wrong_output"
                c.message = f"{where}: {int((r != x).sum())} of {x.numel()} values differ (exact match required)"
            continue
        rf, xf = r.float(), x.float()
        diff = (xf - rf).abs()
        tol = atol + rtol * rf.abs()
        bad_mask = ~(diff <= tol)  # NaN in the reference counts as a mismatch
        c.max_abs = max(c.max_abs, float(torch.nan_to_num(diff, nan=float("inf")).max()))
        c.max_rel = max(c.max_rel, float(torch.nan_to_num(diff / rf.abs().clamp_min(1e-6), nan=float("inf")).max()))
        sq_err += float(torch.linalg.vector_norm(xf - rf, dtype=torch.float64) ** 2)
        sq_ref += float(torch.linalg.vector_norm(rf, dtype=torch.float64) ** 2)
        n_bad = int(bad_mask.sum())
        if n_bad:
            c.ok, c.error_kind = False, "wrong_output"
            c.message = (f"{where}: {n_bad} of {x.numel()} values differ beyond atol={atol:g}, rtol={rtol:g} "
                         f"(max abs diff {c.max_abs:.3g}, max rel diff {c.max_rel:.3g})")
    c.rel_l2 = (sq_err ** 0.5) / (sq_ref ** 0.5) if sq_ref > 0 else (0.0 if sq_err == 0 else float("inf"))
    return c
