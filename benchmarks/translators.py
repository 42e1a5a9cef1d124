"""One random Marian-shaped translator, run by every engine the decode benchmarks compare.

The model is built so that every engine must do the same arithmetic and produce exactly
N tokens per text:

- the logits bias of the end, pad and start tokens is -1e4: nothing ends early (every
  text gets exactly N new tokens) and no engine needs its own "banned tokens" option;
- the start token's embedding row is zero: CTranslate2's Marian models always start the
  decoder from a zero embedding (``start_from_zero_embedding``), so ours, transformers'
  and the PyTorch reference do too.

The engines: attnserve's :class:`TranslationEngine` (end to end: tokenize, encode,
continuous-batching decode, detokenize), a plain onnxruntime greedy loop over the same
graphs, the PyTorch reference :func:`greedy_decode`, transformers' ``generate`` on the
:func:`to_marian` copy of the weights, and CTranslate2 on a conversion of that copy.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import numpy as np

CACHE_KEY = "attnserve-bench translator v12"  # bump when the model recipe or the export changes


def bench_translator(preset: str, seed: int = 0, vocab_size: int | None = None):
    """The random ``preset`` translator every engine runs (see the module docstring).

    ``vocab_size`` replaces the preset's vocabulary (opus-mt-en-de is ``mt-base`` with 58,101):
    at batch 1 reading the output projection (vocab x d_model) dominates a decoder step.
    """
    import torch

    from attnserve.models import create_model

    torch.manual_seed(seed)
    overrides = {} if vocab_size is None else {"vocab_size": vocab_size}
    model = create_model(preset, dropout=0.0, **overrides).eval()
    cfg = model.cfg
    with torch.no_grad():
        if model.logits_bias is not None:
            model.logits_bias[[cfg.eos_id, cfg.pad_id, cfg.bos_id]] = -1e4
            model.tgt_embed.weight[cfg.bos_id] = 0.0
        else:  # M2M100-shaped (no logits bias): a zero end-token row scores 0, far below the best of 8000
            model.tgt_embed.weight[[cfg.eos_id, cfg.bos_id]] = 0.0
    return model


def to_transformers(model):
    """The same weights as a transformers model: M2M100ForConditionalGeneration for M2M100-shaped
    presets (pre-norm), MarianMTModel otherwise."""
    from attnserve.export.importers import to_m2m100, to_marian

    return to_m2m100(model) if model.cfg.norm_first else to_marian(model)


def model_label(preset: str, vocab_size: int | None) -> str:
    """The name a preset goes by in tables, work folders and cache keys: ``mt-base-v58101`` when overridden."""
    return preset if vocab_size is None else f"{preset}-v{vocab_size}"


def source_ids(batch: int, length: int, vocab: int, eos_id: int, seed: int = 0) -> list[list[int]]:
    """``batch`` random sources of ``length`` tokens each, the last one the end token (as the tokenizer adds)."""
    rng = np.random.default_rng(seed)
    return [[*map(int, rng.integers(4, vocab, length - 1)), eos_id] for _ in range(batch)]


def texts_of(ids: list[list[int]]) -> list[str]:
    """The placeholder tokenizer's words for ``ids`` (``t{i}``; the end token is added back by it)."""
    return [" ".join(f"t{i}" for i in row[:-1]) for row in ids]


def export_translator(
    model,
    out: Path,
    preset: str,
    precision: str = "fp32",
    attention: str = "fused",
    kv_cache: str | None = None,
    screen: bool = True,
) -> Path:
    """Export ``model`` to ``out`` unless an export of the same recipe is already there. ``kv_cache``:
    the decoder's cache layout (None: the exporter's default, in place for fused attention);
    ``screen``: an fp32 decoder's int8-screened vocabulary projection (export/screen_vocab.py)."""
    from attnserve.export.modeldir import placeholder_tokenizer
    from attnserve.export.options import ExportOptions
    from attnserve.export.pipeline import export_translation

    options = ExportOptions(
        out=out, name=out.name, precision=precision, attention=attention, verify=False, force=True, kv_cache=kv_cache,
        screen=screen,
    )  # fmt: skip
    key = f"{CACHE_KEY} {preset} {precision} {attention} {kv_cache or 'default'}"
    key += " screened" if options.screens_vocab else ""  # exports without it keep their keys
    marker = out.with_name(out.name + ".key")
    if (out / "model.json").is_file() and marker.is_file() and marker.read_text() == key:
        return out
    print(f"exporting {preset} ({precision}, {attention}, {options.cache_layout} cache) to {out} ...", flush=True)
    cfg = model.cfg  # the placeholder's special ids are the model's (export refuses others)
    export_translation(
        model, placeholder_tokenizer(cfg.vocab_size, cfg.pad_id, cfg.bos_id, cfg.eos_id, cfg.unk_id), options
    )
    marker.write_text(key)
    return out


