"""How much work a torch op does, read from profiler events: the one measure of torch work
that coverage compares (a candidate's ops against the reference's).

Covers: which ops are memory ops (no work), which are weighed by their elements
(``ELEMENT_OPS``; an op that does several ops per element by as many, ``ELEMENT_WEIGHTS``,
read from ``op_weights.json``, which ``opweights.py`` counts from torch's decompositions),
which are matrix-product front ends (``COMPOSITE_OPS``), the FLOP formulas for ops the
profiler gives no count (convolutions, embeddings, contractions, sampling), ops on complex
inputs four times, and the outermost compute ops of a call (``outermost_compute``,
``profiled_work``). Does not cover: running the profiler or what a call read and wrote on
the host (``audit.py``), counting the weights (``opweights.py``, offline).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

MEMORY_OPS = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "view", "_unsafe_view",
    "reshape", "_reshape_alias", "as_strided", "t", "transpose", "permute", "expand", "squeeze",
    "unsqueeze", "slice", "select", "split", "split_with_sizes", "chunk", "unbind", "detach", "alias",
    "lift_fresh", "clone", "copy_", "_to_copy", "to", "set_", "resize_", "contiguous", "narrow",
    "_local_scalar_dense", "item", "zeros", "zeros_like", "zero_", "fill_", "full", "full_like",
    "ones", "ones_like", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "is_same_size",
    "result_type", "view_as", "expand_as", "flatten", "unflatten", "movedim", "diagonal", "_unsafe_index",
    "arange", "scalar_tensor", "new_zeros", "new_ones", "new_full", "lift_fresh_copy", "record_stream",
    "_has_compatible_shallow_copy_type", "stride", "size", "numel", "dim", "is_contiguous",
}


# Ops whose work is their elements (elementwise math, comparisons, reductions, scans, sorts,
# normalizations, softmax, losses, pooling, padding, resampling, indexing, joins): names as
# the profiler shows them without ``aten::``, leading ``_`` or a trailing in-place ``_``.
# A candidate's op outside this list, outside the ops whose FLOPs the profiler counts and
# outside the formulas below, that calls no other op, is weighed as doing all the work
# (``UNCOUNTED``): a linear solve, an attention or a transform does far more than its inputs
# suggest, and an allowlist is the only way no such op is missed.
ELEMENT_OPS = frozenset("""
abs absolute acos acosh add addcdiv addcmul all amax amin aminmax angle any arccos arccosh arcsin arcsinh arctan
arctan2 arctanh argmax argmin argsort asin asinh atan atan2 atanh baddbmm_scale bernoulli bincount binary_cross_entropy
binary_cross_entropy_with_logits bitwise_and bitwise_left_shift bitwise_not bitwise_or bitwise_right_shift
bitwise_xor bucketize cat ceil celu channel_shuffle clamp clamp_max clamp_min clip col2im complex concat concatenate
conj conj_physical constant_pad_nd copysign cos cosh count_nonzero cross_entropy_loss cummax cummin cumprod cumsum
deg2rad diag diag_embed diff digamma div divide dropout elu embedding_renorm eq erf erfc erfinv exp exp2 expm1
exponential eye fill fix flip fliplr flipud float_power floor floor_divide fmax fmin fmod frac gather gcd ge gelu
geometric glu greater greater_equal grid_sampler grid_sampler_2d grid_sampler_3d group_norm gt hardshrink
hardsigmoid hardswish hardtanh heaviside histc huber_loss hypot i0 igamma igammac im2col index index_add index_copy
index_fill index_put index_reduce index_select instance_norm isclose isfinite isin isinf isnan isneginf isposinf
isreal kl_div kthvalue l1_loss layer_norm lcm ldexp le leaky_relu lerp less less_equal lgamma linspace log log10
log1p log2 log_normal log_sigmoid log_sigmoid_forward log_softmax logaddexp logaddexp2 logcumsumexp logical_and
logical_not logical_or logical_xor logit logspace logsumexp lt margin_ranking_loss masked_fill masked_scatter
masked_select max max_pool1d max_pool2d max_pool2d_with_indices max_pool3d max_pool3d_with_indices maximum mean
median min minimum mish mode mse_loss mul multinomial multiply mvlgamma nan_to_num nanmean nanmedian nanquantile
nansum native_batch_norm native_dropout native_group_norm native_layer_norm ne neg negative nextafter nll_loss
nll_loss2d nll_loss2d_forward nll_loss_forward nll_loss_nd nonzero norm normal not_equal one_hot pad pdist pixel_shuffle
pixel_unshuffle poisson polar polygamma pos positive pow prelu prod put quantile rad2deg rand rand_like randint
randint_like randn randn_like random randperm range real reciprocal reflection_pad1d reflection_pad2d
reflection_pad3d relu relu6 remainder renorm repeat repeat_interleave replication_pad1d replication_pad2d
replication_pad3d rms_norm fused_rms_norm roll rot90 round rrelu rsqrt rsub scatter scatter_add scatter_reduce
searchsorted selu sgn sigmoid sign signbit silu sin sinc sinh smooth_l1_loss soft_margin_loss softmax softmin softplus
softshrink sort sqrt square std std_mean sub subtract sum take tan tanh threshold tile topk trace tril triu true_divide
trunc uniform unique unique_consecutive unique_dim var var_mean vector_norm linalg_vector_norm where xlogy zeros
softmax_backward_data batch_norm cudnn_batch_norm miopen_batch_norm native_batch_norm_legit
native_batch_norm_legit_no_training batch_norm_impl_index stack hstack vstack dstack cartesian_prod meshgrid
upsample_nearest1d upsample_nearest2d upsample_nearest3d upsample_linear1d upsample_bilinear2d upsample_bicubic2d
upsample_trilinear3d upsample_nearest_exact1d upsample_nearest_exact2d upsample_nearest_exact3d avg_pool1d avg_pool2d
avg_pool3d adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d adaptive_max_pool1d adaptive_max_pool2d
adaptive_max_pool3d fractional_max_pool2d lp_pool1d lp_pool2d reflection_pad unfold fold cosine_similarity
pairwise_distance log_softmax_backward_data index_put_impl masked_softmax safe_softmax addcmul_ addcdiv_
resolve_conj resolve_neg is_nonzero
""".split())
# Element ops that do more than one op per element, each weighed by the full-size compute ops
# of its decomposition in torch (``op_weights.json``: ``opweights.py`` traces torch's
# decompositions of every element op, called as torch's own OpInfo tests call it, down to
# primitives, and counts; tests/test_evaluate_credit.py regenerates part of it against the
# installed torch): one F.layer_norm is a mean, a variance, a subtraction, a scale and the
# affine pair (9), one training-mode F.batch_norm the same (9), ``addcmul`` a multiply and an
# add (2), so a torch version made of fewer, fused ops is not credited to a custom kernel.
# Ops with no usable decomposition weigh 1 per element; ops torch implements in other ops
# (CompositeImplicitAutograd: ``batch_norm``, ``instance_norm``) weigh what they call.
WEIGHTS_FILE = Path(__file__).with_name("op_weights.json")
DECOMPOSED_WEIGHTS = {k: float(v["weight"]) for k, v in json.loads(WEIGHTS_FILE.read_text())["ops"].items()
                      if v["weight"] != 1}
ELEMENT_WEIGHTS = dict(DECOMPOSED_WEIGHTS)
# Ops whose work is what the ops they call do (each weighed itself): the matrix products'
# front ends. Any other op outside ELEMENT_OPS needs its own FLOP count or a formula.
COMPOSITE_OPS = frozenset({"matmul", "linear", "einsum", "tensordot", "chain_matmul", "linalg_multi_dot",
                           "multi_dot", "linalg_vecdot", "bilinear"})
_ELEMENT_FAMILIES = ("foreach_", "special_", "bitwise_", "logical_", "fused_")


def element_op(name: str) -> bool:
    """Whether an aten op (``aten::`` already stripped) is listed here as weighed by its
    elements (``op_class`` also reads torch's tags)."""
    base = name.lstrip("_").rstrip("_")
    return base in ELEMENT_OPS or base.startswith(_ELEMENT_FAMILIES) or name in MORE_ELEMENT_OPS \
        or name.rstrip("_") in MORE_ELEMENT_OPS or _copy_of(name)


# Ops that only move data (copies, joins, gathers, pads, reorders): a reference made of these
# and MEMORY_OPS alone does no compute, so a custom kernel that only loads and stores is
# doing its work (kernelwork.py's ``moved``). Anywhere else a copy kernel earns nothing.
MOVE_OPS = frozenset("""
cat concat concatenate stack hstack vstack dstack column_stack row_stack gather index_select index take take_along_dim
flip fliplr flipud roll rot90 repeat tile repeat_interleave constant_pad_nd pad reflection_pad1d reflection_pad2d
reflection_pad3d replication_pad1d replication_pad2d replication_pad3d pixel_shuffle pixel_unshuffle channel_shuffle
diag diag_embed tril triu narrow_copy unfold im2col index_copy index_put index_put_impl masked_select masked_scatter
select_scatter slice_scatter diagonal_scatter as_strided_scatter scatter embedding copy clone contiguous to_copy
unsafe_index permute_copy transpose_copy t_copy expand_copy view_copy unsqueeze_copy squeeze_copy slice_copy
select_copy split_copy split_with_sizes_copy unbind_copy diagonal_copy alias_copy detach_copy unfold_copy
""".split())


def moves_only(ops) -> bool:
    """Whether a call's outermost ops (names without ``aten::``) only move data."""
    return all((n.lstrip("_").rstrip("_") in MOVE_OPS or n in MEMORY_OPS) for n in ops)


# Ops that read or change metadata, assert, or make tensors without reading data: no work.
NO_WORK_OPS = frozenset("""
_assert_async _assert_scalar _assert_tensor_metadata _functional_assert_async _functional_assert_scalar
_functional_sym_constrain_range _functional_sym_constrain_range_for_size sym_constrain_range
sym_constrain_range_for_size _print _make_dep_token _has_same_storage_numel _linalg_check_errors is_coalesced
is_pinned is_set_to dense_dim sparse_dim _dimI _dimV _nnz indices values _indices _values ccol_indices col_indices
crow_indices row_indices q_scale q_zero_point q_per_channel_axis q_per_channel_scales q_per_channel_zero_points
qscheme _pin_memory lift _lazy_clone _fw_primal _make_dual resize resize_as resize_as_ _resize_output set
slice_inverse _efficientzerotensor empty_permuted empty_quantized _empty_affine_quantized
_empty_per_channel_affine_quantized from_file _neg_view view_as_real view_as_complex _reshape_alias
squeeze_ unsqueeze_ transpose_ t_ detach_ as_strided_ bartlett_window blackman_window hamming_window hann_window
kaiser_window fft_fftfreq fft_rfftfreq tril_indices triu_indices _new_zeros_with_same_feature_meta
_cudnn_init_dropout_state _use_cudnn_ctc_loss _use_miopen_ctc_loss _validate_compressed_sparse_indices
_nested_get_jagged_dummy _philox_key_fold_in _philox_key_split _resize_output_ unsafe_split unsafe_split_with_sizes
_nnpack_available _use_cudnn_rnn_flatten_weight is_vulkan_available
""".split())
# Ops torch carries no pointwise/reduction tag for that still work element by element (copies,
# scatters, sampling, statistics, small losses): weighed by their elements.
MORE_ELEMENT_OPS = frozenset("""
__and__ __or__ __xor__ __lshift__ __rshift__ __iand__ __ior__ __ixor__ __ilshift__ __irshift__ copy zero
_copy_from _copy_from_and_resize _chunk_cat _conj_copy _add_relu _amp_foreach_non_finite_check_and_unscale
_amp_update_scale _batch_norm_no_update _batch_norm_with_update _batch_norm_with_update_functional batch_norm_elemt
batch_norm_stats batch_norm_gather_stats batch_norm_gather_stats_with_counts batch_norm_update_stats
_native_batch_norm_legit_functional _cummax_helper _cummin_helper _fill_mem_eff_dropout_mask _masked_scale
_prelu_kernel _transform_bias_rescale_qkv _weight_norm_interface _unique2 unique_dim_consecutive nonzero_static
_unsafe_index_put _unsafe_masked_index _unsafe_masked_index_put_accumulate select_scatter slice_scatter
diagonal_scatter as_strided_scatter _spdiags block_diag max_unpool2d max_unpool3d fractional_max_pool3d
affine_grid_generator dist linalg_cross frexp native_norm multi_margin_loss multilabel_margin_loss_forward
segment_reduce histogram _histogramdd_bin_edges _histogramdd_from_bin_cts _histogramdd_from_bin_tensors allclose
hash_tensor _is_all_true _is_any_true binomial cauchy _standard_gamma _sample_dirichlet rrelu_with_noise
rrelu_with_noise_functional normal_functional _philox_normal _philox_uniform _reshape_copy lu_unpack _convert_indices_from_coo_to_csr
_convert_indices_from_csr_to_coo unfold_copy
""".split())
# Ops counted as all of any reference's work (``UNCOUNTED``) on purpose: their work is not
# their elements and has no formula here. By family (a part of the name): gradients, linear
# algebra, transforms, attention, quantized, sparse, nested and low-precision products,
# vendor and fallback convolutions, recurrent cells, sequence losses, test ops; and by name.
ALL_WORK_PARTS = ("backward", "jvp", "linalg", "cholesky", "solve", "geqrf", "ormqr", "_det", "fft_c2", "fft_r2",
                  "attention", "quantiz", "int4", "int8", "scaled_mm", "grouped_mm", "_int_mm", "dyn_quant", "cslt",
                  "semi_structured", "sparse", "coalesce", "nested", "jagged", "padded", "mkldnn", "miopen", "cudnn",
                  "mps", "nnpack", "slow_conv", "conv_depthwise", "convolution_overrideable", "rnn", "lstm", "gru",
                  "ctc", "transformer", "_triton_", "foobar", "_test_", "mixed_dtypes", "weight_int",
                  "compute_linear_combination", "hspmm", "fake_quant", "dequantize", "int_repr", "dirichlet_grad",
                  "standard_gamma_grad", "matrix_exp", "householder")
ALL_WORK_OPS = frozenset({"addmm_", "addbmm_", "addmv_", "addr_", "baddbmm_", "_addmm_activation", "_pdist_forward",
                          "triangular_solve", "to_mkldnn", "_to_dense"})

# Ops the profiler gives FLOPs for (torch/csrc/profiler/util.cpp ``computeFlops``)
FLOP_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "conv2d", "mul", "add"})


