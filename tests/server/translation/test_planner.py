"""The planning step on its own: plain jobs and budgets in, a StepPlan out; no model runs."""

from __future__ import annotations

from collections import deque

import pytest

from attnserve.server.translation.jobs import Job, JobState, Sink
from attnserve.server.translation.options import DecodeOptions
from attnserve.server.translation.planner import ENCODE_AHEAD_TOKENS, Budgets, Usage, plan_step

EOS = 2
ROOMY = Budgets(max_rows=64, max_tokens=100_000)


def job(source_tokens=4, max_new=6, beam=1, deadline=None, bytes_per_token=0) -> Job:
    options = DecodeOptions(beam_size=beam, num_hypotheses=1)
    return Job([5] * source_tokens, options, max_new, EOS, Sink(), deadline=deadline, bytes_per_token=bytes_per_token)


def running(*jobs: Job) -> tuple[list[Job], Usage]:
    """Jobs admitted earlier and decoding, with the usage they hold."""
    usage = Usage()
    for j in jobs:
        usage.take(j)
        j.state = JobState.RUNNING
    return list(jobs), usage


def test_waiting_jobs_are_admitted_in_order_while_rows_last():
    waiting = [job(beam=2), job(beam=3), job(beam=1)]
    plan = plan_step(waiting, [], Usage(), Budgets(max_rows=5, max_tokens=100_000), now=0.0)
    assert plan.admit == waiting[:2]


def test_the_head_of_the_queue_is_not_overtaken():
    """A big job that does not fit yet blocks the smaller ones behind it (no starvation)."""
    waiting = [job(beam=4), job(beam=1)]
    active, usage = running(job(beam=2))
    plan = plan_step(waiting, active, usage, Budgets(max_rows=5, max_tokens=100_000), now=0.0)
    assert plan.admit == []


def test_the_token_budget_counts_beams_times_source_plus_new_tokens():
    first, second = job(source_tokens=10, max_new=20, beam=2), job(source_tokens=5, max_new=5)
    active, usage = running(job(source_tokens=10, max_new=10))  # 20 tokens
    plan = plan_step([first, second], active, usage, Budgets(max_rows=64, max_tokens=80), now=0.0)
    assert plan.admit == [first]  # 20 + 60 = 80 fits; + 10 does not
    plan = plan_step([first, second], active, usage, Budgets(max_rows=64, max_tokens=79), now=0.0)
    assert plan.admit == []


def test_the_cache_byte_budget_limits_admission_and_zero_means_none():
    waiting = [job(source_tokens=4, max_new=6, bytes_per_token=100) for _ in range(3)]  # 1,000 bytes each
    assert plan_step(waiting, [], Usage(), Budgets(64, 100_000, max_cache_bytes=2_500), now=0.0).admit == waiting[:2]
    assert plan_step(waiting, [], Usage(), Budgets(64, 100_000, max_cache_bytes=0), now=0.0).admit == waiting


def test_planning_changes_nothing():
    waiting = deque([job(), job()])
    active, usage = running(job())
    before = (list(waiting), usage.rows, usage.tokens, active[0].state)
    plan_step(waiting, active, usage, ROOMY, now=0.0)
    assert (list(waiting), usage.rows, usage.tokens, active[0].state) == before


def test_cancelled_running_jobs_are_evicted_and_their_rows_go_to_newcomers_at_once():
    leaving, staying = job(beam=3), job(beam=1)
    active, usage = running(leaving, staying)
    leaving.cancel_requested = True
    newcomer = job(beam=3)
    plan = plan_step([newcomer], active, usage, Budgets(max_rows=4, max_tokens=100_000), now=0.0)
    assert plan.evict == [leaving] and plan.finish == []
    assert plan.admit == [newcomer]


def test_a_cancelled_waiting_job_is_evicted_not_admitted():
    gone, kept = job(), job()
    gone.cancel_requested = True
    plan = plan_step([gone, kept], [], Usage(), ROOMY, now=0.0)
    assert plan.evict == [gone] and plan.admit == [kept]


def test_jobs_past_their_deadline_finish_whether_waiting_or_running():
    late_running, on_time = job(deadline=5.0), job(deadline=50.0)
    active, usage = running(late_running, on_time)
    late_waiting, no_deadline = job(deadline=9.9), job()
    plan = plan_step([late_waiting, no_deadline], active, usage, ROOMY, now=10.0)
    assert plan.finish == [late_running, late_waiting]
    assert plan.admit == [no_deadline] and plan.evict == []
    assert not plan_step([late_waiting], [], Usage(), ROOMY, now=9.0).finish


def test_finished_jobs_still_listed_as_running_are_ignored():
    done = job(deadline=1.0)
    active, usage = running(done)
    done.cancel_requested = True
    done.state = JobState.FINISHED
    usage.give_back(done)
    plan = plan_step([], active, usage, ROOMY, now=10.0)
    assert (plan.evict, plan.finish, bool(plan)) == ([], [], False)


def test_static_batching_admits_only_into_an_empty_batch():
    active, usage = running(job())
    newcomer = job()
    assert plan_step([newcomer], active, usage, ROOMY, now=0.0, static=True).admit == []
    active[0].cancel_requested = True  # the last decoding row leaves: the batch is empty at this boundary
    assert plan_step([newcomer], active, usage, ROOMY, now=0.0, static=True).admit == [newcomer]
    assert plan_step([newcomer], active, usage, ROOMY, now=0.0, static=False).admit == [newcomer]


@pytest.mark.parametrize("already_encoded", [False, True])
def test_waiting_texts_are_encoded_ahead_only_when_the_encoder_runs_anyway(already_encoded):
    newcomer = job(source_tokens=8)
    if already_encoded:
        newcomer.encoded = []
    behind = [job(source_tokens=ENCODE_AHEAD_TOKENS // 2) for _ in range(3)]
    plan = plan_step([newcomer, *behind], [], Usage(), Budgets(max_rows=1, max_tokens=100_000), now=0.0)
    assert plan.admit == [newcomer]
    assert plan.encode_ahead == ([] if already_encoded else behind[:2])  # within ENCODE_AHEAD_TOKENS


def test_the_queue_gives_up_what_the_plan_admits_or_drops_and_keeps_the_rest():
    """WaitingQueue.take: admitted jobs leave holding their budget; cancelled waiting ones leave."""
    from attnserve.server.translation.waiting import WaitingQueue

    queue, usage = WaitingQueue(max_size=8), Usage()
    first, gone, last = job(beam=2), job(), job(beam=4)
    queue.submit([first, gone, last])
    gone.cancel_requested = True  # flagged from an event loop; the plan evicts it
    plan = queue.take(lambda waiting: plan_step(waiting, [], usage, Budgets(3, 100_000), now=0.0), usage)
    assert plan.admit == [first] and plan.evict == [gone]
    assert list(queue.jobs) == [last]  # 2 + 4 rows do not fit 3: it waits
    assert first.state is JobState.ENCODING and first.holds_budget and usage.rows == 2
    assert not last.holds_budget and last.state is JobState.WAITING
