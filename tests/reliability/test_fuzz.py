"""Fuzzing every RPC with random and adversarial messages (issue 8, "Bad input, exhaustively").

Every call must end with a documented status (OK, INVALID_ARGUMENT, NOT_FOUND,
RESOURCE_EXHAUSTED), never INTERNAL, UNKNOWN or a hang, and after every example the
server must still classify a digit exactly as it did before. Hypothesis runs
derandomized (a fixed seed) with bounded example counts; the inputs tried are reported.
"""

from __future__ import annotations

import io
import struct
import zlib
from collections import Counter

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc

from .conftest import MAX_TARGET, digit_png

DOCUMENTED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}
MAX_MESSAGE = 1 << 20
CALL_TIMEOUT = 60.0  # a hang shows up as DEADLINE_EXCEEDED, which is not documented here
FUZZ = settings(
    max_examples=150,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
TRIED: dict[str, int] = {}
STATUSES: Counter = Counter()


@pytest.fixture(scope="module")
def server(serve, full_repo):
    with serve(
        full_repo,
        max_message_bytes=MAX_MESSAGE,
        max_image_bytes=50_000,
        max_image_pixels=1_000_000,
        max_images_per_request=4,
        max_texts_per_request=8,
        max_beam_size=4,
        max_active_sequences=16,
    ) as handle:
        yield handle


@pytest.fixture(scope="module")
def channel(server):
    options = [("grpc.max_send_message_length", 8 * MAX_MESSAGE), ("grpc.max_receive_message_length", 8 * MAX_MESSAGE)]
    with grpc.insecure_channel(server.address, options=options) as channel:
        yield channel


@pytest.fixture(scope="module")
def stub(channel):
    return pb_grpc.InferenceServiceStub(channel)


@pytest.fixture(scope="module")
def still_serving(stub):
    """A check that the server answers a good request exactly as before the fuzzing."""
    request = pb.ClassifyRequest(model="digits", images=[pb.ImageInput(encoded=digit_png(3))], top_k=3)
    expected = stub.Classify(request, timeout=CALL_TIMEOUT)

    def check() -> None:
        reply = stub.Classify(request, timeout=CALL_TIMEOUT)
        assert [label.label for label in reply.results[0].labels] == [
            label.label for label in expected.results[0].labels
        ]
        got = [label.probability for label in reply.results[0].labels]
        assert got == pytest.approx([label.probability for label in expected.results[0].labels], abs=1e-5)

    return check


def outcome(call, *args, **kw) -> grpc.StatusCode:
    try:
        result = call(*args, timeout=CALL_TIMEOUT, **kw)
        if hasattr(result, "__iter__") and not hasattr(result, "ByteSize"):
            list(result)  # a stream: drain it
    except grpc.RpcError as exc:
        details = exc.details() or ""
        STATUSES[exc.code().name] += 1
        assert exc.code() in DOCUMENTED, f"{exc.code()}: {details}"
        assert "Traceback" not in details
        return exc.code()
    STATUSES["OK"] += 1
    return grpc.StatusCode.OK


def count(kind: str) -> None:
    TRIED[kind] = TRIED.get(kind, 0) + 1


# ---------------------------------------------------------------------------- images


def _png(mode: str, size: tuple[int, int], seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    channels = {"L": 1, "RGB": 3, "RGBA": 4}[mode]
    array = rng.integers(0, 255, (size[1], size[0], channels), np.uint8).squeeze(-1 if channels == 1 else ())
    buf = io.BytesIO()
    Image.fromarray(array, mode).save(buf, "PNG")
    return buf.getvalue()


def _encode(image: Image.Image, fmt: str) -> bytes:
    buf = io.BytesIO()
    image.save(buf, fmt)
    return buf.getvalue()


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def declared_png(width: int, height: int, payload: bytes = b"") -> bytes:
    """A PNG whose header declares ``width x height`` (grayscale) with ``payload`` as compressed pixel data."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", payload) + _chunk(b"IEND", b"")


def bomb_png(side: int) -> bytes:
    """A real decompression bomb: ``side x side`` zero pixels in a few kilobytes."""
    row = b"\x00" + b"\x00" * side  # filter byte + pixels
    compressor = zlib.compressobj(9)
    data = b"".join(compressor.compress(row) for _ in range(side)) + compressor.flush()
    return declared_png(side, side, data)


VALID = [
    digit_png(7),
    digit_png(2, size=1),
    digit_png(4, size=1000, mode="RGB", fmt="JPEG"),
    _png("RGBA", (33, 5)),
    _encode(Image.new("P", (20, 20)), "GIF"),
    _encode(Image.new("RGB", (9, 300), (10, 200, 30)), "BMP"),
    _encode(Image.new("L", (64, 64), 128), "TIFF"),
    _encode(Image.new("RGB", (17, 17), (1, 2, 3)), "WEBP"),
    _encode(Image.new("RGB", (8, 8), (200, 0, 0)), "PPM"),
]
ADVERSARIAL = [
    declared_png(20000, 20000),  # declared far over the pixel limit
    declared_png(1, 1),  # header only, no pixel data
    declared_png(0, 0),
    declared_png(2**31 - 1, 1),
    bomb_png(5000),  # 25 MP of zeros in a few kB
    b"\x89PNG\r\n\x1a\n",
    b"\xff\xd8\xff\xe0" + b"\x00" * 20,  # a JPEG start and nothing else
    b"GIF89a" + b"\xff" * 10,
    b"\x00" * 60_000,  # over the byte limit
]


def image_input() -> st.SearchStrategy[pb.ImageInput]:
    encoded = st.one_of(
        st.binary(max_size=3000),
        st.sampled_from(VALID + ADVERSARIAL),
        st.tuples(st.sampled_from(VALID), st.floats(0, 1)).map(lambda t: t[0][: int(len(t[0]) * t[1])]),  # truncated
    ).map(lambda data: pb.ImageInput(encoded=data))
    special = st.sampled_from([np.nan, np.inf, -np.inf, 0.0, 1e38, -1e38, 3.4e38])
    shapes = st.one_of(
        st.sampled_from([[1, 16, 16], [3, 16, 16], [1, 1, 16, 16], [1, 3, 16, 16], [16, 16], []]),
        st.lists(st.integers(-(2**63), 2**63 - 1), max_size=6),
        st.lists(st.integers(-3, 40), max_size=5),
    )

    def tensor(shape, datatype, fill, extra):
        n = int(np.prod([max(d, 0) for d in shape])) if shape and all(0 <= d <= 4096 for d in shape) else 0
        values = np.full(min(n, 1 << 16), fill, dtype="<f4")
        raw = values.tobytes()[: len(values) * 4 + extra] if extra <= 0 else values.tobytes() + b"\x00" * extra
        return pb.ImageInput(tensor=pb.Tensor(shape=shape, datatype=datatype, raw_contents=raw))

    tensors = st.builds(tensor, shapes, st.integers(0, 5), special, st.integers(-8, 8))
    return st.one_of(encoded, tensors, st.just(pb.ImageInput()))


MODELS = st.one_of(st.sampled_from(["digits", "colors", "mt", "", "nope"]), st.text(max_size=40))
IMAGE_MODELS = st.one_of(st.sampled_from(["digits", "colors"]), st.sampled_from(["digits", "colors"]), MODELS)
TEXT_MODELS = st.one_of(st.sampled_from(["mt", ""]), st.sampled_from(["mt", ""]), MODELS)  # "" = the only translator


@FUZZ
@given(model=IMAGE_MODELS, images=st.lists(image_input(), max_size=6), top_k=st.integers(0, 2**32 - 1))
def test_fuzz_classify(stub, still_serving, model, images, top_k):
    count("Classify")
    code = outcome(stub.Classify, pb.ClassifyRequest(model=model, images=images, top_k=top_k))
    assert code in DOCUMENTED
    still_serving()


# ---------------------------------------------------------------------------- texts

TEXT = st.one_of(
    st.text(st.characters(exclude_categories=("Cs",)), max_size=60),
    st.lists(st.sampled_from(["t5", "t17", "t42", "t59", "hello", "<unk>", "</s>", "<pad>"]), max_size=30).map(
        " ".join
    ),
    st.sampled_from(["", " ", "\x00", "t5 " * 5000, "\u202e\ufeff", "🙂" * 100]),
)
FLOAT = st.one_of(st.none(), st.floats(width=32, allow_nan=True, allow_infinity=True))
U32 = st.one_of(st.integers(0, 5), st.integers(0, 2**32 - 1))


@st.composite
def decoding_options(draw) -> pb.DecodingOptions:
    options = pb.DecodingOptions(
        mode=draw(st.integers(0, 6)),
        beam_size=draw(U32),
        num_hypotheses=draw(U32),
        max_new_tokens=draw(st.one_of(st.integers(0, 40), st.integers(0, 2**32 - 1), st.just(MAX_TARGET))),
        temperature=draw(st.one_of(st.just(0.0), st.floats(width=32, allow_nan=True, allow_infinity=True))),
        top_k=draw(U32),
        return_scores=draw(st.booleans()),
        return_token_ids=draw(st.booleans()),
    )
    for name in ("length_penalty", "top_p"):
        value = draw(FLOAT)
        if value is not None:
            setattr(options, name, value)
    seed = draw(st.one_of(st.none(), st.integers(0, 2**64 - 1)))
    if seed is not None:
        options.seed = seed
    return options


@FUZZ
@given(model=TEXT_MODELS, texts=st.lists(TEXT, max_size=10), options=st.one_of(st.none(), decoding_options()))
def test_fuzz_translate(stub, still_serving, model, texts, options):
    count("Translate")
    code = outcome(stub.Translate, pb.TranslateRequest(model=model, texts=texts, options=options))
    assert code in DOCUMENTED
    still_serving()


@FUZZ
@given(model=TEXT_MODELS, texts=st.lists(TEXT, max_size=2), options=st.one_of(st.none(), decoding_options()))
def test_fuzz_translate_stream(stub, still_serving, model, texts, options):
    count("TranslateStream")
    code = outcome(stub.TranslateStream, pb.TranslateRequest(model=model, texts=texts, options=options))
    assert code in DOCUMENTED
    still_serving()


TERM = st.one_of(TEXT, st.sampled_from(["t5", "t17", "hello", "t5 t17", "(", "\\b", ".*", "x" * 300]))


@settings(FUZZ, max_examples=100)
@given(
    texts=st.lists(TEXT, max_size=4),
    options=st.one_of(st.none(), decoding_options()),
    glossary=st.lists(st.tuples(TERM, TERM), max_size=4),
    keep=st.lists(TERM, max_size=2),
)
def test_fuzz_translate_glossary(stub, still_serving, texts, options, glossary, keep):
    """Glossaries of any terms (regex characters, empty, over-long, special tokens) with any options."""
    count("Translate (glossary)")
    entries = [pb.GlossaryEntry(source=source, target=target) for source, target in glossary]
    request = pb.TranslateRequest(model="mt", texts=texts, options=options, glossary=entries, keep=keep)
    code = outcome(stub.Translate, request)
    assert code in DOCUMENTED
    still_serving()


@settings(FUZZ, max_examples=30)
@given(name=MODELS)
def test_fuzz_model_info(stub, name):
    count("GetModel/ListModels")
    assert outcome(stub.GetModel, pb.GetModelRequest(name=name)) in {grpc.StatusCode.OK, grpc.StatusCode.NOT_FOUND}
    assert outcome(stub.ListModels, pb.ListModelsRequest()) == grpc.StatusCode.OK


# ---------------------------------------------------------------------------- valid shapes, edge values

WORDS = st.lists(st.sampled_from(["t5", "t17", "t42", "t59", "t4", "hello", "<unk>"]), min_size=1, max_size=14)


@st.composite
def edge_options(draw) -> pb.DecodingOptions:
    """Options inside their limits, at the edges: tiny and huge temperatures, top_k past the vocabulary."""
    beam = draw(st.integers(1, 4))
    sampling = beam == 1 and draw(st.booleans())
    options = pb.DecodingOptions(
        beam_size=beam,
        num_hypotheses=draw(st.integers(1, beam)),
        max_new_tokens=draw(st.sampled_from([0, 1, 2, 17, 64])) or 1,
        return_scores=draw(st.booleans()),
        return_token_ids=draw(st.booleans()),
    )
    options.length_penalty = draw(st.sampled_from([0.0, 1.0, -10.0, 10.0, 1e-30]))
    if sampling:
        options.temperature = draw(st.sampled_from([1e-30, 1e-3, 0.7, 1.0, 1e3, 1e30]))
        options.top_k = draw(st.sampled_from([0, 1, 59, 60, 10**6]))
        options.top_p = draw(st.sampled_from([1e-30, 0.1, 0.999, 1.0]))
        options.seed = draw(st.integers(0, 2**64 - 1))
    return options


@settings(FUZZ, max_examples=100)
@given(texts=st.lists(WORDS.map(" ".join), min_size=1, max_size=3), options=edge_options())
def test_fuzz_translate_edge_values_answer(stub, still_serving, texts, options):
    """Requests inside every limit must be answered: OK, or RESOURCE_EXHAUSTED under load."""
    count("Translate (edge values)")
    code = outcome(stub.Translate, pb.TranslateRequest(model="mt", texts=texts, options=options))
    assert code in {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}
    still_serving()


@settings(FUZZ, max_examples=60)
@given(text=WORDS.map(" ".join), options=edge_options())
def test_fuzz_translate_stream_edge_values_answer(stub, still_serving, text, options):
    count("TranslateStream (edge values)")
    options.beam_size = options.num_hypotheses = 1  # streams decode greedy or by sampling
    code = outcome(stub.TranslateStream, pb.TranslateRequest(model="mt", texts=[text], options=options))
    assert code in {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}
    still_serving()


EXTREME = st.sampled_from([0.0, -0.0, 1e-45, -1e-45, 1e4, -1e4, 3.0])  # within the accepted range


@settings(FUZZ, max_examples=100)
@given(
    images=st.lists(
        st.one_of(
            st.sampled_from(VALID).map(lambda data: pb.ImageInput(encoded=data)),
            EXTREME.map(
                lambda v: pb.ImageInput(
                    tensor=pb.Tensor(shape=[1, 16, 16], datatype=1, raw_contents=np.full(256, v, "<f4").tobytes())
                )
            ),
        ),
        min_size=1,
        max_size=4,
    ),
    top_k=st.integers(0, 20),
)
def test_fuzz_classify_edge_values_answer(stub, still_serving, images, top_k):
    count("Classify (edge values)")
    reply = stub.Classify(pb.ClassifyRequest(model="digits", images=images, top_k=top_k), timeout=CALL_TIMEOUT)
    STATUSES["OK"] += 1
    for result in reply.results:
        probabilities = [label.probability for label in result.labels]
        assert all(np.isfinite(probabilities)) and probabilities == sorted(probabilities, reverse=True)
        assert len(result.labels) == min(top_k or 5, 10)
    still_serving()


# ---------------------------------------------------------------------------- raw wire bytes

METHODS = ["Translate", "TranslateStream", "Classify", "ListModels", "GetModel"]
INVALID_UTF8 = [
    b"\x12\x03\xff\xfe\xfd",  # TranslateRequest.texts[0] = invalid UTF-8
    b"\x0a\x02\xc3\x28",  # .model = invalid UTF-8
    b"\x12\x80\x80\x80\x80\x10",  # a length past the end
]


@settings(FUZZ, max_examples=150)
@given(method=st.sampled_from(METHODS), payload=st.one_of(st.binary(max_size=200), st.sampled_from(INVALID_UTF8)))
def test_fuzz_raw_bytes_on_every_rpc(channel, still_serving, method, payload):
    """Bytes that may not even parse as the request message: the server refuses them cleanly."""
    count("raw bytes")
    path = f"/attnserve.v1.InferenceService/{method}"
    if method == "TranslateStream":
        call = channel.unary_stream(path, request_serializer=None, response_deserializer=None)
    else:
        call = channel.unary_unary(path, request_serializer=None, response_deserializer=None)
    try:
        result = call(payload, timeout=CALL_TIMEOUT)
        if method == "TranslateStream":
            list(result)
        STATUSES["OK"] += 1
    except grpc.RpcError as exc:
        STATUSES[exc.code().name] += 1
        assert exc.code() in DOCUMENTED, f"{exc.code()}: {exc.details()}"
    still_serving()


def test_oversize_messages_are_resource_exhausted(stub, still_serving):
    images = [pb.ImageInput(encoded=b"\x00" * (MAX_MESSAGE // 2))] * 3  # 1.5 MiB > the 1 MiB limit
    count("oversize")
    assert outcome(stub.Classify, pb.ClassifyRequest(model="digits", images=images)) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED
    )
    count("oversize")
    texts = ["t5 " * (MAX_MESSAGE // 3 + 10)]
    assert outcome(stub.Translate, pb.TranslateRequest(model="mt", texts=texts)) == grpc.StatusCode.RESOURCE_EXHAUSTED
    still_serving()


def test_report_inputs_tried(figures, server):
    """Runs last in this module: reports the counts and that nothing failed inside the server."""
    total = sum(TRIED.values())
    for kind, n in sorted(TRIED.items()):
        figures(f"fuzz inputs tried ({kind})", n)
    figures("fuzz inputs tried (total)", total)
    for status, n in sorted(STATUSES.items()):
        figures(f"fuzz replies {status}", n)
    assert total > 0
    assert server.metric("attnserve_requests_total", model="digits", method="Classify", status="INTERNAL") == 0
    assert server.metric("attnserve_requests_total", model="mt", method="Translate", status="INTERNAL") == 0