def _torch_facts(name: str) -> tuple[bool, bool]:
    """(tagged pointwise or reduction, has a CompositeImplicitAutograd kernel) for aten op
    ``name`` (without ``aten::``, any overload), or its out-of-place form; cached."""
    hit = _FACTS.get(name)
    if hit is None:
        hit = _FACTS[name] = _read_facts(name) or _read_facts(name.rstrip("_")) if name.endswith("_") and \
            not name.endswith("__") else _read_facts(name)
    return hit or (False, False)


_FACTS: dict = {}


def _read_facts(name: str):
    try:
        import torch

        packet = getattr(torch.ops.aten, name.split(".")[0])
        tagged = composite = False
        for o in packet.overloads():
            op = getattr(packet, o)
            tags = set(op.tags)
            tagged = tagged or torch.Tag.pointwise in tags or torch.Tag.reduction in tags
            composite = composite or torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")
    except Exception:  # noqa: BLE001 - no torch, no such op: nothing known
        return None
    return (tagged, composite) if (tagged or composite) else None


def op_class(name: str) -> str:
    """How an aten op (without ``aten::``) is weighed: ``memory`` (no work), ``elements``,
    ``formula`` (a FLOP formula here or the profiler's count), ``composite`` (the work of
    the ops it calls: a matrix product's front end, or an op torch implements in other ops,
    CompositeImplicitAutograd, e.g. ``__and__`` → ``bitwise_and``), ``all`` (declared:
    counted as all of any reference's work), or ``unclassified`` (also all, by default; the
    test over every registered op keeps this empty)."""
    base = name.split(".")[0]
    if no_work(base):
        return "memory"
    if element_op(base):
        return "elements"
    if base in _CONTRACTIONS or base in _CONV or base in _EMBEDDING or base in FLOP_OPS:
        return "formula"
    if base in COMPOSITE_OPS:
        return "composite"
    if base in ALL_WORK_OPS or any(p in base for p in ALL_WORK_PARTS):
        return "all"
    tagged, composite = _torch_facts(base)
    if tagged:  # torch.Tag.pointwise / torch.Tag.reduction, on the op or its out-of-place form
        return "elements"
    if composite:  # CompositeImplicitAutograd: its work is the (dispatched, profiled) ops it calls
        return "composite"
    return "unclassified"


