"""Train the bundled handwritten-digit classifier (``models/zoo/digits-vit``).

Data: scikit-learn's bundled UCI digits (1,797 images of 8x8, values 0..16, high = ink),
split 80/20, stratified, with a fixed seed, plus synthetic digits (:mod:`.digit_images`:
drawn with a pen, typed in fonts, degraded). Inputs are what a person scans, draws or
types: either ink polarity, any size and place in the frame, PNG or JPEG. Every training
image goes through the server's own preprocessing (``model.json`` ``preprocessing``,
:func:`attnserve.contract.images.preprocess_pil`, torch-free): grayscale -> invert unless
the background is dark -> crop to the ink, centred on a square with a margin, contrast
stretched -> bilinear resize to 32x32 -> [0, 1] -> (x - 0.5) / 0.5. One implementation for
training and serving, so the two cannot drift.

Augmentation: the 8x8 digit is rendered on paper at a random size (8..64 px, bilinear or
nearest), shifted, rotated and scaled, then half of the images get light ink on dark, and
:func:`.digit_images.degrade` (stroke width, rotation, blur, noise, JPEG).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from tqdm import tqdm

from attnserve.contract.images import preprocess_pil
from attnserve.contract.manifest import Preprocessing
from attnserve.models import VisionTransformer, ViTConfig, load_checkpoint, save_checkpoint

from .digit_images import degrade, robustness_set, synthetic_digit

LABELS = [str(i) for i in range(10)]
PREPROCESSING = {
    "image_size": 32,
    "channels": 1,
    "mean": [0.5],
    "std": [0.5],
    "resample": "bilinear",
    "invert": True,  # dark ink on light paper in, light ink on dark for the model
    "auto_invert": True,  # ... unless the background is dark: light ink on dark goes in as it is
    "crop_to_ink": True,  # MNIST-style: the digit's size and place in the frame stop mattering
}
MODEL_CONFIG = ViTConfig(
    image_size=32, patch_size=4, in_channels=1, num_classes=10, dim=64, depth=4, num_heads=4, mlp_ratio=2.0, dropout=0.1
)


@dataclass(frozen=True)
class DigitsTrainConfig:
    seed: int = 0
    split_seed: int = 0
    test_fraction: float = 0.2
    epochs: int = 60
    batch_size: int = 64
    lr: float = 2e-3
    weight_decay: float = 0.05
    label_smoothing: float = 0.1
    threads: int = 2
    synthetic_per_epoch: int = 0  # pen and font digits (digit_images.synthetic_digit) added to each epoch
    degrade_rate: float = 0.5  # share of the UCI training images that digit_images.degrade wears down
    init_from: str = ""  # fine-tune this checkpoint instead of training from random weights


def load_split(
    split_seed: int = 0, test_fraction: float = 0.2
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train images, train labels, test images, test labels); images (N, 8, 8) float in 0..16."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x_tr, x_te, y_tr, y_te = train_test_split(
        digits.images, digits.target, test_size=test_fraction, stratify=digits.target, random_state=split_seed
    )
    return x_tr, y_tr, x_te, y_te


def to_paper(image: np.ndarray) -> Image.Image:
    """An 8x8 sklearn digit (0..16, high = ink) as the canonical input: dark ink on light paper, mode L."""
    return Image.fromarray((255 - np.round(image * 255 / 16)).astype(np.uint8))  # mode L


def render(image: np.ndarray, size: int = 64) -> Image.Image:
    """The digit on paper at ``size`` px (bilinear), like the PNGs in ``examples/digits``."""
    return to_paper(image).resize((size, size), Image.BILINEAR)


def preprocess(img: Image.Image, prep: dict = PREPROCESSING) -> np.ndarray:
    """The server's preprocessing (see the module docstring): PIL image -> (1, S, S) float32."""
    return preprocess_pil(img, Preprocessing(**prep))


def augment(image: np.ndarray, rng: random.Random) -> Image.Image:
    """A randomly rendered, slightly moved copy of an 8x8 digit, on paper."""
    size = rng.choice((8, 16, 24, 32, 48, 64))
    img = to_paper(image).resize((size, size), rng.choice((Image.BILINEAR, Image.NEAREST, Image.BICUBIC)))
    angle = rng.uniform(-12, 12)
    scale = rng.uniform(0.85, 1.1)
    shift = (rng.uniform(-0.1, 0.1) * size, rng.uniform(-0.1, 0.1) * size)
    # inverse affine map for Image.transform: rotate + scale about the centre, then shift
    a = math.radians(angle)
    cos, sin = math.cos(a) / scale, math.sin(a) / scale
    cx = cy = size / 2
    matrix = (
        cos,
        sin,
        cx - cos * cx - sin * cy - shift[0],
        -sin,
        cos,
        cy + sin * cx - cos * cy - shift[1],
    )
    return img.transform((size, size), Image.AFFINE, matrix, resample=Image.BILINEAR, fillcolor=255)


