"""The one deadline type: what every door builds, what the service caps, what a refusal says."""

from __future__ import annotations

import time

from attnserve.contract.deadline import CLIENT, Deadline, earliest, timeout_parameter


def test_a_door_without_a_deadline_has_none_and_a_spent_one_has_passed_already():
    assert Deadline.from_timeout(None) is None
    spent = Deadline.from_timeout(-0.5)  # a gRPC client's deadline spent before its request was read
    assert spent is not None and spent.passed() and spent.remaining() == 0.0
    assert spent.message == f"{CLIENT} passed; its work was dropped"


def test_the_server_limit_caps_a_later_deadline_and_leaves_an_earlier_one():
    limit = "the server's time limit of 60 s (--request-timeout-seconds)"
    late = Deadline.from_timeout(3600.0)
    capped = Deadline.within(late, 60.0, limit)
    assert capped is not None and capped.what == limit and 59.0 < capped.remaining() <= 60.0
    soon = Deadline.from_timeout(0.5, timeout_parameter(0.5))
    assert Deadline.within(soon, 60.0, limit) is soon
    assert Deadline.within(None, 0.0, limit) is None  # 0: no server limit
    assert Deadline.within(soon, 0.0, limit) is soon
    assert Deadline.within(None, 60.0, limit).what == limit  # no deadline of its own: the server's
    assert soon.message == "the request's timeout of 500 ms passed; its work was dropped"


def test_the_scheduler_clock_names_the_same_instant():
    deadline = Deadline.from_timeout(2.0)
    assert abs((deadline.perf_counter() - time.perf_counter()) - deadline.remaining()) < 0.05
    assert earliest(None, deadline, Deadline.from_timeout(5.0)) is deadline
    assert earliest(None, None) is None
