"""The reader's file, checked in the parent from its syntax tree (nothing in it is executed here) once,
before any rank starts: the path, the size, the syntax, each class defined (or imported) at the top level,
and for a class defined in the file its constructor's shape. What only running can tell (an inherited
constructor, the base) is checked by the same rule inside each rank (:func:`class_error`): both read a class
into one :class:`Shape` and judge it with :func:`shape_error`. The class says which interface it is graded
against (:func:`kind_of`): a ZeRO-1 optimizer, a small FSDP or a DDP.
"""

from __future__ import annotations

import ast
import difflib
import inspect
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

import torch

from ..errors import LabConfigError

REFERENCE = Path(__file__).resolve().parents[1] / "ddp" / "miniddp.py"  # 파일을 주지 않으면 채점하는 참조 구현
DEFAULT_CLASSES = ("PerParameterDDP", "BucketedDDP")
KIND_NAMES = {"ShardedOptimizer": "zero", "FullyShardedDP": "fsdp"}  # 이 이름의 클래스는 13장의 인터페이스로 채점한다
BASES = {"ddp": "torch.nn.Module", "zero": "torch.optim.Optimizer", "fsdp": "torch.nn.Module"}  # 상속해야 할 클래스
METHODS = {"ddp": ("finish_gradient_synchronization",), "zero": (),  # 있어야 할 메서드
           "fsdp": ("finish_gradient_synchronization", "gather_full_params")}
CONSTRUCTORS = {"ddp": "{name}(module) 또는 {name}(module, bucket_cap_mb)여야 합니다",
                "zero": "{name}(params, optimizer_cls, **kwargs)여야 합니다: 두 번째 인자는 torch.optim.SGD 같은 옵티마이저 "
                        "클래스이고, lr 등 나머지 인자는 **kwargs로 받아 그 클래스에 넘깁니다",
                "fsdp": "{name}(module, compute_dtype=None)이어야 합니다"}
MAX_BYTES = 1 << 20           # 채점할 파일의 최대 크기: 손으로 쓴 DDP는 몇 KiB
MAX_NAME = 255                # 경로 구성 요소 하나의 최대 길이 (대부분의 파일 시스템)
EXITS = {"_exit", "exit", "quit", "abort", "kill"}


class GradeInputError(LabConfigError):
    """The file or class cannot be graded (Korean message, exit 2)."""


def class_names(classes: object) -> list[str]:
    """``classes`` as a list of names without repeats: a str is one or more names split on spaces."""
    items = [] if classes is None else classes.split() if isinstance(classes, str) else classes
    names = list(items) if isinstance(items, Iterable) else None  # 목록이 아닌 값은 아래에서 한국어로 거절한다
    if names is None or not all(isinstance(n, str) and n.isidentifier() for n in names):
        raise GradeInputError(f"classes에는 클래스 이름(문자열) 또는 그 목록을 주세요. 예: classes=\"BucketedDDP\" "
                              f"또는 classes=[\"PerParameterDDP\", \"BucketedDDP\"]. 받은 값: {classes!r}")
    return list(dict.fromkeys(names))


def read_tree(path: str | Path) -> tuple[Path, ast.Module]:
    """The file's syntax tree, after the checks on its path and size (Korean errors)."""
    file = Path(path)
    long = next((part for part in file.parts if len(part.encode("utf-8", "replace")) > MAX_NAME), None)
    if long is not None:
        raise GradeInputError(f"경로의 한 부분이 {MAX_NAME}바이트보다 깁니다({len(long.encode('utf-8', 'replace'))}바이트: "
                              f"{long[:40]}…). 파일 이름이나 폴더 이름을 줄여 다시 채점하세요.")
    if not file.is_file():
        raise GradeInputError(f"채점할 파일이 없습니다: {str(path)!r}. 경로를 확인하세요 "
                              "(노트북에서는 %%writefile로 먼저 파일을 만드세요).")
    if (size := file.stat().st_size) > MAX_BYTES:
        raise GradeInputError(f"{file.name}이(가) 너무 큽니다({size:,}바이트, 최대 {MAX_BYTES:,}바이트). "
                              "DDP 클래스가 든 파이썬 파일 하나를 주세요.")
    source = file.read_text(encoding="utf-8-sig", errors="replace")  # 메모장 등이 앞에 붙이는 BOM은 파이썬 코드다
    try:
        return file, ast.parse(source, filename=str(file))
    except SyntaxError as err:
        line = (err.text or "").rstrip()
        raise GradeInputError(f"{file.name} {err.lineno}행에 문법 오류가 있습니다: {err.msg}\n    {line}\n"
                              "이 줄을 고친 뒤 다시 채점하세요.") from None
    except ValueError as err:  # 널 문자 등
        raise GradeInputError(f"{file.name}을(를) 파이썬 코드로 읽을 수 없습니다: {err}") from None


