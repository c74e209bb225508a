import signal
import sys

from .errors import EXIT_SIGNAL

try:
    from .cli import main

    code = main()
except KeyboardInterrupt:  # Ctrl-C, even while torch is still being imported: one line, no traceback
    try:
        print("중단: Ctrl-C(SIGINT)로 실행을 멈췄습니다. 띄운 랭크는 모두 종료했습니다.", file=sys.stderr, flush=True)
    except OSError:
        pass
    code = EXIT_SIGNAL + signal.SIGINT
sys.exit(code)
