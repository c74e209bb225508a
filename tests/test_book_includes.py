"""Every code block the book shows from labs/ still shows what its text talks about.

A ``literalinclude`` names a file, a whole function or class (``:pyobject:``, read here with ast as Sphinx reads it:
from the first decorator to the last line), optionally a ``:start-at:``/``:end-at:`` pair of anchor strings, and
``:emphasize-lines:`` counted in the lines shown. Line offsets (``:lines:``) are not allowed: one added line would
silently show another piece of code. Each emphasized line must contain the token EXPECTED lists for it, so a moved
line fails here instead of highlighting the wrong code. The caption starts with the included path. Every shown line
comes from the code the book teaches (labs/ddp/), a measuring tool (labs/tools/) or chapter 14's scripts (recipe/),
never from a lab's harness (labs/lessons/).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BOOK = REPO / "book"

# Where a shown line may come from: the taught DDP code, the measuring tools, chapter 14's scripts.
SHOWN_FROM = ("labs/ddp/", "labs/tools/", "recipe/")

BLOCK = re.compile(r"```\{literalinclude\} \.\./(\S+)\n((?::\S+:.*\n)+)```")

# (notebook stem, pyobject) → the token each emphasized line contains, in the order of :emphasize-lines:.
EXPECTED: dict[tuple[str, str | None], tuple[str, ...]] = {
    ("02_forward", "train_loop"): ("CollectiveCounter() as fwd", "mse_loss", "CollectiveCounter() as bwd",
                                      "loss.backward()"),
    ("03_backward", "local_gradient"): ("ddp.no_sync()",),
    ("03_backward", "ddp_gradient"): ("loss.backward()",),
    ("04_allreduce", "ring_all_reduce_"): ("(rank - step) %", "p2p.exchange", "add_(incoming)", "(rank + 1 - step)",
                                           "p2p.exchange"),
    ("05_update", "train"): ("model.no_sync()", "mse_backward", "CollectiveCounter() as in_step", "opt.step()"),
    ("05_update", "train_both"): ("mse_backward(local", "mse_backward(ddp"),
    ("06_train", "train"): ("make_ddp_model", "make_loader", "pin_memory", "set_epoch", "train_one_epoch"),
    ("06_train", "train_one_epoch"): ("3단계", "cross_entropy", "4단계", "backward", "6단계", "step"),
    ("06_train", "init_distributed"): ("RANK", "WORLD_SIZE", "LOCAL_RANK", "device_for", "init_process_group",
                                       "init_process_group"),
    ("06_train", "global_mean"): ("totals", "all_reduce", "totals[0] / totals[1]"),
    ("06_train", "evaluate"): ("rank::", "all_reduce"),
    ("06_train", "global_batches"): ("make_loader", "set_epoch", "zip", "torch.cat"),
    ("06_train", "train_reference"): ("make_model", "train_one_epoch", "optimizer, device"),
    ("06_train", "save_checkpoint"): ("rank == 0", "model.module.state_dict", "optimizer.state_dict", "torch.save",
                                      "os.replace", "barrier"),
    ("06_train", "load_checkpoint"): ("torch.load", "model.module.load_state_dict", "optimizer.load_state_dict"),
    ("06_train", "main"): ("RESTART_COUNT", "restarts > 0", "fail_at_epoch", "train("),
    ("07_internals", "ddp_gradient"): ("mse_loss(ddp(x), y)", "loss.backward()"),
    ("07_internals", "gradient_mean_vs_global"): ("dist.all_reduce(total)", "total / n"),
    ("07_internals", "train"): ("mse_backward", "opt.step()"),
    ("07_internals", "group_by_size"): ("total >= limit", "groups.append(current)", "limit = [], 0, cap"),
    ("07_internals", "Timeline.comm_hook"): ('"launch"', "allreduce_hook(state, bucket).then(finished)"),
    ("07_internals", "record_overlap"): ("register_comm_hook", "loss.backward()"),
    ("07_internals", "accumulate"): ("ddp.no_sync()", "scale=1.0 / k"),
    ("07_internals", "fix_gradients"): ("all_reduce_count", "scale=n * ctx.world_size / total"),
    ("07_internals", "join_training"): ("Join([ddp]",),
    ("08_cost", "fit_cost_model"): ("design", "lstsq", "inv_bw, alpha"),
    ("08_cost", "make_train_step"): ("range(micro_steps)", "model.no_sync()", ".backward()", "if after_backward",
                                "after_backward()"),
    ("11_myths", "train_replica"): ("wrap_ddp(plain", "mse_backward"),
    ("11_myths", "dataparallel_part"): ("wrap_ddp(sharding_model", "dist.barrier()", "ctx.rank == 0",
                                        "manual_seed", "measure_dataparallel"),
}


def includes(text: str) -> list[tuple[str, dict[str, str]]]:
    """(path relative to the repository, options) for every literalinclude in a chapter's markdown."""
    return [(path, dict(re.findall(r":(\S+): (.*)", options))) for path, options in BLOCK.findall(text)]


