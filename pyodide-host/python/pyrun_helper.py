"""pyrun's in-worker helper: runs one call at a time in a long-lived Pyodide.

The host (worker.ts) imports this module once and calls ``prepare`` (before a
memory snapshot is taken, when workers start from one), then, in every worker
process, ``setup`` with the functions that write protocol lines, and ``run`` for
every call. Everything a call may
leave behind that pyrun promises to clear is cleared in ``_Call.cleanup``; what
cannot be cleared cheaply is detected and reported as ``recycle`` so the
supervisor replaces the worker.

Keep this module free of work per call that can be done once: it sits on the
hot path of every ``print(1)``.
"""

import ast
import asyncio
import builtins
import contextvars
import gc
import io
import json
import linecache
import math
import os
import signal
import sys
import time
import traceback

import pyrun_guard as _guard  # hooks a call must not leave behind (issue 12)
from pyodide.code import should_quiet
from pyodide.ffi import run_sync as _run_sync
from textwrap import dedent as _dedent

import pyrun_display as _display  # rich results: display(), figures, files
import pyrun_needs as _needs  # what a call needs installed
import pyrun_values as _values  # a call's value as JSON

FILENAME = "main.py"
WORKDIR = "/home/pyodide"
SCRATCH = ("/tmp",)

# Frames from these files are pyrun's or Pyodide's machinery, not the user's.
_INTERNAL_PREFIXES = (
    __file__,
    _display.__file__,
    _needs.__file__,
    _values.__file__,
    os.path.join(os.path.dirname(__file__), "mcp_tools.py"),  # code mode's functions
    "/lib/python314.zip/_pyodide/",
    "/lib/python3.14/site-packages/_pyodide/",
    "/lib/python314.zip/pyodide/",
    "/lib/python3.14/site-packages/pyodide/",
)

# pyrun's own references, taken before any call runs: a call that patches
# json or linecache must not change how pyrun reports the next call.
# Protocol lines: one encoder, made once.
_encode_line = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_loads = json.loads
_linecache_cache = linecache.cache

# The call that may write output right now. A task or callback a call leaves
# behind keeps its context, so its writes are recognised and dropped later.
_current = contextvars.ContextVar("pyrun_call", default=None)


class _Host:
    """Functions the host gave us, and per-worker settings."""

    emit = None  # emit(line: str) writes one protocol line
    wait = None  # wait(ms) blocks until ms pass or an interrupt; True if interrupted
    live = None  # live() is True when the latest interrupt was meant for the running call
    # async load_packages(need_line) -> JSON text: sends a need event, loads
    # the files the supervisor answers with; {"files", "errors"} or {"error"}
    load_packages = None
    loaded: dict[str, str] = {}  # packages loaded in this process: name -> version


_host = _Host()
_active = None  # the running _Call, if any


