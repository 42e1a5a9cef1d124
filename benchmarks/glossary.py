"""Glossary terms in the search: what they cost and what they change.

In process, on the bundled translator (``translator-en-de``, its committed model directory),
with the translation engine the server runs and the glossaries compiled as the translation
service compiles them (``server/service/glossary.py``):

- **throughput**: N sentences decoded together, greedy and beam 4: every other one a date
  phrase naming March, July or Monday, the others example sentences without them
  (``examples/sentences.tsv``); without a glossary against the same sentences with a 3-term
  glossary (those names -> targets in capitals) that applies to half of them, so rows with
  and without terms share the decode batch. Reported: tokens the decoder generated per second
  (median round, ``interleaved``; a surrogate's tokens, not its target's) and the ratio.
- **quality**: for every example sentence with a month or weekday name, and 84 date phrases
  of the same kinds (each weekday with each month), three glossaries:
  the name -> the model's own German word (nothing should change), -> that word in capitals
  (a spelling the model never writes), -> the English name kept. Reported per decoding mode:
  the share of outputs that contain every target term verbatim, once per occurrence of its
  source (the guarantee: 100%), and the share equal to the unconstrained translation with the
  model's word replaced by the term ("the rest of the sentence unchanged"); with the terms
  written as the service writes them (through surrogates where the target is foreign to the
  model, ``server/service/surrogates.py``) and, beside them, as the targets' own tokens.

The surrogates are decided before anything is timed (the first request that meets a term pays
for it once per model; the throughput rows measure the decoding).

    python -m benchmarks.glossary            # or: attnserve-bench glossary
    python -m benchmarks.glossary --quick
"""

from __future__ import annotations

import argparse
import asyncio
import re
from pathlib import Path
from typing import Any

from .common import add_common_arguments, header, interleaved, machine, table, write_results

NAME = "glossary"
MODEL = "translator-en-de"
ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "sentences.tsv"
COMMITTED = ROOT / "models" / "repo" / MODEL
GERMAN = {  # the names the bundled translator knows, and its words for them
    "January": "Januar", "February": "Februar", "March": "März", "April": "April", "May": "Mai",
    "June": "Juni", "July": "Juli", "August": "August", "September": "September", "October": "Oktober",
    "November": "November", "December": "Dezember", "Monday": "Montag", "Tuesday": "Dienstag",
    "Wednesday": "Mittwoch", "Thursday": "Donnerstag", "Friday": "Freitag", "Saturday": "Samstag",
    "Sunday": "Sonntag",
}  # fmt: skip
KINDS = {  # glossary kind -> (English name, the model's word) -> target term
    "own word": lambda english, german: german,
    "respelled": lambda english, german: german.upper(),
    "kept": lambda english, german: english,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.glossary", description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--texts", type=int, default=None, help="sentences per engine call (default 64)")
    return parser


def examples() -> list[str]:
    lines = EXAMPLES.read_text(encoding="utf-8").splitlines()
    return [line.split("\t")[0] for line in lines if line and not line.startswith("#")]


def dated() -> list[str]:
    """Date phrases of the translator's kinds, one per weekday and month (84 sentences)."""
    months, days = list(GERMAN)[:12], list(GERMAN)[12:]
    forms = ("{d}, {m} {n}, 2025", "on the {n}th of {m}", "{d}, the {n}th of {m}", "next {d} at 6:00 PM")
    return [
        forms[i % 4].format(d=d, m=m, n=4 + (i % 20)) for i, (d, m) in enumerate((d, m) for d in days for m in months)
    ]


def names_in(text: str) -> list[str]:
    return [name for name in GERMAN if re.search(rf"(?<!\w){name}(?!\w)", text)]


class Bench:
    """The engine, and the glossary compiler with the service's normalisation and surrogates."""

    def __init__(self, threads: int) -> None:
        from attnserve.contract.manifest import load_manifest
        from attnserve.server.translation import EngineSettings, TranslationEngine
        from attnserve.server.translation.sessions import load_translation_sessions

        manifest = load_manifest(COMMITTED)
        enc, dec = load_translation_sessions(COMMITTED, manifest, "cpu", threads)
        self.engine = TranslationEngine(COMMITTED, manifest, enc, dec, EngineSettings())
        self.engine.warmup()
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self.engine.start())
        self.ids: dict[str, list[int]] = {}  # text -> its source ids

    def close(self) -> None:
        self.loop.run_until_complete(self.engine.stop(1.0))
        self.loop.close()

    def options(self, texts: list[str], glossary: dict[str, str], beam: int, surrogates: bool = True) -> list[Any]:
        """Each text's decoding options with its terms, as the service gives them (``surrogates``:
        written through the model's renderings of the source terms, as the service does; False:
        the targets' own tokens written)."""
        from attnserve.server.service.documents import normalizer
        from attnserve.server.service.glossary import compile_glossary
        from attnserve.server.service.surrogates import bind
        from attnserve.server.translation import DecodeOptions

        base = DecodeOptions(beam_size=beam, return_scores=False)
        compiled = compile_glossary(tuple(glossary.items()), self.engine.tokenizer, normalizer(self.engine))
        if compiled is None:
            return [base] * len(texts)
        if surrogates:
            compiled = self.loop.run_until_complete(bind(self.engine, compiled, texts, base))
        return [compiled.options(text, base, self.engine.max_target_len) for text in texts]

    def translate(self, texts: list[str], options: list[Any]) -> list[Any]:
        """Every text in one batch: one engine call per distinct options, all at once, on ids
        tokenised once (as the service hands the engine a document's sentences)."""
        groups: dict[Any, list[int]] = {}
        for i, o in enumerate(options):
            groups.setdefault(o, []).append(i)
        missing = [t for t in dict.fromkeys(texts) if t not in self.ids]
        self.ids.update(zip(missing, (e.ids for e in self.engine.tokenizer.encode_batch(missing))))

        async def calls() -> list[Any]:
            engine = self.engine
            return await asyncio.gather(
                *(
                    engine.translate(engine.prepare([texts[i] for i in idx], o, [self.ids[texts[i]] for i in idx]))
                    for o, idx in groups.items()
                )
            )

        out: list[Any] = [None] * len(texts)
        for idx, results in zip(groups.values(), self.loop.run_until_complete(calls())):
            for i, r in zip(idx, results):
                out[i] = r.hypotheses[0]
        return out


