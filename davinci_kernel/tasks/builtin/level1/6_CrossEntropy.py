"""Mean cross-entropy loss of (batch, num_classes) float32 logits against integer class targets (LM-head vocabulary size).

op_type: loss
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 4096
num_classes = 32000

CPU_SHAPES = {"batch_size": 3, "num_classes": 4500}
PERTURB = ["batch_size", "num_classes"]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, targets)


def get_inputs():
    logits = torch.randn(batch_size, num_classes) * 2.0
    targets = torch.randint(0, num_classes, (batch_size,))
    return [logits, targets]


def get_init_inputs():
    return []
