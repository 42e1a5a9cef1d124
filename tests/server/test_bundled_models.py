"""The bundled models as ``make serve`` serves them: the committed ``models/repo``, no PyTorch."""

from __future__ import annotations

import pytest

from attnserve.client.cli import main as client_main
from attnserve.export.zoo import DOMAINS, NAMES, REPO, ZOO

EXAMPLES = REPO.parent.parent / "examples"


@pytest.fixture(scope="module")
def bundled(serve):
    with serve(REPO) as server:
        yield server


def test_each_bundled_model_states_its_domain(bundled, capsys):
    with bundled.client() as client:
        models = {m.name: m for m in client.list_models()}
    assert sorted(models) == sorted(NAMES) and all(m.ready for m in models.values())
    assert "dates, times" in models["translator-en-de"].domain and "not free text" in models["translator-en-de"].domain
    assert "digit" in models["digits-vit"].domain
    mt = models["translator-en-de"]
    assert (mt.source_languages, mt.target_languages) == (["en"], ["de"])  # target_language="de" selects it
    for name in NAMES:  # the model card says the same
        assert models[name].domain == DOMAINS[name] and DOMAINS[name] in (ZOO / name / "MODEL_CARD.md").read_text()
    assert client_main(["--address", bundled.address, "models"]) == 0
    out = capsys.readouterr().out
    assert f"  domain: {models['translator-en-de'].domain}" in out.splitlines()


def _first_console_block() -> list[tuple[list[str], list[str]]]:
    """(attnserve-client arguments, expected output lines) of the README's first console example."""
    import shlex

    text = (REPO.parent.parent / "README.md").read_text(encoding="utf-8")
    block = text.split("```console\n", 1)[1].split("```", 1)[0].splitlines()
    commands: list[tuple[list[str], list[str]]] = []
    for line in block:
        if line.startswith("$ "):
            words = shlex.split(line[2:], comments=True)
            assert words[0] == ".venv/bin/attnserve-client", line
            commands.append((words[1:], []))
        else:
            commands[-1][1].append(line)
    return commands


def test_the_readme_first_screen_is_what_the_client_prints(bundled, capsys, monkeypatch):
    monkeypatch.chdir(REPO.parent.parent)  # the README's paths are relative to the checkout
    commands = _first_console_block()
    assert len(commands) >= 3
    for args, expected in commands:
        assert client_main(["--address", bundled.address, *args]) == 0
        assert capsys.readouterr().out.splitlines() == expected, args


def test_the_readme_first_example(bundled):
    with bundled.client() as client:
        results = client.translate(["Monday, March 3, 2025", "three hundred forty-two kilometers"])
        (digit,) = client.classify([EXAMPLES / "digits" / "digit-7.png"], top_k=1)
    assert [r.text for r in results] == ["Montag, 3. März 2025", "dreihundertzweiundvierzig Kilometer"]
    with bundled.client() as client:  # no model named: the language pair picks the translator
        (by_pair,) = client.translate(["Monday, March 3, 2025"], source_language="en", target_language="de")
    assert by_pair.text == "Montag, 3. März 2025"
    assert digit.labels[0].label == "7"
