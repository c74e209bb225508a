"""The command lines for GPU nodes, several nodes and Slurm: one source for the docs and the tests.

README.md and the appendix (``book/appendix_gpu.ipynb``) show exactly the strings these functions
render with their defaults; ``tests/test_engine_cluster_commands.py`` runs the same functions with the
placeholders filled in (``HEAD_NODE`` → 127.0.0.1 and a free port, 8 GPUs → 2 CPU ranks,
the script folder → an absolute path) and checks that README.md contains the default strings.
Chapter 14's lines for the reader's recipe (``recipe/``) work the same way, run by ``tests/test_book_recipe.py``.
"""

from __future__ import annotations

import shlex

HEAD_NODE = "HEAD_NODE"      # placeholder: the host name of the first node
PORT = 29500                 # the rendezvous port on HEAD_NODE
GPUS_PER_NODE = 8
SLURM_DIR = "labs/slurm"     # the sbatch scripts, relative to the repository root
CPU_RANKS = 2                # ranks per node on a CPU partition (the scripts' default too)
TRAIN_EPOCHS = 20            # train.sbatch's default
GPU_CHECK = "bash labs/gpu_check.sh"


def _lab_args(lab: str, params: dict | None) -> str:
    args = "-m labs bench" if lab == "bench" else f"-m labs run {lab}"  # the benchmark has its own subcommand
    for key, value in (params or {}).items():
        args += f" --param {shlex.quote(f'{key}={value}')}"
    return args


def torchrun_one_node(lab: str = "replicas", nproc: int = GPUS_PER_NODE, params: dict | None = None) -> str:
    """One node: torchrun starts ``nproc`` ranks (one per GPU); each runs the lab in place."""
    return f"torchrun --nproc_per_node={nproc} {_lab_args(lab, params)}"


def torchrun_grade(path: str = "labs/ddp/miniddp.py", nproc: int = GPUS_PER_NODE) -> str:
    """One node: grade a DDP class (chapter 9) on ``nproc`` ranks started by torchrun."""
    return f"torchrun --nproc_per_node={nproc} -m labs grade {shlex.quote(path)}"


def _nodes(nnodes: int, nproc: int, head: str, port: int, program: str) -> str:
    return (f"torchrun --nnodes={nnodes} --nproc_per_node={nproc} --rdzv-backend=c10d "
            f"--rdzv-endpoint={head}:{port} {program}")


def torchrun_nodes(lab: str = "replicas", nnodes: int = 2, nproc: int = GPUS_PER_NODE,
                   head: str = HEAD_NODE, port: int = PORT, params: dict | None = None) -> str:
    """Several nodes: the same line on every node; the agents meet at ``head:port`` (c10d)."""
    return _nodes(nnodes, nproc, head, port, _lab_args(lab, params))


def _sbatch(script: str, args: str, cpu_ranks: int | None, slurm_dir: str) -> str:
    line = " ".join(filter(None, (f"{slurm_dir}/{script}", args)))
    if cpu_ranks is None:  # GPU partition: the scripts' #SBATCH defaults as they are
        return f"sbatch {line}"
    # CPU partition: no GPUs, one node, NPROC_PER_NODE ranks with a core each
    return f"NPROC_PER_NODE={cpu_ranks} sbatch --nodes=1 --gpus-per-node=0 --cpus-per-task={cpu_ranks} {line}"


def sbatch_lab(lab: str = "replicas", cpu_ranks: int | None = None, slurm_dir: str = SLURM_DIR) -> str:
    """Slurm: ``ddp_lab.sbatch`` runs one lab; ``cpu_ranks`` switches to a CPU partition."""
    return _sbatch("ddp_lab.sbatch", lab, cpu_ranks, slurm_dir)


def sbatch_train(epochs: int = TRAIN_EPOCHS, cpu_ranks: int | None = None, slurm_dir: str = SLURM_DIR) -> str:
    """Slurm: ``train.sbatch`` runs chapter 6's training script for ``epochs`` epochs."""
    return _sbatch("train.sbatch", str(epochs), cpu_ranks, slurm_dir)


RESTART_ENV = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"  # a workaround seen on torch 2.13 (chapter 6.8)


def torchrun_restart(nproc: int = 2, max_restarts: int = 1, epochs: int = 6, ckpt_dir: str = "체크포인트폴더",
                     fail_at_epoch: int = 3, script: str = "labs/ddp/train_script.py") -> str:
    """Chapter 6.8: the training script under torchrun, restarted after a rank fails, resuming from
    the checkpoint. The chapter shows this line and runs :func:`torchrun_restart_argv` of it."""
    return (f"{RESTART_ENV} torchrun --standalone --nproc_per_node={nproc} --max-restarts={max_restarts} "
            f"{script} --epochs {epochs} --ckpt-dir {shlex.quote(ckpt_dir)} --fail-at-epoch {fail_at_epoch}")