def ctranslate2_model(model, out: Path, preset: str) -> Path:
    """CTranslate2 conversion of ``to_transformers(model)`` (fp32 weights; int8 is chosen at load time).

    This is ``TransformersConverter``'s own ``MarianMTLoader`` fed the in-memory
    MarianMTModel, with two differences, both because our model is not a downloaded
    opus-mt checkpoint: the vocabulary comes from the placeholder tokenizer (``t{i}``
    words, no sentencepiece files), and the loader does not drop the last vocabulary
    row (it assumes opus-mt's layout, where ``<pad>`` is the last id; ours is id 0).
    """
    import torch
    from ctranslate2.converters import Converter
    from ctranslate2.converters.transformers import M2M100Loader, MarianMTLoader

    key = f"{CACHE_KEY} {preset} ctranslate2"
    marker = out.with_name(out.name + ".key")
    if (out / "model.bin").is_file() and marker.is_file() and marker.read_text() == key:
        return out
    cfg = model.cfg
    specials = {cfg.pad_id: "<pad>", cfg.bos_id: "<s>", cfg.eos_id: "</s>", cfg.unk_id: "<unk>"}
    if cfg.bos_id == cfg.eos_id:  # M2M100: decoding starts from </s>; <s> is id 0, never used
        specials[0] = "<s>"
    vocab = {specials.get(i, f"t{i}"): i for i in range(cfg.vocab_size)}

    names = {i: w for w, i in vocab.items()}

    class Vocabulary:  # the part of a transformers tokenizer that the loaders read
        eos_token, unk_token, bos_token = "</s>", "<unk>", "<s>"
        special_tokens_map: dict = {}

        def get_vocab(self) -> dict[str, int]:
            return vocab

        def convert_ids_to_tokens(self, i: int) -> str:
            return names[i]

    class Loader(MarianMTLoader):
        def _remove_pad_weights(self, spec) -> None:
            pass

    class M2M100PlaceholderLoader(M2M100Loader):  # the placeholder vocabulary as it is (no made-up words)
        def get_vocabulary(self, model, tokenizer):
            return [w for w, _ in sorted(vocab.items(), key=lambda kv: kv[1])]

    class InMemoryConverter(Converter):
        def _load(self):
            loader = M2M100PlaceholderLoader() if cfg.norm_first else Loader()
            with torch.no_grad():
                return loader(to_transformers(model), Vocabulary())

    print(f"converting {preset} to CTranslate2 in {out} ...", flush=True)
    InMemoryConverter().convert(str(out), force=True)
    marker.write_text(key)
    return out


class EngineRunner:
    """attnserve's TranslationEngine, called synchronously.

    The engine decodes on its scheduler thread; the caller's thread runs the event loop
    that awaits the results, as a gRPC handler's loop would (a loop on a thread of its own
    would add two thread hand-offs per call that a server does not have).
    """

    def __init__(
        self,
        model_dir: Path,
        threads: int,
        max_rows: int = 64,
        disabled_optimizers: tuple[str, ...] | None = None,
        provider: str = "cpu",
        batching: str = "continuous",
        step_buckets: str = "off",
    ) -> None:
        from attnserve.contract.manifest import load_manifest
        from attnserve.server.translation import EngineSettings, TranslationEngine
        from attnserve.server.translation.sessions import load_translation_sessions

        self.manifest = load_manifest(model_dir)
        self.encoder, self.decoder = load_translation_sessions(
            model_dir,
            self.manifest,
            provider,
            intra_op_threads=threads,
            disabled_optimizers=disabled_optimizers,
            cuda_graph=step_buckets == "cuda-graphs",
        )
        settings = EngineSettings(max_active_sequences=max_rows, batching=batching, step_buckets=step_buckets)
        self.engine = TranslationEngine(model_dir, self.manifest, self.encoder, self.decoder, settings)
        self.engine.warmup()
        self.steps = 0  # decoder steps of the last translate call
        self.loop = asyncio.new_event_loop()
        self.call(self.engine.start())

    @property
    def in_place(self) -> bool:
        """The model's decoder writes its cache in place (model.json ``kv_cache: in-place``)."""
        return self.manifest.decoder_io().in_place

    def call(self, coro):
        return self.loop.run_until_complete(coro)

    def translate(self, texts: list[str], new_tokens: int, beam_size: int = 1) -> list[list[int]]:
        from attnserve.server.service.limits import prepare
        from attnserve.server.translation import DecodeOptions

        options = DecodeOptions(max_new_tokens=new_tokens, beam_size=beam_size, return_scores=False)
        steps = self.engine.steps_total
        results = self.call(self.engine.translate(prepare(self.engine, texts, options)))
        self.steps = self.engine.steps_total - steps  # N when every row of the batch decodes at once
        return [r.hypotheses[0].token_ids for r in results]

    def close(self) -> None:
        self.call(self.engine.stop(1.0))
        self.call(self.loop.shutdown_default_executor())
        self.loop.close()


