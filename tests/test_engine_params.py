"""Typed lab parameters: every parameter of every lab rejects bad values in Korean (exit 2) before
any rank is spawned, on the command line and through ``labs.run`` alike; and every value inside a
declared range is measurable: the run passes (a claim whose premise fails is n/a) or is refused.

The bad values are derived from each parameter's declared spec (below its minimum, above its
maximum, the wrong type, NaN/inf, an unknown word, an empty list), so a lab added later is walked
too. Every number must declare both bounds, so the walk always has an out-of-range value to try.
"""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import clean_env, has_hangul

import labs
from labs.cli import EXIT_BAD_INPUT, main
from labs.ddp.train_script import TrainConfig, run_config
from labs.errors import LabConfigError, LabError
from labs.params import Bool, Choice, Float, Int, ListOf, Text, parse_pairs, resolve
from labs.tools.checkpoint_folder import CHECKPOINT_NAME, CONFIG_NAME


def bad_cli_values(spec) -> list[str]:
    """Command-line strings that ``spec`` must reject."""
    if isinstance(spec, Int):
        out = ["1.5", "abc", "nan", "inf", "true"]
        if spec.min is not None:
            out.append(str(spec.min - 1))
        if spec.max is not None:
            out.append(str(spec.max + 1))
        return out
    if isinstance(spec, Float):
        out = ["abc", "nan", "inf", "-inf"]
        if spec.min is not None:
            out.append(repr(spec.min) if spec.min_open else repr(spec.min - 1.0))
        if spec.max is not None:
            out.append(repr(spec.max * 2 + 1))
        return out
    if isinstance(spec, Choice):
        return ["bogus", ""]
    if isinstance(spec, Bool):
        return ["maybe", "2"]
    if isinstance(spec, ListOf):
        return ["", " , ", *[v for v in bad_cli_values(spec.item) if v.strip()][:3],
                " ".join([str(spec.default[0])] * (spec.max_len + 1))]
    if isinstance(spec, Text):
        return [] if spec.allow_empty else [""]
    raise AssertionError(f"no bad values known for spec {spec!r}: add them here")


def bad_python_values(spec) -> list:
    """Python values that ``spec`` must reject in ``labs.run(name, key=value)``."""
    if isinstance(spec, Int):
        return ["4", 1.5, True, None] + ([spec.min - 1] if spec.min is not None else [])
    if isinstance(spec, Float):
        return ["0.1", float("nan"), float("inf"), True, None] + ([spec.min - 1.0] if spec.min is not None else [])
    if isinstance(spec, Choice):
        return ["bogus", 3, None]
    if isinstance(spec, Bool):
        return ["on", 1, None]
    if isinstance(spec, ListOf):
        return [(), "4K 1M", None, tuple(spec.default) * (spec.max_len + 1)]
    if isinstance(spec, Text):
        return [3, None]
    raise AssertionError(f"no bad values known for spec {spec!r}")


def lab_params(lab) -> list[tuple[dict, str, object]]:
    """Every parameter of ``lab`` as ``(case, name, spec)``: a lab made of cases (traps) has each case's own
    parameters under that case (``case`` = ``{"trap": "shape"}``), the shared ones under ``{}``."""
    found: list[tuple[dict, str, object]] = [({}, key, spec) for key, spec in lab.params.items()]
    for name, case in lab.cases.items():
        found += [({lab.case_key: name}, key, spec) for key, spec in case.params.items()]
    return found


def cases(make_values) -> list:
    found = []
    for lab in labs.all_labs().values():
        for case, key, spec in lab_params(lab):
            tag = "".join(f"[{name}]" for name in case.values())
            for value in make_values(spec):
                found.append(pytest.param(lab.name, case, key, value, id=f"{lab.name}{tag}-{key}={value!r}"[:80]))
    return found


CLI_CASES = cases(bad_cli_values)
PY_CASES = cases(bad_python_values)


def test_the_walk_covers_every_lab_and_most_parameters():
    walked = {(lab, tuple(case.items()), key) for lab, case, key, _ in (c.values for c in CLI_CASES)}
    declared = {(lab.name, tuple(case.items()), key) for lab in labs.all_labs().values() for case, key, _ in lab_params(lab)}
    assert walked, "no parameter was walked: the walk must never pass vacuously"
    text_only = {(lab.name, tuple(case.items()), key) for lab in labs.all_labs().values()
                 for case, key, spec in lab_params(lab) if isinstance(spec, Text) and spec.allow_empty}
    assert declared - walked == text_only
    assert {lab for lab, _, _ in walked} >= {name for name, lab in labs.all_labs().items() if lab.params}
    assert {case["trap"] for lab, case, _, _ in (c.values for c in CLI_CASES) if lab == "traps" and case} == \
        set(labs.get_lab("traps").cases)  # 함정마다 제 인자를 그 함정으로 걷는다


