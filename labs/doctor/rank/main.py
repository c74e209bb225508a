"""The body of one rank: install the probes, run the reader's script as ``__main__`` (as ``python -u
script.py ARGS`` does under torchrun) and record how it ended."""

from __future__ import annotations

import atexit
import builtins
import faulthandler
import gc
import importlib.machinery
import io
import json
import os
import select
import shutil
import signal
import sys
import threading
import traceback
import types

from .amp import Amp
from .comms import Comms
from .data import Data
from .devices import Devices
from .files import Files
from .record import STACK_SIGNAL, ReaderFiles, Recorder
from .steps import DoctorStop, Steps


def _watch_parent(parent: int, folder: str) -> None:
    """When the doctor is gone (even after SIGKILL), remove its folder and end this rank."""
    def watch() -> None:
        try:
            select.select([os.pidfd_open(parent)], [], [])
        except (AttributeError, OSError):
            while os.getppid() == parent:
                threading.Event().wait(0.5)
        shutil.rmtree(folder, ignore_errors=True)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="labs-doctor-parent-watch", daemon=True).start()


def run_as_main(script: str) -> None:
    """Run ``script`` as Python runs ``python script.py``: a fresh ``__main__`` module with an absolute
    ``__file__``, in ``sys.modules``, executing the compiled file (its encoding line honoured)."""
    path = os.path.abspath(script)
    with open(path, "rb") as f:
        source = f.read()
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__dict__["__builtins__"] = builtins
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
    main.__spec__ = None
    main.__package__ = None
    sys.modules["__main__"] = main
    exec(compile(source, path, "exec"), main.__dict__)


def _exception(rec: Recorder, err: BaseException, script: str) -> str:
    """Record the script's exception; its traceback as Python prints it (from the script's frame on)."""
    tb = err.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != script:
        tb = tb.tb_next  # the bootstrap's own frames are not the reader's
    frames = [(f.filename, f.lineno or 0, f.name) for f in traceback.extract_tb(tb)]
    text = "".join(traceback.format_exception(type(err), err, tb))
    rec.emit("exception", type=type(err).__name__, module=type(err).__module__, message=str(err),
             frames=rec.reader.frames(frames), text=text, step=rec.steps)
    return text


def run(folder: str, config_json: str, argv: list[str]) -> int:
    config = json.loads(config_json)
    rank = int(os.environ["RANK"])
    script = argv[0]
    rec = Recorder(os.path.join(folder, f"rank{rank}.jsonl"), ReaderFiles(script, os.getcwd()), rank)
    stack_file = open(os.path.join(folder, f"rank{rank}.stack"), "w")  # noqa: SIM115 - open for the process' life
    faulthandler.register(STACK_SIGNAL, file=stack_file, all_threads=True)
    _watch_parent(config["parent"], folder)
    devices = Devices(rec)
    devices.install()
    steps = Steps(rec, config["steps"], {})
    steps.install()
    Comms(rec, devices, steps).install()
    Data(rec, config["batches"]).install()
    Files(rec).install()
    Amp(rec, steps.optimizers).install()
    rec.emit("start", pid=os.getpid(), thread=threading.get_ident(), argv=argv, cwd=os.getcwd(), rank=rank)
    sys.argv = list(argv)
    code = 0
    try:
        run_as_main(script)
        rec.emit("end", how="finished")
    except DoctorStop:
        rec.emit("end", how="stopped", steps=rec.steps)
    except SystemExit as err:
        code = err.code if isinstance(err.code, int) else (0 if err.code is None else 1)
        if not isinstance(err.code, (int, type(None))):
            print(err.code, file=sys.stderr)
        rec.emit("end", how="exit", code=code)
    except BaseException as err:  # the reader's own failure: recorded, and printed as Python would
        print(_exception(rec, err, os.path.abspath(script)), end="", file=sys.stderr)
        code = 1
    steps.finish_profile(complete=False)
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def leave(code: int) -> None:
    """End the rank as the interpreter would, without its module teardown (seconds once DDP has imported
    torch._dynamo): wait for the script's non-daemon threads, run its atexit handlers, flush every open file."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for obj in gc.get_objects():
        if issubclass(type(obj), io.IOBase):  # type(), not isinstance: some objects warn when their class is read
            try:
                if not obj.closed:
                    obj.flush()
            except (OSError, ValueError):
                pass
    os._exit(code)
