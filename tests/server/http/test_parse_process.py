"""``ParseProcess``: large bodies are parsed in a child process, small ones inline, and a child
that dies fails only the body it held."""

from __future__ import annotations

import asyncio
import os

import pytest

from attnserve.server.doors.http.parse_process import BodyTooLarge, ParseProcess
from attnserve.server.doors.kserve import rest
from attnserve.server.shared.errors import InferenceFailed


def where_parsed(body: bytes, tag: str) -> tuple[int, int, str]:
    return os.getpid(), len(body), tag


def die(body: bytes) -> None:
    os._exit(3)


def test_large_bodies_go_to_one_child_and_small_ones_stay_inline():
    async def main() -> list[tuple[int, int, str]]:
        parser = ParseProcess(inline_bytes=100)
        try:
            return [
                await parser.parse(where_parsed, b"x" * 100, 100, "small"),
                await parser.parse(where_parsed, b"x" * 101, 101, "large"),
                await parser.parse(where_parsed, b"x" * 5000, 5000, "again"),
                await parser.parse(where_parsed, b"x" * 5000, 10, "json part small"),  # binary data after it
            ]
        finally:
            parser.close()

    small, large, again, binary = asyncio.run(main())
    assert small == (os.getpid(), 100, "small") and binary[0] == os.getpid()
    assert large[0] != os.getpid() and large[1:] == (101, "large")
    assert again[0] == large[0]  # the same child, started once


def test_a_child_that_dies_fails_its_body_and_the_next_one_starts_a_new_child():
    async def main():
        parser = ParseProcess(inline_bytes=0)
        try:
            first = await parser.parse(where_parsed, b"{}", 2, "before")
            with pytest.raises(InferenceFailed, match="died"):
                await parser.parse(die, b"{}", 2)
            return first, await parser.parse(where_parsed, b"{}", 2, "after")
        finally:
            parser.close()

    before, after = asyncio.run(main())
    assert before[0] != after[0] and after[2] == "after"


def test_a_body_whose_parse_needs_more_than_the_memory_limit_is_413_and_the_child_parses_the_next():
    # 16 MB of one-number lists parses to 420 MB of Python lists (64 MB of them, which
    # --max-message-bytes allows, 1.7 GB), without a limit
    huge = b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [%d, 1], "data": [%s]}]}'
    body = huge % (4_000_000, b"[0]," * 3_999_999 + b"[0]")
    small = huge % (2, b"[1],[2]")

    async def main():
        parser = ParseProcess(inline_bytes=0, memory_bytes=100 << 20)
        try:
            before = await parser.parse(where_parsed, b"{}", 2, "before")
            with pytest.raises(BodyTooLarge, match=r"more than 104,857,600 bytes .*--parse-memory-bytes") as err:
                await parser.parse(rest.parse_infer, body, len(body), None, "m")
            parsed = await parser.parse(rest.parse_infer, small, len(small), None, "m")
            return before, err.value.http_status, parsed, await parser.parse(where_parsed, b"{}", 2, "after")
        finally:
            parser.close()

    before, status, parsed, after = asyncio.run(main())
    assert status == 413 and parsed.inputs[0].data.tolist() == [[1.0], [2.0]]
    assert after[0] == before[0]  # the same child: a parse past its limit does not end it
