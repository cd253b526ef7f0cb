"""A small ResNet trained on real data: scikit-learn's handwritten digits (8x8, 10 classes).

ImageNet weights cannot be downloaded here, so accuracy is measured on this model instead: the
data ship with scikit-learn, the split is fixed (stratified, 360 held-out images) and training
is deterministic. The trained weights live in ``byoc_int8/data/digits_resnet.pt`` (~100 kB), so
nothing retrains at test time. Retrain with ``python -m byoc_int8.digits``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

WEIGHTS = Path(__file__).with_name("data") / "digits_resnet.pt"
INPUT_SHAPE = (1, 1, 8, 8)
HELD_OUT = 360
SPLIT_SEED = 0


class BasicBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + x)


class DigitsResNet(nn.Module):
    """conv-bn-relu, residual block, max pool, conv-bn-relu, residual block, global average
    pool, linear: every op kind of ResNet-18, sized for 8x8 inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.block1 = BasicBlock(16)
        self.pool = nn.MaxPool2d(2)
        self.widen = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        self.block2 = BasicBlock(32)
        self.fc = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.block2(self.widen(self.pool(self.block1(self.stem(x)))))
        return self.fc(x.mean(dim=(2, 3)))


@dataclass(frozen=True)
class DigitsSplit:
    train_x: np.ndarray  # (N, 1, 8, 8) float32 in [0, 1]
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray


def load_split() -> DigitsSplit:
    """The fixed stratified split: 1437 training and 360 held-out images."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    train_x, test_x, train_y, test_y = train_test_split(
        x, digits.target, test_size=HELD_OUT, stratify=digits.target, random_state=SPLIT_SEED
    )
    return DigitsSplit(train_x, train_y.astype(np.int64), test_x, test_y.astype(np.int64))


def train(epochs: int = 40, seed: int = 0) -> DigitsResNet:
    """Deterministic training (one thread, fixed seeds, deterministic algorithms). Torch's thread
    count, deterministic-algorithms mode and global random state are restored afterwards, also
    when training fails."""
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            torch.set_num_threads(1)
            torch.use_deterministic_algorithms(True)
            return _train(epochs, seed)
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)


def _train(epochs: int, seed: int) -> DigitsResNet:
    split = load_split()
    model = DigitsResNet()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, epochs)
    x, y = torch.from_numpy(split.train_x), torch.from_numpy(split.train_y)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        model.train()
        for batch in torch.randperm(len(x), generator=generator).split(64):
            # Small random shifts (+-1 pixel) against overfitting 1437 images.
            dx, dy = torch.randint(-1, 2, (2,), generator=generator).tolist()
            inputs = torch.roll(x[batch], shifts=(dy, dx), dims=(2, 3))
            loss = nn.functional.cross_entropy(model(inputs), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        schedule.step()
    return model.eval()


def accuracy(predict, x: np.ndarray, y: np.ndarray) -> float:
    """Top-1 accuracy of `predict` (batch-1 float input -> logits) over a data set."""
    correct = sum(int(np.argmax(predict(x[i : i + 1])) == y[i]) for i in range(len(x)))
    return correct / len(x)


def pretrained() -> DigitsResNet:
    model = DigitsResNet()
    model.load_state_dict(torch.load(WEIGHTS, weights_only=True))
    return model.eval()


def main() -> None:
    model = train()
    WEIGHTS.parent.mkdir(exist_ok=True)
    torch.save(model.state_dict(), WEIGHTS)
    split = load_split()
    with torch.no_grad():
        acc = accuracy(lambda b: model(torch.from_numpy(b)).numpy(), split.test_x, split.test_y)
    print(f"wrote {WEIGHTS} ({WEIGHTS.stat().st_size} bytes); held-out accuracy {acc:.4f}")


if __name__ == "__main__":
    main()
