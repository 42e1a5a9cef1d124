"""Every benchmark runs in --quick mode, writes its JSON with the expected fields, and fp32 tokens agree."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("ctranslate2", reason="the bench extra is not installed")
pytest.importorskip("matplotlib", reason="the bench extra is not installed")

from attnserve.benchmarks import cli  # noqa: E402
from attnserve.contract.manifest import load_manifest  # noqa: E402


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
    # int8 results depend on the instruction set: every result names the CPU and its ISA flags
    assert result["machine"]["cpu"] and result["machine"]["isa"]
    engines = {r["engine"] for r in result["rows"]}
    assert {
        "attnserve fp32",
        "plain onnxruntime loop",
        "pytorch reference",
        "transformers fp32",
        "ctranslate2 fp32",
    } <= engines
    # the plain loop returns its tokens like every other engine: they are checked, not only timed
    assert all("agreement_with_reference" in r for r in result["rows"] if r["engine"] == "plain onnxruntime loop")
    for row in result["rows"]:
        assert row["tokens_per_s"] > 0
        if row["precision"] == "fp32" and "agreement_with_reference" in row:
            assert row["agreement_with_reference"]["sequences_equal"] == 1.0, row["engine"]
    assert any("ratio_to_ctranslate2" in r for r in result["rows"] if r["engine"] == "attnserve fp32")


def test_decode_unscreened_beside_the_screened_fp32_decoder(dirs):
    """--unscreened: the fp32 decoder without its int8-screened projection, side by side; both exact."""
    argv, out = dirs
    assert cli.main(["decode", *argv, "--no-int8", "--unscreened", "--batches", "2"]) == 0
    rows = {r["engine"]: r for r in json.loads((out / "decode-quick.json").read_text())["rows"]}
    for engine in ("attnserve fp32", "attnserve fp32 (unscreened)"):
        assert rows[engine]["agreement_with_reference"]["sequences_equal"] == 1.0, engine
        assert "ratio_to_ctranslate2" in rows[engine]


def test_decode_beam_search_beside_ctranslate2(dirs):
    """``--beam-size 4``: every engine runs beam search (CTranslate2's own benchmark setting), the
    fp32 ones give the PyTorch reference beam search's tokens, and greedy results are kept apart."""
    argv, out = dirs
    assert cli.main(["decode", *argv, "--beam-size", "4", "--batches", "2", "--repeats", "1", "--no-plot"]) == 0
    result = json.loads((out / "decode-beam4-quick.json").read_text())
    assert result["settings"]["beam_size"] == 4
    engines = {r["engine"] for r in result["rows"]}
    assert {"attnserve fp32", "attnserve int8", "ctranslate2 fp32", "ctranslate2 int8", "pytorch reference"} <= engines
    assert "plain onnxruntime loop" not in engines  # greedy only: not a beam-search peer
    for row in result["rows"]:
        assert row["beam_size"] == 4 and row["tokens_per_s"] > 0
        if row["precision"] == "fp32":
            assert row["agreement_with_reference"]["sequences_equal"] == 1.0, row["engine"]
    assert all("ratio_to_ctranslate2" in r for r in result["rows"] if r["engine"].startswith("attnserve"))


def test_decode_beam_search_decodes_every_beam_of_the_batch_at_once(dirs):
    """17 texts of 4 beams are 68 rows, past the engine's default 64: attnserve still decodes the
    whole batch together, N steps a call, as CTranslate2's translate_batch does (not in two waves)."""
    argv, out = dirs
    argv = [*argv, "--beam-size", "4", "--batches", "17", "--repeats", "1", "--no-plot", "--no-int8"]
    assert cli.main(["decode", *argv, "--new-tokens", "4"]) == 0
    result = json.loads((out / "decode-beam4-quick.json").read_text())
    (row,) = [r for r in result["rows"] if r["engine"] == "attnserve fp32"]
    assert row["decode_steps"] == 4


def test_decode_vocab_size_overrides_the_preset(tmp_path, capsys):
    """``--vocab-size N``: every engine runs a model of vocabulary N (opus-mt's shape is one command)."""
    import onnx

    work, out = tmp_path / "work", tmp_path / "out"
    argv = ["decode", "--quick", "--work-dir", str(work), "--out", str(out), "--no-plot"]
    assert cli.main([*argv, "--batches", "2", "--repeats", "1", "--no-int8", "--vocab-size", "1234"]) == 0
    result = json.loads((out / "decode-quick.json").read_text())
    assert result["settings"]["vocab_size"] == 1234
    assert {r["preset"] for r in result["rows"]} == {"mt-tiny-v1234"}
    assert all(r["vocab_size"] == 1234 for r in result["rows"])
    for row in result["rows"]:  # fp32 engines still agree token for token at the new shape
        if "agreement_with_reference" in row:
            assert row["agreement_with_reference"]["sequences_equal"] == 1.0, row["engine"]
    model_dir = work / "mt-tiny-v1234-fp32"
    decoder = onnx.load(str(model_dir / "decoder.onnx"), load_external_data=False)
    (logits,) = [o for o in decoder.graph.output if o.name == "logits"]
    assert logits.type.tensor_type.shape.dim[-1].dim_param == "logits_width"  # screened: (B, 1) on argmax steps
    assert load_manifest(model_dir).config["vocab_size"] == 1234
    (weight,) = [i for i in decoder.graph.initializer if i.name == "screen_wscale"]  # a scale per word, padded
    assert 1234 <= weight.dims[0] < 1234 + 64
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        cli.main([*argv, "--vocab-size", "3"])
    assert exit_.value.code == 2 and "--vocab-size must be at least" in capsys.readouterr().err


def test_decode_runs_on_the_m2m100_shaped_preset(tmp_path):
    """M2M100's layout (pre-norm, fairseq positions, decoding from </s>): attnserve, transformers'
    M2M100ForConditionalGeneration and CTranslate2's M2M100 converter give the reference's tokens."""
    work, out = tmp_path / "work", tmp_path / "out"
    argv = ["decode", "--quick", "--presets", "m2m100-small", "--batches", "2", "--repeats", "1", "--no-int8"]
    assert cli.main([*argv, "--work-dir", str(work), "--out", str(out), "--no-plot"]) == 0
    rows = json.loads((out / "decode-quick.json").read_text())["rows"]
    agreeing = {r["engine"] for r in rows if r.get("agreement_with_reference", {}).get("sequences_equal") == 1.0}
    assert {"attnserve fp32", "transformers fp32", "ctranslate2 fp32"} <= agreeing


def test_engine_ab_on_the_decode_exports(dirs, tmp_path):
    """engine_ab runs both variants on the graphs test_decode_quick exported; fp32 tokens agree."""
    from experiments import engine_ab

    argv, _ = dirs
    work = Path(argv[argv.index("--work-dir") + 1])
    model_dir = work / "mt-tiny-fp32"
    if not (model_dir / "model.json").is_file():
        pytest.skip("test_decode_quick did not export mt-tiny (run the whole module)")
    ab = ["--batches", "1", "2", "--repeats", "1", "--new-tokens", "4", "--out", str(tmp_path)]
    assert engine_ab.main([str(model_dir), *ab]) == 0
    result = json.loads((tmp_path / "engine-ab.json").read_text())
    for row in result["rows"]:
        assert row["a_per_s"] > 0 and row["b_per_s"] > 0 and row["outputs_equal"]
        assert row["skip_layer_norm_nodes"]["A"] > 0 and row["skip_layer_norm_nodes"]["B"] == 0


def _left_padded_mt_tiny(argv: list[str]) -> Path:
    """mt-tiny exported with the left-padded cache (the probes below feed that decoder graph)."""
    from attnserve.benchmarks.translators import bench_translator, export_translator

    out = Path(argv[argv.index("--work-dir") + 1]) / "mt-tiny-fp32-left-padded"
    return export_translator(bench_translator("mt-tiny"), out, "mt-tiny", kv_cache="left-padded")


def test_ort_profile_of_a_translation_decoder(dirs, capsys):
    """ort_profile on a translation dir profiles the decoder with the server's CPU options."""
    from experiments import ort_profile

    argv, _ = dirs
    model_dir = _left_padded_mt_tiny(argv)
    small = [str(model_dir), "--batch", "2", "--runs", "1", "--steps", "3"]
    assert ort_profile.main(small) == 0
    server_options = capsys.readouterr().out
    assert "MultiHeadAttention" in server_options and "SkipLayerNormalization" not in server_options
    assert ort_profile.main([*small, "--disable", "none"]) == 0
    assert "SkipLayerNormalization" in capsys.readouterr().out


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


@pytest.mark.parametrize(
    ("argv", "known"),
    [(["decode", "--presets", "mt-huge"], "mt-base"), (["vit", "--preset", "mt-base"], "vit-s16")],
)
def test_an_unknown_or_wrong_kind_of_preset_is_a_usage_error_naming_the_known_ones(argv, known, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"preset {argv[-1]!r}" in err and known in err and "Traceback" not in err


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
    assert cli.main(["server", *argv, "--left-padded"]) == 0
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
    padded = {"continuous (left-padded cache)", "static (left-padded cache)"}  # --left-padded: the older layout too
    assert set(mt["in_process_tokens_per_s"]) == {"continuous", "static", "same_arrivals", *padded}
    assert all(
        r["engine_same_arrivals_tokens_per_s"] > 0 and r["ratio_to_engine_same_arrivals"] > 0 for r in mt["rows"]
    )


def test_server_with_workers_quick(tmp_path):
    """--workers 2 adds a server of two worker processes to both halves; every request is answered
    (classification: batched as before; translation: exact token counts), and each translation row
    carries its ratio to the engine in process."""
    out = tmp_path / "out"
    argv = ["server", "--quick", "--workers", "2", "--no-plot", "--work-dir", str(tmp_path / "work"), "--out", str(out)]
    assert cli.main(argv) == 0
    vit = json.loads((out / "server-quick.json").read_text())
    workers = [r for r in vit["rows"] if r["server"] == "dynamic batching (max 32), 2 workers"]
    assert len(workers) == len(vit["settings"]["clients"]) and all(r["requests"] > 0 for r in workers)
    assert "dynamic batching (max 32), 2 workers" in vit["overhead_vs_in_process"]["v1"]
    mt = json.loads((out / "server-translation-quick.json").read_text())
    assert {r["server"] for r in mt["rows"]} == {"continuous", "static", "continuous, 2 workers"}
    assert mt["settings"]["channels"] == 8
    for row in mt["rows"]:
        assert row["texts"] > 0 and row["exact_token_counts"] and row["ratio_to_in_process"] > 0
    with pytest.raises(SystemExit):
        cli.main([*argv, "--workers", "1"])


def test_server_transports_quick(tmp_path):
    """--transports v1 kserve-shm-stream: every level runs over both doors, the image in shared
    memory only on the one-process servers (a server of workers refuses it); each row names its
    transport, and each transport has its own overhead against in process and batching gain.
    --shared-classifier adds the workers' server whose batches run in one process."""
    out = tmp_path / "out"
    argv = ["server", "--quick", "--workloads", "classification", "--workers", "2", "--shared-classifier", "--no-plot"]
    argv += ["--transports", "v1", "v1-jpeg", "kserve-shm-stream"]
    argv += ["--work-dir", str(tmp_path / "work"), "--out", str(out)]
    assert cli.main(argv) == 0
    vit = json.loads((out / "server-quick.json").read_text())
    assert vit["transports"] == ["v1", "v1-jpeg", "kserve-shm-stream"]
    served = {(r["transport"], r["server"]) for r in vit["rows"]}
    one, unbatched, workers = (
        "dynamic batching (max 32)",
        "unbatched (max_batch_size 1)",
        "dynamic batching (max 32), 2 workers",
    )
    assert served == {
        ("v1", one),
        ("v1", unbatched),
        ("v1", workers),
        ("v1", workers + ", shared classifier"),
        ("v1-jpeg", one),
        ("v1-jpeg", unbatched),
        ("v1-jpeg", workers),
        ("v1-jpeg", workers + ", shared classifier"),
        ("kserve-shm-stream", one),
        ("kserve-shm-stream", unbatched),
    }
    for row in vit["rows"]:
        assert row["requests"] > 0 and row["mean_batch"] >= 1 and row["ratio_to_unbatched"] > 0
    assert set(vit["overhead_vs_in_process"]["kserve-shm-stream"]) == {one, unbatched}
    assert set(vit["dynamic_batching_gain"]) == {"v1", "v1-jpeg", "kserve-shm-stream"}
    assert not list(Path("/dev/shm").glob("attnserve-bench-*"))  # the load generator removed its regions
    with pytest.raises(SystemExit, match="give --workers too"):
        cli.main(["server", "--quick", "--workloads", "classification", "--shared-classifier"])


def _py_spy_can_attach() -> bool:
    """py-spy reads another process's memory (ptrace); containers without CAP_SYS_PTRACE refuse it.
    It is looked up as server_profile looks it up: on PATH, else beside the interpreter."""
    import shutil
    import subprocess
    import sys

    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(pyspy).exists():
        return False
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        import time

        time.sleep(0.5)
        done = subprocess.run([str(pyspy), "dump", "--pid", str(child.pid)], capture_output=True, timeout=30)
        return done.returncode == 0
    finally:
        child.kill()
        child.wait()


def test_server_profile_quick(dirs):
    """py-spy attaches to a live server, the samples fall into groups, and the serving path's
    CPU per request is what /proc counted minus onnxruntime's own."""
    if not _py_spy_can_attach():
        pytest.skip("py-spy cannot attach to a process here (no ptrace permission)")
    argv, out = dirs
    assert cli.main(["server-profile", *argv]) == 0
    result = json.loads((out / "server-profile-quick.json").read_text())
    assert result["served"]["requests"] > 0
    samples = result["samples"]
    assert samples["onnxruntime run"] > 0 and samples["gRPC aio + event loop (Cython and asyncio)"] > 0
    assert result["server_cpu_ms_per_request"] > result["onnxruntime_cpu_ms_per_image"] > 0
    expected = result["server_cpu_ms_per_request"] - result["onnxruntime_cpu_ms_per_image"]
    assert result["serving_path_cpu_ms_per_request"] == pytest.approx(expected)
    assert sum(result["serving_path_shares"].values()) == pytest.approx(1.0)


def test_server_profile_kserve_shared_memory_calls_and_streams_quick(dirs):
    """The same server profiled per transport: the image in Triton's system shared memory, by
    ModelInfer calls and by messages of ModelStreamInfer streams, each served and split on its
    own (and the regions unregistered, their objects removed)."""
    if not _py_spy_can_attach():
        pytest.skip("py-spy cannot attach to a process here (no ptrace permission)")
    argv, out = dirs
    assert cli.main(["server-profile", "--transports", "kserve-shm", "kserve-shm-stream", *argv]) == 0
    result = json.loads((out / "server-profile-quick.json").read_text())
    assert list(result["transports"]) == ["kserve-shm", "kserve-shm-stream"]
    for transport in result["transports"].values():
        assert transport["served"]["requests"] > 0 and transport["served"]["mean_batch"] >= 1
        expected = transport["server_cpu_ms_per_request"] - transport["onnxruntime_cpu_ms_per_image"]
        assert transport["serving_path_cpu_ms_per_request"] == pytest.approx(max(expected, 0.0))
    assert result["served"] == result["transports"]["kserve-shm"]["served"]  # the first transport's at the top
    assert not list(Path("/dev/shm").glob("attnserve-bench-*"))  # the load generator removed its objects


def test_server_ceiling_quick(dirs):
    """One process and two workers take turns per transport under two load processes; shared
    memory only on the one process; every window served, its load average recorded, and the
    load processes' regions (registered side by side on one server) all removed."""
    argv, out = dirs
    transports = ["v1", "kserve-stream", "kserve-shm"]
    assert cli.main(["server-ceiling", "--transports", *transports, "--seconds", "1", *argv]) == 0
    rows = json.loads((out / "server-ceiling-quick.json").read_text())["rows"]
    served = [(r["transport"], r["workers"]) for r in rows]
    assert served == [("v1", 1), ("v1", 2), ("kserve-stream", 1), ("kserve-stream", 2), ("kserve-shm", 1)]
    assert all(r["requests"] > 0 and r["images_per_s"] > 0 and len(r["load_before"]) == 3 for r in rows)
    assert [r["mean_batch"] is None for r in rows] == [False, False, False, True, False]
    assert not list(Path("/dev/shm").glob("attnserve-bench-*"))


def test_server_profile_translation_quick(dirs):
    """The translation server under a saturating stream workload: py-spy's samples fall into the
    translation groups, and serving's CPU per token is the server's (/proc) minus the engine's in process."""
    if not _py_spy_can_attach():
        pytest.skip("py-spy cannot attach to a process here (no ptrace permission)")
    argv, out = dirs
    assert cli.main(["server-profile", "--workload", "translation", *argv]) == 0
    result = json.loads((out / "server-profile-translation-quick.json").read_text())
    assert result["tokens"] > 0 and result["served"]["exact_token_counts"]
    from attnserve.benchmarks.server_profile import WAITING
    from attnserve.benchmarks.server_profile_translation import GROUPS

    assert set(result["shares"]) <= {name for name, _ in GROUPS} | {"other Python"}
    assert sum(n for group, n in result["samples"].items() if group != WAITING) > 0  # a short window: few samples
    assert result["server_cpu_us_per_token"] > result["engine_cpu_us_per_token"] > 0
    expected = result["server_cpu_us_per_token"] - result["engine_cpu_us_per_token"]
    assert result["serving_cpu_us_per_token"] == pytest.approx(expected)
    assert sum(result["shares"].values()) == pytest.approx(1.0)


def test_server_profile_groups_by_the_innermost_frame():
    from attnserve.benchmarks import server_profile as sp

    raw = "\n".join(
        [
            "Thread.run (threading.py:982);_worker (concurrent/futures/thread.py:81) 7",
            "_worker (concurrent/futures/thread.py:83);ImageClassifier.infer (server/images/classification.py:89);"
            "Session.run (onnxruntime/capi/onnxruntime_inference_collection.py:395) 5",
            "BaseEventLoop._run_once (asyncio/base_events.py:1884);EpollSelector.select (selectors.py:468) 3",
            "BaseEventLoop._run_once (asyncio/base_events.py:1922);Handle._run (asyncio/events.py:80) 2",
            "_WorkItem.run (concurrent/futures/thread.py:58);"
            "ImageClassifier.prepare (server/images/classification.py:122);"
            "tensor_to_pixels (server/images/preprocess.py:134) 4",
        ]
    )
    counts = sp.parse_raw(raw, sp.GROUPS)
    assert counts[sp.WAITING] == 10
    assert counts["onnxruntime run"] == 5
    assert counts["gRPC aio + event loop (Cython and asyncio)"] == 2
    assert counts["request tensor decode + preprocessing (thread pool)"] == 4


def test_translation_profile_counts_the_engines_direct_onnxruntime_calls_as_onnxruntime():
    from attnserve.benchmarks import server_profile as sp
    from attnserve.benchmarks.server_profile_translation import GROUPS

    step = (
        "DecodeScheduler.run_once (server/translation/scheduler.py:160);DecodeScheduler._step "
        "(server/translation/scheduler.py:240);ModelRunner.step (server/translation/runner.py:119)"
    )
    raw = "\n".join(
        [
            f"{step};direct_run.<locals>.<lambda> (server/translation/sessions.py:56) 7",
            f"{step};KVCache.step_inputs (server/translation/cache.py:107) 2",
            # an in-place decoder's step (io binding): it was counted as the scheduler's Python
            f"{step};ModelRunner._step_in_place (server/translation/runner.py:163);Session.run_with_iobinding "
            "(onnxruntime/capi/onnxruntime_inference_collection.py:589) 5",
        ]
    )
    counts = sp.parse_raw(raw, GROUPS)
    assert counts["onnxruntime run"] == 12 and counts["decode scheduler (Python)"] == 2


def test_http_servers_quick(dirs):
    argv, out = dirs
    assert cli.main(["http-servers", *argv]) == 0
    result = json.loads((out / "http-servers-quick.json").read_text())
    assert {(r["body"], r["server"]) for r in result["rows"]} == {
        (body, server) for body in ("json", "binary") for server in ("aiohttp", "uvicorn+starlette")
    }
    assert all(r["req_per_s"] > 0 for r in result["rows"])


def test_perf_quick(dirs):
    """perf_analyzer over KServe gRPC beside the Python clients over KServe gRPC and attnserve.v1."""
    from attnserve.benchmarks import perf_analyzer

    try:
        perf_analyzer.check()
    except perf_analyzer.PerfAnalyzerError as exc:
        pytest.skip(f"perf_analyzer cannot run here: {exc}")
    argv, out = dirs
    assert cli.main(["perf", *argv, "--max-concurrency", "2"]) == 0
    result = json.loads((out / "perf-quick.json").read_text())
    clients = {"perf_analyzer, KServe gRPC", "python, KServe gRPC", "python, attnserve.v1"}
    for kind in ("translation", "classification"):
        for c in (1, 2):
            rows = [r for r in result["rows"] if (r["kind"], r["concurrency"]) == (kind, c)]
            assert {r["client"] for r in rows} == clients
            assert all(r["throughput"] > 0 and r["p50_ms"] <= r["p99_ms"] for r in rows)


def test_documents_quick(dirs):
    """One document in one request against its sentences one request each; the translations agree."""
    argv, out = dirs
    assert cli.main(["documents", *argv]) == 0
    result = json.loads((out / "documents-quick.json").read_text())
    assert result["sentences"] > 20 and result["characters"] > 1_000
    assert set(result["characters_per_s"]) == {"document", "sentences, one call each", "sentences, 16 calls in flight"}
    assert all(rate > 0 for rate in result["characters_per_s"].values())


def test_files_quick(dirs):
    """A .docx and a PDF through /translate_file against their text through /translate, and the
    .docx on a server whose decoder does not return its steps' attention; the translations agree
    (the benchmark asserts it) and every rate is measured."""
    argv, out = dirs
    assert cli.main(["files", *argv]) == 0
    result = json.loads((out / "files-quick.json").read_text())
    assert result["paragraphs"] > 20 and result["characters"] > 1_000
    assert set(result["characters_per_s"]) == {
        ".docx via /translate_file",
        "its text via /translate",
        ".docx via /translate_file [aligner graph]",
        ".pdf via /translate_file",
    }
    assert result["file_over_text"] > 0 and result["file_over_text_aligner_graph"] > 0
    assert result["pdf_over_text"] > 0 and result["pdf_pages"] >= 2


def test_translation_cache_quick(dirs):
    """A .docx twice on a server with the translation cache, once on one without: the second pass
    is all hits, the first all misses, and the three files' translations agree."""
    argv, out = dirs
    assert cli.main(["translation-cache", *argv]) == 0
    result = json.loads((out / "translation-cache-quick.json").read_text())
    assert result["outputs_identical"] and result["paragraphs"] > 20
    ((first, second),) = result["counts"]
    assert first["hits"] == 0 and first["misses"] > 20 and second == {"hits": first["misses"], "misses": 0}
    assert 0 < result["second_over_first"] < 1


def test_jobs_quick(dirs):
    """A .docx submitted as a job to a server just started and again to the same server: both
    report their first sentence done and their total (known once the file is split, which may
    come after the first sentences: they decode while the rest of the file is split)."""
    argv, out = dirs
    assert cli.main(["jobs", *argv]) == 0
    result = json.loads((out / "jobs-quick.json").read_text())
    assert result["paragraphs"] > 20 and set(result["seconds"]) == {
        "cold (the server's first file)",
        "warm (the same server, next file)",
    }
    for pairs in result["seconds"].values():
        assert all(done > 0 and total > 0 for done, total in pairs)


def test_alignments_quick(dirs):
    """Every contender with and without the decoder's step attention is timed; the translations
    and the placed tags of both servers agree (the benchmark asserts it)."""
    argv, out = dirs
    assert cli.main(["alignments", *argv]) == 0
    result = json.loads((out / "alignments-quick.json").read_text())
    rates = result["sentences_per_s"]
    assert len(rates) == 10 and sum(name.endswith("[aligner graph]") for name in rates) == 5
    assert all(rate > 0 for rate in rates.values())
    assert set(result["off_with_over_without_step_attention"]) == {"batch, off", "one each, off"}


def test_quality_quick(dirs):
    """The bundled translator's quality score on held-out and out-of-domain texts: its AUC, each
    feature's, the fit it stores, and what scoring costs the decoder (the translations unchanged:
    the benchmark asserts it). The imported checkpoint (trained in the run) is left to the full run."""
    argv, out = dirs
    assert cli.main(["quality", *argv, "--no-imported"]) == 0
    result = json.loads((out / "quality-quick.json").read_text())
    (both, *_) = result["rows"]
    assert both["set"] == "bundled: held-out + out-of-domain" and both["texts"] > both["right"] > 0
    assert both["auc"] >= 0.9 and all(0 <= both[f"auc_{k}"] <= 1 for k in ("mean_logprob", "coverage"))
    assert result["calibration"]["features"] and result["cost"]["scored_over_plain"] > 0


def test_iobinding_probe_on_the_decode_exports(dirs, tmp_path):
    """benchmarks.iobinding runs session.run and io binding on the same decoder; tokens agree."""
    from attnserve.benchmarks import iobinding

    argv, _ = dirs
    model_dir = _left_padded_mt_tiny(argv)
    assert (
        iobinding.main(
            [str(model_dir), "--batches", "1", "2", "--steps", "4", "--repeats", "1", "--out", str(tmp_path)]
        )
        == 0
    )
    rows = json.loads((tmp_path / "iobinding.json").read_text())["rows"]
    assert {(r["batch"], r["contender"]) for r in rows} == {
        (b, c) for b in (1, 2) for c in ("session.run", "io binding, preallocated logits")
    }
    assert all(r["same_tokens"] and r["median_s"] > 0 for r in rows)


def test_projection_probe_times_every_layout_with_the_same_argmax(tmp_path):
    """experiments.projection: each layout of the output projection gives the reference argmax, and
    the table's speed is reported beside one core's copy speed."""
    from experiments import projection

    argv = ["--vocab-size", "300", "--d-model", "16", "--batches", "1", "3", "--repeats", "2"]
    assert projection.main([*argv, "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "projection.json").read_text())
    assert result["table_bytes"] == 300 * 16 * 4 and result["copy_gb_per_s"] > 0
    layouts = {"Gemm, transB=1 (the export's)", "MatMul, (d, V) weight", "MatMul, weight first"}
    assert {(r["batch"], r["contender"]) for r in result["rows"]} == {(b, c) for b in (1, 3) for c in layouts}
    assert all(r["same_argmax"] and r["gb_per_s"] > 0 for r in result["rows"])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the probe reads /proc")
def test_shared_classifier_probe_reports_the_session_hosts_cost_per_image(tmp_path):
    """experiments.shared_classifier: clients' batches run in a session host; every image is
    counted, and the host's CPU and onnxruntime's in process are reported per image."""
    from experiments import shared_classifier

    argv = ["--quick", "--clients", "2", "--batch", "1", "4", "--work-dir", str(tmp_path / "work")]
    assert shared_classifier.main([*argv, "--out", str(tmp_path / "out")]) == 0
    rows = json.loads((tmp_path / "out" / "shared-classifier-quick.json").read_text())["rows"]
    assert [r["batch"] for r in rows] == [1, 4]
    for r in rows:
        assert r["images"] > 0 and r["images"] % r["batch"] == 0
        assert r["host_cpu_us_per_image"] > 0 and r["onnxruntime_cpu_us_per_image"] > 0
        assert r["batch"] <= r["mean_run_rows"] <= 32


def test_shortlist_probe_agrees_with_ctranslate2_on_the_same_candidates(tmp_path):
    """experiments.shortlist: the split decoder with the candidates' projection picks the tokens
    CTranslate2 picks with the same vmap, only candidates; the full-vocabulary loops agree too."""
    from experiments import shortlist

    argv = ["--preset", "mt-tiny", "--vocab-size", "300", "--batches", "1", "2", "--new-tokens", "5"]
    argv += ["--per-word", "6", "--always", "10", "--repeats", "1", "--work-dir", str(tmp_path / "work")]
    assert shortlist.main([*argv, "--out", str(tmp_path / "out")]) == 0
    result = json.loads((tmp_path / "out" / "shortlist.json").read_text())
    assert result["shortlist_tokens_are_candidates"]
    rows = result["rows"]
    assert len(rows) == 8 and all(r["median_s"] > 0 for r in rows)
    assert all(r["sequences_equal_to_ctranslate2_same_vocabulary"] == 1.0 for r in rows)
    assert all(r["candidates"] < 300 for r in rows)  # a real shortlist: fewer words than the vocabulary


def test_kv_inplace_probe_matches_multiheadattention_and_writes_the_cache_in_place(tmp_path):
    """benchmarks.kv_inplace: GroupQueryAttention on a buffer bound as both past and present gives
    MultiHeadAttention's output (rows of one length, and rows of different lengths against the
    left-padded, masked layout) and writes only each row's new position."""
    from attnserve.benchmarks import kv_inplace

    argv = ["--batches", "1", "3", "--past", "2", "7", "--heads", "2", "--head-dim", "8", "--repeats", "2"]
    assert kv_inplace.main([*argv, "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "kv-inplace.json").read_text())["rows"]
    names = {kv_inplace.MHA, kv_inplace.GQA_FULL, kv_inplace.GQA_AGES}
    assert {(r["batch"], r["past"], r["contender"]) for r in rows} == {
        (b, p, c) for b in (1, 3) for p in (2, 7) for c in names
    }
    assert all(r["max_abs_diff"] < 1e-5 and r["median_s"] > 0 for r in rows)
    assert all(r["cache_updated"] is (None if r["contender"] == kv_inplace.MHA else True) for r in rows)


def test_kv_inplace_whole_decoder_steps_give_the_exports_logits(tmp_path):
    """benchmarks.kv_inplace --decoder: the exported decoder with its self-attention swapped for
    GroupQueryAttention over an in-place cache, rows at their own lengths, gives the logits of the
    export fed the same rows left-padded and masked."""
    from attnserve.benchmarks import kv_inplace
    from attnserve.benchmarks.translators import bench_translator, export_translator

    model = bench_translator("mt-tiny", vocab_size=300)
    model_dir = export_translator(model, tmp_path / "mt-tiny", "mt-tiny", kv_cache="left-padded")
    argv = ["--batches", "3", "--past", "1", "6", "--repeats", "2", "--decoder", str(model_dir)]
    assert kv_inplace.main([*argv, "--out", str(tmp_path / "out")]) == 0
    steps = json.loads((tmp_path / "out" / "kv-inplace.json").read_text())["decoder_steps"]["rows"]
    assert {(r["past"], r["contender"]) for r in steps} == {
        (p, c) for p in (1, 6) for c in ("export (MultiHeadAttention, left-padded)", "GroupQueryAttention in place")
    }
    assert all(r["max_abs_diff_logits"] < 1e-4 and r["median_s"] > 0 for r in steps)


def test_cuda_checks_dry_run_on_the_cpu_writes_the_env_step(tmp_path):
    """benchmarks.cuda_checks --provider cpu: the small fp16 graph runs and matches numpy; the
    summary and the tarball are written; on a machine without CUDA the cuda check says so."""
    from attnserve.benchmarks import cuda_checks

    out, work = tmp_path / "out", tmp_path / "work"
    assert cuda_checks.main(["--provider", "cpu", "--steps", "env", "--out", str(out), "--work-dir", str(work)]) == 0
    env = json.loads((out / "cuda-checks.json").read_text())["steps"]["env"]
    assert env["rc"] == 0 and env["figures"]["sanity"]["ok"] is True
    assert env["figures"]["sanity"]["providers"][0] == "CPUExecutionProvider"
    assert (out / "cuda-checks.tar.gz").is_file()
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        assert cuda_checks.main(["--sanity", "cuda"]) == 1


def test_cuda_checks_reports_the_steps_its_budget_leaves_out(tmp_path):
    """A run whose time budget is spent starts no step: each is reported skipped, with why, and
    the plan holds every step the issue lists, the dry run on the CPU provider only."""
    from attnserve.benchmarks import cuda_checks, cuda_steps

    out, work = tmp_path / "out", tmp_path / "work"
    argv = ["--provider", "cpu", "--quick", "--out", str(out), "--work-dir", str(work)]
    assert cuda_checks.main([*argv, "--steps", "env", "ct2-gpu", "--budget-s", "1"]) == 0
    steps = json.loads((out / "cuda-checks.json").read_text())["steps"]
    assert {name: step["rc"] for name, step in steps.items()} == {"env": "skipped", "ct2-gpu": "skipped"}
    assert "budget" in steps["ct2-gpu"]["why"]
    plan = cuda_steps.plan(cuda_checks.build_parser().parse_args(argv))
    assert [step.name for step in plan] == list(cuda_steps.STEPS)
    assert "cuda" not in [arg for step in plan for arg in step.argv], "a dry run asked for the CUDA provider"
    by_name = {step.name: step.argv for step in plan}
    assert "--ctranslate2" in by_name["ct2-gpu"] and "--workers" in by_name["server"]
    assert "--shared-classifier" in by_name["server"]  # N workers with their own sessions, and sharing one
    transports = by_name["server"][by_name["server"].index("--transports") + 1 :][:3]
    assert transports == ["v1", "v1-jpeg", "kserve-shm-stream"]  # v1 raw, v1 with JPEGs, and the cheapest door


def test_decode_graphs_refuses_ctranslate2_on_a_device_it_cannot_see_before_exporting(tmp_path, capsys, monkeypatch):
    """--ctranslate2 where CTranslate2 sees no CUDA device (a CUDA 13 machine: its CUDA build needs
    CUDA 12): exit 2 with why, before the minutes of exports (nothing written to the work dir)."""
    import ctranslate2

    from attnserve.benchmarks import decode_graphs

    monkeypatch.setattr(ctranslate2, "get_cuda_device_count", lambda: 0)
    work = tmp_path / "work"
    argv = ["--provider", "cuda", "--ctranslate2", "--preset", "mt-tiny", "--work-dir", str(work)]
    assert decode_graphs.main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert "CTranslate2 sees no CUDA device" in capsys.readouterr().err
    assert not work.exists()


def test_glossary_quick(dirs):
    argv, out = dirs
    assert cli.main(["glossary", *argv]) == 0
    result = json.loads((out / "glossary-quick.json").read_text())
    assert result["texts_with_terms"] == result["texts"] // 2
    assert {row["beam_size"] for row in result["rows"]} == {1, 4}
    for kinds in result["quality"].values():  # the guarantee: every term verbatim, every mode and kind
        assert all(k["verbatim"] == 1.0 for k in kinds.values())
        assert kinds["own word"]["rest_unchanged"] == 1.0  # the model's own word as the term: nothing changes
        # through surrogates a spelling the model never writes leaves the rest of the sentence in most cases
        assert all(k["rest_unchanged"] > 0.5 and k["targets_written"]["verbatim"] == 1.0 for k in kinds.values())


def test_many_pairs_quick(dirs):
    """24 pairs: a lazily loading server under a budget of 4 models beside one with all 24 loaded."""
    argv, out = dirs
    assert cli.main(["many-pairs", *argv]) == 0
    result = json.loads((out / "many_pairs-quick.json").read_text())
    assert result["pairs"] == 24 and result["budget"] == 4
    assert result["lazy_start_rss_mb"] < result["eager_start_rss_mb"]  # nothing loaded at start
    assert result["cold_first_request_ms_p50"] > 0 and result["lazy_texts"] > 0 and result["eager_texts"] > 0
    assert result["lazy_peak_rss_mb"] < result["eager_peak_rss_mb"]


def test_kv_inplace_cuda_dry_run_on_the_cpu(tmp_path):
    """benchmarks.kv_inplace_cuda --provider cpu: the issue-33 GPU check runs end to end; on the CPU
    the fp32 left-padded engine gives the fp32 in-place engine's tokens exactly."""
    from attnserve.benchmarks import kv_inplace_cuda

    out = tmp_path / "out"
    argv = ["--provider", "cpu", "--preset", "mt-tiny", "--lengths", "4", "8", "--batches", "2", "--repeats", "1"]
    argv += ["--check-tokens", "6", "--threads", "1", "--out", str(out), "--work-dir", str(tmp_path / "work")]
    assert kv_inplace_cuda.main(argv) == 0
    result = json.loads((out / "kv-inplace-cuda.json").read_text())
    assert result["tokens_vs_cpu_fp32"]["fp32 left-padded (MultiHeadAttention)"]["sequences_equal"] == 1.0
    assert result["verdict"] == "ok"  # the fp16 in-place tokens agree as the fp16 left-padded ones do
    assert {r["contender"] for r in result["ms_per_token"]} == set(kv_inplace_cuda.CONTENDERS)
    assert all(r["ms_per_token"] > 0 and "ratio_to_shortest" in r for r in result["ms_per_token"])
    batching = result["batching_in_process"]
    assert batching["continuous"]["tokens"] == batching["static"]["tokens"] == 72 * 16 + 24 * 128


def test_detect_quick(dirs):
    """Every detector names the labelled texts' languages; the server's default reports its figures."""
    argv, out = dirs
    assert cli.main(["detect", *argv]) == 0
    result = json.loads((out / "detect-quick.json").read_text())
    assert result["machine"]["cpu"] and result["machine"]["isa"]
    rows = {r["contender"]: r for r in result["rows"]}
    default = rows["attnserve langid (default)"]
    assert default["installed_mb"] > 1 and default["load_s"] > 0
    for served in default["served"].values():
        for kind in ("short", "sentence", "paragraph"):
            assert served[kind]["texts"] > 0 and served[kind]["ms_per_text"] > 0
        assert served["sentence"]["accuracy"] == 1.0 and served["short"]["accuracy"] >= 0.8
    for row in rows.values():  # a contender not installed is named as missing, never a crash
        assert "missing" in row or {"en, de (bundled)", "7 Latin-script", "all 11"} == row["served"].keys()