def _unquote(value: str) -> str:
    value = value.strip()
    return value[1:-1] if len(value) > 1 and value[0] == value[-1] and value[0] in "'\"" else value


def object_lines(source: str, dotted: str) -> list[str] | None:
    """The lines Sphinx's :pyobject: shows for ``name`` or ``Class.method``; None if there is no such object."""
    body: list[ast.stmt] = ast.parse(source).body
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | None = None
    for name in dotted.split("."):
        node = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and n.name == name), None)
        if node is None:
            return None
        body = node.body
    if node is None:
        return None
    start = node.decorator_list[0].lineno if node.decorator_list else node.lineno
    return source.splitlines()[start - 1:node.end_lineno]


def _emphasized(spec: str) -> list[int]:
    lines: list[int] = []
    for part in filter(None, spec.split(",")):
        first, _, last = part.strip().partition("-")
        lines.extend(range(int(first), int(last or first) + 1))
    return lines


def problems(stem: str, path: str, opts: dict[str, str], root: Path = REPO) -> list[str]:
    """What is wrong with one literalinclude of chapter ``stem`` (empty when it shows what its text says)."""
    where = f"{stem}: {path}"
    if "lines" in opts:
        return [f"{where}: :lines: 대신 가르치는 부분을 이름 있는 함수로 꺼내 :pyobject:로 보이세요"]
    file = root / path
    if not file.is_file():
        return [f"{where}: 파일이 없습니다"]
    found = []
    if not opts.get("caption", "").startswith(path):
        found.append(f"{where}: 캡션이 경로 {path}로 시작하지 않습니다: {opts.get('caption')!r}")
    shown = file.read_text(encoding="utf-8").splitlines()
    if "pyobject" in opts:
        named = object_lines(file.read_text(encoding="utf-8"), opts["pyobject"])
        if named is None:
            return found + [f"{where}: {opts['pyobject']}이(가) 없습니다"]
        shown = named
    for option in ("start-at", "end-at"):
        if option in opts:
            anchor = _unquote(opts[option])
            at = next((i for i, line in enumerate(shown) if anchor in line), None)
            if at is None:
                return found + [f"{where}: {option} {anchor!r}이(가) 보이는 코드에 없습니다"]
            shown = shown[at:] if option == "start-at" else shown[:at + 1]
    lines = _emphasized(opts.get("emphasize-lines", ""))
    if lines:
        tokens = EXPECTED.get((stem, opts.get("pyobject")))
        if tokens is None or len(tokens) != len(lines):
            return found + [f"{where}: EXPECTED[({stem!r}, {opts.get('pyobject')!r})]에 강조한 {len(lines)}행마다 "
                            f"토큰을 하나씩 적으세요"]
        for number, token in zip(lines, tokens):
            line = shown[number - 1] if number <= len(shown) else ""
            if token not in line:
                found.append(f"{where}:{opts.get('pyobject')} 강조 {number}행에 {token!r}이(가) 없습니다: {line!r}")
    return found


def _chapters() -> list[tuple[str, str]]:
    out = []
    for notebook in sorted(BOOK.glob("*.ipynb")):
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        out.append((notebook.stem, "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")))
    return out


def test_every_include_shows_what_its_text_talks_about():
    found, count = [], 0
    for stem, text in _chapters():
        for path, opts in includes(text):
            count += 1
            found += problems(stem, path, opts)
    assert count >= 60
    assert not found, "\n".join(found)


def shown_elsewhere(chapters: list[tuple[str, str]]) -> list[str]:
    """``stem: path`` of every literalinclude whose file lies outside :data:`SHOWN_FROM`."""
    return [f"{stem}: {path}" for stem, text in chapters for path, _ in includes(text)
            if not path.startswith(SHOWN_FROM)]


def test_every_include_shows_taught_code_or_a_tool():
    chapters = _chapters()
    assert sum(len(includes(text)) for _, text in chapters) >= 60  # 빈 목록으로 통과하지 않게
    found = shown_elsewhere(chapters)
    assert not found, ("labs/ddp/, labs/tools/, recipe/ 밖의 코드를 보입니다 (보이는 함수를 그리로 옮기세요): "
                       + ", ".join(found))


SHOWN_SHARE = 0.60  # labs/ddp는 책이 보여 주는 코드다: 그 줄의 60 % 이상을 어느 장에선가 보인다


def shown_lines(chapters: list[tuple[str, str]], root: Path = REPO) -> dict[str, set[int]]:
    """Line numbers (1-based) of every labs/ddp file that some literalinclude shows (pyobject range narrowed
    by start-at/end-at, or the whole file)."""
    shown: dict[str, set[int]] = {}
    for _, text in chapters:
        for path, opts in includes(text):
            if not path.startswith("labs/ddp/"):
                continue
            source = (root / path).read_text(encoding="utf-8")
            lines = source.splitlines()
            numbers = list(range(1, len(lines) + 1))
            if "pyobject" in opts:
                part = object_lines(source, opts["pyobject"]) or []
                first = next(i for i in range(len(lines)) if lines[i:i + len(part)] == part) + 1 if part else 1
                numbers = list(range(first, first + len(part)))
            if "start-at" in opts:
                numbers = numbers[next(i for i, n in enumerate(numbers) if _unquote(opts["start-at"]) in lines[n - 1]):]
            if "end-at" in opts:
                numbers = numbers[:next(i for i, n in enumerate(numbers) if _unquote(opts["end-at"]) in lines[n - 1]) + 1]
            shown.setdefault(path, set()).update(numbers)
    return shown


