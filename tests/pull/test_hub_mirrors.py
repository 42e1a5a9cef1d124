"""``pull`` from a Hub mirror that serves less than the Hub: no ``/api/models/{id}/tree/{rev}``
(some mirrors and older proxies answer only ``/api/models/{id}`` and ``/resolve/``), or a model info
without ``siblings``. The model installs, its files still checked against the Hub's checksums;
a mirror that lists no files at all is one clear line, not a traceback."""

from __future__ import annotations

HUB_ID = "Helsinki-NLP/opus-mt-en-de"


def asked(hub, part: str) -> bool:
    return any(part in path for _, path, _ in hub.requests)


def test_a_mirror_without_tree_installs_checked_by_the_model_info(run, hub, fake_export, tmp_path):
    hub.without.add("tree")
    repo = tmp_path / "repo"
    code, out, err = run("pull", HUB_ID, "--model-repo", repo)
    assert code == 0, err
    assert f"installed {HUB_ID} -> opus-mt-en-de" in out and asked(hub, "/tree/")
    assert "files not checked" not in err
    hub.corrupt.add((HUB_ID, "model.safetensors"))  # the siblings' sha256 now disagrees with the file
    code, out, err = run("pull", HUB_ID, "--model-repo", repo, "--force")
    assert code == 1 and "model.safetensors: checksum mismatch" in err, err
    assert fake_export == [HUB_ID]


def test_a_model_info_without_siblings_lists_the_files_from_tree(run, hub, fake_export, tmp_path):
    hub.without.add("siblings")
    code, out, err = run("pull", HUB_ID, "--model-repo", tmp_path / "repo")
    assert code == 0, err
    fetched = {path.rsplit("/", 1)[-1] for method, path, _ in hub.requests if method == "GET" and "/resolve/" in path}
    assert fetched == {"config.json", "model.safetensors"}


def test_a_mirror_that_lists_no_files_says_so(run, hub, fake_export, tmp_path):
    hub.without.update({"tree", "siblings"})
    code, out, err = run("pull", HUB_ID, "--model-repo", tmp_path / "repo")
    assert code == 1 and "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("attnserve-export: error:")]
    assert len(errors) == 1 and f"{HUB_ID}: the Hub at {hub.url} lists no files of it" in errors[0]
    assert "'siblings'" in errors[0] and "/tree" in errors[0]
    assert "holds none of the files" not in err and fake_export == []
