"""Settings: flag > environment > config file > default; bad values named clearly."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnserve.server.entry.cli import build_parser
from attnserve.server.shared.config import ConfigError, Settings
from attnserve.server.shared.config_sources import resolve_settings, settings_table
from attnserve.server.shared.locations import bundled_model_repo


@pytest.fixture(autouse=True)
def _cwd_with_a_model_repo_folder(tmp_path_factory, monkeypatch):
    """Where ./model-repo exists the default stays ``model-repo`` (== ``Settings()``); the
    bundled-models default has its own test."""
    cwd = tmp_path_factory.mktemp("cwd")
    (cwd / "model-repo").mkdir()
    monkeypatch.chdir(cwd)


def _resolve(argv: list[str], env: dict[str, str] | None = None) -> Settings:
    return resolve_settings(build_parser().parse_args(argv), environ=env or {})


def test_defaults():
    s = _resolve([])
    assert s == Settings()
    assert (s.host, s.port, s.provider, s.model_repo) == ("127.0.0.1", 50051, "auto", Path("model-repo"))


def test_no_model_repo_named_and_no_model_repo_folder_is_the_bundled_models(tmp_path, monkeypatch):
    """``attnserve-server`` with no arguments, where no ./model-repo exists (a fresh checkout, or
    after ``pip install 'attnserve[cpu]'``), serves the models that ship with the package; a
    repository named by flag, environment or config file is taken as given, existing or not."""
    monkeypatch.chdir(tmp_path)
    s = _resolve([])
    assert s.model_repo == bundled_model_repo() and s.model_repo.is_absolute()
    assert sorted(p.name for p in s.model_repo.iterdir()) == ["digits-vit", "translator-en-de"]
    assert _resolve(["--model-repo", "mine"]).model_repo == Path("mine")
    assert _resolve([], {"ATTNSERVE_MODEL_REPO": "env-repo"}).model_repo == Path("env-repo")
    (tmp_path / "server.json").write_text('{"model_repo": "file-repo"}')
    assert _resolve(["--config", "server.json"]).model_repo == Path("file-repo")


def test_precedence_flag_over_env_over_file_over_default(tmp_path):
    cfg = tmp_path / "server.toml"
    cfg.write_text("[server]\nport = 7000\nmax-batch-size = 9\nthreads = 3\nskip_bad_models = true\n")
    env = {"ATTNSERVE_CONFIG": str(cfg), "ATTNSERVE_PORT": "7001", "ATTNSERVE_THREADS": "2"}
    s = _resolve(["--port", "7002"], env)
    assert s.port == 7002  # flag
    assert s.threads == 2  # env over file
    assert s.max_batch_size == 9  # file over default
    assert s.skip_bad_models is True
    assert s.max_queue_size == Settings().max_queue_size  # default
    assert _resolve(["--no-skip-bad-models", "--config", str(cfg)]).skip_bad_models is False


def test_json_config_and_env_model_repo(tmp_path):
    cfg = tmp_path / "s.json"
    cfg.write_text('{"max_queue_delay_ms": 2.5, "provider": "cpu"}')
    s = _resolve(["--config", str(cfg)], {"ATTNSERVE_MODEL_REPO": "/srv/models"})
    assert (s.max_queue_delay_ms, s.provider, s.model_repo) == (2.5, "cpu", Path("/srv/models"))


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        ([], {"ATTNSERVE_PORT": "http"}, r"port \(from env ATTNSERVE_PORT\)"),
        (["--max-batch-size", "0"], {}, "max_batch_size: invalid value 0"),
        ([], {"ATTNSERVE_PROVIDER": "tpu"}, "provider: invalid value 'tpu'"),
        ([], {"ATTNSERVE_SKIP_BAD_MODELS": "maybe"}, "not a boolean"),
    ],
)
def test_bad_values_are_named(argv, env, message):
    with pytest.raises(ConfigError, match=message):
        _resolve(argv, env)


def test_bad_config_files(tmp_path):
    unknown = tmp_path / "u.json"
    unknown.write_text('{"max_batch": 3}')
    with pytest.raises(ConfigError, match="unknown setting 'max_batch'"):
        _resolve(["--config", str(unknown)])
    with pytest.raises(ConfigError, match="No such file"):
        _resolve(["--config", str(tmp_path / "missing.toml")])
    yaml = tmp_path / "server.yaml"
    yaml.write_text("threads: 2\n")
    read_as_json = r"server.yaml: not valid JSON: .* \(a .yaml file is read as JSON; settings are TOML or JSON\)"
    with pytest.raises(ConfigError, match=read_as_json):
        _resolve(["--config", str(yaml)])
    broken = tmp_path / "server.toml"
    broken.write_text("threads = \n")
    with pytest.raises(ConfigError, match="server.toml: not valid TOML: "):
        _resolve(["--config", str(broken)])


def test_every_setting_is_documented_in_the_cli_reference():
    page = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    for line in settings_table().splitlines()[2:]:
        flag = line.split("`")[1]
        assert f"| `{flag}` |" in page, f"{flag} is not in docs/cli.md's settings table"


def test_translation_batching_from_env_and_flag_reaches_the_engine_settings():
    from attnserve.server.runtime.model_loader import engine_settings_kwargs
    from attnserve.server.translation import EngineSettings

    assert _resolve([]).translation_batching == "continuous"
    s = _resolve([], {"ATTNSERVE_TRANSLATION_BATCHING": "static"})
    assert EngineSettings(**engine_settings_kwargs(s)).batching == "static"
    assert (
        _resolve(["--translation-batching", "continuous"], {"ATTNSERVE_TRANSLATION_BATCHING": "static"}) == Settings()
    )
    with pytest.raises(ConfigError, match="translation_batching: invalid value 'dynamic'"):
        _resolve([], {"ATTNSERVE_TRANSLATION_BATCHING": "dynamic"})


def test_decode_step_buckets_from_env_and_flag_reach_the_engine_settings():
    from attnserve.server.runtime.model_loader import engine_settings_kwargs
    from attnserve.server.translation import EngineSettings

    assert EngineSettings(**engine_settings_kwargs(_resolve([]))).step_buckets == "off"
    s = _resolve(["--decode-step-buckets", "cuda-graphs"], {"ATTNSERVE_DECODE_STEP_BUCKETS": "on"})
    assert EngineSettings(**engine_settings_kwargs(s)).step_buckets == "cuda-graphs"
    with pytest.raises(ConfigError, match="decode_step_buckets: invalid value 'always'"):
        _resolve([], {"ATTNSERVE_DECODE_STEP_BUCKETS": "always"})


def test_workers_setting_from_env_and_its_limits(capsys):
    from attnserve.server.entry.cli import main

    assert Settings().workers == 1
    assert _resolve([], {"ATTNSERVE_WORKERS": "4"}).workers == 4
    with pytest.raises(ConfigError, match="workers: invalid value 0"):
        _resolve(["--workers", "0"])
    with pytest.raises(ConfigError, match="admin RPCs act on the one worker"):
        _resolve(["--workers", "2", "--enable-admin"])
    assert _resolve(["--workers", "1", "--enable-admin"]).enable_admin
    assert main(["--workers", "2", "--enable-admin"]) == 2
    assert "SIGHUP" in capsys.readouterr().err


def test_models_load_lazily_exactly_when_a_budget_is_set_unless_told():
    assert not _resolve([]).lazy  # today's start-up: every model loaded before the ports answer
    assert _resolve(["--max-loaded-models", "4"]).lazy and _resolve(["--model-memory-bytes", "1000000"]).lazy
    assert _resolve(["--load-models", "lazy"]).lazy
    assert _resolve(["--pinned-models", " a, b ,"]).pinned == ("a", "b")
    with pytest.raises(ConfigError, match="eager loads every model at start, so it takes no memory budget"):
        _resolve(["--load-models", "eager", "--max-loaded-models", "4"])
    with pytest.raises(ConfigError, match="max_loaded_models: invalid value -1"):
        _resolve(["--max-loaded-models", "-1"])


def test_servers_of_one_repository_share_their_state_folder_and_others_do_not(tmp_path, monkeypatch):
    from attnserve.server.shared.locations import per_repository_dir

    a, b = tmp_path / "repo-a", tmp_path / "repo-b"
    a.mkdir()
    b.mkdir()
    (tmp_path / "link-to-a").symlink_to(a)
    monkeypatch.chdir(tmp_path)
    same = {per_repository_dir("attnserve-state", p) for p in (a, Path("repo-a"), tmp_path / "link-to-a")}
    assert len(same) == 1  # --workers and a restart find the same jobs, however the path is spelt
    assert per_repository_dir("attnserve-state", b) not in same  # another repository's server never takes them
    assert per_repository_dir("attnserve-downloads", a) != per_repository_dir("attnserve-state", a)
