"""Train the bundled English -> German translator (``models/zoo/translator-en-de``).

Recipe of Vaswani et al. (2017), section 5: batches by token count, Adam with
beta2 = 0.98, eps = 1e-9, the learning rate warmed up linearly, label smoothing 0.1.
After the warm-up the rate decays linearly to zero at the last step (``lr_schedule =
"linear"``; Defazio et al. 2023, "When, why and how much?", find this beats inverse
square root and cosine for a known budget) rather than with the inverse square root of
the step (``"rsqrt"``, the paper's). Training runs a fixed number of steps (about 25
minutes on two idle CPU cores), so the result is the same however busy the machine is;
``max_minutes`` can cap the wall-clock time as well.

Torch, tokenizers and the data packages only; the ONNX evaluation lives in
``attnserve.export.evaluate``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import random
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from tqdm import tqdm

from attnserve.contract.target_text import target_side
from attnserve.models import TranslationTransformer, greedy_decode, load_checkpoint, preset_config, save_checkpoint

from .data_translation import Pair, make_splits
from .data_variants import KINDS, held_out_hyphen_variants, held_out_variants, mix_variants
from .metrics import exact_match, sacrebleu_scores
from .tokenizer import normalize_source, train_tokenizer

log = logging.getLogger(__name__)

PRESET = "mt-numbers"


@dataclass(frozen=True)
class TranslationTrainConfig:
    preset: str = PRESET
    # Independent draws (repeats allowed, see data_translation.generate_pairs): 300k give
    # about 211k distinct sources.
    train_size: int = 300_000
    test_size: int = 2_000
    data_seed: int = 0
    seed: int = 0
    vocab_size: int = 2000
    max_tokens: int = 4000  # padded source + target tokens per batch
    epochs: float = 4.0
    # The budget is counted in steps, so the result does not depend on the machine's load:
    # 4,000 steps took 25.4 minutes on two nearly idle cores (9,885 tokens/s measured).
    steps: int = 4000
    max_minutes: float = 0.0  # optional wall-clock cap on the optimisation loop; 0 = none
    lr_factor: float = 0.8  # peak lr = factor * d_model^-0.5 * warmup^-0.5 (Vaswani et al., eq. 3)
    warmup: int = 600
    lr_schedule: str = "linear"  # after the warm-up: "linear" to zero at the last step, or "rsqrt"
    label_smoothing: float = 0.1
    monitor_every: int = 500  # steps between quick held-out checks (200 pairs) in the log
    threads: int = 2
    max_len: int = 64  # model.json limits; the data stay well below (about 30 tokens)
    # Fine-tuning: start from this checkpoint (and the tokenizer.json beside it) instead of
    # random weights and a new tokenizer; "" = train from scratch.
    init_from: str = ""
    # Share of training pairs re-spelt as people type them (data_variants), drawn from
    # variant_kinds (comma-separated); 0 = the generator's spelling only. Case and runs of
    # spaces need no training: the tokenizer's source normaliser removes them.
    variant_rate: float = 0.3
    variant_kinds: str = "ampm,spacing,punctuation,hyphen"
    # Score the trained model with the PyTorch decoder on both held-out sets before writing it
    # (False: leave it to `python -m attnserve.export.evaluate`, which decodes through ONNX).
    final_eval: bool = True


def encode_pairs(tok: Tokenizer, pairs: Sequence[Pair], bos_id: int) -> list[tuple[list[int], list[int]]]:
    """(source ids ending in eos, target ids starting with bos and ending in eos) per pair;
    targets through :func:`target_side` (German keeps its case)."""
    src = tok.encode_batch([p.source for p in pairs])
    tgt = target_side(tok).encode_batch([p.target for p in pairs])
    return [(s.ids, [bos_id, *t.ids]) for s, t in zip(src, tgt)]


def token_batches(
    examples: Sequence[tuple[list[int], list[int]]], max_tokens: int, rng: random.Random
) -> list[list[int]]:
    """Indices grouped by similar length so that padded source + target tokens <= max_tokens."""
    order = sorted(range(len(examples)), key=lambda i: (len(examples[i][1]), len(examples[i][0]), rng.random()))
    batches, batch, width = [], [], 0
    for i in order:
        w = max(width, len(examples[i][0]) + len(examples[i][1]))
        if batch and w * (len(batch) + 1) > max_tokens:
            batches.append(batch)
            batch, w = [], len(examples[i][0]) + len(examples[i][1])
        batch.append(i)
        width = w
    if batch:
        batches.append(batch)
    rng.shuffle(batches)
    return batches


def collate(
    examples: Sequence[tuple[list[int], list[int]]], idx: list[int], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded src (B, L) and tgt (B, S + 1) int64."""
    L = max(len(examples[i][0]) for i in idx)
    S = max(len(examples[i][1]) for i in idx)
    src = torch.full((len(idx), L), pad_id, dtype=torch.long)  # (B, L)
    tgt = torch.full((len(idx), S), pad_id, dtype=torch.long)  # (B, S + 1)
    for row, i in enumerate(idx):
        s, t = examples[i]
        src[row, : len(s)] = torch.tensor(s)
        tgt[row, : len(t)] = torch.tensor(t)
    return src, tgt