def top_level_names(tree: ast.Module) -> dict[str, ast.stmt]:
    """Names bound at the top level by ``class``, ``import`` or ``from … import``."""
    names: dict[str, ast.stmt] = {}
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
    names = [n for n in DEFAULT_CLASSES if n in top_level_names(tree)]
    if not names:
        raise GradeInputError(f"{file.name}에 {' 또는 '.join(DEFAULT_CLASSES)} 클래스가 없습니다. "
                              "채점할 클래스 이름을 --class NAME(파이썬: classes=[...])으로 알려 주세요 "
                              f"(13장의 클래스는 --class {' 또는 --class '.join(KIND_NAMES)}).")
    return names


class Signature(NamedTuple):
    """A constructor's parameters without ``self``: positional names, required names, ``**kwargs``, all names."""

    positional: list[str]
    required: list[str]
    kwargs: bool
    shown: list[str]

    @classmethod
    def of_node(cls, args: ast.arguments) -> Signature:
        positional = [a.arg for a in args.posonlyargs + args.args][1:]
        required = positional[:len(positional) - len(args.defaults)] + \
            [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
        stars = ([f"*{args.vararg.arg}"] if args.vararg else []) + [a.arg for a in args.kwonlyargs] + \
            ([f"**{args.kwarg.arg}"] if args.kwarg else [])
        return cls(positional, required, args.kwarg is not None, positional + stars)

    @classmethod
    def of_class(cls, target: type) -> Signature:
        params = list(inspect.signature(target).parameters.values())
        named = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        required = [p.name for p in params if p.default is inspect.Parameter.empty and p.kind in (*named, inspect.Parameter.KEYWORD_ONLY)]
        shown = [("*" if p.kind == p.VAR_POSITIONAL else "**" if p.kind == p.VAR_KEYWORD else "") + p.name for p in params]
        return cls([p.name for p in params if p.kind in named], required, any(p.kind == p.VAR_KEYWORD for p in params), shown)


class Shape(NamedTuple):
    """What is known of a class: its interface, whether it derives from the interface's base, the methods it has and
    its constructor (None: not known, a base the tree does not show; no ``__init__`` in the file)."""

    kind: str
    based: bool | None
    methods: set[str] | None
    init: Signature | None


def kind_from(names: Iterable[str], optimizer: bool, gathers: bool) -> str:
    """The interface: by a known name (the class's or a base's), else an optimizer is ZeRO-1, a module with
    ``gather_full_params`` an FSDP, anything else a DDP."""
    known = [KIND_NAMES[n] for n in names if n in KIND_NAMES]
    return known[0] if known else "zero" if optimizer else "fsdp" if gathers else "ddp"


def constructor_ok(kind: str, sig: Signature) -> bool:
    """``DDP(module[, bucket_cap_mb])``, ``ShardedOptimizer(params, optimizer_cls, **kwargs)`` or
    ``FullyShardedDP(module, compute_dtype=None)``: nothing else may be required."""
    first, required = set(sig.positional[:1]), set(sig.required)
    if kind == "zero":
        return len(sig.positional) >= 2 and sig.kwargs and required <= set(sig.positional[:2])
    if kind == "fsdp":
        return bool(first) and required <= first and ("compute_dtype" in sig.positional or sig.kwargs)
    return bool(first) and required <= first | {"bucket_cap_mb"}


def shape_error(name: str, shape: Shape, where: str = "") -> str | None:
    """Why a class of this shape cannot be graded (Korean, ``where`` before it), or None: the one rule."""
    base = BASES[shape.kind]
    if shape.based is False:
        return f"{where}{name}은(는) {base}을(를) 상속한 클래스여야 합니다 (class {name}({base}): ...)."
    missing = [m for m in METHODS[shape.kind] if shape.methods is not None and m not in shape.methods]
    if missing:
        what = ("FullyShardedDP는 backward() 뒤 finish_gradient_synchronization()으로 그래디언트를 마무리하고, "
                "gather_full_params()로 {이름: 전체 텐서}를 돌려줍니다." if shape.kind == "fsdp" else
                "backward() 뒤, optimizer.step() 전에 부를 이 메서드가 그래디언트 평균을 마무리합니다.")
        return f"{name}에 {', '.join(f'{m}(self)' for m in missing)} 메서드가 없습니다. {what}"
    if shape.init is not None and not constructor_ok(shape.kind, shape.init):
        return f"{name}의 생성자는 {CONSTRUCTORS[shape.kind].format(name=name)}. 지금 받는 인자: ({', '.join(shape.init.shown)})"
    return None


def node_shape(node: ast.ClassDef) -> Shape:
    """A class defined in the file, from its syntax tree: its methods are known when every base is a Module."""
    bases = [ast.unparse(b).split(".")[-1] for b in node.bases]
    methods = {n.name: n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    kind = kind_from([node.name, *bases], "Optimizer" in bases, "gather_full_params" in methods)
    init = methods.get("__init__")
    return Shape(kind, False if not node.bases else None, set(methods) if all(b == "Module" for b in bases) else None,
                 None if init is None else Signature.of_node(init.args))


def kind_of(name: str, cls: object) -> str:
    """Inside a rank, the interface a class is graded against: ``zero``, ``fsdp`` or ``ddp``; by its name, else by
    what ``cls`` is (None when the file has no such name)."""
    return kind_from([name], isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer),
                     callable(getattr(cls, "gather_full_params", None)))


def class_error(name: str, cls: object) -> str | None:
    """Inside a rank, once the file is imported: why ``cls`` cannot be graded, or ``None``."""
    kind = kind_of(name, cls)
    base = torch.optim.Optimizer if kind == "zero" else torch.nn.Module
    if not (isinstance(cls, type) and issubclass(cls, base)):
        return shape_error(name, Shape(kind, False, None, None))
    methods = {m for m in METHODS[kind] if callable(getattr(cls, m, None))}
    return shape_error(name, Shape(kind, True, methods, Signature.of_class(cls)))


def validate_params(params: Mapping[str, object], world_size: int) -> None:
    """The ``grade`` lab's ``validate``: every check of the file and its classes that needs no execution, once before
    spawning (Korean errors). The lab's ``classes`` is never empty (:func:`labs.grading.runner.lab_params` fills it)."""
    names = str(params["classes"]).split()
    if len(set(names)) != len(names):
        raise LabConfigError(f"classes에 같은 클래스가 두 번 있습니다: {params['classes']!r}. 한 번씩만 적으세요.")
    file, tree = read_tree(str(params["path"] or REFERENCE))
    found = top_level_names(tree)
    for name in class_names(names):
        node = found.get(name)
        if node is None:
            defined = [n for n, v in found.items() if isinstance(v, ast.ClassDef)]
            hint = "".join(f" 혹시 '{close}'인가요?" for close in difflib.get_close_matches(name, defined, n=1))
            raise GradeInputError(f"{file.name}에 클래스 {name!r}가 없습니다.{hint} 이 파일의 클래스: {', '.join(defined) or '(없음)'}")
        if isinstance(node, ast.ClassDef) and (problem := shape_error(name, node_shape(node), f"{file.name} {node.lineno}행: ")):
            raise GradeInputError(problem)


def exit_calls(path: str | Path) -> list[int]:
    """Lines of module-level calls that end the process (``os._exit``, ``sys.exit``, ``os.kill`` …)."""
    _, tree = read_tree(path)
    lines, stack = [], list[ast.AST](tree.body)
    while stack:  # 함수·클래스·람다의 몸은 불러올 때 돌지 않는다
        node = stack.pop()
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in EXITS:
            lines.append(node.lineno)  # os._exit(…)의 attr, exit(…)의 id
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))
    return sorted(lines)
