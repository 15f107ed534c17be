"""pyrun's rich results: display(), matplotlib figures, files in and out.

pyrun_helper imports this module and calls it at four points:

- ``install(active, emit)`` once per interpreter (from ``prepare``): puts
  ``display`` into builtins, and a hook that makes ``matplotlib.pyplot.show``
  send the open figures;
- ``begin(call, options_json)`` before a call's code runs: empties /output/
  (unless the call keeps it, as a session does), writes the call's input
  files into the working directory, and notes what /output/ holds;
- ``last(call, value)`` with the value of the call's last expression;
- ``end(call, result)`` after the code: sends the open matplotlib figures and
  the files the call wrote under /output/, and puts what the caps held back
  into the result.

What is shown goes to the supervisor as ``display`` and ``file`` events
(docs/protocol.md, Rich results), one representation each, with its bytes in
base64. Nothing here runs for a call that shows nothing and writes nothing
under /output/ but a few dictionary lookups.
"""

import base64
import builtins
import importlib.machinery
import io
import json
import os
import sys

OUTPUT = "/output"

# Representations, richest first (docs/contract.md section 9). A mime bundle's
# other entries are ignored; text/plain is shown only when display() was
# asked for an object with nothing richer.
RICH = (
    "image/png",
    "image/jpeg",
    "image/gif",
    "image/webp",
    "image/svg+xml",
    "text/html",
    "text/markdown",
    "application/json",
    "text/latex",
)
# The _repr_*_ methods in the order IPython's formatters try them.
_REPR_METHODS = (
    ("_repr_png_", "image/png"),
    ("_repr_jpeg_", "image/jpeg"),
    ("_repr_svg_", "image/svg+xml"),
    ("_repr_html_", "text/html"),
    ("_repr_markdown_", "text/markdown"),
    ("_repr_json_", "application/json"),
    ("_repr_latex_", "text/latex"),
)
_BINARY = ("image/png", "image/jpeg", "image/gif", "image/webp")
# Values whose last-expression display is never rich: checked first so that
# a call returning a number costs no attribute lookups.
_PLAIN = (type(None), bool, int, float, str, bytes, list, tuple, dict, set, frozenset)

_encode_line = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_dumps = json.dumps
_loads = json.loads
_b64encode = base64.b64encode
_b64decode = base64.b64decode


class _Hooks:
    active = None  # active() -> the _Call that may show things now, or None
    emit = None  # emit(line) writes one protocol line
    clear = None  # clear(path) empties a folder (clear_dir)


_hooks = _Hooks()


class Caps:
    """What a run's options allow; one per distinct options text."""

    __slots__ = ("max_displays", "max_display_bytes", "max_files", "max_file_bytes", "keep")

    def __init__(self, opts):
        self.max_displays = int(opts.get("max_displays") or 16)
        self.max_display_bytes = int(opts.get("max_display_bytes") or 4 << 20)
        self.max_files = int(opts.get("max_files") or 256)
        self.max_file_bytes = int(opts.get("max_file_bytes") or 64 << 20)
        self.keep = bool(opts.get("keep_output"))


class Rich:
    """A call's rich-results state; pyrun_helper keeps one on its _Call."""

    __slots__ = (
        "caps",
        "displays",
        "display_bytes",
        "displays_dropped",
        "files_dropped",
        "before",
        "seen",
    )

    def __init__(self, caps):
        self.caps = caps
        self.displays = 0
        self.display_bytes = 0
        self.displays_dropped = 0
        self.files_dropped = 0
        self.before = {}
        self.seen = False  # /output/ held files at the end of the call


# The options of calls without input files are the same text call after
# call: parsed once.
_cached = ["", Caps({})]


# Folders besides pyrun's scratch ones that calls may write: /output/ and
# the host folders mounted read-write (a write to a read-only one fails).
writable = [OUTPUT]


