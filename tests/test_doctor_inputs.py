"""`labs doctor`'s bad input: a Korean message that says what to do and exit code 2, before any rank starts
(no process is spawned: these tests run in milliseconds and leave no child)."""

from __future__ import annotations

import pytest
from conftest import has_hangul

from labs.cli import build_parser, main
from labs.doctor import DoctorInputError, examine
from labs.doctor.cli import parse
from labs.errors import EXIT_BAD_INPUT

GOOD = "import torch\n"


@pytest.fixture
def good(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(GOOD)
    return path


def _error(capsys, argv: list[str]) -> str:
    assert main(argv) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert has_hangul(err) and "Traceback" not in err
    return err


def test_a_missing_script(capsys, tmp_path, no_leftover_children):
    err = _error(capsys, ["doctor", str(tmp_path / "nope.py")])
    assert "nope.py" in err and "없습니다" in err
    no_leftover_children(timeout=0.1)


def test_a_folder(capsys, tmp_path):
    assert "폴더" in _error(capsys, ["doctor", str(tmp_path)])


def test_a_syntax_error_names_its_line(capsys, tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("import torch\n\ndef train(:\n    pass\n")
    err = _error(capsys, ["doctor", str(path)])
    assert f"{path}:3" in err and "문법 오류" in err


def test_a_binary_file(capsys, tmp_path):
    path = tmp_path / "model.py"
    path.write_bytes(b"\x00\x01PK\x03\x04")
    assert "파이썬 파일이 아닙니다" in _error(capsys, ["doctor", str(path)])


def test_a_notebook(capsys, tmp_path):
    path = tmp_path / "train.ipynb"
    path.write_text('{"cells": []}')
    assert "nbconvert" in _error(capsys, ["doctor", str(path)])


def test_a_text_file_that_is_not_python(capsys, tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("이건 파이썬이 아닙니다: (\n")
    assert "파이썬 파일이 맞는지" in _error(capsys, ["doctor", str(path)])


@pytest.mark.parametrize("flags, word", [(["--nproc", "0"], "nproc"), (["--timeout", "-1"], "timeout"),
                                         (["--steps", "0"], "--steps"), (["--batches", "-2"], "--batches")])
def test_bad_option_values(capsys, good, flags, word):
    assert word in _error(capsys, ["doctor", str(good), *flags])


def test_an_option_that_is_not_a_number(capsys, good):
    with pytest.raises(SystemExit) as exit_:  # before the script: the engine's parser says it
        main(["doctor", "--nproc", "x", str(good)])
    assert exit_.value.code == EXIT_BAD_INPUT and "명령줄 인자" in capsys.readouterr().err
    assert "invalid int value" in _error(capsys, ["doctor", str(good), "--nproc", "x"])  # after it: the doctor's


@pytest.mark.parametrize("kwargs", [{"args": "--epochs 1"}, {"args": [1]}, {"cwd": "/no/such/folder"},
                                    {"nproc": True}, {"steps": 1.5}])
def test_bad_python_arguments_raise_before_any_rank(good, kwargs, no_leftover_children):
    with pytest.raises(DoctorInputError) as err:
        examine(good, **kwargs)
    assert has_hangul(str(err.value))
    no_leftover_children(timeout=0.1)


def _parsed(argv: list[str]) -> tuple[str, list[str], object]:
    return parse(build_parser().parse_args(["doctor", *argv]))


def test_script_arguments_come_after_the_separator(good):
    script, args, options = _parsed(["--nproc", "3", str(good), "--steps", "4", "--", "--lr", "0.1", "-v"])
    assert (script, args, options.nproc, options.steps) == (str(good), ["--lr", "0.1", "-v"], 3, 4)
    script, args, options = _parsed([str(good), "--", "--nproc", "9"])  # after `--`: the script's, not the doctor's
    assert (args, options.nproc, options.json) == (["--nproc", "9"], 2, False)
    script, args, options = _parsed([str(good), "--json"])
    assert (args, options.json, options.timeout) == ([], True, 120.0)


def test_script_arguments_without_the_separator_are_a_korean_error(capsys, good):
    assert "`--` 뒤에" in _error(capsys, ["doctor", str(good), "--epochs", "1"])
    assert "스크립트를 주세요" in _error(capsys, ["doctor"])