def no_work(name: str) -> bool:
    """An op (without ``aten::``) that moves no data and computes nothing: views, metadata,
    allocation."""
    return name in MEMORY_OPS or name in NO_WORK_OPS


def _copy_of(name: str) -> bool:
    """``view_copy``, ``t_copy``, …: a view made a copy (its elements)."""
    return name.endswith("_copy") and (name[:-5] in MEMORY_OPS or name[:-5].lstrip("_") in MEMORY_OPS
                                       or name[:-5] in NO_WORK_OPS)


def _complex(names) -> bool:
    return any("complex" in str(n) for n in names or [])


_OWN_LABELS = ("dvk::",)  # the worker's own record_function labels (profile.py), not ops


def dispatcher_op(name: str) -> bool:
    """A dispatcher op of any namespace (``aten::mm``, ``quantized::linear_dynamic_fp16``,
    ``mkl::_mkl_linear``), not a label of ours or a runtime call."""
    ns, sep, op = name.partition("::")
    return bool(sep) and ns.isidentifier() and op.split(".")[0].isidentifier() and not name.startswith(_OWN_LABELS)


def outermost_compute(events, any_namespace: bool = False):
    """The compute ops no other op called: each is work the caller asked for. A user scope
    (``record_function``) or a TorchScript function between an op and the top does not hide
    it; an op called by another op (matmul's mm) is that op's work. ``any_namespace``: ops
    of every dispatcher namespace (a candidate's ``quantized::`` or ``mkl::`` op is work
    too), else ``aten`` ones only."""
    is_op = dispatcher_op if any_namespace else (lambda n: n.startswith("aten::"))
    for e in events:
        name = getattr(e, "name", "")
        if not is_op(name) or (name.startswith("aten::") and no_work(name[6:])):
            continue
        up = getattr(e, "cpu_parent", None)
        while up is not None and not is_op(getattr(up, "name", "")):
            up = getattr(up, "cpu_parent", None)
        if up is None:
            yield e


