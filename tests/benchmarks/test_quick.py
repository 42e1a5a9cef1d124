"""Every benchmark runs in --quick mode, writes its JSON with the expected fields, and fp32 tokens agree."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("ctranslate2", reason="the bench extra is not installed")
pytest.importorskip("matplotlib", reason="the bench extra is not installed")

from attnserve.benchmarks import cli  # noqa: E402


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    return ["--quick", "--work-dir", str(root / "work"), "--out", str(root / "out")], root / "out"


def test_decode_quick(dirs):
    argv, out = dirs
    assert cli.main(["decode", *argv]) == 0
    result = json.loads((out / "decode-quick.json").read_text())
    assert (out / "decode-quick.png").is_file()
    assert {"machine", "settings", "rows"} <= result.keys()
    assert "loadavg_start" in result["machine"] and "loadavg_end" in result["machine"]
    engines = {r["engine"] for r in result["rows"]}
    assert {"attnserve fp32", "pytorch reference", "transformers fp32", "ctranslate2 fp32"} <= engines
    for row in result["rows"]:
        assert row["tokens_per_s"] > 0
        if row["precision"] == "fp32" and "agreement_with_reference" in row:
            assert row["agreement_with_reference"]["sequences_equal"] == 1.0, row["engine"]
    assert any("ratio_to_ctranslate2" in r for r in result["rows"] if r["engine"] == "attnserve fp32")


def test_kv_cache_quick(dirs):
    argv, out = dirs
    assert cli.main(["kv-cache", *argv]) == 0
    result = json.loads((out / "kv-cache-quick.json").read_text())
    assert (out / "kv-cache-quick.png").is_file()
    for row in result["rows"]:
        assert row["ms_per_token"] > 0 and "ratio_to_shortest" in row
        assert row["tokens_equal_cache_vs_recompute"] and row["engine_equal_cache"]


def test_cli_usage():
    assert cli.main([]) == 2
    assert cli.main(["no-such-benchmark"]) == 2


def test_vit_quick(dirs):
    argv, out = dirs
    assert cli.main(["vit", *argv]) == 0
    result = json.loads((out / "vit-quick.json").read_text())
    assert (out / "vit-quick.png").is_file()
    assert result["gemm_peak_gflops"] > 0
    engines = {r["engine"] for r in result["rows"]}
    assert {"pytorch eager fp32", "onnxruntime fused fp32", "onnxruntime decomposed fp32"} <= engines
    for row in result["rows"]:
        assert row["images_per_s"] > 0 and 0 < row["fraction_of_gemm_peak"]


def test_server_quick(dirs):
    argv, out = dirs
    assert cli.main(["server", *argv]) == 0
    result = json.loads((out / "server-quick.json").read_text())
    assert (out / "server-quick.png").is_file()
    servers = {r["server"] for r in result["rows"]}
    assert len(servers) == 2
    for row in result["rows"]:
        assert row["requests"] > 0 and row["p50_ms"] <= row["p95_ms"] <= row["p99_ms"]
        assert row["mean_batch"] >= 1
    assert set(result["in_process_images_per_s"]) == {"1", "32"}
    mt = json.loads((out / "server-translation-quick.json").read_text())
    assert (out / "server-translation-quick.png").is_file()
    assert {r["server"] for r in mt["rows"]} == {"continuous", "static"}
    for row in mt["rows"]:
        assert row["texts"] > 0 and row["tokens_per_s"] > 0 and row["exact_token_counts"]
        assert row["ttft_p50_ms"] <= row["ttft_p95_ms"] <= row["latency_p95_ms"]
    assert any(r["ratio_to_static"] == 1.0 for r in mt["rows"])
    assert set(mt["in_process_tokens_per_s"]) == {"continuous", "static"}
