"""Interpreter-wide hooks a call must not leave to the calls after it.

An audit hook, a trace or profile function and a sys.monitoring tool live as
long as the interpreter: one installed by a call would see (or break) every
later call on its worker. pyrun refuses audit hooks outright (no API removes
one) and undoes the others after every call.

pyrun_helper calls ``install`` once, in ``prepare`` (so the refusal is in
the memory snapshot), and ``reset`` after every call.
"""

import sys


def install(notice):
    """Adds the hook that refuses any later audit hook. It must be the last
    hook added: from here on none can be. ``notice(text)`` tells the running
    call, if any, why its hook was refused."""
    sys.addaudithook(_make_refusal(notice))
    _baseline_tools[:] = [t for t in range(_TOOLS) if sys.monitoring.get_tool(t) is not None]


def _make_refusal(notice):
    # Everything the hook uses is bound in its defaults: a call can change
    # module globals and builtins, but replacing or deleting a function's
    # __code__ or __defaults__ raises "object.__setattr__" or
    # "object.__delattr__", which the hook refuses for itself. A hook that raises keeps sys.addaudithook from adding the new
    # hook whatever the exception (CPython suppresses it if it is an Exception).
    def refuse(event, args, _notice=notice, _code=None, _msg=_REFUSED):
        if event == "sys.addaudithook":
            try:
                _notice(_msg)
            except:  # noqa: E722 - a broken notice must not let the hook in
                pass
            raise RuntimeError(_msg)
        if event == "object.__setattr__" or event == "object.__delattr__":
            try:
                mine = args[0].__code__ is _code
            except:  # noqa: E722 - any object may be set on; only ours matters
                mine = False
            if mine:
                raise RuntimeError("pyrun: its audit hook cannot be changed")

    refuse.__defaults__ = (notice, refuse.__code__, _REFUSED)
    return refuse


_REFUSED = (
    "pyrun: sys.addaudithook refused: an audit hook would outlive this call "
    "and see the calls after it on this worker\n"
)

# sys.monitoring's tool ids are 0-5.
_TOOLS = 6
_baseline_tools = []  # tools in use before any call, left alone


def reset():
    """Undoes the trace and profile functions and sys.monitoring tools a call
    set: about a microsecond when it set none."""
    if sys.gettrace() is not None:
        sys.settrace(None)
    if sys.getprofile() is not None:
        sys.setprofile(None)
    mon = sys.monitoring
    for tool in range(_TOOLS):
        if mon.get_tool(tool) is not None and tool not in _baseline_tools:
            mon.clear_tool_id(tool)
            mon.free_tool_id(tool)
