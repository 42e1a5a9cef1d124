"""The bundled models as ``make serve`` serves them: the committed ``models/repo``, no PyTorch."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys

import pytest

from attnserve.client.cli import main as client_main
from attnserve.export.zoo import DOMAINS, NAMES, REPO, ZOO

ROOT = REPO.parent.parent
EXAMPLES = ROOT / "examples"


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

    text = (ROOT / "README.md").read_text(encoding="utf-8")
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
    monkeypatch.chdir(ROOT)  # the README's paths are relative to the checkout
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


def test_the_translator_reads_any_case_and_spacing_and_keeps_a_german_target_prefix(bundled):
    """The bundled tokenizer lower-cases its English and folds runs of spaces, so people's
    spellings reach the model as the canonical one; a ``target_prefix`` is German and keeps
    its capitals (it is encoded without the source side's lower-casing)."""
    typed = ["Monday, March 3, 2025", "MONDAY, MARCH 3, 2025", "monday,   march 3, 2025", "  Monday, March 3, 2025 "]
    with bundled.client() as client:
        results = client.translate(typed, return_token_ids=True)
        (prefixed,) = client.translate(["monday, march 3, 2025"], target_prefix="Montag,", return_token_ids=True)
    # the spaces around a text are the document's own and come back around its translation
    assert [r.text for r in results] == ["Montag, 3. März 2025"] * 3 + ["  Montag, 3. März 2025 "]
    assert len({tuple(r.hypotheses[0].token_ids) for r in results}) == 1
    assert prefixed.text == "Montag, 3. März 2025"
    assert prefixed.hypotheses[0].token_ids == results[0].hypotheses[0].token_ids


def test_several_hypotheses_are_distinct_texts(bundled):
    """Two of the beam's hypotheses for "Friday" are different token ids that read "Freitag": a
    user asking for alternatives sees each text once, the next distinct one of the beam in its
    place, in a one-sentence text and in each sentence of a longer one."""
    with bundled.client() as client:
        (two,) = client.translate(["Friday"], beam_size=4, num_hypotheses=2, return_token_ids=True)
        (four,) = client.translate(["Friday"], beam_size=4, num_hypotheses=4)
        (document,) = client.translate(
            ["Friday. Monday, March 3, 2025"], beam_size=4, num_hypotheses=4, return_scores=True
        )
    texts = [h.text for h in two.hypotheses]
    assert texts[0] == "Freitag" and len(texts) == 2 and len(set(texts)) == 2
    assert len({tuple(h.token_ids) for h in two.hypotheses}) == 2
    # the beam of 4 holds three different texts: those three, each once
    assert [h.text for h in four.hypotheses][:1] == ["Freitag"] and len(four.hypotheses) == 3
    assert len({h.text for h in four.hypotheses}) == 3
    assert len(document.hypotheses) == 4 and len({h.text for h in document.hypotheses}) == 4
    assert [h.score for h in document.hypotheses] == sorted((h.score for h in document.hypotheses), reverse=True)


CURL = shutil.which("curl")
# The pages whose commands run against the bundled models (the README's first screen and "What
# to try next", the CLI reference, the protocols page); each command is run here as written.
PAGES = ("README.md", "docs/cli.md", "docs/protocols.md")


def _blocks(language: str) -> list[tuple[str, str]]:
    """(page, text) of every fenced ``language`` block of PAGES."""
    found = []
    for page in PAGES:
        text = (ROOT / page).read_text(encoding="utf-8")
        found += [(page, b.split("```", 1)[0]) for b in text.split(f"```{language}\n")[1:]]
    return found


def _readme_curl_examples() -> list[tuple[str, list[str]]]:
    """(command, output lines as the page shows them) of every curl call to the HTTP routes
    (LibreTranslate, generate_stream, KServe v2 REST) on the pages."""
    examples: list[tuple[str, list[str]]] = []
    for _, block in _blocks("bash"):
        if "curl -s" not in block:
            continue
        for line in block.splitlines():
            if line.startswith("curl "):
                examples.append((line, []))
            elif line.startswith("#"):
                examples[-1][1].append(line[2:])
            else:  # the command goes on (a quoted JSON body over two lines)
                examples[-1] = (examples[-1][0] + "\n" + line, examples[-1][1])
    return examples


def _client_commands() -> list[str]:
    """Every ``.venv/bin/attnserve-client`` line of the pages' bash blocks that talks to the
    default address (the bundled models), as written."""
    commands = []
    for _, block in _blocks("bash"):
        for line in block.splitlines():
            if line.startswith(".venv/bin/attnserve-client") and "--tls-ca" not in line:
                address = line.split("--address ", 1)[1].split()[0] if "--address " in line else "127.0.0.1:50051"
                if address == "127.0.0.1:50051":
                    commands.append(line)
    return commands


def test_every_client_command_of_the_pages_runs_against_the_bundled_models(bundled, tmp_path):
    """Each attnserve-client line of the README and the CLI reference, run by bash as written
    (stdin redirections included) against this server, exits 0 with output; none names a file
    that does not exist. They run in a folder that links every entry of the checkout, so the
    paths they read are the checkout's and the files they write (an attention map) are not."""
    commands = _client_commands()
    assert len(commands) >= 10
    for entry in ROOT.iterdir():
        (tmp_path / entry.name).symlink_to(entry)
    client = f"{sys.executable} -m attnserve.client.cli --address {bundled.address}"
    for line in commands:
        command = line.replace(".venv/bin/attnserve-client", client, 1).replace(" --address 127.0.0.1:50051", "")
        run = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0 and run.stdout.strip(), (line, run.stderr[-2000:])


def test_every_python_example_of_the_pages_runs_against_the_bundled_models(bundled, monkeypatch, capsys):
    """The Python client's and tritonclient's examples run as written (against this server's
    address) and print what the bundled models answer."""
    pytest.importorskip("tritonclient.grpc")
    monkeypatch.chdir(ROOT)
    examples = [(page, b) for page, b in _blocks("python") if "127.0.0.1:50051" in b]
    assert {page for page, _ in examples} >= {"README.md", "docs/cli.md", "docs/protocols.md"}
    for page, code in examples:
        exec(compile(code.replace("127.0.0.1:50051", bundled.address), page, "exec"), {"__name__": "example"})
        assert "Montag, 3. M" in capsys.readouterr().out, page  # tritonclient prints the bytes (b"...M\xc3\xa4rz")


@pytest.mark.skipif(CURL is None, reason="curl is not installed")
def test_the_readme_curl_examples_answer_what_it_shows(serve):
    """Each curl call of the README's HTTP section, run as it is written (against this server's
    port), answers the JSON the README shows; a stream's first piece is the one shown, and its
    pieces add up to the text shown (how many pieces depends on timing: one per interval)."""
    examples = _readme_curl_examples()
    assert len(examples) >= 7
    with serve(REPO, http_port=0) as server:
        for command, shown in examples:
            run = subprocess.run(
                ["bash", "-c", command.replace("localhost:8000", server.http_address)],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            )
            if "translate_file" in command:  # the URL names a random file: <name> is its 32 characters
                (url,) = json.loads(run.stdout).values()
                (shown_url,) = json.loads("\n".join(shown)).values()
                pattern = re.escape(shown_url.replace("localhost:8000", server.http_address))
                assert re.fullmatch(pattern.replace(re.escape("<name>"), "[A-Za-z0-9_-]{32}"), url), (url, shown_url)
            elif "generate_stream" in command:
                events = [json.loads(x[len("data: ") :]) for x in run.stdout.split("\n\n") if x.startswith("data: ")]
                expected = [json.loads(x[len("data: ") :]) for x in shown if x.startswith("data: ")]
                assert events[0] == expected[0], command
                assert "".join(e["text_output"] for e in events) == "".join(e["text_output"] for e in expected)
            else:
                assert json.loads(run.stdout) == json.loads("\n".join(shown)), command


def test_the_html_example_page_comes_back_translated_with_its_markup(bundled, capsys, monkeypatch):
    """examples/page.html, the README's html example: tags, attributes and the translate="no"
    element come back as sent, every text node in German."""
    page = (EXAMPLES / "page.html").read_text(encoding="utf-8")
    monkeypatch.setattr("sys.stdin", io.StringIO(page))
    assert client_main(["--address", bundled.address, "translate", "--format", "html", "-"]) == 0
    assert capsys.readouterr().out == (
        "<ul>\n"
        "  <li>Montag, 3. März 2025: <b>09:00–17:30 Uhr</b></li>\n"
        '  <li><b>Freitag, 9. Januar 2026</b>, <a href="#late">um 15:45 Uhr</a></li>\n'
        "  <li>dreihundertzweiundvierzig Kilometer</li>\n"
        "</ul>\n"
        '<p translate="no">attnserve</p>\n'  # the file's last newline, once
    )