def noam_lr(step: int, d_model: int, warmup: int, factor: float) -> float:
    """Vaswani et al. (2017), eq. 3."""
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def linear_decay_lr(step: int, total: int, d_model: int, warmup: int, factor: float) -> float:
    """The warm-up of eq. 3, then a straight line from its peak to zero at step ``total``."""
    step = max(step, 1)
    if step <= warmup:
        return noam_lr(step, d_model, warmup, factor)
    return noam_lr(warmup, d_model, warmup, factor) * max(total - step, 0) / max(total - warmup, 1)


def learning_rate(step: int, total: int, d_model: int, cfg: TranslationTrainConfig) -> float:
    if cfg.lr_schedule == "linear":
        return linear_decay_lr(step, total, d_model, cfg.warmup, cfg.lr_factor)
    if cfg.lr_schedule == "rsqrt":
        return noam_lr(step, d_model, cfg.warmup, cfg.lr_factor)
    raise ValueError(f"unknown lr_schedule {cfg.lr_schedule!r}; expected 'linear' or 'rsqrt'")


def _optimise(
    model: TranslationTransformer,
    opt: torch.optim.Optimizer,
    src: torch.Tensor,
    tgt: torch.Tensor,
    lr: float,
    label_smoothing: float,
) -> torch.Tensor:
    """One step at ``lr`` on a batch (teacher forcing, gradients clipped at norm 1); returns its loss.
    src: (B, L) int64; tgt: (B, S + 1) int64, the start token first."""
    pad = model.cfg.pad_id
    for group in opt.param_groups:
        group["lr"] = lr
    logits = model(src, tgt[:, :-1])  # (B, S, V)
    loss = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),  # (B * S, V)
        tgt[:, 1:].reshape(-1),  # (B * S,)
        ignore_index=pad,
        label_smoothing=label_smoothing,
    )
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss


def train_loop(
    model: TranslationTransformer,
    examples: Sequence[tuple[list[int], list[int]]],
    cfg: TranslationTrainConfig,
    device: torch.device | str = "cpu",
    max_steps: int | None = None,
    progress: bool = True,
    monitor: Callable[[], str] | None = None,
) -> dict:
    """Optimise ``model`` in place; returns {steps, epochs, seconds, tokens, losses (per 50 steps)}."""
    rng = random.Random(cfg.seed)
    pad = model.cfg.pad_id
    model.to(device).train()
    opt = torch.optim.Adam(model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9)
    batches_per_epoch = len(token_batches(examples, cfg.max_tokens, random.Random(0)))
    total = max_steps or min(cfg.steps, math.ceil(cfg.epochs * batches_per_epoch))
    deadline = time.monotonic() + 60 * cfg.max_minutes if cfg.max_minutes > 0 else math.inf
    start, step, tokens, losses, window = time.monotonic(), 0, 0, [], []

    def batches() -> Iterator[list[int]]:
        while True:
            yield from token_batches(examples, cfg.max_tokens, rng)

    bar = tqdm(total=total, unit="step", disable=not progress, dynamic_ncols=True)
    for idx in batches():
        if step >= total or time.monotonic() > deadline:
            break
        src, tgt = collate(examples, idx, pad)
        src, tgt = src.to(device), tgt.to(device)
        step += 1
        loss = _optimise(model, opt, src, tgt, learning_rate(step, total, model.cfg.d_model, cfg), cfg.label_smoothing)
        tokens += int((src != pad).sum() + (tgt[:, 1:] != pad).sum())
        window.append(loss.item())
        if step % 50 == 0 or step == total:
            losses.append(sum(window) / len(window))
            window = []
        elapsed = time.monotonic() - start
        bar.set_postfix(loss=f"{loss.item():.3f}", tok_s=f"{tokens / max(elapsed, 1e-9):,.0f}", refresh=False)
        bar.update()
        if monitor is not None and step % cfg.monitor_every == 0:
            bar.write(f"step {step}: loss {loss.item():.3f}, {monitor()}")
            model.train()
    bar.close()
    if window:
        losses.append(sum(window) / len(window))
    seconds = time.monotonic() - start
    model.eval()
    return {
        "steps": step,
        "epochs": round(step / batches_per_epoch, 3),
        "seconds": round(seconds, 1),
        "tokens": tokens,
        "tokens_per_s": round(tokens / max(seconds, 1e-9)),
        "losses": [round(x, 4) for x in losses],
    }


