"""Calibration and evaluation inputs: a .npy file, a directory of images, or arrays in memory."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"}
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def load_images(
    directory: str | os.PathLike,
    input_shape: Sequence[int],
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
) -> np.ndarray:
    """Every image in `directory` (sorted by name), resized to the model's (H, W), scaled to [0, 1]
    and normalized with mean / std per channel (ImageNet's by default for 3 channels), stacked
    on axis 0 as (N, C, H, W) float32."""
    from PIL import Image

    _, channels, height, width = input_shape
    files = sorted(p for p in Path(directory).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise ValueError(f"no images ({', '.join(sorted(IMAGE_SUFFIXES))}) in {directory}")
    if channels not in (1, 3):
        raise ValueError(f"images can feed 1- or 3-channel inputs, the model takes {channels}")
    if mean is None and channels == 3:
        mean, std = IMAGENET_MEAN, IMAGENET_STD
    mean = np.asarray(mean if mean is not None else [0.0] * channels, np.float32).reshape(-1, 1, 1)
    std = np.asarray(std if std is not None else [1.0] * channels, np.float32).reshape(-1, 1, 1)
    batch = []
    for path in files:
        with Image.open(path) as image:
            image = image.convert("RGB" if channels == 3 else "L").resize((width, height), Image.BILINEAR)
            pixels = np.asarray(image, np.float32) / 255.0
        pixels = pixels.transpose(2, 0, 1) if channels == 3 else pixels[None]
        batch.append((pixels - mean) / std)
    return np.stack(batch).astype(np.float32)


def load_inputs(source: str | os.PathLike, input_shape: Sequence[int]) -> np.ndarray:
    """A .npy file (inputs stacked on axis 0) or a directory of images, checked against the
    model's input shape (batch excluded)."""
    path = Path(source)
    if path.is_dir():
        data = load_images(path, input_shape)
    elif path.suffix == ".npy":
        data = np.load(path)
    else:
        raise ValueError(f"calibration data must be a .npy file or a directory of images: {source}")
    if tuple(data.shape[1:]) != tuple(input_shape[1:]):
        raise ValueError(f"{source}: samples of shape {data.shape[1:]}, the model takes {tuple(input_shape[1:])}")
    return data.astype(np.float32)
