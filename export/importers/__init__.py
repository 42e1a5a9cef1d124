"""Import local Hugging Face checkpoints into attnserve models (nothing is downloaded).

- :func:`load_marian`: an opus-mt / MarianMT directory -> :class:`TranslationTransformer`
  plus a ``tokenizers.Tokenizer`` that reproduces Marian's preprocessing;
- :func:`load_hf_vit`: a ViTForImageClassification directory -> :class:`VisionTransformer`;
- :func:`to_marian`: the reverse for translation models, a ``transformers.MarianMTModel``
  with the same weights (for side-by-side benchmarks and CTranslate2 conversion).

transformers and sentencepiece are optional (``pip install 'attnserve[import]'``) and
imported only inside the functions that need them.
"""

from .hf_files import ImportCheckpointError
from .marian import ImportedTranslator, load_marian, to_marian
from .vit import ImportedViT, load_hf_vit

__all__ = ["ImportCheckpointError", "ImportedTranslator", "ImportedViT", "load_hf_vit", "load_marian", "to_marian"]