@pytest.mark.parametrize("lab, case, key, value", CLI_CASES)
def test_cli_rejects_bad_value_in_korean(no_spawn, capsys, lab, case, key, value):
    chosen = [arg for name, choice in case.items() for arg in ("--param", f"{name}={choice}")]
    code = main(["run", lab, "--nproc", "2", *chosen, "--param", f"{key}={value}"])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT, err
    assert has_hangul(err) and key in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("lab, case, key, value", PY_CASES)
def test_python_api_rejects_bad_value_in_korean(no_spawn, lab, case, key, value):
    with pytest.raises(LabConfigError) as info:
        labs.run(lab, nproc=2, **case, **{key: value})
    assert key in str(info.value) and has_hangul(str(info.value))


@pytest.mark.parametrize("argv", [
    ["run", "replicas", "--param", "per_rank_batch=0"],
    ["run", "allreduce", "--param", "per_rank_batch=-3"],
    ["run", "train", "--param", "lr=-1"],
])
def test_reported_cases_exit_2_without_traceback_in_a_real_process(argv):
    """The three commands of the issue, as a user types them (a real interpreter, no monkeypatching)."""
    proc = subprocess.run([sys.executable, "-m", "labs", *argv], capture_output=True, text=True,
                          encoding="utf-8", timeout=120, env=clean_env())
    assert proc.returncode == EXIT_BAD_INPUT, proc.stderr
    assert "Traceback" not in proc.stderr and has_hangul(proc.stderr)
    assert argv[-1].split("=")[0] in proc.stderr


def test_specs_convert_command_line_text():
    specs = {"n": Int(1, min=1), "lr": Float(0.1, min=0.0, min_open=True), "mode": Choice("a", ("a", "b")),
             "on": Bool(True), "sizes": ListOf(Int(4, min=4), (4,), sizes=True),
             "caps": ListOf(Float(1.0, min=0.0, min_open=True), (1.0,), words=("default",))}
    got = parse_pairs("x", specs, ["n=3", "lr=1e-3", "mode='b'", "on=off", "sizes=4K,1M 8", "caps=0.5 default"])
    assert got == {"n": 3, "lr": 0.001, "mode": "b", "on": False, "sizes": (4096, 1 << 20, 8),
                   "caps": (0.5, "default")}
    assert resolve("x", specs, {"n": 2}) == {"n": 2, "lr": 0.1, "mode": "a", "on": True, "sizes": (4,),
                                            "caps": (1.0,)}


def test_every_number_declares_its_range():
    loose = [f"{lab.name}.{key}" for lab in labs.all_labs().values() for _, key, spec in lab_params(lab)
             for s in ([spec.item] if isinstance(spec, ListOf) else [spec])
             if isinstance(s, (Int, Float)) and (s.min is None or s.max is None)]
    assert not loose, f"numeric parameters without a declared minimum and maximum: {loose}"


def test_every_default_satisfies_its_own_spec():
    for lab in labs.all_labs().values():
        for case, key, spec in lab_params(lab):
            assert spec.check(key, spec.default) == spec.default, (lab.name, case, key)


# ----------------------------------------------------------------------------- values inside the ranges

TINY = 1e-300  # the smallest value of an open range from 0 that the walk tries (issue 39: caps_mb=1e-300)
# The other parameters of a walk run: the cheapest values that keep every claim measurable, at N=2.
CHEAP: dict[str, dict[str, object]] = {"miniddp": {"repeats": 1}, "train": {"epochs": 2}, "myths": {"steps": 30},
         "bench": {"sizes": (4096, 8 << 20), "repeats": 3, "warmup": 1, "memcpy_mb": 1, "ddp_steps": 2}}
# In range but not walked: these bounds cost memory or minutes, not a claim.
UNWALKED = {
    ("allreduce", "numel", "max"): "1 GiB float32 per rank",
    ("bench", "sizes", "max"): "1 GiB messages", ("bench", "memcpy_mb", "max"): "4 GiB copies",
    ("bench", "repeats", "max"): "minutes of timing", ("bench", "ddp_steps", "max"): "minutes of timing",
    ("bench", "width", "max"): "a 4096-wide model of 12 layers (800 MB)", ("bench", "batch", "max"): "4096 × 4096 inputs",
    ("bench", "depth", "max"): "64 layers of width 256, timed", ("buckets", "width", "max"): "800 MB of parameters",
    ("buckets", "batch", "max"): "4096 × 256 activations per layer, 20 iterations",
    ("buckets", "depth", "max"): "64 layers timed per cap", ("miniddp", "width", "max"): "six 2048-wide models",
    ("miniddp", "repeats", "max"): "500 timed steps per variant", ("myths", "hidden", "max"): "FSDP of a 4096-wide model",
}