COMPLEX_FACTOR = 4.0  # a complex multiply-add is four real ones; the profiler counts one


def profiled_work(events, strict: bool = False, dtypes: dict | None = None, plain: bool = False) -> float:
    """Work of the outermost aten compute ops among profiler events (``op_work``); an op
    on complex inputs (``dtypes``: event id → input dtype names) does ``COMPLEX_FACTOR``
    times what its real count says (one complex matmul over half the depth is a whole real
    one). A top-level ``resolve_conj``/``resolve_neg`` is what ``Tensor.numpy()`` and
    ``tolist()`` run: a tensor handed to the host, whose work no torch-level view sees,
    counts as work done outside custom kernels. ``plain``: every element op weighs one
    pass per element, whatever its decomposition does (``op_work``)."""
    dtypes = dtypes or {}
    return sum(op_work(e, strict, plain) * (COMPLEX_FACTOR if _complex(dtypes.get(getattr(e, "id", None))) else 1.0)
               for e in outermost_compute(events, any_namespace=strict))


def op_work(e, strict: bool = False, plain: bool = False) -> float:
    """One op's work: the largest of its FLOPs (the profiler's count, its own and its
    callees', e.g. matmul's mm; or ``conv_flops`` / ``embedding_bag``'s, which the
    profiler lacks), the elements of its inputs broadcast together (a reduction over
    broadcast views does the work of the full shape), of its largest input or of its
    tensor lists (``_foreach_*``), and the summed work of the compute ops it called (an op
    with no shapes or no formula does at least what its callees do). ``strict`` (a
    candidate's ops): an op that calls no other compute op, is not weighed by its elements
    (``element_op``), is no matrix product's front end (``COMPOSITE_OPS``) and has neither
    its own profiler FLOPs nor a formula is ``UNCOUNTED``, whatever it calls (a Cholesky
    calls only ``tril``; its LAPACK work is never dispatched), as is any op outside
    ``aten``. An op with its own FLOP count or formula is weighed by it under ``strict``;
    its callees are not looked at (a CPU conv's ``_slow_conv2d_forward``, rated all).
    ``plain``: an element op weighs 1 per element, not its decomposition's count (the
    measure in which a written-out version of a fused op costs more than the op)."""
    shapes = [s for s in (getattr(e, "input_shapes", None) or []) if s]
    lists = [s for s in (getattr(e, "structured_input_shapes", None) or []) if s and isinstance(s[0], list)]
    name = getattr(e, "name", "")
    together = broadcast_numel(shapes) if broadcasts(name[6:]) else 1
    sizes = [1, together] + [_numel(s) for s in shapes] + [sum(_numel(t) for t in lst) for lst in lists]
    formula = formula_flops(e, plain)
    if strict and not (name.startswith("aten::") and (op_class(name[6:]) in ("elements", "composite")
                                                        or float(getattr(e, "flops", 0) or 0) or formula)):
        return UNCOUNTED
    weight = 1.0 if plain else ELEMENT_WEIGHTS.get(name[6:].strip("_"), 1.0) + _scaled(name[6:], e)
    own = max(max(sizes) * weight, _flops(e), formula)
    if strict and (formula or float(getattr(e, "flops", 0) or 0)):
        return own  # weighed by its count: what it calls is how it does it (a CPU conv's slow path)
    children = [c for c in getattr(e, "cpu_children", None) or []
                if getattr(c, "name", "").startswith("aten::") and not no_work(c.name[6:])]
    return max(own, sum(op_work(c, strict, plain) for c in children))