def occurrences(name: str, text: str) -> int:
    return len(re.findall(rf"(?<!\w){name}(?!\w)", text))


def quality(bench: Bench, beam: int) -> dict[str, dict[str, Any]]:
    """Per glossary kind: the shares of outputs with every term verbatim (once per occurrence of
    its source) and equal to the unconstrained output with the model's words replaced by the
    terms; written through surrogates (the service's way) and, beside it, as the targets' own tokens."""
    texts = [t for t in examples() if names_in(t)] + dated()
    plain = bench.translate(texts, bench.options(texts, {}, beam))
    out: dict[str, dict[str, Any]] = {}
    for kind, target in KINDS.items():
        glossaries = [{n: target(n, GERMAN[n]) for n in names_in(t)} for t in texts]
        shares = {}
        for surrogates in (True, False):
            options = [bench.options([t], g, beam, surrogates)[0] for t, g in zip(texts, glossaries)]
            got = bench.translate(texts, options)
            verbatim = unchanged = 0
            for text, g, p, h in zip(texts, glossaries, plain, got):
                verbatim += all(h.text.count(v) >= occurrences(n, text) for n, v in g.items())
                expected = p.text
                for n, v in g.items():
                    expected = expected.replace(GERMAN[n], v)
                unchanged += h.text == expected
            shares[surrogates] = {"verbatim": verbatim / len(texts), "rest_unchanged": unchanged / len(texts)}
        out[kind] = {"texts": len(texts), **shares[True], "targets_written": shares[False]}
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    n = args.texts or (16 if args.quick else 64)
    repeats = args.repeats or (1 if args.quick else 5)
    info = machine()
    header(f"glossary: {n} sentences per call, 3-term glossary on about half of them", info, args.threads)
    bench = Bench(args.threads)
    glossary = {"March": "MÄRZ", "Monday": "MONTAG", "July": "JULI"}
    plain_pool = [t for t in examples() if not set(names_in(t)) & set(glossary)]
    term_pool = [t for t in dated() if set(names_in(t)) & set(glossary)]
    pools = (term_pool, plain_pool)  # every other sentence has terms
    texts = [pools[i % 2][(i // 2) % len(pools[i % 2])] for i in range(n)]
    with_terms = sum(bool(set(names_in(t)) & set(glossary)) for t in texts)
    rows, result_rows = [], []
    for beam in (1, 4):
        contenders = {
            "no glossary": bench.options(texts, {}, beam),
            "3-term glossary": bench.options(texts, glossary, beam),  # surrogates decided here, once
            "3-term, targets written": bench.options(texts, glossary, beam, surrogates=False),
        }
        runs = {name: (lambda o=o: bench.translate(texts, o)) for name, o in contenders.items()}
        timings, values = interleaved(runs, repeats)
        # tokens the decoder generated (where surrogates were swapped out: theirs, not the targets')
        generated = {name: sum(len(h.written_ids or h.token_ids) for h in hs) for name, hs in values.items()}
        rates = {name: generated[name] / t.median for name, t in timings.items()}
        ratio = rates["3-term glossary"] / rates["no glossary"]
        for name, t in timings.items():
            rows.append(
                [
                    f"beam {beam}",
                    name,
                    f"{t.median:.3f}",
                    f"{t.median / timings['no glossary'].median:.2f}x",
                    round(rates[name]),
                    f"{rates[name] / rates['no glossary']:.2f}x",
                ]
            )
        result_rows.append(
            {
                "beam_size": beam,
                "tokens_per_s": rates,
                "generated_tokens": generated,
                "ratio": ratio,
                "timings": {k: v.to_json() for k, v in timings.items()},
            }
        )
    heads = ["decoding", "contender", "median s", "time vs none", "tokens/s", "vs no glossary"]
    print(table(heads, rows))
    scores = {f"beam {beam}": quality(bench, beam) for beam in (1, 4)}
    qrows = [
        [
            mode,
            kind,
            s["texts"],
            f"{s['verbatim']:.0%}",
            f"{s['rest_unchanged']:.0%}",
            f"{s['targets_written']['verbatim']:.0%}",
            f"{s['targets_written']['rest_unchanged']:.0%}",
        ]
        for mode, kinds in scores.items()
        for kind, s in kinds.items()
    ]
    heads = ["decoding", "glossary", "sentences", "terms verbatim", "rest unchanged"]
    print(table(heads + ["targets written: verbatim", "rest unchanged"], qrows))
    bench.close()
    return {
        "machine": info,
        "texts": n,
        "texts_with_terms": with_terms,
        "glossary": glossary,
        "threads": args.threads,
        "repeats": repeats,
        "rows": result_rows,
        "quality": scores,
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result = run(args)
    write_results(args.out, NAME, result, args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