def in_range_values(spec) -> list[tuple[str, object]]:
    """A numeric spec's bounds and one value between them (geometric when the range is wide), as
    ``(where, value)``; a list's value is one such item."""
    item = spec.item if isinstance(spec, ListOf) else spec
    if not isinstance(item, (Int, Float)):
        return []
    low, high = item.min, item.max
    assert low is not None and high is not None, "numeric specs declare both bounds"
    if isinstance(item, Float) and item.min_open:  # 열린 하한: 그 바로 위(0이면 1e-300: 바이트로 0인 cap, 움직이지 않는 lr)
        low = low * 1.001 if low else TINY
    mid = math.sqrt(max(low, 1) * high) if high > 16 * max(low, 1) else (low + high) / 2
    mid = round(mid) if isinstance(item, Int) else mid
    return [(where, (v,) if isinstance(spec, ListOf) else v) for where, v in (("min", low), ("max", high), ("mid", mid))]


def walk_cases(lab_name: str) -> list[dict]:
    lab = labs.get_lab(lab_name)
    cases: list[dict] = []
    for key, spec in lab.params.items():
        for where, value in in_range_values(spec):
            if (lab_name, key, where) not in UNWALKED and not key.endswith("seed") and key != "seed_base":
                cases.append({**CHEAP.get(lab_name, {}), key: value})
    return cases


def outcome(lab_name: str, nproc: int, params: dict) -> str:
    """How ``python -m labs run`` would end: ``ok`` (0), ``refused`` (2), else what went wrong."""
    try:
        result = labs.run(lab_name, nproc=nproc, timeout=120, **params)
    except LabConfigError as err:
        assert has_hangul(str(err)), err
        return "refused"
    except LabError as err:
        return f"rank error (exit 3): {str(err).splitlines()[0]}"
    return "ok" if result.ok else f"check failed (exit 1): {[c.name for c in result.failed()]}"


def walk(lab_name: str, cases: list[dict], nproc: int = 2) -> None:
    assert cases, f"nothing to walk in {lab_name}"
    bad = [(params, got) for params in cases if (got := outcome(lab_name, nproc, params)) not in ("ok", "refused")]
    assert not bad, "\n".join(f"{lab_name} {params}: {got}" for params, got in bad)


WALKED = sorted(name for name, lab in labs.all_labs().items() if name not in ("bench", "traps", "faults")
                and any(in_range_values(spec) for spec in lab.params.values()))


@pytest.mark.real_ranks
@pytest.mark.timeout(900)
@pytest.mark.parametrize("lab_name", WALKED)
def test_values_inside_every_range_pass_or_are_refused(lab_name):
    """Each numeric parameter at its bounds and in between (the others cheap, N=2, real ranks): the run
    passes every claim (n/a where its premise does not hold) or is refused in Korean before spawning;
    never a failed claim (exit 1) or a rank error (exit 3). bench walks in test_lab_bench.py (it is timed)."""
    walk(lab_name, walk_cases(lab_name))


# In-range values that ended in a traceback or a failed claim (issue 39), at the N they were run with: fsdp's
# lr=1e-12 divided by a distance of zero (ZeroDivisionError), uneven's lr=10 diverged to 1e16 gradients at N=3
# (float32 rounding read as a wrong divisor) and to NaN at N=4.
REPORTED = [("fsdp", 2, {"lr": 1e-12}), ("uneven", 3, {"lr": 10.0}), ("uneven", 4, {"lr": 10.0})]


@pytest.mark.real_ranks
@pytest.mark.parametrize("lab_name, nproc, params", REPORTED)
def test_reported_in_range_values_pass_or_are_refused(lab_name, nproc, params):
    walk(lab_name, [params], nproc)


@pytest.mark.real_ranks
@pytest.mark.timeout(900)
def test_values_inside_the_trap_ranges_pass_or_are_refused():
    """Every trap and variant that finishes (the hanging and failing bugs are chapter 10's outcomes, see
    traps.EXPECTED), each numeric parameter it reads (its case's own) at its bounds and in between; the bugs
    that need a second rank are refused at N=1."""
    from labs.lessons.traps import EXPECTED, TRAPS, VARIANTS

    lab = labs.get_lab("traps")
    for trap, variant in itertools.product(TRAPS, VARIANTS):
        if (trap, variant) in EXPECTED:
            assert outcome("traps", 1, {"trap": trap, "variant": variant}) == "refused"
            continue
        cases = [{"trap": trap, "variant": variant, key: value} for key, spec in lab.cases[trap].params.items()
                 if not key.endswith("seed") for _, value in in_range_values(spec)]
        walk("traps", cases or [{"trap": trap, "variant": variant}])  # shape reads only its seed: its defaults