def shown_share(chapters: list[tuple[str, str]], root: Path = REPO) -> float:
    """Non-blank lines of labs/ddp/*.py that the book shows ÷ all its non-blank lines."""
    shown = shown_lines(chapters, root)
    total = covered = 0
    for file in sorted((root / "labs" / "ddp").glob("*.py")):
        rel = file.relative_to(root).as_posix()
        code = [i for i, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1) if line.strip()]
        total += len(code)
        covered += sum(1 for i in code if i in shown.get(rel, set()))
    if not total:
        raise ValueError("labs/ddp에 파이썬 줄이 없습니다")
    return covered / total


def test_the_book_shows_most_of_the_taught_code():
    share = shown_share(_chapters())
    assert share >= SHOWN_SHARE, f"책이 labs/ddp의 {share:.1%}만 보입니다({SHOWN_SHARE:.0%} 이상이어야 합니다)"


def test_the_share_drops_when_an_include_goes():
    chapters = _chapters()
    fewer = [(stem, text.replace(":pyobject: ring_all_reduce_\n", ":pyobject: library_all_reduce_\n"))
             for stem, text in chapters]
    assert shown_share(fewer) < shown_share(chapters)


def test_every_literalinclude_is_parsed():
    # A block written another way (other fence, no ../ prefix) would escape the guard.
    for stem, text in _chapters():
        assert text.count("{literalinclude}") == len(includes(text)), stem


def test_every_expected_entry_is_used():
    used = {(stem, opts.get("pyobject")) for stem, text in _chapters() for _, opts in includes(text)
            if opts.get("emphasize-lines")}
    assert set(EXPECTED) == used


# ----------------------------------------------------------------------------- the guard can fail

SAMPLE = '''\
"""A taught module."""


def taught(x):
    y = x + 1
    z = y * 2
    return z
'''


def _block(path: str, **opts: str) -> str:
    return "```{literalinclude} ../" + path + "\n" + "".join(f":{k.replace('_', '-')}: {v}\n"
                                                           for k, v in opts.items()) + "```"


@pytest.mark.parametrize("opts, message", [
    ({"pyobject": "taught", "caption": "labs/x.py — ok"}, None),
    ({"pyobject": "missing", "caption": "labs/x.py — 없는 함수"}, "missing이(가) 없습니다"),
    ({"pyobject": "taught", "lines": "2-3", "caption": "labs/x.py — 줄 번호"}, ":lines: 대신"),
    ({"pyobject": "taught", "emphasize_lines": "3", "caption": "labs/x.py — 틀린 줄"}, "강조 3행에 'x + 1'"),
    ({"pyobject": "taught", "emphasize_lines": "2", "caption": "labs/x.py — 맞는 줄"}, None),
    ({"pyobject": "taught", "start_at": "z =", "emphasize_lines": "1", "caption": "labs/x.py — 시작"}, "'x + 1'"),
    ({"pyobject": "taught", "start_at": "nowhere", "caption": "labs/x.py — 닻"}, "start-at 'nowhere'"),
    ({"pyobject": "taught", "caption": "labs/old.py — 옛 경로"}, "캡션이 경로"),
])
def test_a_broken_snippet_is_caught(tmp_path, monkeypatch, opts, message):
    (tmp_path / "labs").mkdir()
    (tmp_path / "labs" / "x.py").write_text(SAMPLE, encoding="utf-8")
    monkeypatch.setitem(EXPECTED, ("99_sample", "taught"), ("x + 1",))
    [(path, parsed)] = includes(_block("labs/x.py", **opts))
    found = problems("99_sample", path, parsed, root=tmp_path)
    assert (found == []) if message is None else any(message in f for f in found), found


def test_an_include_of_a_lab_module_is_caught():
    planted = _block("labs/lessons/forward.py", pyobject="rank_fn", caption="labs/lessons/forward.py — 실습 모듈")
    chapters = [*_chapters(), ("99_sample", planted)]
    assert shown_elsewhere(chapters) == ["99_sample: labs/lessons/forward.py"]
    assert shown_elsewhere([("99_sample", _block("labs/ddpx/x.py", pyobject="f", caption="labs/ddpx/x.py"))]) == [
        "99_sample: labs/ddpx/x.py"]


def test_a_missing_file_is_caught(tmp_path):
    [(path, parsed)] = includes(_block("labs/gone.py", pyobject="f", caption="labs/gone.py — 없음"))
    assert problems("99_sample", path, parsed, root=tmp_path) == ["99_sample: labs/gone.py: 파일이 없습니다"]
