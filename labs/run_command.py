"""Run one command line (chapter 6's ``torchrun``) under a deadline, recorded like a lab run.

Part of the engine: no lesson in it. :mod:`labs.commands` writes the command lines the docs
show and runs nothing; this module runs one.
"""

from __future__ import annotations

import subprocess

from . import replay


def run_command(cmd: list[str], env: dict, timeout: float) -> subprocess.CompletedProcess:
    """Run ``cmd`` (e.g. torchrun) with a deadline; on timeout stop it and everything it started.

    Recorded and replayed like a lab run when ``LABS_RECORD_DIR``/``LABS_REPLAY_DIR`` are set
    (:class:`labs.replay.CommandRecording`: `make test` runs the chapter's torchrun once, in the build).
    """
    recording = replay.CommandRecording(cmd, env, timeout)
    recorded = recording.load()
    if recorded is not None:
        return subprocess.CompletedProcess(cmd, recorded["returncode"], recorded["stdout"], recorded["stderr"])
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()  # torchrun은 SIGTERM을 받으면 자기가 띄운 랭크들을 먼저 멈추고 끝난다
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        raise TimeoutError(f"{timeout:g}초 안에 끝나지 않아 명령과 그 자식 프로세스를 종료했습니다: {' '.join(cmd)}") from None
    recording.save({"returncode": proc.returncode, "stdout": out, "stderr": err})
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
