"""The reader's file, checked in the parent from its syntax tree: nothing in it is executed here.

What can be known without running it is checked once, before any rank starts: the path, the size,
the syntax, that each class is defined (or imported) at the top level, and for a class defined in
the file its constructor's shape. What only running can tell (an inherited constructor, the base
class) is checked by the same functions inside each rank (:func:`class_error`).

The class says which interface it is graded against (:func:`kind_of`): ``ShardedOptimizer`` or any
``torch.optim.Optimizer`` is a ZeRO-1 optimizer (chapter 13), ``FullyShardedDP`` or a module with
``gather_full_params`` a small FSDP, anything else a DDP (chapter 9).
"""

from __future__ import annotations

import ast
import difflib
import inspect
from pathlib import Path

from ..errors import LabConfigError

REFERENCE = Path(__file__).resolve().parents[1] / "ddp" / "miniddp.py"  # 파일을 주지 않으면 채점하는 참조 구현
DEFAULT_CLASSES = ("PerParameterDDP", "BucketedDDP")
KINDS = {"ShardedOptimizer": "zero", "FullyShardedDP": "fsdp"}  # 이 이름의 클래스는 13장의 인터페이스로 채점한다
MAX_BYTES = 1 << 20           # 채점할 파일의 최대 크기: 손으로 쓴 DDP는 몇 KiB
MAX_NAME = 255                # 경로 구성 요소 하나의 최대 길이 (대부분의 파일 시스템)
EXITS = {"_exit", "exit", "quit", "abort", "kill"}


class GradeInputError(LabConfigError):
    """The file or class cannot be graded (Korean message, exit 2)."""


def class_names(classes) -> list[str]:
    """``classes`` as a list of names without repeats: a str is one or more names split on spaces."""
    if classes is None:
        return []
    items = classes.split() if isinstance(classes, str) else classes
    try:
        names = list(items)
    except TypeError:
        names = None
    if names is None or not all(isinstance(n, str) and n.isidentifier() for n in names):
        raise GradeInputError(f"classes에는 클래스 이름(문자열) 또는 그 목록을 주세요. 예: classes=\"BucketedDDP\" "
                              f"또는 classes=[\"PerParameterDDP\", \"BucketedDDP\"]. 받은 값: {classes!r}")
    return list(dict.fromkeys(names))


def read_tree(path: str | Path) -> tuple[Path, ast.Module]:
    """The file's syntax tree, after the checks on its path and size (Korean errors)."""
    text = str(path)
    long = next((part for part in Path(text).parts if len(part.encode("utf-8", "replace")) > MAX_NAME), None)
    if long is not None:
        raise GradeInputError(f"경로의 한 부분이 {MAX_NAME}바이트보다 깁니다({len(long.encode('utf-8', 'replace'))}바이트: "
                              f"{long[:40]}…). 파일 이름이나 폴더 이름을 줄여 다시 채점하세요.")
    file = Path(text)
    if not file.is_file():
        raise GradeInputError(f"채점할 파일이 없습니다: {text!r}. 경로를 확인하세요 "
                              "(노트북에서는 %%writefile로 먼저 파일을 만드세요).")
    size = file.stat().st_size
    if size > MAX_BYTES:
        raise GradeInputError(f"{file.name}이(가) 너무 큽니다({size:,}바이트, 최대 {MAX_BYTES:,}바이트). "
                              "DDP 클래스가 든 파이썬 파일 하나를 주세요.")
    source = file.read_text(encoding="utf-8", errors="replace")
    try:
        return file, ast.parse(source, filename=str(file))
    except SyntaxError as err:
        line = (err.text or "").rstrip()
        raise GradeInputError(f"{file.name} {err.lineno}행에 문법 오류가 있습니다: {err.msg}\n    {line}\n"
                              "이 줄을 고친 뒤 다시 채점하세요.") from None
    except ValueError as err:  # 널 문자 등
        raise GradeInputError(f"{file.name}을(를) 파이썬 코드로 읽을 수 없습니다: {err}") from None


def top_level_names(tree: ast.Module) -> dict[str, ast.AST]:
    """Names bound at the top level by ``class``, ``import`` or ``from … import``."""
    names: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.setdefault((alias.asname or alias.name).split(".")[0], node)
    return names