_ALPHA = frozenset({"add", "add_", "sub", "sub_", "rsub"})


def _scaled(name: str, e) -> float:
    """1 where an add or subtract scales its second operand (``alpha`` other than 1, which the
    profiler records): a multiply as well, as ``x + s * z`` written out is; else 0."""
    if name not in _ALPHA:
        return 0.0
    conc = list(getattr(e, "concrete_inputs", None) or [])
    alpha = conc[2] if len(conc) > 2 else None
    return 1.0 if isinstance(alpha, (int, float)) and not isinstance(alpha, bool) and alpha != 1 else 0.0


_PER_CHANNEL = frozenset({"weight", "bias", "running_mean", "running_var", "save_mean", "save_invstd", "mean",
                          "invstd"})
_BROADCASTS: dict = {}


def broadcasts(name: str) -> bool:
    """Whether an aten op's tensor inputs broadcast against one another (``add``,
    ``mse_loss``, any op torch tags pointwise, ``lerp``'s weight too): not where its schema
    takes per-channel tensors (a normalisation's ``weight``, ``bias``, running statistics),
    which line up with the channel dimension, not the last one (a group norm over ``(N, C,
    1)`` is N·C elements, not N·C·C)."""
    if name not in _BROADCASTS:
        try:
            import torch

            packet = getattr(torch.ops.aten, name, None)
            pointwise = packet is not None and any(
                torch.Tag.pointwise in getattr(getattr(packet, o), "tags", ()) for o in packet.overloads())
            schemas = torch._C._jit_get_schemas_for_operator("aten::" + name)
            _BROADCASTS[name] = pointwise or not any(a.name in _PER_CHANNEL for s in schemas for a in s.arguments)
        except Exception:  # noqa: BLE001 - no schema: taken to broadcast
            _BROADCASTS[name] = True
    return _BROADCASTS[name]


