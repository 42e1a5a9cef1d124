"""Which files of a Hub repository ``pull`` downloads: what the importers read, one weight format
(safetensors when there is one), never the TensorFlow, Flax or Rust weights beside them. The
listings are those of the real repositories, filtered by huggingface_hub's own matcher."""

from __future__ import annotations

import pytest
from huggingface_hub.utils import filter_repo_objects

from attnserve.export.pull.errors import PullError
from attnserve.export.pull.hub import split_id, weight_patterns

OPUS_MT = ["config.json", "generation_config.json", "metadata.xml", "model.safetensors", "pytorch_model.bin",
           "rust_model.ot", "source.spm", "target.spm", "tf_model.h5", "tokenizer_config.json", "vocab.json",
           "README.md", ".gitattributes"]  # fmt: skip
NLLB = ["config.json", "generation_config.json", "pytorch_model.bin", "sentencepiece.bpe.model",
        "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json",
        "README.md", ".gitattributes"]  # fmt: skip
M2M100 = ["added_tokens.json", "config.json", "generation_config.json", "pytorch_model.bin", "rust_model.ot",
          "sentencepiece.bpe.model", "special_tokens_map.json", "tokenizer_config.json", "vocab.json"]  # fmt: skip
VIT = ["config.json", "flax_model.msgpack", "model.safetensors", "preprocessor_config.json", "pytorch_model.bin",
       "tf_model.h5", "README.md"]  # fmt: skip


def fetched(files: list[str]) -> set[str]:
    return set(filter_repo_objects(files, allow_patterns=weight_patterns(files)))


def test_only_what_the_importers_read_is_downloaded():
    assert fetched(OPUS_MT) == {"config.json", "generation_config.json", "model.safetensors", "source.spm",
                                "target.spm", "tokenizer_config.json", "vocab.json"}  # fmt: skip
    assert fetched(NLLB) == set(NLLB) - {"README.md", ".gitattributes"}
    assert fetched(M2M100) == set(M2M100) - {"rust_model.ot"}
    assert fetched(VIT) == {"config.json", "model.safetensors", "preprocessor_config.json"}
    sharded = ["config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
               "model.safetensors.index.json", "pytorch_model-00001-of-00002.bin"]  # fmt: skip
    assert fetched(sharded) == set(sharded) - {"pytorch_model-00001-of-00002.bin"}


def test_hub_ids():
    assert split_id("Helsinki-NLP/opus-mt-en-de") == ("Helsinki-NLP/opus-mt-en-de", None)
    assert split_id("hf:facebook/nllb-200-distilled-600M@v1") == ("facebook/nllb-200-distilled-600M", "v1")
    for bad in ("opus-mt-en-de", "a/b/c", "../x", "a/"):
        with pytest.raises(PullError, match="organisation/model"):
            split_id(bad)
