"""The bundled translator's outputs, pinned: greedy, beam search and seeded sampling.

The values were computed with the engine as it stood before the plan/run/update reshape
(issue 12), so a refactor of the scheduler, slots, runner or search that changes a single
token or a score fails here. Several texts of different lengths go in one request, so
rows join and leave the batch at different steps.
"""

from __future__ import annotations

import pytest

from attnserve.contract.manifest import load_manifest
from attnserve.export.zoo import ZOO, export_translator
from attnserve.server.translation import DecodeOptions, EngineSettings, TranslationEngine, load_translation_sessions

from .conftest import run

TEXTS = [
    "Monday, March 3, 2025",
    "three hundred forty-two kilometers",
    "It costs €1,234.50.",
    "in the 12th century",
]

GREEDY = DecodeOptions()
BEAM = DecodeOptions(beam_size=4, num_hypotheses=2, length_penalty=1.0)
SAMPLING = DecodeOptions(temperature=2.0, top_k=50, top_p=0.98, seed=7)

# (text, token ids, logprob) per hypothesis, best first, one list per source text.
PINNED: dict[str, list[list[tuple[str, list[int], float]]]] = {
    "greedy": [
        [
            ("Montag, 3. März 2025", [993, 15, 224, 22, 17, 502, 224, 21, 19, 21, 24, 2], -1.063),
        ],
        [
            ("dreihundertzweiundvierzig Kilometer", [342, 1364, 902, 2], -0.346),
        ],
        [
            ("Es kostet 1.234,50 €.", [381, 471, 224, 20, 17, 21, 22, 23, 15, 24, 19, 1481, 2], -1.19),
        ],
        [
            ("im 12. Jahrhundert", [345, 224, 20, 21, 17, 807, 2], -0.592),
        ],
    ],
    "beam": [
        [
            ("Montag, 3. März 2025", [993, 15, 224, 22, 17, 502, 224, 21, 19, 21, 24, 2], -1.063),
            ("Montag, 3. Dezember 2025", [993, 15, 224, 22, 17, 581, 224, 21, 19, 21, 24, 2], -8.214),
        ],
        [
            ("dreihundertzweiundvierzig Kilometer", [342, 1364, 902, 2], -0.346),
            ("drei zweiundvierzig Kilometer", [342, 1838, 902, 2], -4.907),
        ],
        [
            ("Es kostet 1.234,50 €.", [381, 471, 224, 20, 17, 21, 22, 23, 15, 24, 19, 1481, 2], -1.19),
            # "... ₹." (-6.753) finished from outside the best K candidates; since issue 13 only the best
            # K may finish (transformers' rule, models/decoding.py), so the next-best hypothesis comes back.
            ("Es kostet 1.234,50 €.", [381, 471, 224, 20, 17, 21, 22, 23, 15, 24, 19, 945, 17, 2], -7.06),
        ],
        [
            ("im 12. Jahrhundert", [345, 224, 20, 21, 17, 807, 2], -0.592),
            ("im 12. Stock", [345, 224, 20, 21, 17, 694, 2], -7.403),
        ],
    ],
    "sampling": [
        [
            # the decoded text starts with a space; engine_api's documents trim it (issue 14)
            ("dreizehnhunderteinundsechzigtausendneunundsechzig", [1075, 1398, 816, 554, 2], -27.491),
        ],
        [
            ("dreitausendzwei April Stunden", [1932, 448, 493, 2], -20.564),
        ],
        [
            (
                "Essiebenundfünfzig den 2sechstausendfünf3Es¥..",
                [381, 1768, 758, 224, 21, 1871, 22, 381, 1490, 17, 2],
                -42.681,
            ),
        ],
        [
            ("hundertdreißig Swiss zum 1 Gallone", [1444, 687, 889, 224, 20, 1958, 2], -33.616),
        ],
    ],
}


@pytest.fixture(scope="module")
def bundled(tmp_path_factory):
    out = tmp_path_factory.mktemp("zoo") / "translator-en-de"
    export_translator(ZOO / "translator-en-de" / "model.safetensors", out)
    return out


def translate(model_dir, options: DecodeOptions):
    manifest = load_manifest(model_dir)
    encoder, decoder = load_translation_sessions(model_dir, manifest, intra_op_threads=1)
    # few rows, so the four texts (eight beam rows) queue and join a running batch
    engine = TranslationEngine(model_dir, manifest, encoder, decoder, EngineSettings(max_active_sequences=6))

    async def go():
        await engine.start()
        try:
            return await engine.translate(engine.prepare(TEXTS, options))  # the engine itself, no document layer
        finally:
            await engine.stop(1.0)

    results = run(go())
    return [[(h.text, h.token_ids, round(h.logprob, 3)) for h in r.hypotheses] for r in results]


@pytest.mark.parametrize("mode", ["greedy", "beam", "sampling"])
def test_bundled_translator_outputs_are_pinned(bundled, mode):
    options = {"greedy": GREEDY, "beam": BEAM, "sampling": SAMPLING}[mode]
    got = translate(bundled, options)
    expected = PINNED[mode]
    assert [[h[:2] for h in r] for r in got] == [[h[:2] for h in r] for r in expected]
    for r_got, r_expected in zip(got, expected):
        for h_got, h_expected in zip(r_got, r_expected):
            assert h_got[2] == pytest.approx(h_expected[2], abs=2e-3)
