"""Hand-written retrieval labels: KernelBench-style tasks and the seed skills relevant to them.

Covers: 44 small problem sources (a ``Model`` whose forward calls the ops of a
typical KernelBench level-1/2/3 problem) with graded relevance (2 = the skill a
kernel engineer would reach for first, 1 = also useful). Used by
``skills_retrieval.py``; not a test suite and not the built-in task suite.
"""

from davinci_kernel.records import Task

_TEMPLATE = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """{doc}"""

    def __init__(self):
        super().__init__()
{init}

    def forward(self, {args}):
        return {body}


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return []
'''

# (name, level, docstring, init lines, forward args, forward body, inputs, {skill: grade})
_SPECS = [
    ("1_Square_matmul", 1, "C = A @ B for square matrices.", "", "A, B", "torch.matmul(A, B)",
     "torch.randn(4096, 4096), torch.randn(4096, 4096)",
     {"tiled_matmul_grouped_ordering": 2, "autotune_block_sizes": 1, "persistent_matmul": 1}),
    ("2_Rect_matmul", 1, "Matmul of a tall and a wide matrix.", "", "A, B", "torch.matmul(A, B)",
     "torch.randn(1024, 4096), torch.randn(4096, 2048)",
     {"tiled_matmul_grouped_ordering": 2, "autotune_block_sizes": 2, "persistent_matmul": 1}),
    ("3_Batched_matmul", 1, "Batched matrix multiply.", "", "A, B", "torch.bmm(A, B)",
     "torch.randn(128, 512, 256), torch.randn(128, 256, 512)", {"batched_matmul_3d_grid": 2}),
    ("4_Matmul_transposed_A", 1, "C = A.T @ B.", "", "A, B", "torch.matmul(A.T, B)",
     "torch.randn(4096, 1024), torch.randn(4096, 2048)",
     {"strided_access_no_copy": 2, "tiled_matmul_grouped_ordering": 1}),
    ("5_Matmul_small_K", 1, "Matmul with a small inner dimension and many output tiles.", "", "A, B",
     "torch.matmul(A, B)", "torch.randn(16384, 64), torch.randn(64, 16384)",
     {"persistent_matmul": 2, "tiled_matmul_grouped_ordering": 1}),
    ("6_Einsum_bmm", 1, "Einsum batched product.", "", "A, B", "torch.einsum('bij,bjk->bik', A, B)",
     "torch.randn(64, 256, 128), torch.randn(64, 128, 256)", {"batched_matmul_3d_grid": 2}),
    ("19_ReLU", 1, "ReLU activation.", "", "x", "torch.relu(x)", "torch.randn(16, 16384)",
     {"coalesced_vectorized_access": 2, "int64_offsets_large_tensors": 1}),
    ("20_LeakyReLU", 1, "LeakyReLU activation.", "", "x", "F.leaky_relu(x, 0.01)", "torch.randn(16, 16384)",
     {"coalesced_vectorized_access": 2}),
    ("21_Sigmoid", 1, "Sigmoid activation.", "", "x", "torch.sigmoid(x)", "torch.randn(16, 16384)",
     {"activation_math_identities": 2, "coalesced_vectorized_access": 1}),
    ("22_Tanh", 1, "Tanh activation.", "", "x", "torch.tanh(x)", "torch.randn(16, 16384)",
     {"activation_math_identities": 2, "coalesced_vectorized_access": 1}),
    ("23_Softmax", 1, "Softmax over dim 1.", "", "x", "torch.softmax(x, dim=1)", "torch.randn(16, 16384)",
     {"row_softmax_single_block": 2, "online_softmax": 2, "masked_tail_neutral_values": 1}),
    ("24_LogSoftmax", 1, "LogSoftmax over dim 1.", "", "x", "torch.log_softmax(x, dim=1)",
     "torch.randn(16, 16384)", {"online_softmax": 2, "row_softmax_single_block": 1}),
    ("25_Swish", 1, "Swish activation x * sigmoid(x).", "", "x", "x * torch.sigmoid(x)",
     "torch.randn(16, 16384)", {"activation_math_identities": 2, "fuse_elementwise_chain": 1}),
    ("26_GELU", 1, "GELU activation.", "", "x", "F.gelu(x)", "torch.randn(16, 16384)",
     {"activation_math_identities": 2}),
    ("29_Softplus", 1, "Softplus activation.", "", "x", "F.softplus(x)", "torch.randn(16, 16384)",
     {"activation_math_identities": 2}),
    ("30_Softsign", 1, "Softsign activation x / (1 + |x|).", "", "x", "x / (1 + torch.abs(x))",
     "torch.randn(16, 16384)", {"coalesced_vectorized_access": 2, "fuse_elementwise_chain": 1}),
    ("36_RMSNorm", 1, "RMS normalization over features.", "", "x",
     "x / torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + 1e-5)", "torch.randn(16, 64, 256, 256)",
     {"welford_layernorm": 1, "fp32_accumulation": 1, "cuda_warp_shuffle_reduction": 1}),
    ("37_FrobeniusNorm", 1, "Divide by the Frobenius norm.", "", "x", "x / torch.norm(x, p='fro')",
     "torch.randn(16, 64, 256, 256)", {"two_pass_reduction": 2}),
    ("38_L1Norm", 1, "L1 normalization over dim 1.", "", "x", "x / torch.sum(torch.abs(x), dim=1, keepdim=True)",
     "torch.randn(16, 16384)", {"cuda_warp_shuffle_reduction": 2, "row_softmax_single_block": 1}),
    ("39_L2Norm", 1, "L2 normalization over dim 1.", "", "x", "x / torch.norm(x, p=2, dim=1, keepdim=True)",
     "torch.randn(16, 16384)", {"cuda_warp_shuffle_reduction": 2}),
    ("40_LayerNorm", 1, "LayerNorm.", "        self.ln = nn.LayerNorm((64, 256, 256))", "x", "self.ln(x)",
     "torch.randn(16, 64, 256, 256)", {"welford_layernorm": 2, "fp32_accumulation": 1}),
    ("35_GroupNorm", 1, "GroupNorm.", "        self.gn = nn.GroupNorm(8, 64)", "x", "self.gn(x)",
     "torch.randn(16, 64, 256, 256)", {"welford_layernorm": 2}),
    ("41_MaxPool1d", 1, "Max pooling 1-D.", "        self.pool = nn.MaxPool1d(4, 2, 2)", "x", "self.pool(x)",
     "torch.randn(16, 64, 128)", {"max_pool2d_window": 2}),
    ("42_MaxPool2d", 1, "Max pooling 2-D.", "        self.pool = nn.MaxPool2d(2, 2, 1)", "x", "self.pool(x)",
     "torch.randn(16, 32, 128, 128)", {"max_pool2d_window": 2, "masked_tail_neutral_values": 1}),
    ("45_AvgPool2d", 1, "Average pooling 2-D.", "        self.pool = nn.AvgPool2d(3)", "x", "self.pool(x)",
     "torch.randn(16, 64, 256, 256)", {"max_pool2d_window": 2}),
    ("47_Sum_dim", 1, "Sum reduction over a dimension.", "", "x", "torch.sum(x, dim=1, keepdim=True)",
     "torch.randn(16, 256, 256)", {"column_reduction_without_atomics": 2, "fp32_accumulation": 1}),
    ("48_Mean_dim", 1, "Mean reduction over a dimension.", "", "x", "torch.mean(x, dim=1)",
     "torch.randn(16, 256, 256)", {"column_reduction_without_atomics": 2, "fp32_accumulation": 1}),
    ("49_Max_dim", 1, "Max reduction over a dimension.", "", "x", "torch.max(x, dim=1)[0]",
     "torch.randn(16, 256, 256)", {"masked_tail_neutral_values": 2}),
    ("51_Argmax", 1, "Argmax over a dimension.", "", "x", "torch.argmax(x, dim=1)", "torch.randn(16, 256, 256)",
     {"masked_tail_neutral_values": 2}),
    ("53_Min_dim", 1, "Min reduction over a dimension.", "", "x", "torch.min(x, dim=1)[0]",
     "torch.randn(16, 256, 256)", {"masked_tail_neutral_values": 2}),
    ("54_Conv2d_3x3", 1, "Standard 2D convolution.", "        self.conv = nn.Conv2d(3, 64, 3)", "x",
     "self.conv(x)", "torch.randn(16, 3, 256, 256)", {"conv2d_implicit_gemm": 2, "autotune_block_sizes": 1}),
    ("67_Conv1d", 1, "Standard 1D convolution.", "        self.conv = nn.Conv1d(3, 64, 3)", "x", "self.conv(x)",
     "torch.randn(16, 3, 512)", {"conv2d_implicit_gemm": 2}),
    ("87_Conv_pointwise", 1, "Pointwise 1x1 convolution.", "        self.conv = nn.Conv2d(64, 128, 1)", "x",
     "self.conv(x)", "torch.randn(16, 64, 256, 256)", {"fold_batchnorm_into_conv": 1, "conv2d_implicit_gemm": 2}),
    ("95_CrossEntropyLoss", 1, "Cross entropy loss.", "", "predictions, targets",
     "F.cross_entropy(predictions, targets)", "torch.randn(4096, 10), torch.randint(0, 10, (4096,))",
     {"fused_cross_entropy": 2}),
    ("100_Sum_all", 1, "Sum of all elements.", "", "x", "torch.sum(x)", "torch.randn(64, 1024, 1024)",
     {"two_pass_reduction": 2, "fp32_accumulation": 1}),
    ("L2_9_Matmul_Subtract_Multiply_ReLU", 2, "Linear, subtract, multiply, ReLU.",
     "        self.linear = nn.Linear(1024, 512)", "x", "torch.relu((self.linear(x) - 2.0) * 1.5)",
     "torch.randn(128, 1024)", {"matmul_fused_epilogue": 2, "fuse_elementwise_chain": 1}),
    ("L2_12_Gemm_Multiply_LeakyReLU", 2, "Gemm, multiply, LeakyReLU.", "        self.gemm = nn.Linear(1024, 512)",
     "x", "F.leaky_relu(self.gemm(x) * 2.0, 0.1)", "torch.randn(128, 1024)",
     {"matmul_fused_epilogue": 2, "fuse_elementwise_chain": 1}),
    ("L2_40_Matmul_Scaling_ResidualAdd", 2, "Linear, scale, residual add.", "        self.linear = nn.Linear(64, 128)",
     "x", "self.linear(x) * 0.5 + self.linear(x)", "torch.randn(128, 64)",
     {"matmul_fused_epilogue": 2, "fuse_elementwise_chain": 1}),
    ("L2_44_Conv_BatchNorm_ReLU", 2, "Conv2d, BatchNorm, ReLU.",
     "        self.conv = nn.Conv2d(3, 16, 3)\n        self.bn = nn.BatchNorm2d(16)", "x",
     "torch.relu(self.bn(self.conv(x)))", "torch.randn(128, 3, 32, 32)",
     {"fold_batchnorm_into_conv": 2, "conv2d_implicit_gemm": 2}),
    ("L2_52_Conv_Activation_BatchNorm", 2, "Conv2d, tanh-softplus activation, BatchNorm.",
     "        self.conv = nn.Conv2d(3, 16, 3)\n        self.bn = nn.BatchNorm2d(16)", "x",
     "self.bn(torch.tanh(F.softplus(self.conv(x))) * self.conv(x))", "torch.randn(128, 3, 32, 32)",
     {"conv2d_implicit_gemm": 2, "activation_math_identities": 2, "fold_batchnorm_into_conv": 1}),
    ("L2_23_Conv_GroupNorm_Mean", 2, "Conv3d, GroupNorm, mean.",
     "        self.conv = nn.Conv3d(3, 16, 3)\n        self.gn = nn.GroupNorm(8, 16)", "x",
     "self.gn(self.conv(x)).mean(dim=[1, 2, 3, 4])", "torch.randn(128, 3, 16, 32, 32)",
     {"conv2d_implicit_gemm": 2, "welford_layernorm": 2, "two_pass_reduction": 1}),
    ("L2_99_Matmul_GELU_Softmax", 2, "Linear, GELU, softmax.", "        self.linear = nn.Linear(100, 10)", "x",
     "torch.softmax(F.gelu(self.linear(x)), dim=1)", "torch.randn(128, 100)",
     {"matmul_fused_epilogue": 2, "activation_math_identities": 1, "row_softmax_single_block": 1}),
    ("L3_1_MLP", 3, "Multi-layer perceptron with ReLU.",
     "        self.l1 = nn.Linear(1000, 400)\n        self.l2 = nn.Linear(400, 800)", "x",
     "self.l2(torch.relu(self.l1(x)))", "torch.randn(1, 1000)",
     {"matmul_fused_epilogue": 2, "autotune_block_sizes": 1}),
    ("L3_attention_scores", 3, "Scaled attention scores, softmax, weighted values.", "", "q, k, v",
     "torch.bmm(torch.softmax(torch.bmm(q, k.transpose(1, 2)) * 0.125, dim=-1), v)",
     "torch.randn(32, 512, 64), torch.randn(32, 512, 64), torch.randn(32, 512, 64)",
     {"batched_matmul_3d_grid": 2, "online_softmax": 2, "strided_access_no_copy": 1}),
]


def labeled_tasks() -> list[tuple[Task, dict[str, int]]]:
    out = []
    for i, (name, level, doc, init, args, body, inputs, rel) in enumerate(_SPECS, 1):
        src = _TEMPLATE.format(doc=doc, init=init or "        pass", args=args, body=body, inputs=inputs)
        out.append((Task(name=f"level{level}/{name}", level=level, problem_id=i, source=src), rel))
    return out
