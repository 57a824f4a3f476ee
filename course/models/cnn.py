"""A small convolutional network, the baseline lesson 11's Vision Transformer is measured against.

The usual modern layout in miniature: blocks of two 3x3 convolutions (each followed by batch norm and
ReLU), a 2x2 max-pool between blocks, then **global average pooling** and one linear layer. Two
built-in assumptions ("inductive biases") make a CNN data-efficient on images: *locality* (a 3x3
kernel only mixes neighbouring pixels) and *translation equivariance* (the same kernel slides over
the whole image). The price shows on lesson 11's shapes task: what a unit sees is bounded by its
receptive field, and the global average pooling at the end keeps *what* was found, not *where*.

``receptive_field`` says how many input pixels the last convolution's units see, so a lesson can
compare it with the distances its task needs.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["SmallCNN", "count_parameters"]


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _conv(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU())


class SmallCNN(nn.Module):
    """Conv blocks (two 3x3 convolutions each, 2x2 max-pool between blocks) -> global average pool -> linear.

    Args:
        in_channels: C of the input images.
        n_classes: number of output classes.
        width: channels of the first block; each later block doubles them.
        n_blocks: number of conv blocks (the receptive field grows with it).
        dropout: dropout before the linear head.

    Shapes:
        forward: images (B, C, H, W) -> logits (B, n_classes).
    """

    def __init__(self, in_channels: int, n_classes: int, width: int = 32, n_blocks: int = 2, dropout: float = 0.0):
        super().__init__()
        layers, c = [], in_channels
        for i in range(n_blocks):
            c_out = width * 2 ** i
            if i > 0:
                layers.append(nn.MaxPool2d(2))                       # (B, c, H, W) -> (B, c, H/2, W/2)
            layers += [_conv(c, c_out), _conv(c_out, c_out)]
            c = c_out
        self.features = nn.Sequential(*layers)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(c, n_classes)
        self.n_blocks = n_blocks

    @property
    def receptive_field(self) -> int:
        """Side, in input pixels, of the square that one unit of the last convolution sees."""
        rf, jump = 1, 1
        for i in range(self.n_blocks):
            if i > 0:
                rf, jump = rf + jump, jump * 2                        # 2x2 max-pool, stride 2
            rf += 2 * 2 * jump                                        # two 3x3 convolutions
        return rf

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        h = self.features(images)                                     # (B, C', H', W')
        h = h.mean(dim=(-2, -1))                                      # global average pool: (B, C')
        return self.head(self.dropout(h))                             # (B, n_classes)