@torch.no_grad()
def translate(
    model: TranslationTransformer, tok: Tokenizer, sources: Sequence[str], batch_size: int = 128, max_new_tokens=64
) -> list[str]:
    """Greedy translations with the PyTorch reference decoder (the tokens ONNX must reproduce)."""
    model.eval()
    device = next(model.parameters()).device
    out: list[str] = []
    for i in range(0, len(sources), batch_size):
        enc = tok.encode_batch(list(sources[i : i + batch_size]))
        L = max(len(e.ids) for e in enc)
        src = torch.full((len(enc), L), model.cfg.pad_id, dtype=torch.long)  # (B, L)
        for row, e in enumerate(enc):
            src[row, : len(e.ids)] = torch.tensor(e.ids)
        hyps = greedy_decode(model, src.to(device), max_new_tokens=max_new_tokens)
        out += [tok.decode(h.tokens, skip_special_tokens=True) for h in hyps]
    return out


def evaluate(model: TranslationTransformer, tok: Tokenizer, pairs: Sequence[Pair]) -> dict:
    hyps = translate(model, tok, [p.source for p in pairs])
    refs = [p.target for p in pairs]
    return {"exact_match": exact_match(hyps, refs), **sacrebleu_scores(hyps, refs), "n": len(pairs)}


def _training_pairs(cfg: TranslationTrainConfig) -> tuple[list[Pair], list[Pair], list[Pair], list[Pair]]:
    """(train, held-out test, its re-spelt variants, its hyphen variants); no training source is a
    held-out source as the model reads it (lower case, one space), and the training pairs mix in
    ``cfg.variant_rate`` variants of their own."""
    train, test = make_splits(cfg.train_size, cfg.test_size, cfg.data_seed)
    variants = held_out_variants(test, cfg.data_seed)  # the held-out pairs, re-spelt: never trained either
    hyphens = held_out_hyphen_variants(test, cfg.data_seed)
    # Compared as the model reads them (lower case, one space): no training source is a held-out
    # source in another case or spacing.
    held_out = frozenset(normalize_source(p.source) for p in (*test, *variants, *hyphens))
    train = [p for p in train if normalize_source(p.source) not in held_out]
    if cfg.variant_rate > 0:
        kinds = [k.strip() for k in cfg.variant_kinds.split(",") if k.strip()]
        unknown = sorted(set(kinds) - set(KINDS))
        if unknown or not kinds:
            raise ValueError(f"variant_kinds: expected some of {', '.join(KINDS)}, got {cfg.variant_kinds!r}")
        train = mix_variants(
            train, cfg.variant_rate, seed=cfg.data_seed * 2 + 100, exclude=held_out, kinds=kinds, key=normalize_source
        )
    return train, test, variants, hyphens


