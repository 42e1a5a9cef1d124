"""Import local Hugging Face checkpoints into attnserve models (nothing is downloaded).

- :func:`load_hf_translation`: a translation directory by its ``config.json`` ``model_type``:
  :func:`load_marian` (``marian``) or :func:`load_m2m100` (``m2m_100``: M2M100 and NLLB);
- :func:`load_marian`: an opus-mt / MarianMT directory -> :class:`TranslationTransformer`
  plus a ``tokenizers.Tokenizer`` that reproduces Marian's preprocessing;
- :func:`load_argos`: an Argos Translate package (``.argosmodel`` or unpacked), whose
  CTranslate2 ``model.bin`` is read directly; :func:`argos_packages` lists a folder of them;
- :func:`load_hf_vit`: a ViTForImageClassification directory -> :class:`VisionTransformer`;
- :func:`to_marian`: the reverse for translation models, a ``transformers.MarianMTModel``
  with the same weights (for side-by-side benchmarks and CTranslate2 conversion).

transformers and sentencepiece are optional (``pip install 'attnserve[import]'``) and
imported only inside the functions that need them.
"""

from pathlib import Path

from .argos import argos_packages, load_argos
from .hf_files import ImportCheckpointError, model_dir, read_json
from .hf_translation import ImportedTranslator
from .m2m100 import load_m2m100
from .marian import load_marian
from .to_transformers import to_m2m100, to_marian
from .vit import ImportedViT, load_hf_vit

TRANSLATION_IMPORTERS = {"marian": load_marian, "m2m_100": load_m2m100}  # config.json model_type -> importer


def load_hf_translation(path: Path | str, expected: str | None = None) -> ImportedTranslator:
    """Import a local translation directory by its ``config.json`` ``model_type`` (``expected``: require one)."""
    directory = model_dir(path)
    model_type = read_json(directory / "config.json").get("model_type")
    model_type = model_type if model_type is None or isinstance(model_type, str) else repr(model_type)
    if model_type not in TRANSLATION_IMPORTERS or (expected is not None and model_type != expected):
        wanted = [expected] if expected else sorted(TRANSLATION_IMPORTERS)
        found = "has no model_type" if model_type is None else f"model_type is {model_type!r}"
        hint = "; a ViT is exported with `attnserve-export vit --from-hf-vit DIR`" if model_type == "vit" else ""
        raise ImportCheckpointError(
            f"{directory / 'config.json'}: {found}; this importer reads {', '.join(wanted)}{hint}"
        )
    return TRANSLATION_IMPORTERS[model_type](directory)


__all__ = [
    "TRANSLATION_IMPORTERS",
    "ImportCheckpointError",
    "ImportedTranslator",
    "ImportedViT",
    "argos_packages",
    "load_hf_translation",
    "load_argos",
    "load_hf_vit",
    "load_m2m100",
    "load_marian",
    "to_m2m100",
    "to_marian",
]
