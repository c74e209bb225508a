"""A Jupyter kernel that ran a lab shuts down like any other: fast, through its atexit, leaving nothing in TMPDIR.

At shutdown ipykernel (7.x) sends SIGTERM to each child process and waits for them all to end before it exits
(``Kernel._at_shutdown``). The launcher's fork server ends on SIGTERM, but multiprocessing's resource tracker
ignores it, so the kernel outlives jupyter_client's wait (5 s) and is killed with SIGKILL: its atexit handlers
never run and multiprocessing's ``pymp-*`` folder (the fork server's socket) stays in TMPDIR, one per notebook
of `make book`. :func:`stop_helpers_at_kernel_shutdown` stops both helpers the way multiprocessing itself does
(closing their pipes) just before the kernel signals its children; the kernel then exits normally.
"""

from __future__ import annotations

import sys
from multiprocessing import forkserver, resource_tracker
from typing import Any

_MARK = "_labs_stops_helpers"


def _kernel() -> Any:
    """The running ipykernel's ``Kernel``, or None outside one."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return getattr(shell, "kernel", None)


def stop_helpers_at_kernel_shutdown() -> None:
    """Inside a Jupyter kernel (once): stop the fork server and the resource tracker when the kernel shuts down
    or restarts, before it signals its children. Elsewhere it does nothing: a script's own exit stops them."""
    kernel = _kernel()
    at_shutdown = getattr(kernel, "_at_shutdown", None)
    if at_shutdown is None or getattr(at_shutdown, _MARK, False):
        return

    async def stop_helpers_then_shut_down() -> None:
        forkserver._forkserver._stop()  # type: ignore[attr-defined]  # 살아 있음 파이프를 닫는다: 포크 서버가 끝난다
        resource_tracker._resource_tracker._stop()  # type: ignore[attr-defined]  # 파이프를 닫는다: 쓰는 쪽이 모두 닫혀 트래커가 끝난다
        await at_shutdown()

    setattr(stop_helpers_then_shut_down, _MARK, True)
    kernel._at_shutdown = stop_helpers_then_shut_down
