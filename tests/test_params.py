"""Typed lab parameters: every parameter of every lab rejects bad values in Korean (exit 2) before
any rank is spawned, on the command line and through ``labs.run`` alike.

The bad values are derived from each parameter's declared spec (below its minimum, above its
maximum, the wrong type, NaN/inf, an unknown word, an empty list), so a lab added later is walked
too. Every number must declare both bounds, so the walk always has an out-of-range value to try.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import labs
import labs.launch
from labs.cli import EXIT_BAD_INPUT, main
from labs.errors import LabConfigError
from labs.params import Bool, Choice, Float, Int, ListOf, Text, parse_pairs, resolve

from conftest import clean_env, has_hangul


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


def cases(make_values) -> list:
    found = []
    for lab in labs.all_labs().values():
        for key, spec in lab.params.items():
            for value in make_values(spec):
                found.append(pytest.param(lab.name, key, value, id=f"{lab.name}-{key}={value!r}"[:80]))
    return found


CLI_CASES = cases(bad_cli_values)
PY_CASES = cases(bad_python_values)


def test_the_walk_covers_every_lab_and_most_parameters():
    walked = {(lab, key) for lab, key, _ in (c.values for c in CLI_CASES)}
    declared = {(lab.name, key) for lab in labs.all_labs().values() for key in lab.params}
    assert walked, "no parameter was walked: the walk must never pass vacuously"
    text_only = {(lab.name, key) for lab in labs.all_labs().values() for key, spec in lab.params.items()
                 if isinstance(spec, Text) and spec.allow_empty}
    assert declared - walked == text_only
    assert {lab for lab, _ in walked} >= {name for name, lab in labs.all_labs().items() if lab.params}


@pytest.fixture
def no_spawn(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("bad input must be rejected before spawning any rank")

    monkeypatch.setattr(labs.launch, "spawn_ranks", forbidden)


@pytest.mark.parametrize("lab, key, value", CLI_CASES)
def test_cli_rejects_bad_value_in_korean(no_spawn, capsys, lab, key, value):
    code = main(["run", lab, "--nproc", "2", "--param", f"{key}={value}"])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT, err
    assert has_hangul(err) and key in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("lab, key, value", PY_CASES)
def test_python_api_rejects_bad_value_in_korean(no_spawn, lab, key, value):
    with pytest.raises(LabConfigError) as info:
        labs.run(lab, nproc=2, **{key: value})
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
    loose = [f"{lab.name}.{key}" for lab in labs.all_labs().values() for key, spec in lab.params.items()
             for s in ([spec.item] if isinstance(spec, ListOf) else [spec])
             if isinstance(s, (Int, Float)) and (s.min is None or s.max is None)]
    assert not loose, f"numeric parameters without a declared minimum and maximum: {loose}"


def test_every_default_satisfies_its_own_spec():
    for lab in labs.all_labs().values():
        for key, spec in lab.params.items():
            assert spec.check(key, spec.default) == spec.default, (lab.name, key)