def engines(
    model, ids: list[list[int]], new_tokens: int, runners: dict[str, object], threads: int, beam_size: int = 1
) -> dict[str, Callable[[], list[list[int]]]]:
    """Name -> function that translates ``ids`` with exactly ``new_tokens`` and returns the new token ids.

    ``beam_size`` > 1: every engine runs beam search with that many beams and returns its best
    hypothesis (the plain onnxruntime loop, greedy only, is left out). The end token never wins,
    so every hypothesis has N tokens and the length penalty cannot reorder them: the engines'
    beam searches must agree token for token.

    ``runners`` holds what is expensive to build: ``attnserve ...`` (EngineRunner: fp32, int8, in
    either cache layout),
    ``ctranslate2`` (a model directory), ``transformers`` (a MarianMTModel), and optional
    ``transformers int8`` (a dynamically quantized one).
    """
    import torch

    from attnserve.models import beam_search, greedy_decode

    from .decode_engine import plain_loop

    cfg = model.cfg
    texts = texts_of(ids)
    B, L = len(ids), max(map(len, ids))
    src = torch.full((B, L), cfg.pad_id, dtype=torch.long)  # right-padded
    for i, row in enumerate(ids):
        src[i, : len(row)] = torch.tensor(row)
    attention_mask = (src != cfg.pad_id).long()
    words = [[f"t{i}" for i in row[:-1]] + ["</s>"] for row in ids]
    out: dict[str, Callable[[], list[list[int]]]] = {}

    for name, runner in runners.items():
        if isinstance(runner, EngineRunner):
            out[name] = lambda r=runner: r.translate(texts, new_tokens, beam_size)
    runner = runners.get("attnserve fp32")
    if runner is not None and beam_size == 1:
        spec = runner.engine.spec

        def plain(r=runner) -> list[list[int]]:
            return plain_loop(r.encoder, r.decoder, texts, r.engine.tokenizer, spec, new_tokens)

        out["plain onnxruntime loop"] = plain

    def reference() -> list[list[int]]:
        with torch.inference_mode():
            if beam_size > 1:
                return [hyps[0].tokens for hyps in beam_search(model, src, beam_size, max_new_tokens=new_tokens)]
            return [h.tokens for h in greedy_decode(model, src, max_new_tokens=new_tokens)]

    out["pytorch reference"] = reference
    for name in ("transformers fp32", "transformers int8"):
        marian = runners.get(name)
        if marian is not None:

            def generate(m=marian) -> list[list[int]]:
                with torch.inference_mode():
                    seq = m.generate(
                        src,
                        attention_mask=attention_mask,
                        max_new_tokens=new_tokens,
                        min_new_tokens=0,
                        num_beams=beam_size,
                        do_sample=False,
                    )
                return seq[:, 1:].tolist()  # drop the start token

            out[name] = generate
    for name in ("ctranslate2 fp32", "ctranslate2 int8"):
        translator = runners.get(name)
        if translator is not None:

            def ct2(t=translator) -> list[list[int]]:
                results = t.translate_batch(
                    words, beam_size=beam_size, max_decoding_length=new_tokens, max_batch_size=0, return_scores=False
                )
                return [[vocab_id(w) for w in r.hypotheses[0]] for r in results]

            out[name] = ct2
    return out


def vocab_id(word: str) -> int:
    return int(word[1:]) if word.startswith("t") else {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}[word]


def agreement(tokens: list[list[int]], reference: list[list[int]]) -> dict[str, float]:
    """Share of identical sequences and of equal tokens position by position."""
    same = sum(a == b for a, b in zip(tokens, reference))
    pairs = [(x, y) for a, b in zip(tokens, reference) for x, y in zip(a, b)]
    total = max(sum(map(len, reference)), 1)
    return {
        "sequences_equal": same / max(len(reference), 1),
        "tokens_equal": sum(x == y for x, y in pairs) / total,
    }
