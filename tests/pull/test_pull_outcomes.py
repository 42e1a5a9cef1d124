"""What a pull tells the user and leaves in the repository when only part of it can be done: a
language list that makes no Argos pair, an Argos index that cannot be read beside Hub models that
can, two names that install as one folder, a folder the pull cannot write, an interruption."""

from __future__ import annotations


def test_languages_that_make_no_pair_fail_naming_the_language_that_pairs_them(run, argos, tmp_path):
    repo = tmp_path / "repo"
    code, out, err = run("pull", "--languages", "de,fr", "--argos-index", f"{argos.url}/index.json",
                         "--model-repo", repo, "--cache-dir", tmp_path / "cache")  # fmt: skip
    assert code == 1
    assert "no pair among de, fr" in err and "de-en, en-de, en-fr" in err
    assert "add en (--languages en,de,fr)" in err
    assert len(err.strip().splitlines()) == 1
    assert not any(path.endswith(".argosmodel") for _, path, _ in argos.requests)
    code, _, err = run("pull", "--languages", "de", "--argos-index", f"{argos.url}/index.json", "--model-repo", repo)
    assert code == 1 and "add en (--languages en,de)" in err


def test_an_unreadable_index_fails_the_argos_names_alone(run, argos, hub, fake_export, tmp_path):
    repo = tmp_path / "repo"
    code, out, err = run("pull", "Helsinki-NLP/opus-mt-en-de", "argos:en-es", "--argos-index", tmp_path / "none.json",
                         "--model-repo", repo)  # fmt: skip
    assert code == 1
    assert "installed Helsinki-NLP/opus-mt-en-de -> opus-mt-en-de" in out
    assert "failed    argos:en-es" in out and "argos:en-es: Argos index" in err and "none.json" in err
    assert "1 of 2 model(s)" in out and "1 failed" in out
    assert sorted(p.name for p in repo.iterdir()) == ["opus-mt-en-de"]
    code, out, err = run("pull", "Helsinki-NLP/opus-mt-en-de", "--languages", "en,xx", "--force",
                         "--argos-index", f"{argos.url}/index.json", "--model-repo", repo)  # fmt: skip
    assert code == 1
    assert "installed Helsinki-NLP/opus-mt-en-de" in out and "failed    --languages en,xx" in out
    assert "--languages en,xx: the Argos index has no package for xx" in err
    assert fake_export == ["Helsinki-NLP/opus-mt-en-de"] * 2


def test_a_folder_in_the_way_fails_before_the_download_and_keeps_the_cached_package(run, argos, fake_export, tmp_path):
    repo, cache = tmp_path / "repo", tmp_path / "cache"
    package = cache / "argos" / "translate-en_de-1_0.argosmodel"
    package.parent.mkdir(parents=True)
    package.write_bytes(b"PK a package an earlier pull downloaded")
    (repo / "argos-en-de").mkdir(parents=True)
    (repo / "argos-en-de" / "notes.txt").write_text("mine")
    (repo / "argos-de-en").write_text("a file")
    pull = ("pull", "argos:en-de", "argos:de-en", "--argos-index", f"{argos.url}/index.json",
            "--model-repo", repo, "--cache-dir", cache)  # fmt: skip
    code, out, err = run(*pull)
    assert code == 1 and "0 of 2 model(s)" in out
    assert f"argos:en-de: {repo / 'argos-en-de'} exists and holds no model.json" in err and "--force" in err
    assert f"argos:de-en: {repo / 'argos-de-en'} is a file" in err
    assert "--out" not in err
    assert package.read_bytes() == b"PK a package an earlier pull downloaded"
    assert not any(path.endswith(".argosmodel") for _, path, _ in argos.requests)
    assert fake_export == []
    code, out, _ = run(*pull[:2], *pull[3:], "--force")
    assert code == 0 and "installed argos:en-de" in out and package.exists()


def test_two_models_for_one_folder_never_replace_each_other(run, hub, fake_export, tmp_path):
    repo = tmp_path / "repo"
    code, out, err = run("pull", "Helsinki-NLP/opus-mt-en-de", "someone/opus-mt-en-de", "hf:Helsinki-NLP/opus-mt-en-de",
                         "--model-repo", repo)  # fmt: skip
    assert code == 1 and "1 of 2 model(s)" in out
    assert "installed Helsinki-NLP/opus-mt-en-de -> opus-mt-en-de" in out
    assert "someone/opus-mt-en-de: installs as opus-mt-en-de, as Helsinki-NLP/opus-mt-en-de" in err
    assert fake_export == ["Helsinki-NLP/opus-mt-en-de"]
    code, out, err = run("pull", "someone/opus-mt-en-de", "--model-repo", repo)
    assert code == 1 and "present" not in out
    assert "holds another model (pulled from Helsinki-NLP/opus-mt-en-de); --force replaces it" in err
    code, out, _ = run("pull", "Helsinki-NLP/opus-mt-en-de", "--model-repo", repo)
    assert code == 0 and "present   Helsinki-NLP/opus-mt-en-de" in out
    (repo / "opus-mt-en-de" / "model.json").write_text("{}")  # exported there, not pulled
    code, out, err = run("pull", "Helsinki-NLP/opus-mt-en-de", "--model-repo", repo)
    assert code == 1 and "holds another model (not pulled: exported there)" in err
    assert fake_export == ["Helsinki-NLP/opus-mt-en-de"]


def test_a_hub_id_in_other_letter_case_is_the_model_installed(run, hub, fake_export, tmp_path):
    """The Hub reads ids without regard to case: helsinki-nlp/opus-mt-en-de is the model installed."""
    repo = tmp_path / "repo"
    code, _, err = run("pull", "Helsinki-NLP/opus-mt-en-de", "--model-repo", repo)
    assert code == 0, err
    code, out, err = run("pull", "helsinki-nlp/opus-mt-en-de", "--model-repo", repo)
    assert code == 0 and "present   helsinki-nlp/opus-mt-en-de -> opus-mt-en-de" in out, err
    assert fake_export == ["Helsinki-NLP/opus-mt-en-de"]
