"""docs/models.md's first example, run as written: the presets build, decode and classify."""

from __future__ import annotations

import ast
from pathlib import Path

import torch

PAGE = Path(__file__).resolve().parents[2] / "docs" / "models.md"


def test_the_pytorch_example_of_the_models_page_runs(capsys):
    code = PAGE.read_text(encoding="utf-8").split("```python\n", 1)[1].split("```", 1)[0]
    scope: dict = {"__name__": "example"}
    exec(compile(code, str(PAGE), "exec"), scope)
    greedy, beams = capsys.readouterr().out.splitlines()[:2]
    assert 0 < len(ast.literal_eval(greedy)) <= 20  # token ids, at most max_new_tokens
    assert beams.startswith("[Hypothesis(tokens=[") and beams.count("Hypothesis(") == 2  # num_hypotheses
    assert scope["logits"].shape == (1, 1000) and torch.isfinite(scope["logits"]).all()
