"""The tools of the MCP servers pyrun is connected to, as async Python functions.

    import mcp_tools
    graph = await mcp_tools.memory.read_graph()
    help(mcp_tools.memory)          # every function, its signature and docstring

One namespace per server, one async function per tool the operator allowed,
with a signature and docstring made from the tool's input schema and
description. A call goes from this worker to pyrun, which checks the
arguments against the schema and calls the server; the sandbox itself has no
path to the servers, their credentials or their processes.

A function returns the tool's structured content when it has some, else its
text (JSON-decoded when it parses), an ``Image`` for an image, or a list when
the tool returned several pieces. A failure raises ``ToolError``.

The host (worker.ts) calls ``_setup`` once per process and ``_begin`` before
every call with that call's catalog; the namespaces are built on first use.
"""

import base64 as _base64
import functools as _functools
import inspect as _inspect
import json as _json
import keyword as _keyword
import operator as _operator
import re as _re
import sys as _sys
import types as _types
import typing as _typing

__all__ = ["ToolError", "Image"]


class ToolError(Exception):
    """A tool call failed: the tool reported an error, or pyrun refused or
    could not make the call (arguments that do not fit the tool's schema, a
    limit reached, the server not available, a timeout).

    ``server`` and ``tool`` name the call; ``content`` holds what the tool
    returned with its error, if it returned anything."""

    def __init__(self, message, *, server=None, tool=None, content=None):
        super().__init__(message)
        self.server = server
        self.tool = tool
        self.content = content


class Image:
    """An image a tool returned: ``data`` (bytes) and ``mime_type``.

    ``bytes(image)`` gives the bytes; ``display(image)`` shows it."""

    def __init__(self, data, mime_type):
        self.data = bytes(data)
        self.mime_type = mime_type

    def __bytes__(self):
        return self.data

    def __repr__(self):
        return f"<mcp_tools.Image {self.mime_type}, {len(self.data)} bytes>"

    def __eq__(self, other):
        return isinstance(other, Image) and (self.data, self.mime_type) == (
            other.data,
            other.mime_type,
        )

    __hash__ = None

    def _repr_png_(self):
        return self.data if self.mime_type == "image/png" else None

    def _repr_jpeg_(self):
        return self.data if self.mime_type in ("image/jpeg", "image/jpg") else None

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {self.mime_type: self.data}


# --- the connection to the host -------------------------------------------

_host_call = None  # async call(server, tool, args_json) -> tool_result line
_catalog = ""  # the running call's catalog, JSON text
_servers = []  # names of the namespaces set on this module now


def _setup(call):
    """Called by the host once per process: the function that makes a call."""
    global _host_call
    _host_call = call


def _begin(catalog):
    """Called by the host before every call with its catalog (JSON text).

    The namespaces are dropped and built again on first use, so that a call
    sees the tools as they are now, and none of what an earlier call did to
    them."""
    global _catalog
    _catalog = catalog
    if _servers:
        mod = _sys.modules[__name__]
        for name in _servers:
            mod.__dict__.pop(name, None)
        _servers.clear()


def __getattr__(name):
    if name.startswith("__") or _catalog == "" or _servers:
        raise AttributeError(f"module 'mcp_tools' has no attribute {name!r}")
    _build()
    try:
        return globals()[name]
    except KeyError:
        raise AttributeError(f"module 'mcp_tools' has no attribute {name!r}") from None


def __dir__():
    if _catalog and not _servers:
        _build()
    return sorted(set(globals()) | set(_servers))


async def call(server, tool, /, **arguments):
    """Calls ``tool`` of ``server`` with ``arguments``, by their MCP names
    (for names that are not Python identifiers)."""
    if _host_call is None:
        raise ToolError("pyrun's tool calls are not connected", server=server, tool=tool)
    line = await _host_call(server, tool, _dumps(arguments, server, tool))
    ans = _json.loads(line)
    if "error" in ans:
        raise ToolError(ans["error"], server=server, tool=tool)
    return _result(ans.get("result") or {}, server, tool)


