"""``python -m labs grade PATH``: a reader's bad file ends in a Korean message and a non-zero exit, never a
hang or a traceback wall; the reference passes every check."""

from __future__ import annotations

import subprocess
import time

import pytest
from conftest import grade_cli, has_hangul, write_source

from labs.errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_LAB_ERROR, EXIT_OK

pytestmark = pytest.mark.timeout(240)


def assert_korean_error(proc: subprocess.CompletedProcess, code: int, *words: str) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert has_hangul(proc.stderr), proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    for word in words:
        assert word in proc.stderr, (word, proc.stderr)


def test_missing_file(tmp_path):
    assert_korean_error(grade_cli(str(tmp_path / "nope.py")), EXIT_BAD_INPUT, "파일이 없습니다")


def test_syntax_error_names_the_line(tmp_path):
    path = write_source(tmp_path, "my_ddp.py", """\
        import torch
        class BucketedDDP(torch.nn.Module)
            pass
        """)
    assert_korean_error(grade_cli(path), EXIT_BAD_INPUT, "2행", "문법 오류")


def test_missing_class_suggests_the_close_name(tmp_path):
    path = write_source(tmp_path, "my_ddp.py", """\
        import torch
        class BucketDDP(torch.nn.Module):
            def finish_gradient_synchronization(self): pass
        """)
    assert_korean_error(grade_cli(path, "--class", "BucketedDDP"), EXIT_BAD_INPUT, "BucketDDP", "없습니다")
    assert_korean_error(grade_cli(path), EXIT_BAD_INPUT, "--class")


@pytest.mark.parametrize("source, words", [
    ("class BucketedDDP:\n    def finish_gradient_synchronization(self): pass\n", ("nn.Module",)),
    ("import torch\nclass BucketedDDP(torch.nn.Module):\n    pass\n", ("finish_gradient_synchronization",)),
    ("import torch\nclass BucketedDDP(torch.nn.Module):\n    def __init__(self, module, cap, extra): super().__init__()\n"
     "    def finish_gradient_synchronization(self): pass\n", ("생성자", "extra")),
])
def test_wrong_class_shape(tmp_path, source, words):
    assert_korean_error(grade_cli(write_source(tmp_path, "my_ddp.py", source)), EXIT_BAD_INPUT, *words)


def test_bad_grade_parameter(tmp_path):
    assert_korean_error(grade_cli("labs/ddp/miniddp.py", "--param", "steps=0"), EXIT_BAD_INPUT, "steps")


def test_deadlock_ends_in_a_named_timeout(tmp_path, no_leftover_children):
    path = write_source(tmp_path, "my_ddp.py", """\
        import torch
        import torch.distributed as dist
        from labs.ddp.miniddp import PerParameterDDP as Reference

        class PerParameterDDP(Reference):
            def finish_gradient_synchronization(self):
                if dist.get_rank() == 0:
                    dist.recv(torch.zeros(1), src=1)  # only rank 0 waits: nobody ever sends
                super().finish_gradient_synchronization()
        """)
    started = time.monotonic()
    proc = grade_cli(path, "--timeout", "10")
    assert_korean_error(proc, EXIT_LAB_ERROR, "제한 시간 10초", "교착", "랭크 0", "랭크 1")
    assert time.monotonic() - started < 120
    # 멈춘 랭크 0의 보고: 여러분의 코드(recv를 부른 줄)가 먼저, 그다음 채점기의 자리
    stuck = next(line for line in proc.stderr.splitlines() if line.startswith("  - 랭크 0"))
    assert stuck.index("여러분의 코드 my_ddp.py 8행") < stuck.index("채점기"), stuck
    no_leftover_children()


def test_reference_passes_every_check():
    proc = grade_cli("labs/ddp/miniddp.py")
    assert proc.returncode == EXIT_OK, proc.stdout + proc.stderr
    assert proc.stdout.count("모두 통과했습니다") == 2, proc.stdout
    assert "[실패]" not in proc.stdout


def test_a_bug_gets_its_diagnosis_and_exit_1():
    proc = grade_cli("labs/ddp/bugs.py", "--class", "NoDivision")
    assert proc.returncode == EXIT_CHECK_FAILED, proc.stdout + proc.stderr
    assert "가장 가능성 높은 원인 (grads_averaged)" in proc.stdout and "N으로 나누지 않았습니다" in proc.stdout
    assert "[실패] torch DDP·단일 프로세스와 같은 결과 (matches_oracles)" in proc.stdout


def test_a_file_saved_with_a_byte_order_mark_is_read_as_python(tmp_path):
    # Windows 메모장 등은 UTF-8 파일 앞에 BOM(EF BB BF)을 붙인다: 파이썬은 그 파일을 그대로 실행하므로 채점기도 읽는다
    import ast
    from pathlib import Path

    import labs
    from labs.grading.source import read_tree

    reference = Path(labs.__file__).parent / "ddp" / "miniddp.py"
    marked = tmp_path / "my_ddp.py"
    marked.write_bytes(b"\xef\xbb\xbf" + reference.read_bytes())
    _, tree = read_tree(marked)
    assert ast.dump(tree) == ast.dump(ast.parse(reference.read_text(encoding="utf-8")))
