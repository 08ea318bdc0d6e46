"""ResNet basic block in inference mode: relu(bn2(conv3x3(relu(bn1(conv3x3(x))))) + x),
batch norm using its running statistics, NCHW float32.

op_type: architecture/conv_block
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 64
channels = 64
height = 56
width = 56

CPU_SHAPES = {"batch_size": 2, "channels": 36, "height": 5, "width": 7}
PERTURB = ["batch_size", "channels", "height", "width"]


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        with torch.no_grad():
            for bn in (self.bn1, self.bn2):
                bn.weight.uniform_(0.5, 1.5)
                bn.bias.uniform_(-0.2, 0.2)
                bn.running_mean.uniform_(-0.2, 0.2)
                bn.running_var.uniform_(0.5, 1.5)

    @staticmethod
    def _bn(x: torch.Tensor, bn: nn.BatchNorm2d) -> torch.Tensor:
        return F.batch_norm(x, bn.running_mean, bn.running_var, bn.weight, bn.bias,
                            training=False, eps=bn.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self._bn(self.conv1(x), self.bn1))
        out = self._bn(self.conv2(out), self.bn2)
        return torch.relu(out + x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
