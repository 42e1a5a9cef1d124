"""Fixtures of the KServe v2 / Triton tests: a tiny trained translator and a live server with HTTP.

The translator is trained here for a few hundred steps (seconds on CPU) to reverse a
sequence of words (``"t5 t9 t17"`` -> ``"t17 t9 t5"``), so every test can check the text
it gets against the one a person expects: a reply for the wrong text, in the wrong order
or cut short shows. The digits ViT of the server tests is the classifier.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from ..conftest import (  # noqa: F401 - fixtures shared with the server tests
    DIGIT_LABELS,
    LoopThread,
    ServerHandle,
    digit_images,
    digit_png,
    loop_thread,
    repo,
    serve,
    settings_for,
    vit_dirs,
)

VOCAB = 24  # ids 4..23 are the words t4..t23
WORDS = [f"t{i}" for i in range(4, VOCAB)]
MAX_SOURCE, MAX_TARGET = 10, 12
TRAIN_STEPS = 300


def reverse(text: str) -> str:
    return " ".join(reversed(text.split()))


def _train_reverser(seed: int = 0):
    from attnserve.models import TranslationConfig, TranslationTransformer

    torch.manual_seed(seed)
    rng = random.Random(seed)
    cfg = TranslationConfig(
        vocab_size=VOCAB, d_model=32, num_heads=4, encoder_layers=2, decoder_layers=2, ffn_dim=64, dropout=0.0
    )
    model = TranslationTransformer(cfg).train()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(TRAIN_STEPS):
        rows = [[rng.randrange(4, VOCAB) for _ in range(rng.randrange(1, 7))] for _ in range(64)]
        L, S = max(len(r) for r in rows) + 1, max(len(r) for r in rows) + 2
        src = torch.zeros(len(rows), L, dtype=torch.long)  # (B, L) right-padded with pad_id 0
        tgt = torch.zeros(len(rows), S, dtype=torch.long)  # (B, S) <s> reversed </s>
        for b, r in enumerate(rows):
            src[b, : len(r) + 1] = torch.tensor([*r, cfg.eos_id])
            tgt[b, : len(r) + 2] = torch.tensor([cfg.bos_id, *reversed(r), cfg.eos_id])
        logits = model(src, tgt[:, :-1])  # (B, S - 1, V)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), tgt[:, 1:].reshape(-1), ignore_index=cfg.pad_id)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return model.eval()


@pytest.fixture(scope="session")
def reverser_dir(tmp_path_factory) -> Path:
    from attnserve.export.modeldir import placeholder_tokenizer, write_translation_dir
    from attnserve.models import greedy_decode

    model = _train_reverser()
    tokenizer = placeholder_tokenizer(VOCAB)
    checks = ["t5 t9 t17", "t4", "t23 t8 t8 t11 t6 t20"]
    for text in checks:  # the model must have learnt the task, or every test below is moot
        src = torch.tensor([tokenizer.encode(text).ids])  # (1, L)
        out = tokenizer.decode(greedy_decode(model, src, max_new_tokens=MAX_TARGET)[0].tokens)
        assert out == reverse(text), f"the reverser did not learn: {text!r} -> {out!r}"
    out = tmp_path_factory.mktemp("kserve") / "reverser"
    write_translation_dir(model, out, tokenizer, name="reverser", max_source_len=MAX_SOURCE, max_target_len=MAX_TARGET)
    return out


@pytest.fixture(scope="session")
def kserve_repo(tmp_path_factory, reverser_dir, vit_dirs) -> Path:  # noqa: F811
    root = tmp_path_factory.mktemp("kserve-repo")
    (root / "reverser").symlink_to(reverser_dir, target_is_directory=True)
    (root / "digits").symlink_to(vit_dirs["digits"], target_is_directory=True)
    return root


@pytest.fixture(scope="module")
def server(serve, kserve_repo):  # noqa: F811
    # one message per streamed token (stream_interval_ms=0): the stream tests count them
    with serve(kserve_repo, http_port=0, max_beam_size=4, max_texts_per_request=8, stream_interval_ms=0) as handle:
        yield handle