def torchrun_restart_argv(line: str, python: str) -> tuple[list[str], dict[str, str]]:
    """A ``torchrun`` line as (argv with ``python -m torch.distributed.run``, leading VAR=value settings)."""
    words = shlex.split(line)
    env = {}
    while "=" in words[0] and not words[0].startswith("-"):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    if words[0] != "torchrun":
        raise ValueError(f"not a torchrun line: {line!r}")
    return [python, "-m", "torch.distributed.run", *words[1:]], env


# ----------------------------------------------------------------------------- chapter 14: the reader's recipe

RECIPE_DIR = "recipe"  # the two scripts a reader copies, relative to the repository root
RECIPE_SINGLE, RECIPE_DDP, RECIPE_SBATCH = "train_single.py", "train_ddp.py", "train_ddp.sbatch"


def recipe_single(recipe_dir: str = RECIPE_DIR) -> str:
    """One device (a GPU if there is one, else the CPU): the plain script, no torchrun."""
    return f"python {recipe_dir}/{RECIPE_SINGLE}"


def recipe_torchrun(nproc: int = GPUS_PER_NODE, recipe_dir: str = RECIPE_DIR) -> str:
    """One node: torchrun starts ``nproc`` ranks of the DDP script (one per GPU; ``nproc=1`` for one GPU)."""
    return f"torchrun --standalone --nproc_per_node={nproc} {recipe_dir}/{RECIPE_DDP}"


def recipe_nodes(nnodes: int = 2, nproc: int = GPUS_PER_NODE, head: str = HEAD_NODE, port: int = PORT,
                 recipe_dir: str = RECIPE_DIR) -> str:
    """Several nodes: the same line on every node, as for the labs (:func:`torchrun_nodes`)."""
    return _nodes(nnodes, nproc, head, port, f"{recipe_dir}/{RECIPE_DDP}")


def recipe_sbatch(cpu_ranks: int | None = None, recipe_dir: str = RECIPE_DIR) -> str:
    """Slurm: ``recipe/train_ddp.sbatch`` (its #SBATCH lines: 2 nodes × 8 GPUs); ``cpu_ranks``: a CPU partition."""
    return _sbatch(RECIPE_SBATCH, "", cpu_ranks, recipe_dir)


def doctor(script: str = f"{RECIPE_DIR}/{RECIPE_DDP}", args: tuple[str, ...] = (), nproc: int = CPU_RANKS) -> str:
    """``python -m labs doctor``: the reader's script rehearsed on ``nproc`` CPU ranks (chapter 14.6)."""
    ranks = f" --nproc {nproc}" if nproc != CPU_RANKS else ""
    rest = f" -- {' '.join(args)}" if args else ""
    return f"python -m labs doctor {script}{ranks}{rest}"


def recipe_commands() -> list[str]:
    """Chapter 14's launch lines: one GPU (plain and DDP), 8 GPUs on a node, 2 nodes, Slurm (GPU and CPU)."""
    return [recipe_single(), recipe_torchrun(1), recipe_torchrun(), recipe_nodes(), recipe_sbatch(),
            recipe_sbatch(cpu_ranks=CPU_RANKS)]


TRAP_ON_GPU = {"trap": "seed", "variant": "fix"}  # chapter 10: a trap run that ends (no hang, no crash)


def page_commands() -> list[str]:
    """The launch lines the chapters show besides README's (each page renders them from here)."""
    return [torchrun_restart(), torchrun_grade(), torchrun_one_node("traps", params=TRAP_ON_GPU), *recipe_commands()]


def readme_commands() -> list[str]:
    """The lines README.md must contain verbatim (its GPU-node section)."""
    return [torchrun_one_node(), torchrun_nodes(), sbatch_lab(), sbatch_train(), sbatch_lab(cpu_ranks=CPU_RANKS),
            GPU_CHECK]


def lab_commands(nproc: int = GPUS_PER_NODE) -> list[tuple[str, str]]:
    """(where in the book, one-node torchrun command) for every lab of ``python -m labs list``."""
    from .registry import all_labs

    return [(f"{lab.chapter}장" if lab.chapter < 99 else "부록", torchrun_one_node(lab.name, nproc))
            for lab in all_labs().values()]


def bash_block(*lines: str, comments: tuple[str, ...] = ()):
    """The lines as a fenced bash block, displayed as Markdown in a notebook cell.

    ``comments[i]`` (Korean) goes above ``lines[i]``; ``.data`` holds the Markdown text.
    """
    from IPython.display import Markdown

    body = []
    for i, line in enumerate(lines):
        if i < len(comments) and comments[i]:
            body.append(f"# {comments[i]}")
        body.append(line)
    return Markdown("```bash\n" + "\n".join(body) + "\n```")


def sbatch_header(script: str = "ddp_lab.sbatch"):
    """The ``#SBATCH`` lines of a script in ``labs/slurm`` (read from the file), as a bash block."""
    from pathlib import Path

    path = Path(__file__).resolve().parent / "slurm" / script
    return bash_block(*(line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("#SBATCH")))
