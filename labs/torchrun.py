"""Whether this process is a rank torchrun started, judged so that a stale shell cannot fool it.

torchrun's agent (``torch/distributed/elastic/agent/server/local_elastic_agent.py``) gives every
worker the same full set of variables. Variables left in a shell from an earlier job (an
``export MASTER_ADDR=…``, a copied ``RANK=0``) are only part of that set, or inconsistent, or they
reach a process whose parent is a shell rather than the agent: then the labs spawn their own
ranks and say which variables they ignored.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# Set by torchrun for each worker (torch 2.13, LocalElasticAgent._start_workers). All of them are
# needed to call a process a torchrun rank; any of them alone is a leftover worth naming.
REQUIRED = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
            "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
            "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS")
VARIABLES = REQUIRED + ("ROLE_NAME", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE",
                        "TORCHELASTIC_SIGNALS_TO_HANDLE")
# How the agent's own command line names it: the torchrun script, or python -m torch.distributed.run/launch.
_AGENT_NAMES = ("torchrun", "torch.distributed.run", "torch.distributed.launch")


@dataclass(frozen=True)
class TorchrunEnv:
    """The verdict on this process's environment."""

    in_place: bool
    leftovers: tuple[str, ...] = ()  # torchrun variables present although this is not a torchrun rank
    reason: str = ""                 # why they do not make a torchrun rank (Korean)

    def notice(self) -> str:
        """The one Korean line that says which leftover variables were ignored ('' when none)."""
        if self.in_place or not self.leftovers:
            return ""
        names = " ".join(self.leftovers)
        return (f"알림: torchrun이 띄운 랭크가 아니어서({self.reason}) 셸에 남은 torchrun 변수 {names}를 무시하고 "
                f"랭크를 직접 띄웁니다. 지우려면: unset {names}")


def _int(env: Mapping[str, str], key: str) -> int | None:
    try:
        return int(env[key])
    except (KeyError, ValueError):
        return None


def _inconsistency(env: Mapping[str, str]) -> str:
    """What makes the variables not torchrun's own ('' when they are consistent)."""
    missing = [k for k in REQUIRED if k not in env]
    if missing:
        return f"{', '.join(missing)} 없음"
    parsed = {k: _int(env, k) for k in REQUIRED if k not in ("MASTER_ADDR", "TORCHELASTIC_RUN_ID")}
    bad = [k for k, v in parsed.items() if v is None or v < 0]
    if bad:
        return f"{', '.join(bad)}이(가) 0 이상의 정수가 아님"
    values = {k: v for k, v in parsed.items() if v is not None}
    pairs = (("RANK", "WORLD_SIZE"), ("LOCAL_RANK", "LOCAL_WORLD_SIZE"), ("GROUP_RANK", "GROUP_WORLD_SIZE"),
             ("ROLE_RANK", "ROLE_WORLD_SIZE"))
    for index, size in pairs:
        if not values[index] < values[size]:
            return f"{index}={values[index]}이(가) {size}={values[size]}보다 작지 않음"
    if values["LOCAL_WORLD_SIZE"] > values["WORLD_SIZE"]:
        return "LOCAL_WORLD_SIZE가 WORLD_SIZE보다 큼"
    if values["TORCHELASTIC_RESTART_COUNT"] > values["TORCHELASTIC_MAX_RESTARTS"]:
        return "TORCHELASTIC_RESTART_COUNT가 TORCHELASTIC_MAX_RESTARTS보다 큼"
    if not 0 < values["MASTER_PORT"] < 65536:
        return f"MASTER_PORT={values['MASTER_PORT']}이(가) 포트 번호가 아님"
    return ""


def parent_command(pid: int | None = None) -> list[str] | None:
    """The parent process's argv (Linux /proc), or None where that cannot be read."""
    try:
        raw = Path(f"/proc/{os.getppid() if pid is None else pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _is_agent(argv: list[str]) -> bool:
    return any(Path(arg).name in _AGENT_NAMES or arg in _AGENT_NAMES for arg in argv)


def detect(environ: dict | None = None, parent: list[str] | None = None) -> TorchrunEnv:
    """Judge ``environ`` (default: os.environ) and the parent's argv (default: read from /proc)."""
    env = os.environ if environ is None else environ
    present = tuple(k for k in VARIABLES if k in env)
    if not present:
        return TorchrunEnv(False)
    reason = _inconsistency(env)
    if not reason:
        argv = parent_command() if parent is None and environ is None else parent
        if argv is not None and not _is_agent(argv):
            name = Path(argv[0]).name if argv else "?"
            reason = f"부모 프로세스가 torchrun 에이전트가 아니라 {name}"
    return TorchrunEnv(not reason, () if not reason else present, reason)


def in_torchrun() -> bool:
    """True when this process is a rank that torchrun (its elastic agent) started."""
    return detect().in_place
