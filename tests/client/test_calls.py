"""The Python client against a scripted server: what a caller sees of streams and retries."""

from __future__ import annotations

import threading

import grpc
import pytest

from attnserve.client import Classifier, Client, Translator
from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc


class HeldStream(pb_grpc.InferenceServiceServicer):
    """Sends the first chunk of a translation, then holds the last one back until the caller has
    the first (or 10 s pass): a long document whose first sentence is ready well before its end."""

    def __init__(self) -> None:
        self.caller_has_first = threading.Event()
        self.last_waited_for: bool | None = None

    def TranslateStream(self, request, context):
        yield pb.TranslateChunk(delta="Montag")
        self.last_waited_for = self.caller_has_first.wait(10)
        yield pb.TranslateChunk(delta=".", finish_reason=pb.FINISH_REASON_EOS)


def test_a_stream_yields_each_chunk_as_it_arrives_not_once_the_server_is_done(scripted):
    servicer = HeldStream()
    with Client(scripted(servicer), retries=0, timeout=30) as client:
        chunks = client.translate_stream("Monday.")
        assert next(chunks).delta == "Montag"
        servicer.caller_has_first.set()
        assert [chunk.delta for chunk in chunks] == ["."]
    assert servicer.last_waited_for is True  # the first chunk reached the caller while the server held the last


class RestartingServer(pb_grpc.InferenceServiceServicer):
    """Answers each call UNAVAILABLE the first time, as a server that is still starting up does."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def _refuse_first(self, name: str, context) -> None:
        self.calls.append(name)
        if self.calls.count(name) == 1:
            context.abort(grpc.StatusCode.UNAVAILABLE, "starting up")

    def TranslateFile(self, request, context):
        self._refuse_first("TranslateFile", context)
        yield pb.TranslateFileChunk(content=b"Montag\n")
        yield pb.TranslateFileChunk(done=pb.FileDone(filename="notes.de.txt", sentences=1))

    def WatchFileJob(self, request, context):
        self._refuse_first("WatchFileJob", context)
        yield pb.FileJob(id=request.id, status=pb.FILE_JOB_STATUS_DONE)

    def GetFileJobResult(self, request, context):
        self._refuse_first("GetFileJobResult", context)
        yield pb.TranslateFileChunk(content=b"Montag\n")
        yield pb.TranslateFileChunk(done=pb.FileDone(filename="notes.de.txt", sentences=1))


def test_file_calls_are_retried_while_the_server_answers_unavailable(scripted, tmp_path):
    """The module's promise, "retried with backoff when the server answers UNAVAILABLE", holds for
    the streamed file calls too, not only for the unary ones."""
    path = tmp_path / "notes.txt"
    path.write_text("Monday\n")
    servicer = RestartingServer()
    with Client(scripted(servicer), retries=2, backoff_s=0.01, timeout=30) as client:
        assert client.translate_file(path, "de").content == b"Montag\n"
        assert [job.status for job in client.jobs.watch("j1")] == ["done"]
        assert client.jobs.result("j1").content == b"Montag\n"
    assert servicer.calls == ["TranslateFile"] * 2 + ["WatchFileJob"] * 2 + ["GetFileJobResult"] * 2


class Answers(pb_grpc.InferenceServiceServicer):
    def Translate(self, request, context):
        return pb.TranslateResponse(translations=[pb.Translation(hypotheses=[pb.Hypothesis(text="Montag")])])


def test_a_timeout_of_years_means_no_deadline_not_an_expired_one(scripted):
    """gRPC answered DEADLINE_EXCEEDED at once for a deadline past its clock's range (1e10 s)."""
    with Client(scripted(Answers()), retries=0, timeout=1e10) as client:
        assert client.translate("Monday")[0].text == "Montag"
        assert client.translate("Monday", timeout=1e12)[0].text == "Montag"


class Echo(pb_grpc.InferenceServiceServicer):
    """Answers each text with itself upper-cased, and keeps count of the calls."""

    def __init__(self) -> None:
        self.calls = 0

    def Translate(self, request, context):
        self.calls += 1
        hypotheses = [pb.Translation(hypotheses=[pb.Hypothesis(text=text.upper())]) for text in request.texts]
        return pb.TranslateResponse(translations=hypotheses)


def test_texts_come_as_any_iterable_and_none_of_them_is_no_call(scripted):
    servicer = Echo()
    with Client(scripted(servicer), retries=0, timeout=30) as client:
        assert [t.text for t in client.translate(text for text in ("Monday", "Friday"))] == ["MONDAY", "FRIDAY"]
        assert client.translate([]) == [] and Translator(client).batch(iter(())) == []
        assert servicer.calls == 1  # the server's "texts is empty" is not the caller's answer to an empty batch
        for texts, said in [
            (None, "texts must be a str or an iterable of str, got NoneType"),
            (b"Monday", "texts must be a str or an iterable of str, got bytes"),
            (["Monday", None], "texts\\[1\\] must be a str, got NoneType"),
        ]:
            with pytest.raises(TypeError, match=said):
                client.translate(texts)
        with pytest.raises(TypeError, match="text must be a str, got NoneType"):
            next(client.translate_stream(None))


def test_a_translator_given_an_address_closes_its_channel_and_one_given_a_client_leaves_it_open(scripted):
    address = scripted(Echo())
    with Translator(address) as translator, Classifier(address) as classifier:
        assert translator("Monday") == "MONDAY"
    for closed in (translator.client, classifier.client):
        with pytest.raises(ValueError, match="closed channel"):
            closed.translate("Monday")
    with Client(address, retries=0) as client:
        with Translator(client) as translator:
            assert translator("Monday") == "MONDAY"
        assert client.translate("Friday")[0].text == "FRIDAY"  # the caller's client, the caller's to close
