"""``attnserve-export pull`` failing as a user meets it, fast (no export runs): a 404, an unknown
pair or Hub id, a Hub file whose checksum does not match. Each is reported with its reason, the
exit code is 1, and the repository holds nothing of it, not even a hidden folder. ``--list``
shows what the index offers and what is installed."""

from __future__ import annotations

import json

import pytest

from attnserve.export.pull.errors import PullError
from tests.support.stand_ins import FileStandIn


def nothing_in(repo):
    return not repo.exists() or list(repo.iterdir()) == []


def test_a_404_fails_alone_and_leaves_nothing(run, argos, tmp_path):
    repo = tmp_path / "repo"
    code, out, err = run(
        "pull", "argos:en-de", "argos:xx-de", "--argos-index", f"{argos.url}/index.json",
        "--model-repo", repo, "--cache-dir", tmp_path / "cache",
    )  # fmt: skip
    assert code == 1
    assert "HTTP 404" in err and "translate-en_de-1_0.argosmodel" in err
    assert "argos:xx-de: the Argos index has no xx -> de package" in err
    assert "0 of 2 model(s)" in out
    assert nothing_in(repo)
    assert nothing_in(tmp_path / "cache" / "argos")


def test_languages_pull_every_offered_pair(run, argos, tmp_path):
    code, out, err = run(
        "pull", "--languages", "en,de", "--argos-index", f"{argos.url}/index.json",
        "--model-repo", tmp_path / "repo", "--cache-dir", tmp_path / "cache",
    )  # fmt: skip
    assert code == 1  # the packages 404 here; what matters is which were asked for
    asked = sorted(path for _, path, _ in argos.requests if path.endswith(".argosmodel"))
    assert asked == ["translate-de_en-1_0.argosmodel", "translate-en_de-1_0.argosmodel"]


def test_region_and_script_codes_pull_argos_pb_and_zt(run, tmp_path):
    """``--languages pt-BR,zh-Hant,en-US`` as a LibreTranslate or DeepL user names them: Argos'
    ``pb`` and ``zt`` packages and English, and ``--list`` shows the same pairs."""
    root = tmp_path / "argos"
    root.mkdir()
    pairs = [("en", "pt"), ("en", "pb"), ("pb", "en"), ("en", "zh"), ("en", "zt"), ("zt", "en"), ("en", "de")]
    entries = [{"from_code": s, "to_code": t, "package_version": "1.0", "links": [f"translate-{s}_{t}-1_0.argosmodel"]}
               for s, t in pairs]  # fmt: skip
    (root / "index.json").write_text(json.dumps(entries))
    with FileStandIn(root) as argos:
        index = f"{argos.url}/index.json"
        code, _, err = run("pull", "--languages", "pt-BR,zh-Hant,en-US", "--argos-index", index,
                           "--model-repo", tmp_path / "repo", "--cache-dir", tmp_path / "cache")  # fmt: skip
        assert code == 1 and "no package for" not in err  # the packages 404 here: which were asked for matters
        asked = sorted(path for _, path, _ in argos.requests if path.endswith(".argosmodel"))
        code, out, _ = run("pull", "--list", "--languages", "pt-BR,zh-Hant,en-US", "--argos-index", index,
                           "--model-repo", tmp_path / "repo")  # fmt: skip
    assert asked == [f"translate-{pair}-1_0.argosmodel" for pair in ("en_pb", "en_zt", "pb_en", "zt_en")]
    assert code == 0 and "4 pair(s)" in out and "en-pb" in out and "  en-pt " not in out


