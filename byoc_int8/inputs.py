"""Calibration and evaluation inputs: a .npy file, a directory of images, or arrays in memory."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .errors import CalibrationDataError

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

    if len(input_shape) != 4:
        raise CalibrationDataError(f"images can feed an (N, C, H, W) input; the model takes shape {tuple(input_shape)}")
    _, channels, height, width = input_shape
    files = sorted(p for p in Path(directory).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise CalibrationDataError(f"no images ({', '.join(sorted(IMAGE_SUFFIXES))}) in {directory}")
    if channels not in (1, 3):
        raise CalibrationDataError(f"images can feed 1- or 3-channel inputs; the model takes {channels} channels")
    if mean is None and channels == 3:
        mean, std = IMAGENET_MEAN, IMAGENET_STD
    mean = np.asarray(mean if mean is not None else [0.0] * channels, np.float32).reshape(-1, 1, 1)
    std = np.asarray(std if std is not None else [1.0] * channels, np.float32).reshape(-1, 1, 1)
    batch = []
    for path in files:
        try:
            with Image.open(path) as image:
                image = image.convert("RGB" if channels == 3 else "L").resize((width, height), Image.BILINEAR)
                pixels = np.asarray(image, np.float32) / 255.0
        except (OSError, ValueError, Image.DecompressionBombError) as err:  # unreadable, corrupt, too large
            raise CalibrationDataError(f"cannot read image {path}: {err}") from None
        pixels = pixels.transpose(2, 0, 1) if channels == 3 else pixels[None]
        batch.append((pixels - mean) / std)
    return np.stack(batch).astype(np.float32)


def load_inputs(source: str | os.PathLike, input_shape: Sequence[int]) -> np.ndarray:
    """A .npy file (inputs stacked on axis 0) or a directory of images, checked against the
    model's input shape (batch excluded): see :func:`check_samples`."""
    path = Path(source)
    if path.is_dir():
        data = load_images(path, input_shape)
    elif not path.exists():
        raise CalibrationDataError(f"no such file or directory: {source} (expected a .npy file or a directory of images)")
    elif path.suffix.lower() == ".npy":
        data = load_npy(path)
    else:
        raise CalibrationDataError(f"{source}: calibration data must be a .npy file (numpy.save of the inputs "
                                   "stacked on axis 0) or a directory of images")
    return check_samples(data, input_shape, str(source))


def load_npy(path: str | os.PathLike) -> np.ndarray:
    """The array in a .npy file, memory-mapped, so that a header declaring more data than the
    file holds is refused before anything is allocated. Arrays of Python objects (pickles) are
    refused."""
    try:
        data = np.load(path, mmap_mode="r", allow_pickle=False)
    except EOFError:
        raise CalibrationDataError(f"{path} is empty: save the inputs with numpy.save") from None
    except (OSError, ValueError) as err:
        raise CalibrationDataError(f"cannot read {path} as a .npy array: {err}") from None
    if not isinstance(data, np.ndarray):  # an .npz archive under a .npy name
        raise CalibrationDataError(f"{path} is an .npz archive, not a .npy array: save one array with numpy.save")
    return data


def check_samples(data, input_shape: Sequence[int], source: str = "calibration data") -> np.ndarray:
    """`data` as float32 samples stacked on axis 0, after checking that it is a non-empty array
    of real numbers whose samples have the model's input shape (`input_shape` with its batch
    axis) and that every value is finite; `source` names the data in the error
    (:class:`CalibrationDataError`)."""
    expected = tuple(int(d) for d in input_shape[1:])
    if not isinstance(data, np.ndarray):
        raise CalibrationDataError(f"{source}: expected an array of inputs stacked on axis 0, got {type(data).__name__}")
    if not (np.issubdtype(data.dtype, np.floating) or np.issubdtype(data.dtype, np.integer) or data.dtype == bool):
        raise CalibrationDataError(f"{source} holds {data.dtype} values; the model takes real numbers (float32)")
    if data.ndim != len(expected) + 1 or tuple(data.shape[1:]) != expected:
        raise CalibrationDataError(
            f"{source}: samples of shape {tuple(data.shape[1:])}, the model takes {expected} (the array has shape "
            f"{tuple(data.shape)}; stack the inputs on axis 0: (N, {', '.join(map(str, expected))}))"
        )
    if len(data) == 0:
        raise CalibrationDataError(f"{source} holds no samples (shape {tuple(data.shape)})")
    with np.errstate(over="ignore", invalid="ignore"):  # values beyond float32 become infinite: refused below
        data = np.array(data, dtype=np.float32)  # a writable copy
    finite = np.isfinite(data.reshape(len(data), -1)).all(axis=1)
    if not finite.all():
        bad = int(np.argmin(finite))
        what = "NaN" if np.isnan(data[bad]).any() else "an infinity (or a value beyond float32's range)"
        raise CalibrationDataError(
            f"{source}: sample {bad} (of {len(data)}) contains {what}; "
            f"{int((~finite).sum())} sample(s) are not finite"
        )
    return data