def broadcast_numel(shapes) -> int:
    """Elements of the shape the given shapes broadcast to (1 if they do not broadcast)."""
    shapes = [list(s) for s in shapes if all(isinstance(d, int) for d in s)]
    if not shapes:
        return 1
    out = []
    for i in range(1, max(len(s) for s in shapes) + 1):
        dims = {s[-i] for s in shapes if len(s) >= i} - {1}
        if len(dims) > 1:
            return 1
        out.append(dims.pop() if dims else 1)
    return _numel(out)


def _flops(e) -> float:
    return float(getattr(e, "flops", 0) or 0) + sum(_flops(c) for c in (getattr(e, "cpu_children", None) or []))


# conv ops: where stride, padding, dilation sit among their arguments, and whether transposed
_CONV = {**{f"conv{n}d": (3, 4, 5, False) for n in (1, 2, 3)},
         **{f"conv_transpose{n}d": (3, 4, 7, True) for n in (1, 2, 3)},
         "convolution": (3, 4, 5, None), "_convolution": (3, 4, 5, None),
         "cudnn_convolution": (3, 2, 4, False), "mkldnn_convolution": (4, 3, 5, False),
         "cudnn_convolution_transpose": (4, 3, 5, True)}
_EMBEDDING = {"embedding", "embedding_bag", "_embedding_bag", "_embedding_bag_forward_only"}


