"""Entry of a rank: ``python -u bootstrap.py FOLDER CONFIG SCRIPT [ARGS…]``, started by the doctor with
torchrun's environment. Python put this file's folder first on ``sys.path``; the reader's script expects its
own folder there, as ``python -u SCRIPT`` gives it, so that is set before anything is imported. The probes
are loaded as the package ``_labs_doctor_rank`` straight from this folder (not through ``labs/__init__``)."""

import importlib
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "_labs_doctor_rank"


def _load() -> object:
    spec = importlib.util.spec_from_file_location(PACKAGE, os.path.join(HERE, "__init__.py"),
                                                  submodule_search_locations=[HERE])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = module
    spec.loader.exec_module(module)
    return importlib.import_module(f"{PACKAGE}.main")


if __name__ == "__main__":
    folder, config, *argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.realpath(argv[0]))
    main = _load()
    main.leave(main.run(folder, config, argv))  # type: ignore[attr-defined]
