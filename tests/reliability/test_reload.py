"""Hot reload (issue 8, "Faults"): a new version of a model directory is loaded and warmed
beside the old one and swapped in atomically; requests in flight finish on the old version;
a bad new version changes nothing. Through the admin Reload RPC and through SIGHUP."""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time

import grpc
import pytest

from attnserve.client import Client
from attnserve.protos.attnserve.v1 import admin_pb2
from attnserve.protos.attnserve.v1 import admin_pb2_grpc as admin_grpc
from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc
from tests.support.server import ServerProcess

from .conftest import MAX_TARGET, MT, digit_png, export_mt

TIMEOUT = 60.0
PROBE = "t5 t17 t9"


@pytest.fixture(scope="module")
def mt_v2(tmp_path_factory) -> MT:
    root = tmp_path_factory.mktemp("mt-v2")
    model, tokenizer = export_mt(root / "mt", seed=1)
    return MT(model, tokenizer, root / "mt")


def _replace_dir(target, source) -> None:
    """Put a copy of ``source`` at ``target`` (the copy is made beside it first, hidden)."""
    staging = target.parent / f".{target.name}.staging"
    shutil.copytree(source, staging)
    shutil.rmtree(target)
    os.rename(staging, target)


def _wait_for(predicate, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_reload_swaps_atomically_and_in_flight_requests_finish_on_the_old_version(
    serve, mt, mt_v2, long_source, vit_dirs, tmp_path, figures
):
    repo = tmp_path / "repo"
    shutil.copytree(mt.model_dir, repo / "mt")
    shutil.copytree(vit_dirs["digits"], repo / "digits")
    old_probe = mt.greedy(PROBE, 20).tokens
    new_probe = mt_v2.greedy(PROBE, 20).tokens
    assert old_probe != new_probe, "the two versions must be told apart"
    old_long = mt.greedy(long_source, MAX_TARGET).tokens

    # stream_interval_ms=0: one message per token, so the stream below is read token by token
    with (
        serve(repo, enable_admin=True, grace_seconds=30, stream_interval_ms=0) as server,
        grpc.insecure_channel(server.address) as ch,
    ):
        stub, admin = pb_grpc.InferenceServiceStub(ch), admin_grpc.AdminServiceStub(ch)
        stream = stub.TranslateStream(
            pb.TranslateRequest(
                model="mt",
                texts=[long_source],
                options=pb.DecodingOptions(max_new_tokens=MAX_TARGET, return_token_ids=True),
            ),
            timeout=TIMEOUT,
        )
        streamed = [t for _ in range(3) for t in next(stream).token_ids]  # admitted on version 1

        seen, errors, stop = [], [], threading.Event()

        def probe_loop() -> None:  # requests all through the reload: each gets one version or the other
            while not stop.is_set():
                try:
                    reply = stub.Translate(
                        pb.TranslateRequest(
                            model="mt",
                            texts=[PROBE],
                            options=pb.DecodingOptions(max_new_tokens=20, return_token_ids=True),
                        ),
                        timeout=TIMEOUT,
                    )
                    seen.append(list(reply.translations[0].hypotheses[0].token_ids))
                except grpc.RpcError as exc:
                    errors.append(exc.code())

        prober = threading.Thread(target=probe_loop)
        prober.start()
        try:
            _replace_dir(repo / "mt", mt_v2.model_dir)
            reply = admin.Reload(admin_pb2.ReloadRequest(), timeout=TIMEOUT)
            swapped_at = len(seen)  # the next request completed started after the swap at the latest
            assert _wait_for(lambda: len(seen) >= swapped_at + 2)
        finally:
            stop.set()
            prober.join(TIMEOUT)
        actions = {m.name: m.action for m in reply.models}
        assert actions == {"mt": admin_pb2.RELOAD_ACTION_RELOADED, "digits": admin_pb2.RELOAD_ACTION_UNCHANGED}
        assert not errors, errors
        assert seen and all(tokens in (old_probe, new_probe) for tokens in seen)
        assert seen[-1] == new_probe
        figures("requests during the reload", len(seen))

        # The stream admitted before the swap finishes on version 1, token for token.
        streamed += [t for chunk in stream for t in chunk.token_ids]
        assert streamed == old_long
        after = stub.Translate(
            pb.TranslateRequest(
                model="mt", texts=[PROBE], options=pb.DecodingOptions(max_new_tokens=20, return_token_ids=True)
            ),
            timeout=TIMEOUT,
        )
        assert list(after.translations[0].hypotheses[0].token_ids) == new_probe
        server.loop_thread.run(server.app.reloader.wait_retired())

        # A bad new version (one byte of the decoder flipped): refused, version 2 still served.
        with open(repo / "mt" / "decoder.onnx", "r+b") as fh:
            fh.seek(100)
            byte = fh.read(1)
            fh.seek(100)
            fh.write(bytes([byte[0] ^ 0xFF]))
        manifest = json.loads((repo / "mt" / "model.json").read_text())
        manifest["attnserve_version"] = "0.1.0+tampered"  # a new model.json: a new version to try
        (repo / "mt" / "model.json").write_text(json.dumps(manifest))
        reply = admin.Reload(admin_pb2.ReloadRequest(models=["mt", "nope"]), timeout=TIMEOUT)
        by_name = {m.name: m for m in reply.models}
        assert by_name["mt"].action == admin_pb2.RELOAD_ACTION_FAILED and "sha256" in by_name["mt"].error
        assert by_name["nope"].action == admin_pb2.RELOAD_ACTION_FAILED
        again = stub.Translate(
            pb.TranslateRequest(
                model="mt", texts=[PROBE], options=pb.DecodingOptions(max_new_tokens=20, return_token_ids=True)
            ),
            timeout=TIMEOUT,
        )
        assert list(again.translations[0].hypotheses[0].token_ids) == new_probe
        with server.client() as client:
            assert client.health("mt") == "SERVING"


def test_sighup_loads_a_new_model_directory(vit_dirs, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(vit_dirs["digits"], repo / "digits")
    server = ServerProcess(repo, "--metrics-port", "-1")
    try:
        with Client(server.address, retries=0, timeout=TIMEOUT) as client:
            assert client.health("colors") == "SERVICE_UNKNOWN"
            shutil.copytree(vit_dirs["colors"], repo / "colors")
            server.proc.send_signal(signal.SIGHUP)
            assert _wait_for(lambda: client.health("colors") == "SERVING"), "".join(server.log)
            assert client.classify([digit_png(1, mode="RGB")], "colors")[0].labels
            assert client.classify([digit_png(1)], "digits")[0].labels
    finally:
        assert server.stop() == 0
    assert any("colors added" in line for line in server.log), "".join(server.log)