def default_classes(path: str | Path) -> list[str]:
    """The classes graded when none are named: those of ``DEFAULT_CLASSES`` the file defines."""
    file, tree = read_tree(path)
    found = top_level_names(tree)
    names = [n for n in DEFAULT_CLASSES if n in found]
    if not names:
        raise GradeInputError(f"{file.name}에 {' 또는 '.join(DEFAULT_CLASSES)} 클래스가 없습니다. "
                              "채점할 클래스 이름을 --class NAME(파이썬: classes=[...])으로 알려 주세요 "
                              f"(13장의 클래스는 --class {' 또는 --class '.join(KINDS)}).")
    return names


def kind_of(name: str, cls: object = None) -> str:
    """The interface a class is graded against: ``zero``, ``fsdp`` or ``ddp``; by its name, else (inside a
    rank, given the class) by what it is."""
    if name in KINDS:
        return KINDS[name]
    import torch

    if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer):
        return "zero"
    return "fsdp" if callable(getattr(cls, "gather_full_params", None)) else "ddp"


def _node_kind(node: ast.ClassDef) -> str:
    """:func:`kind_of` from the syntax tree: the name, a base's name, or a ``gather_full_params`` method."""
    bases = [ast.unparse(b).split(".")[-1] for b in node.bases]
    known = [KINDS[b] for b in [node.name, *bases] if b in KINDS]
    if known:
        return known[0]
    if "Optimizer" in bases:
        return "zero"
    methods = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return "fsdp" if "gather_full_params" in methods else "ddp"


def validate_params(params: dict, world_size: int) -> None:
    """The ``grade`` lab's ``validate``: the file and classes, checked once before spawning (Korean errors)."""
    names = params["classes"].split()
    if len(set(names)) != len(names):
        raise LabConfigError(f"classes에 같은 클래스가 두 번 있습니다: {params['classes']!r}. 한 번씩만 적으세요.")
    validate_file(params["path"] or REFERENCE, names)


def validate_file(path: str | Path, classes) -> list[str]:
    """Every check that needs no execution; returns the class names to grade."""
    file, tree = read_tree(path)
    names = class_names(classes) or default_classes(file)
    found = top_level_names(tree)
    for name in names:
        node = found.get(name)
        if node is None:
            defined = [n for n, v in found.items() if isinstance(v, ast.ClassDef)]
            close = difflib.get_close_matches(name, defined, n=1)
            hint = f" 혹시 '{close[0]}'인가요?" if close else ""
            raise GradeInputError(f"{file.name}에 클래스 {name!r}가 없습니다.{hint} 이 파일의 클래스: "
                                  f"{', '.join(defined) or '(없음)'}")
        if isinstance(node, ast.ClassDef):
            _check_class_node(file, node)
    return names


