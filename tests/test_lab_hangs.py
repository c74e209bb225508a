"""Chapter 10.9: the ``hangs`` lab on real gloo ranks (monitored_barrier names the rank that never
arrived; py-spy's stack of every rank shows where each waits; the flight recorder's dump shows the rank
that is behind, or says this build does not record gloo; torch's analyzer names the missing rank from the
per-rank dump files), each check failing on tampered records, and the lab ending in seconds (nothing
really hangs)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import assert_checks_hold, assert_only_these_fail, has_hangul

import labs
from labs.lessons import hangs
from labs.tools import pyspy
from labs.viz import hangs as figures

pytestmark = pytest.mark.timeout(240)

CHECKS = {"barrier_names_missing_rank", "only_rank0_names_it", "barrier_waited_timeout", "fr_shows_rank_behind",
          "fr_state_does_not_tell", "stacks_waiting_in_all_reduce", "stack_skipper_elsewhere",
          "fr_files_name_missing_rank", "fr_dump_lacks_membership", "gloo_no_dump_on_timeout"}


@pytest.fixture(scope="module")
def runs():
    return {n: labs.run("hangs", nproc=n) for n in (1, 2, 3)}


@pytest.mark.parametrize("n", [2, 3])
def test_hangs_checks_hold(runs, n):
    result = runs[n]
    assert_checks_hold(result)
    assert set(result.checks) == CHECKS
    assert result.data["mb_named"] == [n - 1]
    assert "monitoredBarrier" in result.data["mb_message"]
    assert result.wall_seconds < 60  # 짧은 timeout의 그룹: 잡 전체는 멈추지 않는다


def test_one_rank_has_nothing_to_find(runs):
    result = runs[1]
    assert_checks_hold(result)
    assert [name for name, c in result.checks.items() if c.applicable] == ["fr_dump_lacks_membership"]


@pytest.mark.parametrize("n", [2, 3])
def test_stack_dump_shows_each_rank_down_to_the_lab(runs, n):
    text = figures.stack_dump(runs[n])
    wait, skip = (hangs.source_line(hangs.one_all_reduce_fewer), hangs.source_line(hangs.fall_behind))
    blocks = text.split("\n\n")
    assert len(blocks) == n
    assert all(f"one_all_reduce_fewer (labs/tools/hangs.py:{wait})" in b for b in blocks[:-1])
    assert f"fall_behind (labs/tools/hangs.py:{skip})" in blocks[-1] and "all_reduce (" not in blocks[-1]
    assert all("rank_fn (labs/lessons/hangs.py:" in b for b in blocks)  # 실습의 프레임까지 보인다
    assert "launch.py" not in text and "multiprocessing/" not in text  # 런처 아래는 잘라서 보인다


def test_analyzer_report_is_shown_trimmed(runs):
    text = figures.flight_record_files(runs[3])
    assert "missing ranks: {2}" in text and "KeyError" in text
    assert "input sizes" not in text


def test_other_ranks_only_point_to_rank0(runs):
    peer = runs[3].data["mb_peer_message"]
    assert "Rank 1" in peer and hangs.named_ranks(peer) == []


def test_flight_recorder_outcome_is_recorded(runs):
    data = runs[3].data
    if data["fr_works"]:
        assert runs[3].checks["fr_shows_rank_behind"].applicable
        assert [e[1] for e in data["fr_last"]][:2] == [data["fr_last"][2][1] + 1] * 2
    else:
        assert data["fr_outcome"] and not runs[3].checks["fr_shows_rank_behind"].applicable


def _name_rank1(ranks):
    ranks[0]["mb_error"] = ranks[0]["mb_error"].replace("Ranks 2", "Ranks 1").replace("Rank 2", "Rank 1")


def _rank1_names_too(ranks):
    ranks[1]["mb_error"] = ranks[0]["mb_error"]


def _no_wait(ranks):
    ranks[0]["mb_seconds"] = 0.01


@pytest.mark.parametrize("tamper, failing", [(_name_rank1, "barrier_names_missing_rank"),
                                             (_rank1_names_too, "only_rank0_names_it"),
                                             (_no_wait, "barrier_waited_timeout")])
def test_barrier_checks_can_fail(runs, tamper, failing):
    assert_only_these_fail(hangs, runs[3], tamper, {failing})


def test_flight_recorder_check_can_fail(runs):
    if not runs[3].data["fr_works"]:
        pytest.skip("이 빌드의 gloo에서는 플라이트 레코더가 기록하지 않는다(확인은 해당 없음)")

    def caught_up(ranks):
        ranks[2]["fr_entries"][-1][1] = ranks[0]["fr_entries"][-1][1]

    assert_only_these_fail(hangs, runs[3], caught_up, {"fr_shows_rank_behind"})


def test_flight_recorder_state_check_can_fail(runs):
    if not runs[3].data["fr_works"]:
        pytest.skip("이 빌드의 gloo에서는 플라이트 레코더가 기록하지 않는다(확인은 해당 없음)")

    def completed(ranks):
        ranks[2]["fr_entries"][-1][2] = "completed"

    assert_only_these_fail(hangs, runs[3], completed, {"fr_state_does_not_tell"})


def _rank0_stack_like_skipper(ranks):
    ranks[2]["stacks"][0]["frames"] = ranks[2]["stacks"][2]["frames"]


def _skipper_stack_like_rank0(ranks):
    ranks[2]["stacks"][2]["frames"] = ranks[2]["stacks"][0]["frames"]


def _analyzer_names_rank1(ranks):
    ranks[0]["fr_files"]["report"] = ranks[0]["fr_files"]["report"].replace("missing ranks: {2}", "missing ranks: {1}")


def _dump_has_membership(ranks):
    ranks[0]["fr_files"]["raw_pg_config"] = {"2": {"name": "2", "desc": "undefined", "ranks": "[0, 1, 2]"}}


def _gloo_wrote_a_file(ranks):
    ranks[1]["timeout_files"] = ["rank_1"]


@pytest.mark.parametrize("tamper, failing", [(_rank0_stack_like_skipper, "stacks_waiting_in_all_reduce"),
                                             (_skipper_stack_like_rank0, "stack_skipper_elsewhere"),
                                             (_analyzer_names_rank1, "fr_files_name_missing_rank"),
                                             (_dump_has_membership, "fr_dump_lacks_membership"),
                                             (_gloo_wrote_a_file, "gloo_no_dump_on_timeout")])
def test_tool_checks_can_fail(runs, tamper, failing):
    assert_only_these_fail(hangs, runs[3], tamper, {failing})


def test_pyspy_reads_the_main_thread_even_when_colour_is_forced(monkeypatch):
    # Jupyter 커널은 자식 프로세스에 CLICOLOR_FORCE=1을 준다: py-spy의 출력이 색 코드로 덮여도 프레임을 읽어야 한다
    monkeypatch.setenv("CLICOLOR_FORCE", "1")
    code = "import time\ndef waiting_here():\n    print('ready', flush=True)\n    time.sleep(30)\nwaiting_here()\n"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        [dumped] = pyspy.dump([child.pid])
    finally:
        child.kill()
        child.wait()
    assert dumped["error"] == "" and "\x1b[" not in dumped["text"]
    assert [fn for fn, _, _ in pyspy.main_thread(dumped["text"])][:2] == ["waiting_here", "<module>"]


def test_missing_pyspy_is_reported_in_korean(monkeypatch):
    monkeypatch.setattr(pyspy, "executable", lambda: None)
    [dumped] = pyspy.dump([1])
    assert dumped["text"] == "" and has_hangul(dumped["error"]) and "requirements.txt" in dumped["error"]