def test_the_walk_covers_every_numeric_parameter():
    walked = {(name, key) for name in WALKED for case in walk_cases(name) for key in case}
    numeric = {(name, key) for name in WALKED for key, spec in labs.get_lab(name).params.items()
               if in_range_values(spec) and not key.endswith("seed") and key != "seed_base"}
    assert numeric and numeric <= walked
    assert all(where == "max" and reason for (_, _, where), reason in UNWALKED.items())


@pytest.mark.parametrize("key, value", [("ckpt_dir", "/tmp/" + "a" * 256), ("ckpt_dir", "/tmp/" + "가" * 90),
                                        ("ckpt_dir", "x\0y"), ("ckpt_dir", "/a" * 2100)])
def test_an_unopenable_path_is_refused_before_spawning(no_spawn, capsys, key, value):
    """A path component over 255 bytes (OSError in a rank before), a NUL, a path over 4096 bytes:
    every Folder and InputFile parameter refuses them in Korean with exit 2."""
    code = main(["run", "train", "--nproc", "1", "--param", f"{key}={value}"])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT and key in err and "경로" in err and "Traceback" not in err, err
    traps_code = main(["run", "traps", "--nproc", "2", "--param", f"stderr_dir={value}"])
    assert traps_code == EXIT_BAD_INPUT and "stderr_dir" in capsys.readouterr().err


def _path_of_length(root: Path, length: int) -> str:
    """A path under ``root`` of exactly ``length`` characters, in names of at most 200 (each one the OS allows)."""
    path = str(root)
    while len(path) < length:
        path += "/" + "d" * min(200, length - len(path) - 1)
    return path


def _unusable_folder(case: str, tmp_path: Path) -> str:
    """A checkpoint folder the ranks could not use, built for ``case``."""
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    return {"4090-characters": _path_of_length(tmp_path, 4090),  # 그 안의 run_config.json.tmp가 4096바이트를 넘는다
            "names-a-file": str(tmp_path / "a-file"),
            "under-a-file": str(tmp_path / "a-file" / "ckpt"),
            "not-writable": "/proc/labs-ckpt"}[case]  # procfs: root도 파일을 만들 수 없다


@pytest.mark.parametrize("case", ["4090-characters", "names-a-file", "under-a-file", "not-writable"])
def test_a_folder_the_ranks_cannot_use_is_refused_before_spawning(no_spawn, capsys, tmp_path, case):
    """Before: OSError "File name too long", FileExistsError, NotADirectoryError in a rank (exit 3). Every
    Folder parameter refuses them in Korean with exit 2: a path too long for the files the ranks write in
    it, a path that names a file or lies under one, a folder nobody can write."""
    folder = _unusable_folder(case, tmp_path)
    code = main(["run", "train", "--nproc", "1", "--param", f"ckpt_dir={folder}"])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT and "ckpt_dir" in err and has_hangul(err) and "Traceback" not in err, err
    if case != "4090-characters":  # 폴더 검사는 Folder 인자 모두의 것: 10장의 stderr_dir도
        assert main(["run", "traps", "--nproc", "2", "--param", f"stderr_dir={folder}"]) == EXIT_BAD_INPUT
        assert "stderr_dir" in capsys.readouterr().err


def test_a_checkpoint_that_does_not_load_is_refused_before_spawning(tmp_path):
    """A garbage checkpoint.pt next to a matching run_config.json: before, torch.load's English error in every
    rank (exit 3); now a Korean exit 2 in a real process, naming the file and what to do (fresh=True)."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / CONFIG_NAME).write_text(json.dumps(run_config(TrainConfig(ckpt_dir=str(folder)), 1)), encoding="utf-8")
    (folder / CHECKPOINT_NAME).write_bytes(b"not a checkpoint")
    proc = subprocess.run([sys.executable, "-m", "labs", "run", "train", "--nproc", "1", "--param", f"ckpt_dir={folder}"],
                          capture_output=True, text=True, encoding="utf-8", timeout=120, env=clean_env())
    assert proc.returncode == EXIT_BAD_INPUT, proc.stderr
    assert str(folder / CHECKPOINT_NAME) in proc.stderr and "fresh=True" in proc.stderr and "Traceback" not in proc.stderr
