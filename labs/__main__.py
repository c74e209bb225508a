"""``python -m labs``: the command line's one top-level handler around :func:`labs.cli.main`.

Korean reaches any terminal (a stream that cannot encode Hangul is switched to UTF-8), a closed pipe
(``| head``) ends quietly, and an error the engine did not expect exits 3, never 1 (a failed check),
with one Korean line that names the file holding its traceback."""

import io
import os
import signal
import sys
import tempfile
import traceback

from .errors import EXIT_LAB_ERROR, EXIT_SIGNAL, say


def _utf8_streams() -> None:
    """Switch stdout and stderr to UTF-8 when their encoding cannot write Korean (PYTHONIOENCODING=latin-1,
    an ASCII locale without Python's UTF-8 mode); a character the terminal cannot show is replaced, not fatal."""
    for stream in (sys.stdout, sys.stderr):
        if not isinstance(stream, io.TextIOWrapper):
            continue
        try:
            "한".encode(stream.encoding)
        except (LookupError, UnicodeEncodeError):
            stream.reconfigure(encoding="utf-8", errors="replace")


def _save_traceback(text: str) -> str | None:
    """Write ``text`` to a new ``labs-error-*.txt`` in TMPDIR as it was at start (a rank under torchrun points its
    own temporary files into a folder it removes), or, when TMPDIR cannot take it, the current folder; its
    path, or None when neither can."""
    for folder in (_TMPDIR, os.getcwd()):
        try:
            fd, path = tempfile.mkstemp(prefix="labs-error-", suffix=".txt", dir=folder)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
            return path
        except OSError:
            continue
    return None


def _unexpected(err: Exception) -> int:
    """One Korean line for an error the engine did not expect; the traceback goes to a file the line names."""
    text = "".join(traceback.format_exception(err))
    what = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else '(메시지 없음)'}"
    path = _save_traceback(text)
    where = f"전체 traceback은 {path}에 저장했습니다" if path else "traceback을 저장할 곳이 없어 아래에 붙입니다"
    say(f"예상하지 못한 오류로 멈췄습니다({what}). {where}. 메시지가 가리키는 파일·폴더·환경(TMPDIR, 디스크, "
         "권한)을 확인하고, 그래도 되풀이되면 그 파일을 붙여 알려 주세요.")
    if path is None:
        say(text.rstrip())
    return EXIT_LAB_ERROR


def _closed_pipe() -> int:
    """The reader of stdout went away (``| head``): say nothing more, as a program killed by SIGPIPE would."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # 종료할 때 남은 출력을 비우다 또 실패하지 않게
    return EXIT_SIGNAL + signal.SIGPIPE


_utf8_streams()
_TMPDIR = tempfile.gettempdir()
signal.signal(signal.SIGINT, signal.default_int_handler)  # labs/__init__ set a quiet end while torch loaded
try:
    from .cli import main

    code = main()
except KeyboardInterrupt:  # Ctrl-C, even while torch is still being imported: one line, no traceback
    say("중단: Ctrl-C(SIGINT)로 실행을 멈췄습니다. 띄운 랭크는 모두 종료했습니다.")
    code = EXIT_SIGNAL + signal.SIGINT
except BrokenPipeError:
    code = _closed_pipe()
except Exception as err:  # the one handler for what the engine did not expect
    code = _unexpected(err)
sys.exit(code)