def install(active):
    """Once per interpreter: display() in builtins, MPLBACKEND, the pyplot hook."""
    _hooks.active = active
    builtins.display = display
    # matplotlib's default backend in Pyodide needs a browser page
    # (js.document); Agg renders without one (docs/architecture.md, Facts).
    os.environ["MPLBACKEND"] = "Agg"
    if not any(isinstance(f, _PyplotHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _PyplotHook())
    import mimetypes

    mimetypes.init()


def connect(emit, clear):
    """In every worker process: the function that writes protocol lines, and
    the one that empties a folder (clear_dir)."""
    _hooks.emit = emit
    _hooks.clear = clear


def mounted(paths_json):
    """In every worker process with mounts: the sandbox paths of host folders."""
    for p in _loads(paths_json):
        if p not in writable:
            writable.append(p)


def begin(call, options_json):
    """Before a call's code: /output/, input files, caps.

    This runs for every call: it costs one listing of /output/ when the
    options are those of the call before and /output/ is empty.
    """
    files = None
    if options_json == _cached[0]:
        caps = _cached[1]
    else:
        opts = _loads(options_json) if options_json else {}
        caps = Caps(opts)
        files = opts.get("files")
        if not files:
            _cached[0], _cached[1] = options_json, caps
    rich = call.rich = Rich(caps)
    try:
        present = os.listdir(OUTPUT)
    except FileNotFoundError:
        os.mkdir(OUTPUT)
        present = ()
    if present and not caps.keep:
        clear_dir(OUTPUT)
    if files:
        _write_inputs(files)
    if caps.keep and present:
        rich.before = _scan(OUTPUT)
    mpl = sys.modules.get("matplotlib.pyplot")
    if mpl is not None:
        _patch_pyplot(mpl)


def last(call, value):
    """The value of the call's last expression: shown when it has a rich form."""
    if isinstance(value, _PLAIN):
        return
    try:
        mime, data = _render(value)
    except Exception as e:  # noqa: BLE001 - a broken _repr_ is the user's, not the call's end
        _warn(call, f"pyrun: could not display the value of the last expression: {e!r}\n")
        return
    if mime is not None and mime != "text/plain":
        _send(call, mime, data)


def end(call, result):
    """After a call's code: figures, /output/ files, what the caps dropped."""
    rich = getattr(call, "rich", None)
    if rich is None:
        return
    if "matplotlib._pylab_helpers" in sys.modules:
        try:
            _send_figures(call)
        except Exception as e:  # noqa: BLE001
            _warn(call, f"pyrun: could not render the open matplotlib figures: {e!r}\n")
    try:
        _send_files(call, rich)
    except Exception as e:  # noqa: BLE001
        _warn(call, f"pyrun: could not collect the files in {OUTPUT}/: {e!r}\n")
    if rich.displays_dropped:
        result["displays_dropped"] = rich.displays_dropped
    if rich.files_dropped:
        result["files_dropped"] = rich.files_dropped


def finish(call):
    """After a call: a stateless call's /output/ goes with it."""
    rich = call.rich
    if rich is not None and rich.seen and not rich.caps.keep:
        clear_dir(OUTPUT)


# --- display ---------------------------------------------------------------


def display(*objs, raw=False, **_kwargs):
    """Show objects in the call's result, as IPython's display() does.

    Each object is rendered by the IPython display protocol
    (``_repr_mimebundle_``, then ``_repr_png_``, ``_repr_jpeg_``,
    ``_repr_svg_``, ``_repr_html_``, ``_repr_markdown_``, ``_repr_json_``,
    ``_repr_latex_``), richest first; an object with none of them is shown as
    its ``repr()``. With ``raw=True`` each object is a mime bundle itself
    (a dict of mime type to data).
    """
    call = _hooks.active()
    if call is None:
        return
    for obj in objs:
        if raw and isinstance(obj, dict):
            mime, data = _pick(obj)
        else:
            try:
                mime, data = _render(obj)
            except Exception as e:  # noqa: BLE001 - as IPython: say so, show the repr
                _warn(call, f"pyrun: display() could not render {type(obj).__name__}: {e!r}\n")
                mime = None
        if mime is None:
            mime, data = "text/plain", repr(obj)
        _send(call, mime, data)


def _render(obj):
    """The richest representation of obj: (mime type, data) or (None, None).

    As in IPython, a formatter that raises (pygal's _repr_png_ without
    cairosvg, say) does not stop the others; if all of those that exist
    fail, the first failure is raised.
    """
    kind = type(obj)
    failed = None
    if getattr(kind, "_repr_mimebundle_", None) is not None:
        try:
            bundle = obj._repr_mimebundle_(include=None, exclude=None)
            if isinstance(bundle, tuple):
                bundle = bundle[0]
            if isinstance(bundle, dict) and bundle:
                mime, data = _pick(bundle)
                if mime is not None and mime != "text/plain":
                    return mime, data
        except Exception as e:  # noqa: BLE001
            failed = e
    for method, mime in _REPR_METHODS:
        if getattr(kind, method, None) is None:
            continue
        try:
            data = getattr(obj, method)()
        except Exception as e:  # noqa: BLE001
            failed = failed or e
            continue
        if isinstance(data, tuple):
            data = data[0]
        if data is not None:
            return mime, data
    if failed is not None:
        raise failed
    return None, None


def _pick(bundle):
    for mime in RICH:
        if bundle.get(mime) is not None:
            return mime, bundle[mime]
    for mime, data in bundle.items():
        if mime != "text/plain" and isinstance(mime, str) and data is not None:
            return mime, data
    if bundle.get("text/plain") is not None:
        return "text/plain", bundle["text/plain"]
    return None, None


def _to_bytes(mime, data):
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if mime in _BINARY and isinstance(data, str):
        # Jupyter's bundles carry images as base64 text.
        try:
            return _b64decode(data, validate=True)
        except ValueError:
            return data.encode("utf-8", "surrogateescape")
    if isinstance(data, str):
        return data.encode("utf-8", "surrogateescape")
    if mime == "application/json" or mime.endswith("+json"):
        return _dumps(data, ensure_ascii=False, default=repr).encode("utf-8")
    return str(data).encode("utf-8", "surrogateescape")


def _send(call, mime, data):
    rich = call.rich
    raw = _to_bytes(mime, data)
    caps = rich.caps
    if rich.displays >= caps.max_displays or rich.display_bytes + len(raw) > caps.max_display_bytes:
        rich.displays_dropped += 1
        return
    rich.displays += 1
    rich.display_bytes += len(raw)
    call.flush()  # output written before the display comes before it
    _emit({"type": "display", "id": call.id, "mime_type": mime}, raw)


# The most bytes one event carries: a larger display or file goes as events
# of the same kind marked "more", so that a protocol line stays small
# (docs/protocol.md, Rich results).
CHUNK = 1 << 20


def _emit(event, raw):
    off = 0
    while True:
        part = raw[off : off + CHUNK]
        off += CHUNK
        event["data"] = _b64encode(part).decode("ascii")
        if off < len(raw):
            event["more"] = True
            _hooks.emit(_encode_line(event))
            continue
        event.pop("more", None)
        _hooks.emit(_encode_line(event))
        return


def _warn(call, text):
    call.write("stderr", text)


# --- matplotlib ------------------------------------------------------------


def _send_figures(call):
    """Every figure still open, as PNG through Agg, then closed."""
    helpers = sys.modules["matplotlib._pylab_helpers"]
    managers = helpers.Gcf.get_all_fig_managers()
    if not managers:
        return
    for manager in managers:
        buf = io.BytesIO()
        manager.canvas.figure.savefig(buf, format="png")
        _send(call, "image/png", buf.getvalue())
    helpers.Gcf.destroy_all()


def _show(*args, **kwargs):
    """matplotlib.pyplot.show in pyrun: the open figures go into the result."""
    call = _hooks.active()
    if call is not None and "matplotlib._pylab_helpers" in sys.modules:
        _send_figures(call)


def _patch_pyplot(mod):
    if getattr(mod, "show", None) is not _show:
        mod.show = _show


class _PyplotHook:
    """A meta path finder that patches matplotlib.pyplot.show on import."""

    def find_spec(self, name, path=None, target=None):
        if name != "matplotlib.pyplot":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _PatchingLoader(spec.loader)
        return spec

    def invalidate_caches(self):
        pass


class _PatchingLoader:
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        _patch_pyplot(module)

    def __getattr__(self, name):
        return getattr(self.loader, name)


# --- files in and out ------------------------------------------------------


class InputError(ValueError):
    """An input file the call cannot have (a path outside the working directory)."""


def _write_inputs(files):
    base = os.getcwd()
    for f in files:
        rel = f["path"]
        full = os.path.normpath(os.path.join(base, rel))
        if os.path.isabs(rel) or not full.startswith(base + "/"):
            raise InputError(f"files: {rel!r} is not a relative path inside the working directory")
        parent = os.path.dirname(full)
        if parent != base:
            os.makedirs(parent, exist_ok=True)
        with open(full, "wb") as out:
            out.write(_b64decode(f["data"]))


def _scan(root):
    """Regular files under root: relative path -> (size, mtime in ns)."""
    found = {}
    try:
        entries = list(os.scandir(root))
    except OSError:
        return found
    while entries:
        e = entries.pop()
        try:
            if e.is_dir(follow_symlinks=False):
                entries.extend(os.scandir(e.path))
            elif e.is_file(follow_symlinks=False):
                st = e.stat(follow_symlinks=False)
                found[e.path[len(root) + 1 :]] = (st.st_size, st.st_mtime_ns)
        except OSError:
            continue
    return found


def _send_files(call, rich):
    try:
        if not os.listdir(OUTPUT):  # the common case, cheaper than a scan
            return
    except OSError:
        return  # the call removed /output/ itself
    rich.seen = True
    now = _scan(OUTPUT)
    caps = rich.caps
    import mimetypes

    sent = 0
    sent_bytes = 0
    for rel in sorted(now):
        size, mtime = now[rel]
        if rich.before.get(rel) == (size, mtime):
            continue  # a session's file this call did not change
        if sent >= caps.max_files or sent_bytes + size > caps.max_file_bytes:
            rich.files_dropped += 1
            continue
        try:
            with open(OUTPUT + "/" + rel, "rb") as f:
                data = f.read(caps.max_file_bytes - sent_bytes + 1)
        except OSError:
            continue
        if sent_bytes + len(data) > caps.max_file_bytes:
            rich.files_dropped += 1
            continue
        sent += 1
        sent_bytes += len(data)
        mime = mimetypes.guess_type(rel, strict=False)[0] or "application/octet-stream"
        call.flush()
        _emit({"type": "file", "id": call.id, "path": rel, "mime_type": mime}, data)


def clear_dir(path):
    """Removes what is in a folder (pyrun's scratch ones, /output/); keeps the folder.

    The host does it, through Emscripten's FS: Python's os.listdir gets
    names cut at 255 bytes, which no one can remove (guards.ts refuses
    such names, but a name made past it must go too)."""
    _hooks.clear(path)