def _check_class_node(file: Path, node: ast.ClassDef) -> None:
    name = node.name
    kind = _node_kind(node)
    if kind != "ddp":
        _check_sharded_node(file, node, kind)
        return
    if not node.bases:
        raise GradeInputError(f"{file.name} {node.lineno}행: {name}은(는) torch.nn.Module을 상속한 클래스여야 합니다 "
                              f"(class {name}(nn.Module): ...).")
    methods = {n.name: n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    only_module = all(ast.unparse(b).split(".")[-1] == "Module" for b in node.bases)
    if "finish_gradient_synchronization" not in methods and only_module:
        raise GradeInputError(_no_finish(name))
    init = methods.get("__init__")
    if init is not None:
        positional, required, _ = _signature(init.args)
        shown = [a.arg for a in init.args.posonlyargs + init.args.args + init.args.kwonlyargs][1:]
        if not positional or any(r not in (positional[0], "bucket_cap_mb") for r in required):
            raise GradeInputError(_bad_constructor(name, shown))


def _signature(args: ast.arguments) -> tuple[list[str], list[str], bool]:
    """A constructor's positional parameter names (without ``self``), its required names, and
    whether it takes ``**kwargs``."""
    positional = [a.arg for a in args.posonlyargs + args.args][1:]
    required = positional[:len(positional) - len(args.defaults)] + \
        [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    return positional, required, args.kwarg is not None


def _check_sharded_node(file: Path, node: ast.ClassDef, kind: str) -> None:
    """A ``ShardedOptimizer`` or ``FullyShardedDP`` defined in the file: base class, methods, constructor."""
    name = node.name
    base = "torch.optim.Optimizer" if kind == "zero" else "torch.nn.Module"
    if not node.bases:
        raise GradeInputError(f"{file.name} {node.lineno}행: {name}은(는) {base}을(를) 상속한 클래스여야 합니다 "
                              f"(class {name}({base}): ...).")
    methods = {n.name: n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if kind == "fsdp" and all(ast.unparse(b).split(".")[-1] == "Module" for b in node.bases):
        missing = [m for m in FSDP_METHODS if m not in methods]
        if missing:
            raise GradeInputError(_no_methods(name, missing))
    init = methods.get("__init__")
    if init is not None:
        positional, required, kwargs = _signature(init.args)
        shown = [a.arg for a in init.args.posonlyargs + init.args.args + init.args.kwonlyargs][1:]
        if not _constructor_ok(kind, positional, required, kwargs):
            raise GradeInputError(_bad_sharded_constructor(name, kind, shown))


FSDP_METHODS = ("finish_gradient_synchronization", "gather_full_params")


def _constructor_ok(kind: str, positional: list[str], required: list[str], kwargs: bool) -> bool:
    """``ShardedOptimizer(params, optimizer_cls, **kwargs)`` or ``FullyShardedDP(module, compute_dtype=None)``."""
    if kind == "zero":
        return len(positional) >= 2 and kwargs and set(required) <= set(positional[:2])
    return len(positional) >= 1 and set(required) <= {positional[0]} and \
        ("compute_dtype" in positional or kwargs)


def _bad_sharded_constructor(name: str, kind: str, shown: list[str]) -> str:
    wanted = (f"{name}(params, optimizer_cls, **kwargs)여야 합니다: 두 번째 인자는 torch.optim.SGD 같은 옵티마이저 "
              "클래스이고, lr 등 나머지 인자는 **kwargs로 받아 그 클래스에 넘깁니다" if kind == "zero" else
              f"{name}(module, compute_dtype=None)이어야 합니다")
    return f"{name}의 생성자는 {wanted}. 지금 받는 인자: ({', '.join(shown)})"


def _no_methods(name: str, missing: list[str]) -> str:
    return (f"{name}에 {', '.join(f'{m}(self)' for m in missing)} 메서드가 없습니다. FullyShardedDP는 backward() 뒤 "
            "finish_gradient_synchronization()으로 그래디언트를 마무리하고, gather_full_params()로 "
            "{이름: 전체 텐서}를 돌려줍니다.")


def _no_finish(name: str) -> str:
    return (f"{name}에 finish_gradient_synchronization(self) 메서드가 없습니다. "
            "backward() 뒤, optimizer.step() 전에 부를 이 메서드가 그래디언트 평균을 마무리합니다.")


def _bad_constructor(name: str, shown: list[str]) -> str:
    return (f"{name}의 생성자는 {name}(module) 또는 {name}(module, bucket_cap_mb)여야 합니다. "
            f"지금 받는 인자: ({', '.join(shown)})")


def class_error(name: str, cls: object) -> str | None:
    """Inside a rank, once the file is imported: why ``cls`` cannot be graded, or ``None``."""
    from torch import nn

    kind = kind_of(name, cls)
    if kind != "ddp":
        return _sharded_class_error(name, cls, kind)
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        return f"{name}은(는) torch.nn.Module을 상속한 클래스여야 합니다 (class {name}(nn.Module): ...)."
    if not callable(getattr(cls, "finish_gradient_synchronization", None)):
        return _no_finish(name)
    params = list(inspect.signature(cls).parameters.values())
    required = [p.name for p in params if p.default is inspect.Parameter.empty
                and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if not params or params[0].kind not in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD) \
            or any(r not in (params[0].name, "bucket_cap_mb") for r in required):
        return _bad_constructor(name, [p.name for p in params])
    return None


def _sharded_class_error(name: str, cls: object, kind: str) -> str | None:
    import torch

    base = torch.optim.Optimizer if kind == "zero" else torch.nn.Module
    if not (isinstance(cls, type) and issubclass(cls, base)):
        return f"{name}은(는) {base.__module__}.{base.__name__}을(를) 상속한 클래스여야 합니다."
    missing = [m for m in FSDP_METHODS if not callable(getattr(cls, m, None))] if kind == "fsdp" else []
    if missing:
        return _no_methods(name, missing)
    params = list(inspect.signature(cls).parameters.values())
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p.name for p in params if p.default is inspect.Parameter.empty
                and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    kwargs = any(p.kind == p.VAR_KEYWORD for p in params)
    if not _constructor_ok(kind, positional, required, kwargs):
        return _bad_sharded_constructor(name, kind, [p.name for p in params])
    return None


def exit_calls(path: str | Path) -> list[int]:
    """Lines of module-level calls that end the process (``os._exit``, ``sys.exit``, ``os.kill`` …)."""
    _, tree = read_tree(path)
    lines = []
    stack = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in EXITS:
                lines.append(node.lineno)
        stack.extend(ast.iter_child_nodes(node))
    return sorted(lines)