class _Stream:
    """sys.stdout / sys.stderr for calls: ordered, capped, tagged with the call."""

    encoding = "utf-8"
    errors = "surrogateescape"
    newlines = None
    closed = False

    def __init__(self, name):
        self.name = name

    def write(self, text):
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        call = _active
        if call is not None and (
            _current.get() is call or (_session.scope is not None and _session.mine())
        ):
            call.write(self.name, text)
        return len(text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        call = _active
        if call is not None and _current.get() is call:
            call.flush()

    def isatty(self):
        return False

    def writable(self):
        return True

    def readable(self):
        return False

    def seekable(self):
        return False

    def fileno(self):
        return 1 if self.name == "stdout" else 2

    @property
    def buffer(self):
        raise AttributeError("pyrun's captured streams have no binary buffer")


_stdout = _Stream("stdout")
_stderr = _Stream("stderr")


class _Call:
    def __init__(self, cid, max_output):
        self.id = cid
        self.max_output = max_output
        self.pending_stream = None
        self.pending = []
        self.pending_len = 0
        self.sent = {"stdout": 0, "stderr": 0}
        self.dropped = {"stdout": 0, "stderr": 0}
        self.recycle = ""
        self.task = None
        self.interrupted = False
        self.running = False  # the user's code (or its packages) may be running
        self.rich = None  # pyrun_display's state for the call

    def write(self, stream, text):
        if not text:
            return
        if self.pending_stream is not None and self.pending_stream != stream:
            self.flush()
        self.pending_stream = stream
        self.pending.append(text)
        self.pending_len += len(text)
        if "\n" in text or self.pending_len >= 8192:
            self.flush()

    def flush(self):
        if not self.pending:
            return
        stream = self.pending_stream
        text = "".join(self.pending)
        self.pending.clear()
        self.pending_len = 0
        room = self.max_output - self.sent[stream]
        if room <= 0:
            self.dropped[stream] += len(text)
            return
        if len(text) > room:
            self.dropped[stream] += len(text) - room
            text = text[:room]
        self.sent[stream] += len(text)
        _host.emit(
            _encode_line({"type": "output", "id": self.id, "stream": stream, "text": text})
        )


def prepare():
    """Called once per interpreter, before any host function exists.

    At a plain start the host calls it right after importing this module; for
    a memory snapshot it runs before the snapshot is taken, so workers started
    from the snapshot have it done. Only interpreter state belongs here: no
    function of the host, no file system or working directory (the file
    system lives outside the snapshot), nothing that differs per process.
    """
    global _prepared
    if _prepared:
        return
    _prepared = True
    # Pyodide's time.sleep suspends the wasm stack (JSPI); an interrupt then
    # lands outside the call and strands it. This sleep blocks the thread on
    # the interrupt flag instead, so an interrupt ends it at once.
    time.sleep = _sleep
    # What Pyodide's package loader imports when it installs a wheel, so
    # that a worker started from the snapshot has it imported already.
    import importlib.metadata  # noqa: F401
    import pyodide._package_loader  # noqa: F401
    import tempfile  # noqa: F401
    import zipfile  # noqa: F401

    _display.install(_showing)
    _guard.install(_stderr.write)  # last: no audit hook can be added after it


def _showing():
    """The call that may show things now (display()), if any."""
    call = _active
    if call is not None and _current.get() is call:
        return call
    return None


_prepared = False


def setup(emit, wait, live, load_packages, clear_dir):
    """Called once in every worker process, after ``prepare``, to connect it.
    ``clear_dir(path)`` empties a folder on the JavaScript side (guards.ts)."""
    _host.emit = emit
    _host.wait = wait
    _host.live = live
    signal.signal(signal.SIGINT, _on_interrupt)
    _host.load_packages = load_packages
    _display.connect(emit, clear_dir)
    # Workers started from one snapshot share its random state: give each
    # its own, as a plain start would.
    rnd = sys.modules.get("random")
    if rnd is not None:
        rnd.seed()
    os.makedirs(WORKDIR, exist_ok=True)
    os.chdir(WORKDIR)
    sys.stdin = io.StringIO()  # as after every call: input() raises EOFError
    _baseline.capture()


def preloaded(files_json):
    """Called once in every worker process whose pool preloads packages
    (--deps), after the host loaded their files and before ``setup``: imports
    their modules, so that calls find them imported, and remembers them."""
    import importlib

    importlib.invalidate_caches()
    for f in _loads(files_json):
        _host.loaded[f["name"]] = f["version"]
        for mod in f.get("imports") or ():
            importlib.import_module(mod)


def _sleep(secs):
    """time.sleep that an interrupt cuts short (KeyboardInterrupt)."""
    secs = float(secs)
    if secs < 0:
        raise ValueError("sleep length must be non-negative")
    if math.isnan(secs):
        raise ValueError("Invalid value NaN (not a number)")
    deadline = time.monotonic() + secs
    while (left := deadline - time.monotonic()) > 0:
        if _host.wait(min(left, 3600.0) * 1000):
            raise KeyboardInterrupt


def interrupt():
    """Called by the host when an interrupt arrives while Python is idle in an await."""
    call = _active
    if call is None or not call.running or call.task is None or call.task.done():
        return False
    call.interrupted = True
    call.task.cancel()
    return True


class _Baseline:
    """Process state restored after every call."""

    def capture(self):
        self.builtins = dict(builtins.__dict__)
        self.path = list(sys.path)
        self.meta_path = list(sys.meta_path)
        self.path_hooks = list(sys.path_hooks)
        self.environ = dict(os.environ)
        # The bytes os.environ keeps: comparing them is C-fast.
        self.environ_data = dict(os.environ._data)
        self.argv = list(sys.argv)
        self.recursion = sys.getrecursionlimit()
        self.modules = dict(sys.modules)
        self._remember_modules()
        self.displayhook = sys.displayhook
        self.excepthook = sys.excepthook

    def _remember_modules(self):
        # sys.modules as restored, to tell cheaply that a call changed
        # nothing in it: lists compare item by item in C, an object equal to
        # itself without calling its __eq__ (6 us for 200 modules, against
        # 22 us for the loop in _forget_modules). A module a call replaced
        # with an object whose __eq__ lies stays: deliberate interference,
        # like patching a module's attributes (docs/security.md).
        self.module_names = list(sys.modules)
        self.module_values = list(sys.modules.values())

    def restore(self):
        if builtins.__dict__ != self.builtins:
            builtins.__dict__.clear()
            builtins.__dict__.update(self.builtins)
        sys.path[:] = self.path
        sys.meta_path[:] = self.meta_path
        sys.path_hooks[:] = self.path_hooks
        if os.environ._data != self.environ_data:
            os.environ.clear()  # through the API: it also unsets C's environment
            os.environ.update(self.environ)
        sys.argv[:] = self.argv
        sys.setrecursionlimit(self.recursion)
        if signal.getsignal(signal.SIGINT) is not _on_interrupt:
            signal.signal(signal.SIGINT, _on_interrupt)
        sys.displayhook = self.displayhook
        sys.excepthook = self.excepthook
        sys.stdout = _stdout
        sys.stderr = _stderr
        sys.stdin = io.StringIO()
        try:
            os.chdir(WORKDIR)
        except OSError:
            os.makedirs(WORKDIR, exist_ok=True)
            os.chdir(WORKDIR)
        self._forget_modules()

    def _forget_modules(self):
        """Drop modules a call created itself; keep stdlib and packages warm.

        A module the baseline knows is put back if a call replaced it in
        sys.modules; changes to a module's attributes persist (docs/security.md,
        Isolation between calls).
        """
        modules = sys.modules
        if (
            len(modules) == len(self.module_names)
            and list(modules) == self.module_names
            and list(modules.values()) == self.module_values
        ):
            return  # untouched: the common case, without a loop in Python
        for name, mod in self.modules.items():
            if modules.get(name) is not mod:
                modules[name] = mod
        if len(modules) == len(self.modules):
            self._remember_modules()
            return
        added = [name for name in modules if name not in self.modules]
        for name in added:
            mod = sys.modules.get(name)
            origin = getattr(getattr(mod, "__spec__", None), "origin", None)
            if isinstance(origin, str) and (
                origin in ("built-in", "frozen") or origin.startswith("/lib/")
            ):
                if not _under(origin, SCRATCH + (WORKDIR,)):
                    self.modules[name] = mod
                    continue
            sys.modules.pop(name, None)
        sys.path_importer_cache.clear()
        import importlib

        importlib.invalidate_caches()
        self._remember_modules()


_baseline = _Baseline()


def _under(path, roots):
    for root in roots:
        if path == root or path.startswith(root + "/"):
            return True
    return False


# What a call left in a scratch folder goes; the folder stays.
_clear_dir = _display.clear_dir


def _cancel_leftover_tasks(before):
    try:
        loop = asyncio.get_event_loop()
        tasks = asyncio.all_tasks(loop)
    except RuntimeError:
        return
    for task in tasks - before:
        task.cancel()


def _all_tasks():
    try:
        return asyncio.all_tasks(asyncio.get_event_loop())
    except RuntimeError:
        return set()


def run(cid, code, globals_json, max_output, rich_json=""):
    """Run one call; returns the result protocol line (a JSON string).

    The host calls it through ``callPromising``, so that it may block on an
    awaitable by switching stacks (``run_sync``): code with top-level await,
    ``asyncio.run`` in the code, package loading. Code that awaits nothing
    runs without a trip through the event loop.
    """
    global _active, _unsettled
    settle()  # the host settles after each result; never run on what a call left
    call = _Call(cid, max_output)
    started = time.perf_counter()
    tasks_before = _all_tasks()
    token = _current.set(call)
    _session.tag()
    _active = call
    sys.stdout = _stdout
    sys.stderr = _stderr
    result = {"type": "result", "id": cid}
    try:
        call.running = True
        try:
            _display.begin(call, rich_json)
            _execute(call, code, globals_json, result)
            call.running = False
        except BaseException as e:  # noqa: BLE001 - every exception is the user's result
            call.running = False
            call.flush()
            result.pop("value", None)
            if isinstance(e, KeyboardInterrupt) or (
                isinstance(e, asyncio.CancelledError) and call.interrupted
            ):
                result.update(status="interrupted", error=_format_exception(e))
            elif isinstance(e, MemoryError):
                result.update(status="memory-error", error=_format_exception(e))
                call.recycle = "the call ran out of memory"
            else:
                result.update(status="run-error", error=_format_exception(e))
        _display.end(call, result)
        return _finish(call, result, started)
    finally:
        _guard.reset()  # first: a trace function must not see the cleanup
        _current.reset(token)
        _active = None
        _display.finish(call)
        _unsettled = tasks_before


# The tasks that existed before the last call, until settle() has cleaned
# up after it; None: nothing to clean up.
_unsettled = None


def settle():
    """Cleans up after the last call: called by the host once the call's
    result is on its way, so that the caller does not wait for it (a
    stateless call's clean-up is about a third of a warm call's time in
    the worker). The host takes no next call before it has returned."""
    global _unsettled
    tasks_before, _unsettled = _unsettled, None
    if tasks_before is None:
        return
    if _session.scope is not None:
        _session.after_call()  # a session keeps what the call left
    else:
        _cleanup(tasks_before)


def _cleanup(tasks_before):
    """Clears what a stateless call left behind."""
    _cancel_leftover_tasks(tasks_before)
    # Functions and classes a call defines hold its globals in reference
    # cycles, which only the collector frees: until then a later call
    # could find them with gc.get_objects(). A young collection
    # (microseconds; a full one costs milliseconds) frees those of a
    # call that was not long.
    gc.collect(0)
    _clear_dir(WORKDIR)
    for d in SCRATCH:
        _clear_dir(d)
    _baseline.restore()


def _execute(call, code, globals_json, result):
    """The part of a call that runs the user's code; interrupts land here only."""
    linecache.cache = _linecache_cache
    _linecache_cache[FILENAME] = (len(code), None, code.splitlines(True), FILENAME)
    tree, compiled, keep = _compile(code)
    try:
        need = _needs.need(call.id, code, _host.loaded)
    except ValueError as e:
        result.update(status="install-error", error=str(e))
        return
    if need is not None:
        # Pyodide's loader writes the packages into site-packages, which
        # guards.ts lets it do (FileGuard.loading), and the call's code not.
        try:
            reply = _loads(_await(call, _host.load_packages(_encode_line(need))))
        except BaseException:
            # The load goes on in the host: it must not land in a later call.
            call.recycle = "the call was stopped while its packages were loading"
            raise
        if reply.get("error"):
            result.update(status="install-error", error=reply["error"])
            return
        files = reply.get("files") or []
        if files:
            result["dependencies"] = [f["name"] for f in files]
        if reply.get("errors"):
            result.update(status="install-error", error="\n".join(str(e) for e in reply["errors"]))
            return
        if files:
            for f in files:
                _host.loaded[f["name"]] = f["version"]
            import importlib

            importlib.invalidate_caches()
    scope = _session.scope
    if scope is None:
        scope = {"__name__": "__main__", "__builtins__": builtins}
    if globals_json:
        scope.update(_loads(globals_json))
        scope["__builtins__"] = builtins
    value = eval(compiled, scope)
    if compiled.co_flags & _CO_COROUTINE:
        _await(call, value)
    value = scope.pop(_LAST, None) if keep else None
    call.flush()
    result["status"] = "success"
    if value is not None:
        _display.last(call, value)
        result["value"] = _values.dump_json(value)


def _await(call, awaitable):
    """Blocks on an awaitable by switching stacks; an interrupt cancels it."""
    call.task = asyncio.ensure_future(_settle(awaitable))
    try:
        ok, value = _run_sync(call.task)
    finally:
        call.task = None
    if ok:
        return value
    raise value


async def _settle(awaitable):
    # An exception must not leave the task: Pyodide prints an exception it
    # hands to JavaScript, and the call would show it twice.
    try:
        return True, await awaitable
    except BaseException as e:  # noqa: BLE001 - re-raised by _await
        return False, e


# The name the value of a call's last expression is kept under, in the
# call's own globals, which are dropped afterwards.
_LAST = "__pyrun_last_value__"
_CO_COROUTINE = 0x80  # inspect.CO_COROUTINE: the code awaits at top level


def _compile(code):
    """Compiles a call's code as Pyodide's runPythonAsync does, without its
    per-call costs (a deep copy and a walk of the whole tree).

    As there, the code is dedented and may await at top level, and the value
    of a last expression statement is kept unless the code ends with a
    semicolon. Returns the tree, the code object and whether the value of
    the last expression is kept (under _LAST).
    """
    source = _dedent(code)
    tree = compile(source, FILENAME, "exec", _AST_FLAGS, dont_inherit=True)
    keep = bool(tree.body) and isinstance(tree.body[-1], ast.Expr)
    if keep and ";" in source and should_quiet(source):
        keep = False
    if keep:
        last = tree.body[-1]
        target = ast.copy_location(ast.Name(_LAST, ast.Store()), last)
        tree.body[-1] = ast.copy_location(ast.Assign([target], last.value), last)
    compiled = compile(tree, FILENAME, "exec", ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    return tree, compiled, keep


_AST_FLAGS = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT


def _on_interrupt(signum, frame):
    """SIGINT from the interrupt flag: stop the running call, and nothing else.

    An interrupt that lands in pyrun's own bookkeeping, or in a callback a
    previous call left behind, is dropped; the host then cancels the call's
    task if it is parked in an await.
    """
    call = _active
    if call is not None and call.running and _current.get() is call and _host.live():
        call.interrupted = True
        raise KeyboardInterrupt


# --- Python sessions ------------------------------------------------------
# A worker started for a session (HostConfig.session) keeps what an
# interactive interpreter keeps: one globals dict for all its calls, the
# modules they import, the files they write (working directory, /output/,
# /tmp), the asyncio tasks they leave running, and the process state the
# stateless path restores (sys.path, os.environ, the current directory).
# Output of a task a previous call left running goes to the running call.
# The worker serves no one else, so a write outside the scratch folders
# needs no replacement of the worker either.


class _Session:
    scope = None  # the session's globals; None: a stateless worker
    # A worker of several sessions (pyrun_sessions.py) replaces these: mine
    # says whether the code writing output belongs to the running call's
    # session, tag marks the call's context with its session.
    mine = staticmethod(lambda: True)
    tag = staticmethod(lambda: None)

    def start(self):
        self.scope = {"__name__": "__main__", "__builtins__": builtins}

    def after_call(self):
        sys.stdout = _stdout
        sys.stderr = _stderr
        # Reference cycles of what the call dropped, as after a stateless call.
        gc.collect(0)


_session = _Session()


def keep_state():
    """Called once by the host of a session's worker, after ``setup``."""
    settle()  # a warming call's leftovers are not the session's
    _session.start()


def _finish(call, result, started):
    call.flush()
    # Cap what the result line carries, as output is capped: the supervisor
    # refuses over-long lines from a worker.
    for key in ("value", "error"):
        text = result.get(key)
        if text is not None and len(text) > call.max_output:
            result[key] = text[: call.max_output]
            result[key + "_cut"] = True
    dropped = {k: v for k, v in call.dropped.items() if v}
    if dropped:
        result["dropped"] = dropped
    if call.recycle:
        result["recycle"] = call.recycle
    result["duration_ms"] = round((time.perf_counter() - started) * 1000, 3)
    return _encode_line(result)


def _format_exception(exc):
    te = traceback.TracebackException.from_exception(exc, capture_locals=False)
    _strip_internal(te, set())
    text = "".join(te.format())
    return text.rstrip("\n")


def _strip_internal(te, seen):
    if te is None or id(te) in seen:
        return
    seen.add(id(te))
    frames = [f for f in te.stack if not _internal(f.filename)]
    te.stack = traceback.StackSummary.from_list(frames)
    _strip_internal(te.__cause__, seen)
    _strip_internal(te.__context__, seen)
    for sub in getattr(te, "exceptions", None) or ():
        _strip_internal(sub, seen)


def _internal(filename):
    return filename.startswith(_INTERNAL_PREFIXES)