UNCOUNTED = 1e30  # the work of a contraction whose shapes cannot be read: all of any reference's


def _n(shape) -> int:
    return _numel(shape) if all(isinstance(d, int) for d in shape) else 0


def _matrix_power(x: list, conc: list) -> float:
    k = conc[1] if len(conc) > 1 and isinstance(conc[1], int) else None
    return UNCOUNTED if k is None else 2.0 * _n(x[0]) * x[0][-1] * max(1, abs(k).bit_length())


# contractions the profiler gives no FLOPs for: (input shapes, concrete inputs) -> work
def _grid_sample(x, c) -> float:
    """2 x (2^dims corners) x N x C x the grid's points: input (N, C, *spatial), grid (N, *out, dims)."""
    image, grid = x[0], x[1]
    dims = grid[-1]
    return 2 * (2 ** dims) * image[0] * image[1] * _n(grid[1:-1])


_CONTRACTIONS = {
    "mv": lambda x, c: 2 * _n(x[0]), "addmv": lambda x, c: 2 * _n(x[1]),
    "dot": lambda x, c: 2 * _n(x[0]), "vdot": lambda x, c: 2 * _n(x[0]),
    "inner": lambda x, c: 2 * _n(x[0]) * _n(x[1]) // max(1, x[1][-1] if x[1] else 1),
    "outer": lambda x, c: _n(x[0]) * _n(x[1]), "ger": lambda x, c: _n(x[0]) * _n(x[1]),
    "addr": lambda x, c: 2 * _n(x[1]) * _n(x[2]),
    "addbmm": lambda x, c: 2 * _n(x[1]) * x[2][-1], "baddbmm": lambda x, c: 2 * _n(x[1]) * x[2][-1],
    "conv_tbc": lambda x, c: 2 * _n(x[0]) * x[1][0] * x[1][2],
    "cdist": lambda x, c: 3 * _n(x[0]) * x[1][-2], "_cdist_forward": lambda x, c: 3 * _n(x[0]) * x[1][-2],
    "_euclidean_dist": lambda x, c: 3 * _n(x[0]) * x[1][-2],
    "kron": lambda x, c: _n(x[0]) * _n(x[1]),
    "matrix_power": _matrix_power, "linalg_matrix_power": _matrix_power,
    "_trilinear": lambda x, c: UNCOUNTED, "bilinear": lambda x, c: 2 * _n(x[0]) * _n(x[2]) // max(1, x[0][-1]),
    # sampling at data-given points weighs its corners by the data: 2 x corners per output
    # element (N, C and the grid's points), whatever the input image's size
    **{k: _grid_sample for k in ("grid_sampler", "grid_sampler_2d", "grid_sampler_3d", "cudnn_grid_sampler",
                                 "_grid_sampler_2d_cpu_fallback")},
}


_UPSAMPLE = re.compile(r"^_*upsample_[a-z_]+?([123])d(_aa)?$")


def _upsample(name: str, image: list, conc: list, plain: bool = False) -> float:
    """An upsampling's work: its weight per element times the elements of its output, from
    the recorded output size (an int list with one entry per spatial dimension) or, where
    none is given, the scale factors (floats); 0 where neither can be read. The profiler
    records only the input's shape, and an upsampling writes more than it reads."""
    m = _UPSAMPLE.match(name)
    if not m or len(image) < 2 or not all(isinstance(d, int) for d in image):
        return 0.0
    k = int(m.group(1))
    size = next((v for v in conc[1:] if isinstance(v, (list, tuple)) and len(v) == k
                 and all(isinstance(d, int) and not isinstance(d, bool) for d in v)), None)
    if size is None:
        scales = [v for v in conc[1:] if isinstance(v, (list, tuple)) and len(v) == k
                  and all(isinstance(d, float) for d in v)]
        loose = [v for v in conc[1:] if isinstance(v, float)][-k:]  # scales_h, scales_w as separate floats
        scales = scales[0] if scales else (loose if len(loose) == k else None)
        if scales is None:
            return 0.0
        size = [int(n * s) for n, s in zip(image[-k:], scales)]
    return float(_numel(image[:-k]) * _numel(size) * (1.0 if plain else ELEMENT_WEIGHTS.get(name.strip("_"), 1.0)))