def _dumps(arguments, server, tool):
    try:
        return _json.dumps(arguments, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{server}.{tool}: the arguments are not JSON: {e}") from None


def _result(res, server, tool):
    items = [_content(c) for c in res.get("content") or ()]
    if res.get("isError"):
        text = "\n".join(c.get("text", "") for c in res.get("content") or () if c.get("type") == "text")
        raise ToolError(text or f"{server}.{tool} failed", server=server, tool=tool, content=items)
    if "structuredContent" in res:
        return res["structuredContent"]
    if not items:
        return None
    if len(items) == 1:
        return items[0]
    return items


def _content(c):
    kind = c.get("type")
    if kind == "text":
        text = c.get("text", "")
        try:
            return _json.loads(text)
        except ValueError:
            return text
    if kind in ("image", "audio"):
        data = _base64.b64decode(c.get("data", ""))
        mime = c.get("mimeType", "application/octet-stream")
        return Image(data, mime) if kind == "image" else {"type": "audio", "data": data, "mime_type": mime}
    return c  # resources and links, as the tool sent them


# --- namespaces -------------------------------------------------------------


def _build():
    try:
        catalog = _json.loads(_catalog)
    except ValueError:
        return
    mod = _sys.modules[__name__]
    for server in catalog.get("servers") or ():
        attr = _pyname(server["name"], set(mod.__dict__))
        ns = _namespace(server)
        mod.__dict__[attr] = ns
        _servers.append(attr)


def _namespace(server):
    name = server["name"]
    ns = _types.ModuleType(f"mcp_tools.{_pyname(name, set())}")
    lines = [f'The tools of the MCP server "{name}", as async functions.']
    if server.get("note"):
        lines += ["", server["note"]]
    taken = set(dir(ns))
    names = []
    for tool in server.get("tools") or ():
        fn = _function(name, tool, ns.__name__)
        attr = _pyname(tool["name"], taken)
        taken.add(attr)
        fn.__name__ = fn.__qualname__ = attr
        setattr(ns, attr, fn)
        names.append(attr)
    if not names:
        lines += ["", "No tools of this server are allowed."]
    ns.__doc__ = "\n".join(lines)
    ns.__all__ = names

    def __getattr__(attr, _name=name, _names=tuple(names), _note=server.get("note")):
        if attr.startswith("__"):
            raise AttributeError(attr)
        why = f" {_note}" if _note else ""
        have = ", ".join(_names) or "none"
        raise AttributeError(
            f'the MCP server "{_name}" has no tool {attr!r} that pyrun allows (functions: {have}).{why}'
        )

    ns.__getattr__ = __getattr__
    return ns


_SIMPLE = {"string": str, "integer": int, "number": float, "boolean": bool, "null": type(None)}


def _annotation(schema, depth=0):
    if not isinstance(schema, dict) or depth > 4:
        return _typing.Any
    if "enum" in schema and schema["enum"]:
        try:
            return _typing.Literal[tuple(schema["enum"])]
        except TypeError:
            return _typing.Any
    if "const" in schema:
        try:
            return _typing.Literal[schema["const"]]
        except TypeError:
            return _typing.Any
    alts = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(alts, list) and alts:
        return _union([_annotation(a, depth + 1) for a in alts])
    kind = schema.get("type")
    if isinstance(kind, list):
        return _union([_annotation({**schema, "type": k}, depth + 1) for k in kind])
    if kind in _SIMPLE:
        return _SIMPLE[kind]
    if kind == "array":
        items = schema.get("items")
        return list[_annotation(items, depth + 1)] if isinstance(items, dict) else list
    if kind == "object":
        return dict
    return _typing.Any


def _union(types):
    if _typing.Any in types:
        return _typing.Any
    out = []
    for t in types:
        if t not in out:
            out.append(t)
    try:
        return _functools.reduce(_operator.or_, out)
    except TypeError:
        return _typing.Any


def _nullable(schema):
    if not isinstance(schema, dict):
        return True
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    alts = schema.get("anyOf") or schema.get("oneOf") or ()
    return any(_nullable(a) for a in alts if isinstance(a, dict) and "type" in a)


def _type_text(annotation):
    return _inspect.formatannotation(annotation)


def _function(server, tool, module):
    """An async function calling ``tool``, with a signature from its schema."""
    schema = tool.get("inputSchema") or {}
    if tool.get("pending"):
        # Its server has not listed its tools yet: pyrun checks the
        # arguments once it has.
        schema = {"type": "object", "properties": {"*": {}}}
    props = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    params, by_py, docs = [], {}, []
    extra = False
    taken = set()
    # Required arguments first, each group in the schema's order.
    for prop in sorted(props, key=lambda p: p not in required):
        ps = props[prop] if isinstance(props[prop], dict) else {}
        ann = _annotation(ps)
        if not prop.isidentifier() or _keyword.iskeyword(prop) or prop in taken:
            extra = True
            docs.append(_arg_doc(prop, ann, ps, prop in required, "(pass it in **arguments)"))
            continue
        taken.add(prop)
        by_py[prop] = prop
        if prop in required:
            params.append(_inspect.Parameter(prop, _inspect.Parameter.KEYWORD_ONLY, annotation=ann))
        else:
            default = ps.get("default") if "default" in ps else None
            if default is None and not _nullable(ps) and ann is not _typing.Any:
                ann = ann | None
            params.append(
                _inspect.Parameter(prop, _inspect.Parameter.KEYWORD_ONLY, default=default, annotation=ann)
            )
        docs.append(_arg_doc(prop, ann, ps, prop in required, ""))
    if tool.get("pending"):
        docs = []
    if extra:
        params.append(_inspect.Parameter("arguments", _inspect.Parameter.VAR_KEYWORD))
    sig = _inspect.Signature(params)
    name = tool["name"]
    omit_none = {p for p in props if p not in required and not _nullable(props[p])}

    async def tool_function(*args, **kwargs):
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{server}.{name}: {e}") from None
        arguments = {}
        for key, value in bound.arguments.items():
            if key == "arguments" and extra:
                arguments.update(value)
                continue
            prop = by_py[key]
            if value is None and prop in omit_none:
                continue
            arguments[prop] = value
        return await call(server, name, **arguments)

    tool_function.__signature__ = sig
    tool_function.__module__ = module
    summary = (tool.get("description") or "").strip() or f'The tool "{name}".'
    if tool.get("pending"):
        summary += " Its server is connecting: pyrun has not listed this tool yet."
    doc = [summary]
    if docs:
        doc += ["", "Arguments:"] + docs
    doc += ["", f'Calls the tool "{name}" of the MCP server "{server}"; raises mcp_tools.ToolError if it fails.']
    tool_function.__doc__ = "\n".join(doc)
    return tool_function


def _arg_doc(prop, ann, schema, required, note):
    what = "required" if required else "optional"
    line = f"    {prop} ({_type_text(ann)}, {what})"
    desc = schema.get("description") if isinstance(schema, dict) else None
    if desc:
        line += f": {' '.join(str(desc).split())}"
    if note:
        line += f" {note}"
    return line


def _pyname(name, taken):
    """A Python identifier for an MCP name: other characters become _."""
    py = _re.sub(r"\W", "_", str(name)) or "_"
    if py[0].isdigit():
        py = "_" + py
    if _keyword.iskeyword(py):
        py += "_"
    base, n = py, 2
    while py in taken:
        py = f"{base}_{n}"
        n += 1
    return py