def test_list_shows_the_index_and_what_is_installed(run, argos, tmp_path):
    repo = tmp_path / "repo"
    (repo / "argos-en-de").mkdir(parents=True)
    (repo / "argos-en-de" / "model.json").write_text("{}")
    (repo / "mine").mkdir()
    (repo / "mine" / "model.json").write_text("{}")
    (repo / ".argos-en-fr.partial-x").mkdir()  # being written: not installed
    code, out, _ = run("pull", "--list", "--argos-index", f"{argos.url}/index.json", "--model-repo", repo)
    assert code == 0
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("  ") and "-" in line}
    assert rows["en-de"][3] == "yes" and rows["en-fr"][3] == "-" and rows["de-en"][3] == "-"
    assert "2 model(s); others: mine" in out
    code, out, _ = run("pull", "--list", "--languages", "en,fr", "--argos-index", f"{argos.url}/index.json",
                       "--model-repo", repo)  # fmt: skip
    assert "1 pair(s)" in out and "en-fr" in out and "  en-de" not in out and "others: mine" in out


def test_usage_and_an_unreadable_index(run, tmp_path):
    assert run("pull", "--model-repo", tmp_path / "repo")[0] == 2
    code, _, err = run("pull", "argos:en-de", "--threads", "-3", "--model-repo", tmp_path / "repo")
    assert code == 2 and "-3: 0 (every core) or a positive count" in err  # as the exports say
    code, _, err = run("pull", "--languages", "en,de", "--argos-index", tmp_path / "none.json")
    assert code == 1 and "Argos index" in err and "none.json" in err


def test_a_hub_file_with_a_wrong_checksum_installs_nothing(run, hub, tmp_path):
    hub.corrupt.add(("Helsinki-NLP/opus-mt-en-de", "model.safetensors"))
    repo = tmp_path / "repo"
    code, _, err = run("pull", "Helsinki-NLP/opus-mt-en-de", "--model-repo", repo)
    assert code == 1
    assert "model.safetensors: checksum mismatch" in err
    assert nothing_in(repo)
    fetched = {path.rsplit("/", 1)[-1] for method, path, _ in hub.requests if "/resolve/" in path}
    assert "tf_model.h5" not in fetched and {"config.json", "model.safetensors"} <= fetched


def test_an_unknown_hub_id_is_reported(run, hub, tmp_path):
    code, _, err = run("pull", "Helsinki-NLP/opus-mt-xx-yy", "not-an-id", "--model-repo", tmp_path / "repo")
    assert code == 1
    assert "Helsinki-NLP/opus-mt-xx-yy:" in err
    assert "not-an-id: a Hugging Face Hub id is 'organisation/model'" in err
    assert nothing_in(tmp_path / "repo")


def test_hf_hub_offline_serves_a_snapshot_from_the_cache(hub, monkeypatch):
    """What ``HF_HUB_OFFLINE=1`` gives: the files an earlier pull downloaded, no request made."""
    from huggingface_hub import constants

    from attnserve.export.pull.hub import download_snapshot

    online = download_snapshot("Helsinki-NLP/opus-mt-en-de")
    assert sorted(p.name for p in online.iterdir()) == ["config.json", "model.safetensors"]
    asked = len(hub.requests)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert download_snapshot("Helsinki-NLP/opus-mt-en-de") == online
    assert len(hub.requests) == asked
    with pytest.raises(PullError, match="HF_HUB_OFFLINE"):
        download_snapshot("Helsinki-NLP/opus-mt-fr-en")


def test_a_model_type_no_importer_reads_is_refused_before_its_weights(run, hub, tmp_path):
    """config.json comes down first: an mBART is refused without fetching gigabytes of weights."""
    mbart = tmp_path / "hub" / "mbart"
    mbart.mkdir(parents=True)
    (mbart / "config.json").write_text('{"model_type": "mbart"}')
    (mbart / "model.safetensors").write_bytes(b"\0" * 4096)
    hub.repos["facebook/mbart-large-50"] = mbart
    code, _, err = run("pull", "facebook/mbart-large-50", "--model-repo", tmp_path / "repo")
    assert code == 1 and "config.json: model_type is 'mbart'" in err and "m2m_100, marian, vit" in err
    fetched = {path.rsplit("/", 1)[-1] for method, path, _ in hub.requests if method == "GET" and "/resolve/" in path}
    assert fetched == {"config.json"}
    assert nothing_in(tmp_path / "repo")