def _write(
    out_dir: Path,
    cfg: TranslationTrainConfig,
    model: TranslationTransformer,
    tok: Tokenizer,
    init_tokenizer: Path | None,
    stats: dict,
    metrics: dict,
) -> None:
    """``out_dir``: tokenizer.json, model.safetensors (fp16 storage) and train_log.json."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if init_tokenizer is None:
        tok.save(str(out_dir / "tokenizer.json"))
    elif init_tokenizer.resolve() != (out_dir / "tokenizer.json").resolve():
        shutil.copyfile(init_tokenizer, out_dir / "tokenizer.json")  # the same bytes: fine-tuning keeps the vocabulary
    extra = {
        "task": "English -> German: numbers, dates, times, quantities",
        "train_config": dataclasses.asdict(cfg),
        "training": {k: v for k, v in stats.items() if k != "losses"},
        **metrics,
        "limits": {"max_source_len": cfg.max_len, "max_target_len": cfg.max_len},
        "torch_threads": cfg.threads,
    }
    # fp16 storage: half the bytes in git (7 MB, not 14); the model runs in fp32 after loading.
    # metrics_torch are the fp32 model's; MODEL_CARD.md's come from the stored weights via ONNX.
    extra["weights_stored_as"] = "float16"
    save_checkpoint(model, out_dir / "model.safetensors", extra=extra, storage_dtype=torch.float16)
    (out_dir / "train_log.json").write_text(json.dumps({**extra, "losses": stats["losses"]}, indent=1) + "\n")


def run(cfg: TranslationTrainConfig, out_dir: Path, progress: bool = True) -> dict:
    """Generate the data, train the tokenizer and the model, evaluate, write ``out_dir``."""
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.threads)
    t0 = time.monotonic()
    train, test, variants, hyphens = _training_pairs(cfg)
    if cfg.init_from:
        init_tokenizer = Path(cfg.init_from).parent / "tokenizer.json"
        tok = Tokenizer.from_file(str(init_tokenizer))
        model, _ = load_checkpoint(cfg.init_from)
        model_cfg = model.cfg
    else:
        tok = train_tokenizer((t for p in train for t in (normalize_source(p.source), p.target)), cfg.vocab_size)
        model_cfg = preset_config(cfg.preset, vocab_size=tok.get_vocab_size())
        model = TranslationTransformer(model_cfg)
    data_seconds = time.monotonic() - t0
    examples = encode_pairs(tok, train, model_cfg.bos_id)
    examples = [(s, t) for s, t in examples if len(s) <= cfg.max_len and len(t) <= cfg.max_len + 1]
    longest = max(max(len(s), len(t)) for s, t in examples)
    print(
        f"data: {len(train):,} train / {len(test):,} held-out pairs, vocab {tok.get_vocab_size()}, "
        f"longest {longest} tokens ({data_seconds:.0f} s); model {cfg.preset}: "
        f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters"
    )
    probe, probe_variants = test[:200], variants[:200]

    def monitor() -> str:
        m, v = evaluate(model, tok, probe), evaluate(model, tok, probe_variants)
        return (
            f"held-out probe: exact match {m['exact_match']:.1%}, chrF {m['chrf']:.1f}; variants {v['exact_match']:.1%}"
        )

    stats = train_loop(model, examples, cfg, progress=progress, monitor=monitor)
    print(
        f"trained {stats['steps']} steps ({stats['epochs']} epochs) in {stats['seconds'] / 60:.1f} min, "
        f"{stats['tokens_per_s']:,} tokens/s"
    )
    metrics, metrics_variants, metrics_hyphens = {}, {}, {}
    if cfg.final_eval:
        metrics, metrics_variants = evaluate(model, tok, test), evaluate(model, tok, variants)
        metrics_hyphens = evaluate(model, tok, hyphens)
        print(
            f"held-out (PyTorch greedy): exact match {metrics['exact_match']:.2%}, chrF {metrics['chrf']:.2f}, "
            f"BLEU {metrics['bleu']:.2f}; held-out variants: exact match {metrics_variants['exact_match']:.2%}, "
            f"chrF {metrics_variants['chrf']:.2f} ({len(variants)} pairs); hyphen variants: exact match "
            f"{metrics_hyphens['exact_match']:.2%} ({len(hyphens)} pairs)"
        )
    metrics_all = {"metrics_torch": metrics, "metrics_torch_variants": metrics_variants}
    metrics_all["metrics_torch_hyphen_variants"] = metrics_hyphens
    _write(out_dir, cfg, model, tok, init_tokenizer if cfg.init_from else None, stats, metrics_all)
    return {"stats": stats, "metrics": metrics}
