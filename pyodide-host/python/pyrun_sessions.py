"""Session namespaces on a shared session worker (docs/sessions.md).

A worker started for sessions (HostConfig.session) may hold several sessions
of one client; each run names its namespace (docs/protocol.md, Sessions), and
the host (sessions.ts) switches to it before the run: ``save`` the Python
state of the namespace switched out, the host swaps the folders, ``load`` the
one switched in. A namespace is:

- its globals dict;
- the modules it made or imported from its own files (a module of the
  standard library or an installed package, once imported, is shared by the
  worker's sessions, as its packages are);
- the state of ``random``'s global generator;
- ``os.environ``, ``sys.path`` and the current directory;
- its asyncio tasks and callbacks, tagged with the namespace (a context
  variable they inherit): their output goes only to a call of their own
  session. They go on running while another session's call runs.
"""

import asyncio
import contextvars
import json
import os
import sys

import pyrun_helper as _h

# The namespace of the call running, or of the call that left a task or
# callback behind.
_ns = contextvars.ContextVar("pyrun_namespace", default=None)


class _Namespace:
    def __init__(self):
        self.scope = {"__name__": "__main__", "__builtins__": _h.builtins}
        self.modules = {}
        self.random = None
        self.environ = dict(_h._baseline.environ)
        self.path = list(_h._baseline.path)
        self.cwd = _h.WORKDIR


_spaces = {}  # namespace -> _Namespace, of the namespaces switched out
_current = None  # the _Namespace switched in
_current_name = None  # and its name
_shared = None  # names of modules every namespace sees


def _own(name, mod):
    """Whether a module beyond the shared ones is the namespace's own: one
    its code made, or imported from its files; not the standard library's
    or an installed package's."""
    origin = getattr(getattr(mod, "__spec__", None), "origin", None)
    if isinstance(origin, str) and (
        origin in ("built-in", "frozen") or origin.startswith("/lib/")
    ):
        return False
    return True


def save(ns):
    """The namespace ns is switched out: keep its Python state."""
    global _shared
    space = _current
    if _shared is None:
        _shared = set(sys.modules)
    if space is None:
        return
    space.modules = _take_own_modules()
    mods = sys.modules
    rnd = mods.get("random")
    space.random = rnd.getstate() if rnd is not None else None
    space.environ = dict(os.environ)
    space.path = list(sys.path)
    try:
        space.cwd = os.getcwd()
    except OSError:
        space.cwd = _h.WORKDIR
    if ns:
        _spaces[ns] = space


def _take_own_modules():
    """Takes the modules of the namespace switched in out of sys.modules."""
    mods = sys.modules
    own = {}
    for name in [n for n in mods if n not in _shared]:
        mod = mods[name]
        if _own(name, mod):
            own[name] = mods.pop(name)
        else:
            _shared.add(name)
    return own


def load(ns):
    """The namespace ns is switched in: its state back, or a new one's."""
    global _current, _current_name
    space = _spaces.pop(ns, None)
    if space is None:
        space = _Namespace()
    _current, _current_name = space, ns
    _h._session.scope = space.scope
    sys.modules.update(space.modules)
    space.modules = {}
    rnd = sys.modules.get("random")
    if rnd is not None:
        if space.random is not None:
            rnd.setstate(space.random)
        else:
            rnd.seed()  # a new session's own sequence
    if dict(os.environ) != space.environ:
        os.environ.clear()
        os.environ.update(space.environ)
    sys.path[:] = space.path
    try:
        os.chdir(space.cwd)
    except OSError:
        os.chdir(_h.WORKDIR)
    # The folders changed under the import system's caches: the finders of
    # the swapped folders (and of relative paths) go, and are made again at
    # the next import. Clearing every cache instead (importlib's
    # invalidate_caches) costs milliseconds a switch.
    cache = sys.path_importer_cache
    for path in [p for p in cache if _swapped(p)]:
        del cache[path]


def _swapped(path):
    if not isinstance(path, str) or not path.startswith("/"):
        return True  # "", ".": relative to the current directory
    return any(path == d or path.startswith(d + "/") for d in _SWAPPED)


_SWAPPED = (_h.WORKDIR, "/tmp", "/output")


def drop(ns):
    """Forgets the namespace ns of an ended session, and stops its tasks."""
    space = _spaces.pop(ns, None)
    if space is None:
        return
    _forget(ns, space)


def discard(ns):
    """Forgets the namespace switched in, ns, whose session ended with the
    call just run: as drop, without keeping its state first (what save
    would); the worker is then nobody's until the next load. The host
    calls it once the call's result is out (sessions.ts, settle)."""
    global _current, _current_name
    space = _current
    if space is None or _current_name != ns:
        return
    if _shared is None:
        return  # not reached: save("") ran before the first load
    space.modules = _take_own_modules()
    _current, _current_name = None, None
    _forget(ns, space)


def _forget(ns, space):
    try:
        tasks = asyncio.all_tasks(asyncio.get_event_loop())
    except RuntimeError:
        tasks = ()
    for task in tasks:
        if task.get_context().get(_ns) == ns:
            task.cancel()
    space.scope.clear()
    space.modules.clear()


def names():
    """The namespaces this worker holds, for the host after a restore from
    a checkpoint (sessions.ts, resume): JSON of the one switched in ("" for
    none) and the others."""
    return json.dumps({"current": _current_name or "", "others": list(_spaces)})


def mine():
    """Whether the code writing output now belongs to the namespace switched
    in (always, on a worker of one session)."""
    return _current is None or _ns.get() == _current_name


def _tag():
    _ns.set(_current_name)


_h._session.mine = mine
_h._session.tag = _tag
