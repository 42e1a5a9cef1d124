"""Where a job's tokens go: the stream sink's interval (the scheduler-thread side of a stream)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from attnserve.server.translation import jobs
from attnserve.server.translation.jobs import StreamSink


class Posts:
    """Stands in for the scheduler's Outbox: records what a sink posts to the event loop."""

    def __init__(self) -> None:
        self.items: list[object] = []

    def post(self, loop, callback, *args) -> None:
        self.items.append(args[0])


@pytest.fixture
def clock(monkeypatch):
    now = SimpleNamespace(t=100.0)
    monkeypatch.setattr(jobs, "time", SimpleNamespace(perf_counter=lambda: now.t))
    return now


def test_tokens_are_held_until_the_interval_has_passed_and_the_last_goes_at_once(clock):
    posts = Posts()
    sink = StreamSink(posts, loop=None, queue=SimpleNamespace(put_nowait=None), interval_s=0.05)
    sink.token(None, 7, None)  # the first: at once
    clock.t += 0.01
    sink.token(None, 8, None)
    clock.t += 0.03
    sink.token(None, 9, None)  # 40 ms after the first post: still held
    assert posts.items == [([7], None)]
    clock.t += 0.011
    sink.token(None, 10, None)  # 51 ms: everything held goes, and the next interval starts
    clock.t += 0.001
    sink.token(None, 11, None)
    sink.token(None, 2, "eos")  # the last: at once, with what was held
    assert posts.items == [([7], None), ([8, 9, 10], None), ([11, 2], "eos")]


def test_no_interval_posts_every_token(clock):
    posts = Posts()
    sink = StreamSink(posts, loop=None, queue=SimpleNamespace(put_nowait=None))
    for token in (5, 6):
        sink.token(None, token, None)
    sink.token(None, 2, "length")
    assert posts.items == [([5], None), ([6], None), ([2], "length")]


def test_a_failure_is_posted_and_held_tokens_are_not(clock):
    posts = Posts()
    sink = StreamSink(posts, loop=None, queue=SimpleNamespace(put_nowait=None), interval_s=1.0)
    sink.token(None, 5, None)
    sink.token(None, 6, None)
    error = RuntimeError("decoder failed")
    sink.fail(None, error)
    assert posts.items == [([5], None), error]


def test_a_hidden_prefix_is_not_passed_on_and_the_first_shown_token_goes_at_once(clock):
    posts = Posts()
    sink = StreamSink(posts, loop=None, queue=SimpleNamespace(put_nowait=None), interval_s=0.05, hidden=2)
    for token in (250, 251, 7, 8):  # two hidden forced tokens, then what the client sees
        sink.token(None, token, None)
    assert posts.items == [([7], None)]
    short = StreamSink(posts, loop=None, queue=SimpleNamespace(put_nowait=None), hidden=2)
    short.token(None, 250, None)
    short.token(None, 251, "length")  # max_new_tokens ran out inside the hidden prefix
    assert posts.items[1:] == [([], "length")]
