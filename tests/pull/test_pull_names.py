"""Models named as users type them: a Hub model's page URL (copied from the browser), an id with a
trailing slash, an Argos pair in other case, with ``_`` or with a region (``en_US-de``,
``en-pt-BR``). Each one whose meaning is plain is pulled as the id or pair it names; the others are
one line saying what to type instead, never a misleading 'no such package'."""

from __future__ import annotations

HUB_ID = "Helsinki-NLP/opus-mt-en-de"


def test_a_hub_url_or_a_trailing_slash_names_the_model(run, hub, fake_export, tmp_path):
    repo = tmp_path / "repo"
    code, out, err = run("pull", f"https://huggingface.co/{HUB_ID}", "--model-repo", repo)
    assert code == 0 and f"installed {HUB_ID} -> opus-mt-en-de" in out, err
    for name in (f"{HUB_ID}/", f"hf.co/{HUB_ID}", f"https://huggingface.co/{HUB_ID}/tree/main", f"{hub.url}/{HUB_ID}"):
        code, out, err = run("pull", name, "--model-repo", repo)
        assert code == 0 and "present" in out and "-> opus-mt-en-de" in out, (name, err)
    assert fake_export == [HUB_ID]


def test_urls_that_name_no_model_say_what_to_type(run, hub, fake_export, tmp_path):
    cases = {
        "https://huggingface.co/datasets/wmt/wmt19": "a Hub dataset, not a model",
        f"https://example.com/{HUB_ID}": "not a Hugging Face Hub URL; name the model as organisation/model",
        f"https://huggingface.co/{HUB_ID}/discussions": f"a model's Hub URL is https://huggingface.co/organisation/"
        f"model[/tree/revision]; name it as {HUB_ID}",
    }
    for name, said in cases.items():
        code, out, err = run("pull", name, "--model-repo", tmp_path / "repo")
        assert code == 1 and "Traceback" not in err and f"error: {name}: {said}" in err, err
    assert fake_export == [] and not any("/resolve/" in path for _, path, _ in hub.requests)


def test_argos_pairs_as_users_type_them(run, argos, tmp_path):
    """The packages 404 on this index: which one each name asked for is what matters."""
    for name, package in (("argos:EN-de", "en_de"), ("argos:en_US-de", "en_de"), ("ARGOS:de-EN/", "de_en"),
                          ("argos:en-fr-FR", "en_fr")):  # fmt: skip
        argos.requests.clear()
        code, _, err = run("pull", name, "--argos-index", f"{argos.url}/index.json", "--model-repo", tmp_path / "repo",
                           "--cache-dir", tmp_path / "cache")  # fmt: skip
        asked = [path for _, path, _ in argos.requests if path.endswith(".argosmodel")]
        assert code == 1 and asked == [f"translate-{package}-1_0.argosmodel"], (name, err)
    code, _, err = run("pull", "argos:fr-en", "--argos-index", f"{argos.url}/index.json", "--model-repo",
                       tmp_path / "repo")  # fmt: skip
    assert code == 1 and "argos:fr-en: the Argos index has no fr -> en package; it offers de-en, en-de, en-fr" in err
