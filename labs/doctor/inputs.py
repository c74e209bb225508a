"""The doctor's input, checked once before any rank starts; every error is Korean and says what to do."""

from __future__ import annotations

import os
from pathlib import Path

from ..context import check_nproc
from ..errors import LabConfigError
from ..launch import check_timeout

MAX_BYTES = 5 * 1024 * 1024  # a training script, not a data file


class DoctorInputError(LabConfigError):
    """Bad input to ``labs doctor`` (exit code 2), raised before any rank starts."""


def check_script(script: object) -> Path:
    """The script's path, after checking it is a readable Python file that compiles."""
    if not isinstance(script, (str, os.PathLike)) or not str(script):
        raise DoctorInputError(f"검사할 스크립트의 경로를 주세요(예: python -m labs doctor train.py). 받은 값: {script!r}")
    path = Path(script)
    if "\0" in str(path):
        raise DoctorInputError("스크립트 경로에 NUL 문자가 있습니다. 파일 경로를 다시 확인하세요.")
    try:
        if not path.exists():
            raise DoctorInputError(f"스크립트 {path}이(가) 없습니다. 경로와 현재 폴더({os.getcwd()})를 확인하세요.")
        if path.is_dir():
            raise DoctorInputError(f"{path}은(는) 폴더입니다. 학습 스크립트 파일(.py)을 주세요.")
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise DoctorInputError(f"{path}은(는) {size // 1024} KiB라 학습 스크립트로 보기에 너무 큽니다"
                                   f"(최대 {MAX_BYTES // 1024 // 1024} MiB). 파이썬 파일이 맞는지 확인하세요.")
        source = path.read_bytes()
    except OSError as err:
        raise DoctorInputError(f"스크립트 {path}을(를) 읽지 못했습니다({err.strerror}). 권한과 경로를 확인하세요.") from None
    if path.suffix == ".ipynb":
        raise DoctorInputError(f"{path}은(는) Jupyter 노트북입니다. `jupyter nbconvert --to script {path}`로 .py 파일을 "
                               "만들어 그 파일을 주세요.")
    if b"\0" in source:
        raise DoctorInputError(f"{path}은(는) 파이썬 파일이 아닙니다(바이너리 파일). 학습 스크립트(.py)를 주세요.")
    try:
        compile(source, str(path), "exec", dont_inherit=True)
    except SyntaxError as err:
        where = f"{path}:{err.lineno}" if err.lineno else str(path)
        hint = "" if path.suffix == ".py" else " 파이썬 파일이 맞는지도 확인하세요."
        raise DoctorInputError(f"{where}: 문법 오류입니다({err.msg}). 그 줄을 고친 뒤 다시 실행하세요.{hint}") from None
    except ValueError as err:  # source that cannot be decoded
        raise DoctorInputError(f"{path}을(를) 파이썬 코드로 읽지 못했습니다({err}). UTF-8로 저장했는지 확인하세요.") from None
    return path


def check_count(value: object, name: str, flag: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise DoctorInputError(f"{name}({flag})은(는) 1 이상의 정수여야 합니다. 받은 값: {value!r}")
    return value


def check_inputs(script: object, nproc: object, args: object, timeout: object, steps: object, batches: object,
                 cwd: object) -> tuple[Path, list[str], int | None, int | None, str]:
    path = check_script(script)
    try:  # the engine's own rules for N and the time limit, said as the doctor's error
        check_nproc(nproc)  # type: ignore[arg-type]
        check_timeout(timeout)
    except LabConfigError as err:
        raise DoctorInputError(str(err)) from None
    if not isinstance(args, (list, tuple)) or not all(isinstance(a, str) for a in args):
        raise DoctorInputError(f"스크립트 인자는 문자열 목록이어야 합니다(예: [\"--epochs\", \"1\"]). 받은 값: {args!r}")
    folder = os.getcwd() if cwd is None else cwd
    if not isinstance(folder, (str, os.PathLike)) or not Path(folder).is_dir():
        raise DoctorInputError(f"실행할 폴더 cwd={cwd!r}이(가) 없습니다. 있는 폴더를 주세요.")
    return (path, list(args), check_count(steps, "스텝 수", "--steps"), check_count(batches, "에폭당 배치 수", "--batches"),
            os.fspath(folder))