def augment_more(image: np.ndarray, rng: random.Random, degrade_rate: float = 0.5) -> Image.Image:
    """:func:`augment`, then light ink on dark for half of them, then scanning's wear and tear for
    ``degrade_rate`` of them (the others stay clean, as the held-out images are)."""
    img = augment(image, rng)
    if rng.random() < 0.5:
        img = Image.eval(img, lambda v: 255 - v)
    return degrade(img, rng) if rng.random() < degrade_rate else img


def batch_tensor(images: list[Image.Image]) -> torch.Tensor:
    return torch.from_numpy(np.stack([preprocess(img) for img in images]))  # (B, 1, S, S)


@torch.no_grad()
def accuracy(model: VisionTransformer, images: np.ndarray, labels: np.ndarray) -> float:
    """Held-out accuracy on the plain (unaugmented) 8x8 images rendered on paper."""
    model.eval()
    x = batch_tensor([to_paper(im) for im in images])  # (N, 1, S, S)
    return float((model(x).argmax(-1).numpy() == labels).mean())


@torch.no_grad()
def robustness_accuracy(model: VisionTransformer) -> dict[str, float]:
    """Accuracy on :func:`.digit_images.robustness_set`, overall and per kind (pen/font x polarity)."""
    model.eval()
    items = robustness_set()
    x = batch_tensor([img for img, _, _ in items])  # (N, 1, S, S)
    right = model(x).argmax(-1).numpy() == np.array([d for _, d, _ in items])
    kinds = sorted({k for _, _, k in items})
    out = {"all": round(float(right.mean()), 4), "n": len(items)}
    for kind in kinds:
        mask = np.array([k == kind for _, _, k in items])
        out[kind] = round(float(right[mask].mean()), 4)
    return out


def _batch(
    indices: list[int], x_tr, y_tr, rng: random.Random, degrade_rate: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Training images ``indices``, augmented; an index past the training set is a fresh synthetic
    digit. Returns x: (B, 1, S, S) float32, y: (B,) int64."""
    images, labels = [], []
    for j in indices:
        if j < len(x_tr):
            img, label = augment_more(x_tr[j], rng, degrade_rate), y_tr[j]
        else:
            img, label = synthetic_digit(rng)
        images.append(img)
        labels.append(label)
    return batch_tensor(images), torch.tensor(labels, dtype=torch.long)


def run(cfg: DigitsTrainConfig, out_dir: Path, progress: bool = True) -> dict:
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.threads)
    rng = random.Random(cfg.seed)
    x_tr, y_tr, x_te, y_te = load_split(cfg.split_seed, cfg.test_fraction)
    model = load_checkpoint(cfg.init_from)[0] if cfg.init_from else VisionTransformer(MODEL_CONFIG)
    print(
        f"data: {len(x_tr)} train / {len(x_te)} held-out images; model: "
        f"{sum(p.numel() for p in model.parameters()) / 1e3:.0f} k parameters"
    )
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    per_epoch = len(x_tr) + cfg.synthetic_per_epoch  # indices >= len(x_tr): a fresh synthetic digit
    steps_per_epoch = math.ceil(per_epoch / cfg.batch_size)
    total = cfg.epochs * steps_per_epoch
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, total_steps=total, pct_start=0.1)
    start, seen = time.monotonic(), 0
    bar = tqdm(total=total, unit="step", disable=not progress, dynamic_ncols=True)
    for _ in range(cfg.epochs):
        model.train()
        order = list(range(per_epoch))
        rng.shuffle(order)
        for i in range(0, len(order), cfg.batch_size):
            x, y = _batch(order[i : i + cfg.batch_size], x_tr, y_tr, rng, cfg.degrade_rate)
            loss = F.cross_entropy(model(x), y, label_smoothing=cfg.label_smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            seen += len(y)
            bar.set_postfix(loss=f"{loss.item():.3f}", img_s=f"{seen / (time.monotonic() - start):,.0f}", refresh=False)
            bar.update()
    bar.close()
    seconds = time.monotonic() - start
    acc = accuracy(model, x_te, y_te)
    robust = robustness_accuracy(model)
    print(
        f"trained {cfg.epochs} epochs in {seconds / 60:.1f} min; held-out accuracy (PyTorch): {acc:.2%}; "
        f"robustness set: {robust['all']:.2%} of {robust['n']}"
    )
    extra = {
        "task": "handwritten digits 0-9, either ink polarity",
        "labels": LABELS,
        "preprocessing": PREPROCESSING,
        "train_config": dataclasses.asdict(cfg),
        "training": {"seconds": round(seconds, 1), "epochs": cfg.epochs, "images": seen},
        "metrics_torch": {"accuracy": round(acc, 4), "n": len(x_te)},
        "metrics_torch_robustness": robust,
        "torch_threads": cfg.threads,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    save_checkpoint(model, out_dir / "model.safetensors", extra=extra)
    (out_dir / "train_log.json").write_text(json.dumps(extra, indent=1) + "\n")
    return {"accuracy": acc, "seconds": seconds}
