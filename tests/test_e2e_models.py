"""Models whose kernel calls take the thread splits of runtime_c/tvm/tvm_adapter.c added for
end-to-end speed (issue 11): a concatenation large enough to be split over the pool's rows (a
SqueezeNet fire module), depthwise layers and ceil-mode max pools whose pixels split unevenly
into 8-pixel tiles (7x7, 13x13) - C bit-exact with the integer reference (the suite runs with
TVM_NUM_THREADS=2)."""

import torch
from torch import nn

from conftest import assert_one_int8_region


class Fire(nn.Module):
    def __init__(self, cin: int, squeeze: int, expand: int):
        super().__init__()
        self.squeeze = nn.Sequential(nn.Conv2d(cin, squeeze, 1), nn.ReLU())
        self.left = nn.Sequential(nn.Conv2d(squeeze, expand, 1), nn.ReLU())
        self.right = nn.Sequential(nn.Conv2d(squeeze, expand, 3, padding=1), nn.ReLU())

    def forward(self, x):
        x = self.squeeze(x)
        return torch.cat([self.left(x), self.right(x)], 1)


def test_fire_modules_and_ceil_pools():
    torch.manual_seed(0)
    model = nn.Sequential(Fire(8, 16, 48), nn.MaxPool2d(3, 2, ceil_mode=True), Fire(96, 16, 64),
                          nn.MaxPool2d(3, 2, ceil_mode=True))
    assert_one_int8_region(model, (8, 40, 40))  # concat outputs 40x40x96 and 20x20x128 bytes


def test_depthwise_small_planes():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(16, 96, 1), nn.ReLU6(), nn.Conv2d(96, 96, 3, padding=1, groups=96), nn.ReLU6(),
                          nn.Conv2d(96, 40, 1), nn.Conv2d(40, 40, 3, stride=2, padding=1, groups=40), nn.ReLU())
    assert_one_int8_region(model, (16, 7, 7))
    assert_one_int8_region(model, (16, 13, 13))
