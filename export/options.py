"""Options every export takes, whatever the model (they own their CLI flags). Torch-free."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path

from attnserve.contract.kinds import IN_PLACE, KV_CACHE_LAYOUTS, LEFT_PADDED, PRECISIONS

from .errors import ExportError
from .onnx_nodes import ATTENTION_OPS, DEFAULT_OPSET

MIN_OPSET = 18  # the dynamo exporter's lowest


@dataclass(frozen=True)
class ExportOptions:
    """What every export takes, whatever the model; owns its CLI flags."""

    out: Path
    name: str | None = None  # default: the --out directory's name (the model repository's layout)
    attention: str = "fused"
    opset: int = DEFAULT_OPSET
    precision: str = "fp32"
    verify: bool = True
    seed: int = 0
    force: bool = False
    device: str = "cpu"  # onnxruntime provider for verification
    threads: int = 0  # 0 = the libraries' default (all cores)
    kv_cache: str | None = None  # translation decoder's cache layout; None: see cache_layout
    screen: bool = True  # translation: the int8-screened vocabulary projection (see screens_vocab)

    def __post_init__(self) -> None:
        if self.attention not in ATTENTION_OPS:
            raise ExportError(f"--attention {self.attention!r} is not one of {', '.join(ATTENTION_OPS)}")
        if self.precision not in PRECISIONS:
            raise ExportError(f"--precision {self.precision!r} is not one of {', '.join(PRECISIONS)}")
        if not MIN_OPSET <= self.opset <= DEFAULT_OPSET:
            raise ExportError(f"--opset {self.opset} outside {MIN_OPSET}..{DEFAULT_OPSET}")
        if self.name is not None and (not self.name.strip() or "/" in self.name):
            raise ExportError(
                f"--name {self.name!r}: a model name is not empty and has no '/' "
                "(clients put it in URLs: /v2/models/NAME)"
            )
        if self.kv_cache is not None and self.kv_cache not in KV_CACHE_LAYOUTS:
            raise ExportError(f"--kv-cache {self.kv_cache!r} is not one of {', '.join(KV_CACHE_LAYOUTS)}")
        if self.kv_cache == IN_PLACE and self.attention != "fused":
            raise ExportError(
                f"--kv-cache in-place needs --attention fused (GroupQueryAttention), got {self.attention}"
            )
        if self.attention == "onnx" and self.opset < 23:
            raise ExportError(f"--attention onnx needs --opset 23 (the standard Attention op), got {self.opset}")

    @property
    def cache_layout(self) -> str:
        """The translation decoder's cache layout: in-place unless asked otherwise or the attention
        target is not onnxruntime's fused ops (GroupQueryAttention is one of them); for CUDA
        (``--device cuda``) in-place at fp16 only, since onnxruntime's CUDA GroupQueryAttention has
        fp16 and bf16 kernels and an fp32 one would run on the CPU provider."""
        if self.kv_cache is not None:
            return self.kv_cache
        if self.attention != "fused" or (self.device == "cuda" and self.precision != "fp16"):
            return LEFT_PADDED
        return IN_PLACE

    @property
    def step_attention(self) -> bool:
        """Whether the decoder returns its step's attention (``step_attention``, for alignments
        without the aligner graph): with fused attention, for the CPU provider. onnxruntime's CUDA
        MultiHeadAttention writes other numbers than the CPU's into its scores output (on an H200,
        uncorrelated with them), so a ``--device cuda`` export goes without it and alignments run
        the aligner graph (the server does the same with a CPU export served on CUDA)."""
        return self.attention == "fused" and self.device == "cpu"

    @property
    def screens_vocab(self) -> bool:
        """Whether the decoder gets the int8-screened vocabulary projection (export/screen_vocab.py):
        for fp32 CPU exports only (an int8 decoder's projection is int8 already; CUDA is not
        measured), unless ``--no-screen-vocab``."""
        return self.screen and self.precision == "fp32" and self.device == "cpu"

    @property
    def folds_layer_biases(self) -> bool:
        """Whether the translation graphs' layer biases go into their products (export/layer_bias.py):
        fp32 CPU exports (an int8 quantizer would give the bias row the weight's scale)."""
        return self.precision == "fp32" and self.device == "cpu"

    @property
    def model_name(self) -> str:
        return self.name or Path(self.out).resolve().name

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--out", type=Path, required=True, help="model directory to write (atomically)")
        parser.add_argument("--name", help="model name in model.json (default: the --out directory's name)")
        parser.add_argument(
            "--attention",
            choices=list(ATTENTION_OPS),
            default="fused",
            help="fused = com.microsoft::MultiHeadAttention (default), onnx = standard Attention (opset 23), "
            "decomposed = MatMul/Softmax",
        )
        parser.add_argument("--opset", type=int, default=DEFAULT_OPSET, help=f"ONNX opset (default {DEFAULT_OPSET})")
        parser.add_argument(
            "--precision",
            choices=PRECISIONS,
            default="fp32",
            help="fp32 (default); fp16 for CUDA; int8 = dynamic quantization of the MatMuls for CPU",
        )
        parser.add_argument("--no-verify", dest="verify", action="store_false", help="skip verification")
        parser.add_argument("--seed", type=int, default=0, help="seed of preset weights and verification inputs")
        parser.add_argument("--force", action="store_true", help="replace an existing non-empty --out")
        parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="verify on (default cpu)")
        parser.add_argument(
            "--kv-cache",
            choices=KV_CACHE_LAYOUTS,
            default=None,
            help="translation: the decoder's self-attention cache; in-place = GroupQueryAttention over a buffer "
            "written in place, rows at their own lengths (default with --attention fused, but for --device cuda at "
            "fp32); left-padded = MultiHeadAttention, rows left-padded to the longest (the default for --device "
            "cuda at fp32: CUDA's GroupQueryAttention is fp16 and bf16 only)",
        )
        parser.add_argument(
            "--no-screen-vocab",
            dest="screen",
            action="store_false",
            help="translation, fp32 CPU: no int8-screened vocabulary projection for greedy steps (default: with "
            "it; the decoder then also holds 7-bit int8 output weights, a quarter of the fp32 projection's bytes, "
            "and adds a logits bias inside the projection)",
        )
        parser.add_argument("--threads", type=thread_count, default=0, help="torch/onnxruntime threads (default: all)")

    @classmethod
    def from_args(cls, ns: argparse.Namespace) -> ExportOptions:
        return cls(**{f.name: getattr(ns, f.name) for f in dataclasses.fields(cls)})


def thread_count(text: str) -> int:
    """``--threads``: 0 (the libraries' default, every core) or a positive count."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value}: 0 (every core) or a positive count")
    return value