def formula_flops(e, plain: bool = False) -> float:
    """Work of ops the profiler gives no FLOPs for. Convolutions (1-3-D, transposed too):
    2 x numel(out) x C_in/groups x prod(kernel), with the output's size from stride,
    padding and dilation (weight ``(C_out, C_in/g, *k)``); a transposed one does
    2 x numel(in) x C_out/groups x prod(kernel) (weight ``(C_in, C_out/g, *k)``).
    Embedding lookups: numel(indices) x dim (a copy per row); ``embedding_bag`` twice that
    (each row read is also weighed and summed into its bag). Contractions without a profiler
    count (``_CONTRACTIONS``: matrix-vector and outer products, batched sums, ``conv_tbc``,
    distances, powers): 2 x their multiply-adds; one whose shapes cannot be read counts as
    ``UNCOUNTED``, more than any reference's work (torch did it, whatever it was).
    Upsamplings: their per-element weight times their output's elements (``_upsample``)."""
    name = getattr(e, "name", "")[6:]
    shapes = list(getattr(e, "input_shapes", None) or [])
    if _UPSAMPLE.match(name):
        return _upsample(name, list(shapes[0]) if shapes else [], list(getattr(e, "concrete_inputs", None) or []),
                         plain)
    if name in _CONTRACTIONS:
        try:
            return float(_CONTRACTIONS[name]([list(x) for x in shapes], list(getattr(e, "concrete_inputs", None) or [])))
        except (IndexError, TypeError, ValueError):
            return UNCOUNTED
    if name in _EMBEDDING and len(shapes) >= 2 and len(shapes[0]) == 2:  # a bag's rows are reduced: x 2
        return float(_numel(shapes[1]) * shapes[0][1] * (1 if name == "embedding" else 2))
    if name not in _CONV or len(shapes) < 2 or len(shapes[1]) < 3:
        return 0.0
    x, w = list(shapes[0]), list(shapes[1])
    if len(x) == len(w) - 1:  # unbatched input
        x = [1] + x
    if len(x) != len(w) or not all(isinstance(d, int) for d in x + w):
        return 0.0
    conc = list(getattr(e, "concrete_inputs", None) or [])
    si, pi, di, transposed = _CONV[name]
    if transposed is None:  # convolution / _convolution: the flag is an argument
        transposed = bool(conc[6]) if len(conc) > 6 and isinstance(conc[6], bool) else False
    kernel = w[2:]
    if transposed:
        return 2.0 * _numel(x) * w[1] * _numel(kernel)
    arg = lambda i: conc[i] if i < len(conc) else None  # noqa: E731
    spatial = [_out_len(x[2 + j], kernel[j], _nth(arg(si), j, 1), _nth(arg(pi), j, 0, x[2 + j], kernel[j]),
                        _nth(arg(di), j, 1)) for j in range(len(kernel))]
    return 2.0 * x[0] * w[0] * _numel(spatial) * w[1] * _numel(kernel)


def _nth(v, j: int, default: int, length: int = 0, k: int = 1) -> int:
    """Entry ``j`` of an int-list argument (one entry stands for all); padding "same"
    keeps the length, "valid" is 0."""
    if v == "same":
        return (k - 1) // 2 if length else default
    if isinstance(v, (list, tuple)) and v:
        v = v[j] if j < len(v) else v[0]
    return v if isinstance(v, int) and not isinstance(v, bool) else default


def _out_len(n: int, k: int, s: int, p: int, d: int) -> int:
    return max(1, (n + 2 * p - d * (k - 1) - 1) // max(1, s) + 1)


def _numel(shape) -> int:
    n = 1
    for d in shape:
        if isinstance(d, int):
            n *= d
    return n
