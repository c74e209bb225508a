"""A real single-node Slurm cluster in a temporary folder, for the launcher tests.

Not a test module: ``test_engine_cluster_commands.py`` and ``test_book_recipe.py`` import it. ``SlurmCluster`` writes a munge key and a
``slurm.conf`` (ports the OS picked, so it never meets a system Slurm or another test's cluster),
starts ``munged``, ``slurmctld`` and ``slurmd`` in the foreground as children of this process,
and stops them by pid. Every process the cluster starts (daemons, job steps, torchrun, ranks)
inherits ``SLURM_CONF`` pointing into the temporary folder, which is how ``leftovers()`` finds
them without matching any process by name.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import psutil

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo", "srun")
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
                "DEADLINE", "PREEMPTED"}


def missing_reason() -> str | None:
    """Why a Slurm cluster cannot be started here (``None`` when it can)."""
    missing = [name for name in DAEMONS if shutil.which(name, path=_search_path()) is None]
    if missing:
        return (f"Slurm/munge 실행 파일이 없습니다 ({', '.join(missing)}). "
                "root로 `make slurm`(apt-get install slurmd slurmctld slurm-client munge)을 실행하세요.")
    if os.geteuid() != 0:
        return "단일 노드 Slurm 클러스터는 root로만 띄울 수 있습니다 (slurmd가 작업을 다른 사용자로 실행하므로)."
    return None


@contextlib.contextmanager
def running_cluster(root: Path, env: dict | None = None) -> Iterator["SlurmCluster"]:
    """A started cluster under ``root`` (skips the test when Slurm cannot run here), stopped and swept at the end."""
    import pytest

    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    cluster = SlurmCluster(root, env=env)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        cluster.kill_leftovers()


def _search_path() -> str:
    return os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/bin", "/sbin"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlurmCluster:
    """slurmctld + slurmd + munged for one node (this machine), configured under ``root``."""

    def __init__(self, root: Path, env: dict | None = None):
        self.root = Path(root)
        self.conf = self.root / "slurm.conf"
        self.host = socket.gethostname().split(".")[0]
        self.procs: dict[str, subprocess.Popen] = {}
        # the daemons', and so every job's, environment: ``env`` (default os.environ) plus the config
        self.env = {**(os.environ if env is None else env), "SLURM_CONF": str(self.conf), "PATH": _search_path()}

    # ------------------------------------------------------------------ start / stop
    def start(self, timeout: float = 60.0) -> None:
        try:  # the job scripts use the node name as the rendezvous host (HEAD_NODE)
            socket.gethostbyname(self.host)
        except OSError:
            raise RuntimeError(f"이 기계의 호스트 이름 {self.host!r}을(를) 주소로 바꿀 수 없습니다. "
                               f"/etc/hosts에 '127.0.0.1 {self.host}' 줄을 추가하세요.") from None
        for sub in ("munge", "ctld", "spool", "log"):
            (self.root / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
        key = self.root / "munge" / "munge.key"
        subprocess.run([self._bin("mungekey"), "--create", f"--keyfile={key}"], check=True, env=self.env,
                       capture_output=True)
        socket_path = self.root / "munge" / "munge.socket"
        self._write_conf(socket_path)
        self._spawn("munged", [self._bin("munged"), "--foreground", "--force", f"--socket={socket_path}",
                               f"--key-file={key}", f"--pid-file={self.root / 'munge' / 'munged.pid'}",
                               f"--seed-file={self.root / 'munge' / 'munged.seed'}",
                               f"--log-file={self.root / 'log' / 'munged.log'}"])
        self._wait(lambda: socket_path.exists(), timeout, "munged가 소켓을 만들지 않았습니다")
        self._spawn("slurmctld", [self._bin("slurmctld"), "-D", "-i", "-L", str(self.root / "log" / "slurmctld.log")])
        self._spawn("slurmd", [self._bin("slurmd"), "-D", "-N", self.host, "-L", str(self.root / "log" / "slurmd.log")])
        self._wait(self._node_idle, timeout, "노드가 idle 상태가 되지 않았습니다")

    def stop(self) -> None:
        """Cancel what is still queued, then stop slurmd, slurmctld and munged by pid."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            subprocess.run([self._bin("scancel"), "--full", "--user=root"], env=self.env, capture_output=True,
                           timeout=30)
            self._wait(lambda: not self._queue(), 30, "취소한 작업이 끝나지 않았습니다", fail=False)
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.pop(name, None)
            if proc is None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def leftovers(self) -> list[psutil.Process]:
        """Live processes (other than the daemons themselves) that carry this cluster's SLURM_CONF."""
        own = {p.pid for p in self.procs.values()}
        out = []
        for p in psutil.process_iter():
            if p.pid in own or p.pid == os.getpid():
                continue
            try:
                if p.status() != psutil.STATUS_ZOMBIE and p.environ().get("SLURM_CONF") == str(self.conf):
                    out.append(p)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return out

    def kill_leftovers(self) -> None:
        for p in self.leftovers():
            try:
                p.kill()
            except psutil.Error:
                pass

    # ------------------------------------------------------------------ jobs
    def submit(self, command: str, cwd: Path, extra_env: dict | None = None) -> int:
        """Run a shell command line that calls ``sbatch`` (as a reader would) and return the job id."""
        proc = subprocess.run(["bash", "-c", command], cwd=cwd, env={**self.env, **(extra_env or {})},
                              capture_output=True, text=True, timeout=60)
        match = re.search(r"Submitted batch job (\d+)", proc.stdout)
        if proc.returncode != 0 or not match:
            raise RuntimeError(f"sbatch 실패 (종료 코드 {proc.returncode}): {command}\n{proc.stdout}{proc.stderr}")
        return int(match.group(1))

    def wait(self, job_id: int, timeout: float) -> dict:
        """Poll until the job ends; return its ``scontrol show job`` fields. Cancels it on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            info = self.job(job_id)
            if info.get("JobState") in FINAL_STATES:
                return info
            if time.monotonic() >= deadline:
                subprocess.run([self._bin("scancel"), str(job_id)], env=self.env, capture_output=True, timeout=30)
                raise TimeoutError(f"작업 {job_id}이(가) {timeout:g}초 안에 끝나지 않아 취소했습니다: {info}")
            time.sleep(0.5)

    def job(self, job_id: int) -> dict:
        out = self._scontrol("show", "job", "--oneliner", str(job_id))
        return dict(re.findall(r"(\w+)=(\S*)", out))

    def log(self, name: str) -> str:
        path = self.root / "log" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # ------------------------------------------------------------------ internals
    def _write_conf(self, socket_path: Path) -> None:
        cpus = os.cpu_count() or 1
        memory = max(1000, psutil.virtual_memory().total // 2**20 // 2)
        self.conf.write_text("\n".join([
            "ClusterName=ddpcourse",
            f"SlurmctldHost={self.host}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={socket_path}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "MpiDefault=none",
            "SlurmUser=root",
            "SlurmdUser=root",
            "ReturnToService=2",
            f"StateSaveLocation={self.root / 'ctld'}",
            f"SlurmdSpoolDir={self.root / 'spool'}",
            f"SlurmctldPidFile={self.root / 'ctld' / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root / 'spool' / 'slurmd.pid'}",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=30",
            "MinJobAge=600",
            f"NodeName={self.host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory} State=UNKNOWN",
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
            "",
        ]))

    def _spawn(self, name: str, cmd: list[str]) -> None:
        out = open(self.root / "log" / f"{name}.stdout", "w")
        self.procs[name] = subprocess.Popen(cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)
        out.close()

    def _bin(self, name: str) -> str:
        return shutil.which(name, path=_search_path()) or name

    def _scontrol(self, *args: str) -> str:
        proc = subprocess.run([self._bin("scontrol"), *args], env=self.env, capture_output=True, text=True,
                              timeout=30)
        return proc.stdout

    def _queue(self) -> list[str]:
        proc = subprocess.run([self._bin("squeue"), "--noheader", "--format=%i"], env=self.env,
                              capture_output=True, text=True, timeout=30)
        return proc.stdout.split()

    def _node_idle(self) -> bool:
        proc = subprocess.run([self._bin("sinfo"), "--noheader", "--format=%T"], env=self.env,
                              capture_output=True, text=True, timeout=30)
        return proc.stdout.strip() == "idle"

    def _wait(self, ready, timeout: float, what: str, fail: bool = True) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            for name, proc in self.procs.items():
                if proc.poll() is not None and fail:
                    raise RuntimeError(f"{name}이(가) 종료 코드 {proc.returncode}로 끝났습니다.\n"
                                       f"{self.log(name)[-2000:]}")
            if time.monotonic() >= deadline:
                if fail:
                    raise RuntimeError(f"{what} ({timeout:g}초).\n{self.log('slurmctld')[-2000:]}\n"
                                       f"{self.log('slurmd')[-2000:]}")
                return
            time.sleep(0.2)
