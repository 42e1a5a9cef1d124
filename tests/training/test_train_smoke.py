"""Training smoke tests: a few optimiser steps lower the loss; the digits pipeline matches the server's."""

from __future__ import annotations

import io
import random

import numpy as np
import pytest
import torch

pytest.importorskip("babel")
pytest.importorskip("sklearn")

from attnserve.models import TranslationConfig, TranslationTransformer  # noqa: E402
from attnserve.models.training.data_translation import Pair, generate_pairs  # noqa: E402
from attnserve.models.training.tokenizer import train_tokenizer  # noqa: E402
from attnserve.models.training.train_translation import (  # noqa: E402
    TranslationTrainConfig,
    encode_pairs,
    linear_decay_lr,
    noam_lr,
    token_batches,
    train_loop,
)


def test_a_short_translation_run_lowers_the_loss():
    pairs = generate_pairs(400, seed=0)
    tok = train_tokenizer((t for p in pairs for t in (p.source, p.target)), vocab_size=300)
    cfg = TranslationConfig(
        vocab_size=tok.get_vocab_size(), d_model=32, num_heads=4, encoder_layers=1, decoder_layers=1, ffn_dim=64,
        norm_first=True, dropout=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = TranslationTransformer(cfg)
    examples = encode_pairs(tok, pairs, cfg.bos_id)
    train_cfg = TranslationTrainConfig(max_tokens=1500, warmup=20, lr_factor=2.0, threads=1)
    stats = train_loop(model, examples, train_cfg, max_steps=100, progress=False)
    assert stats["steps"] == 100
    assert stats["losses"][-1] < stats["losses"][0] - 0.5, stats["losses"]


def test_token_batches_cover_every_example_once_within_budget():
    examples = [
        ([5] * random.Random(i).randrange(2, 20), [1] + [6] * random.Random(-i).randrange(2, 20)) for i in range(500)
    ]
    batches = token_batches(examples, 400, random.Random(0))
    assert sorted(i for b in batches for i in b) == list(range(500))
    for b in batches:
        width = max(len(examples[i][0]) + len(examples[i][1]) for i in b)
        assert width * len(b) <= 400 or len(b) == 1


def test_noam_schedule_warms_up_then_decays():
    lrs = [noam_lr(s, 192, 600, 1.0) for s in (1, 300, 600, 2400)]
    assert lrs[0] < lrs[1] < lrs[2] and lrs[3] == pytest.approx(lrs[2] / 2)


def test_linear_schedule_warms_up_like_noam_then_reaches_zero_at_the_last_step():
    assert linear_decay_lr(300, 3200, 192, 600, 1.0) == noam_lr(300, 192, 600, 1.0)
    peak = noam_lr(600, 192, 600, 1.0)
    assert linear_decay_lr(1900, 3200, 192, 600, 1.0) == pytest.approx(peak / 2)
    assert linear_decay_lr(3200, 3200, 192, 600, 1.0) == 0.0


def test_digits_training_preprocessing_is_the_servers():
    """The re-implementation used for training gives the same pixels as server/images/preprocess.py."""
    from PIL import Image

    from attnserve.contract.manifest import Preprocessing
    from attnserve.models.training.train_digits import PREPROCESSING, augment, load_split, preprocess, to_paper
    from attnserve.server.images.preprocess import preprocess_image

    x_tr, _, _, _ = load_split()
    prep = Preprocessing(**PREPROCESSING)
    rng = random.Random(0)
    for img in [to_paper(x_tr[0]), augment(x_tr[1], rng), augment(x_tr[2], rng)]:
        buf = io.BytesIO()
        img.save(buf, format="PNG")
        np.testing.assert_allclose(preprocess(img), preprocess_image(buf.getvalue(), prep), atol=1e-6)
        assert isinstance(img, Image.Image) and img.mode == "L"


def test_the_source_side_reads_every_case_and_spacing_alike_and_german_keeps_its_case():
    """The tokenizer the translator ships: `MONDAY,   March 3` and `monday, march 3` are the same
    ids (people type all three cases), while German targets, encoded through ``target_side``,
    keep theirs, and decoding gives back the exact German."""
    from attnserve.contract.target_text import target_side
    from attnserve.models.training.tokenizer import normalize_source

    pairs = generate_pairs(400, seed=0)

    tok = train_tokenizer((t for p in pairs for t in (normalize_source(p.source), p.target)), vocab_size=300)
    same = [tok.encode(s).ids for s in ("Monday, March 3, 2025", "MONDAY,   march 3, 2025 ", "monday, march 3,\t2025")]
    assert same[0] == same[1] == same[2]
    assert tok.encode("at 3:45 PM").ids != tok.encode("at 3:45 p.m.").ids  # spellings the model has to learn
    german = "Montag, 3. März 2025 um 15:45 Uhr"
    ids = target_side(tok).encode(german).ids
    assert tok.decode(ids, skip_special_tokens=True) == german
    assert ids != tok.encode(german).ids  # the source side would have lower-cased it


def test_training_keeps_every_held_out_source_out_in_any_case_or_spacing():
    """No training pair reads (after the source normaliser) as a held-out source or a held-out variant."""
    from attnserve.models.training.data_variants import held_out_variants, mix_variants
    from attnserve.models.training.tokenizer import normalize_source

    held = generate_pairs(300, seed=1)
    variants = held_out_variants(held)
    keys = frozenset(normalize_source(p.source) for p in (*held, *variants))
    # training candidates that include the held-out sources in other spellings
    train = [*generate_pairs(300, seed=2), *[Pair(p.source.upper(), p.target, p.template) for p in held[:50]]]
    kept = [p for p in train if normalize_source(p.source) not in keys]
    assert len(kept) <= len(train) - 50
    kinds = ["ampm", "spacing", "punctuation"]
    mixed = mix_variants(kept, 1.0, seed=0, exclude=keys, kinds=kinds, key=normalize_source)
    assert not {normalize_source(p.source) for p in mixed} & keys
    assert sum(p.template.count("+") > 0 for p in mixed) > 0.5 * len(mixed)
