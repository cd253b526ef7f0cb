"""Built-in models: ResNet-18 (random init, fixed seed), the seed tutorial's ResNet-18 stem, and
the ResNet trained on scikit-learn's digits (real data, for accuracy)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from . import digits


class ResNetStem(nn.Module):
    """The sub-graph printed in the seed tutorial: conv7x7/2+bn+relu, max_pool2d, then a basic
    block's two 3x3 convs (bn folded) and the residual add with the pooled tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(64, 64, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(64)
        self.conv3 = nn.Conv2d(64, 64, 3, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = self.pool(torch.relu(self.bn1(self.conv1(x))))
        y = torch.relu(self.bn2(self.conv2(pooled)))
        return self.bn3(self.conv3(y)) + pooled


class Seed002Net(nn.Module):
    """The network of seed 002 (a TVM forum question), rebuilt: an NHWC 28x28x1 input, conv 5x5 x8,
    relu, max pool 2, conv 5x5 x16, relu, max pool 3, flatten, dense 10, with the seed graph's
    NHWC <-> NCHW transposes around every convolution and before the flatten."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 5, padding=2)
        self.conv2 = nn.Conv2d(8, 16, 5, padding=2)
        self.dense = nn.Linear(256, 10)

    @staticmethod
    def _nhwc_round_trip(x: torch.Tensor) -> torch.Tensor:
        # layout_transform NCHW -> NHWC for the accelerator's conv, and back.
        return x.permute(0, 2, 3, 1).permute(0, 3, 1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 3, 1, 2)  # NHWC input -> NCHW
        x = nn.functional.max_pool2d(torch.relu(self.conv1(self._nhwc_round_trip(x))), 2)
        x = nn.functional.max_pool2d(torch.relu(self.conv2(self._nhwc_round_trip(x))), 3)
        x = x.permute(0, 2, 3, 1)  # NCHW -> NHWC before the flatten, as in the seed
        return self.dense(x.reshape(x.shape[0], -1))


def randomize_batch_norm(model: nn.Module, generator: torch.Generator) -> None:
    """Give batch norms non-trivial statistics so that folding them is actually exercised."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            c = m.num_features
            m.running_mean.copy_(torch.randn(c, generator=generator) * 0.1)
            m.running_var.copy_(torch.rand(c, generator=generator) * 0.5 + 0.75)
            m.weight.data.copy_(torch.rand(c, generator=generator) * 0.5 + 0.75)
            m.bias.data.copy_(torch.randn(c, generator=generator) * 0.1)


def random_inputs(shape: tuple[int, ...], count: int, seed: int) -> torch.Tensor:
    """`count` standard-normal inputs of `shape` (batch 1 each), stacked on axis 0."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn((count,) + tuple(shape[1:]), generator=g)


def _torchvision(name: str) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        import torchvision

        torch.manual_seed(0)
        model = getattr(torchvision.models, name)()
        randomize_batch_norm(model, torch.Generator().manual_seed(1))
        return model.eval()

    return make


def _seed002() -> nn.Module:
    torch.manual_seed(0)
    return Seed002Net().eval()


def _stem() -> nn.Module:
    torch.manual_seed(0)
    model = ResNetStem()
    randomize_batch_norm(model, torch.Generator().manual_seed(1))
    return model.eval()


@dataclass(frozen=True)
class BuiltinModel:
    """A model the CLI knows by name, with its default calibration and evaluation data."""

    name: str
    input_shape: tuple[int, ...]
    make: Callable[[], nn.Module]
    default_calibration: int = 32
    default_evaluation: int = 8

    def calibration_inputs(self, count: int | None = None) -> np.ndarray:
        return random_inputs(self.input_shape, count or self.default_calibration, 1234).numpy()

    def evaluation_set(self, count: int | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """(inputs, labels or None: random-init models have no ground truth)."""
        return random_inputs(self.input_shape, count or self.default_evaluation, 4321).numpy(), None


class DigitsModel(BuiltinModel):
    """The ResNet trained on scikit-learn's digits: calibration on training images, evaluation
    on the whole held-out split, with labels."""

    def calibration_inputs(self, count: int | None = None) -> np.ndarray:
        return digits.load_split().train_x[: count or self.default_calibration]

    def evaluation_set(self, count: int | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        split = digits.load_split()
        n = count or len(split.test_x)
        return split.test_x[:n], split.test_y[:n]


BUILTIN_MODELS = {
    "resnet18": BuiltinModel("resnet18", (1, 3, 224, 224), _torchvision("resnet18")),
    "resnet50": BuiltinModel("resnet50", (1, 3, 224, 224), _torchvision("resnet50")),
    "mobilenet_v2": BuiltinModel("mobilenet_v2", (1, 3, 224, 224), _torchvision("mobilenet_v2")),
    "squeezenet1_1": BuiltinModel("squeezenet1_1", (1, 3, 224, 224), _torchvision("squeezenet1_1")),
    "vgg11_bn": BuiltinModel("vgg11_bn", (1, 3, 224, 224), _torchvision("vgg11_bn")),
    "seed002": BuiltinModel("seed002", (1, 28, 28, 1), _seed002),
    "resnet18_stem": BuiltinModel("resnet18_stem", (1, 3, 224, 224), _stem),
    "digits": DigitsModel("digits", digits.INPUT_SHAPE, digits.pretrained, default_calibration=256,
                          default_evaluation=digits.HELD_OUT),
}
