"""The typed form of ``model.json`` (:mod:`.manifest` reads, checks and writes it): what a
model directory holds, its graphs, tokenizer, languages and image preprocessing."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .graph_io import AlignerIO, ClassifierIO, DecoderIO, EncoderIO, GraphIO
from .kinds import LEFT_PADDED, TRANSLATION
from .quality import QualityCalibration

FORMAT_VERSION = 1


class ManifestError(ValueError):
    """A model directory that cannot be served; the message names the file and the field."""

    def __init__(self, path: Path | str, field_name: str, message: str) -> None:
        self.path, self.field = str(path), field_name
        super().__init__(f"{path}: {field_name}: {message}")


@dataclass(frozen=True)
class GraphSpec:
    file: str
    inputs: list[str]
    outputs: list[str]


@dataclass(frozen=True)
class TokenizerSpec:
    file: str
    pad_id: int
    bos_id: int
    eos_id: int
    unk_id: int
    decoder_start_id: int | None = None  # None: bos_id (read it through start_id)
    never_generate_ids: list[int] | None = None  # None: [pad_id, bos_id] (read it through never_generate)

    @property
    def start_id(self) -> int:
        """The token decoding starts from (Marian: pad; M2M100 / NLLB: ``</s>``)."""
        return self.bos_id if self.decoder_start_id is None else self.decoder_start_id

    @property
    def never_generate(self) -> list[int]:
        """Ids decoding never chooses."""
        return sorted({self.pad_id, self.bos_id}) if self.never_generate_ids is None else list(self.never_generate_ids)


@dataclass(frozen=True)
class Languages:
    """The languages a translation model reads and writes, by the model's own codes.

    ``tokens`` maps a code to the vocabulary token that selects it: M2M100 / NLLB prepend
    the source language's token to the source and force the target language's token first
    in the output; multilingual opus-mt models take the target's ``>>xx<<`` token at the
    start of the source. A model that translates one fixed pair has no tokens.
    """

    source: list[str] = field(default_factory=list)
    target: list[str] = field(default_factory=list)
    tokens: dict[str, str] = field(default_factory=dict)
    default_source: str | None = None
    default_target: str | None = None


@dataclass(frozen=True)
class Preprocessing:
    image_size: int
    channels: int  # 1 = grayscale ("L"), 3 = RGB
    mean: list[float]
    std: list[float]
    resample: str = "bilinear"
    invert: bool = False  # 255 - pixel before normalising (dark ink on light paper -> model's light on dark)
    # Grayscale only (contract.images): a dark background (light ink) is detected and not inverted,
    # so both ink polarities reach the model alike
    auto_invert: bool = False
    # Grayscale only: crop to the ink, centre it on a square with a margin, stretch its contrast
    # (MNIST-style size normalisation: the digit's size and place in the image stop mattering)
    crop_to_ink: bool = False


@dataclass(frozen=True)
class Manifest:
    name: str
    kind: str
    attention: str
    precision: str
    opset: int
    config: dict[str, Any]
    graphs: dict[str, GraphSpec]
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    tokenizer: TokenizerSpec | None = None
    limits: dict[str, int] = field(default_factory=dict)
    labels: list[str] | None = None
    preprocessing: Preprocessing | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    family: str = "attnserve"
    languages: Languages | None = None
    format_version: int = FORMAT_VERSION
    attnserve_version: str = "0.1.0"
    kv_cache: str = LEFT_PADDED  # translation: the decoder's self-attention cache layout (contract.kinds)
    quality: QualityCalibration | None = None  # translation: the quality score's calibration (contract.quality)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if self.kind != TRANSLATION:
            data.pop("kv_cache")
        data["quality"] = self.quality.to_json() if self.quality is not None else None
        return {k: v for k, v in data.items() if v is not None}

    def io(self, role: str) -> GraphIO:
        """The input and output names of graph ``role`` ("encoder", "decoder", "aligner" or "model"), as listed."""
        roles = {"encoder": self.encoder_io, "decoder": self.decoder_io, "aligner": self.aligner_io}
        return {**roles, "model": self.classifier_io}[role]()

    def aligner_io(self) -> AlignerIO:
        graph = self.graphs["aligner"]
        return AlignerIO.from_lists(graph.inputs, graph.outputs)

    def encoder_io(self) -> EncoderIO:
        graph = self.graphs["encoder"]
        return EncoderIO.from_lists(graph.inputs, graph.outputs)

    def decoder_io(self) -> DecoderIO:
        graph = self.graphs["decoder"]
        return DecoderIO.from_lists(graph.inputs, graph.outputs, self.kv_cache)

    def classifier_io(self) -> ClassifierIO:
        graph = self.graphs["model"]
        return ClassifierIO.from_lists(graph.inputs, graph.outputs)
