"""What a call needs installed before it runs (pyrun_helper's ``need``
event): the dependencies of its PEP 723 ``# /// script`` block, or the
imports Pyodide's own analysis finds that this worker cannot import now."""

import re
import sys

from pyodide.code import find_imports


def need(cid, code, loaded):
    """What the code needs installed before it runs, as a need event; None
    when nothing.

    A PEP 723 block's dependencies win over the imports. Without one, the
    imports Pyodide's own analysis finds (``find_imports``) that this worker
    cannot import now go to the supervisor, which knows which packages of
    the index and the wheelhouse provide them. ``loaded`` is what the
    worker installed so far (name to version), for the supervisor.
    """
    if "# /// script" in code:
        meta = script_metadata(code)
        if meta is not None:
            need = {"type": "need", "id": cid, "requires": meta[0], "loaded": loaded}
            if meta[1]:
                need["requires_python"] = meta[1]
            return need
    if "import" not in code:
        return None
    missing = []
    for name in find_imports(code):
        if "." in name or name in sys.modules or name in missing:
            continue
        try:
            if _find_spec(name) is not None:
                continue
        except (ImportError, ValueError):
            pass
        missing.append(name)
    if not missing:
        return None
    return {"type": "need", "id": cid, "imports": missing, "loaded": loaded}


def _find_spec(name):
    import importlib.util

    return importlib.util.find_spec(name)


# PEP 723's reference expression for a block of inline script metadata.
_PEP723 = re.compile(r"(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$")


def script_metadata(code):
    """The dependencies and requires-python of the code's PEP 723 ``script``
    block, or None if it has none. A malformed block raises ValueError, which
    the call reports."""
    blocks = [m for m in _PEP723.finditer(code) if m.group("type") == "script"]
    if not blocks:
        return None
    if len(blocks) > 1:
        raise ValueError("PEP 723: the code has more than one `# /// script` block")
    import tomllib

    content = "".join(
        line[2:] if line.startswith("# ") else line[1:]
        for line in blocks[0].group("content").splitlines(keepends=True)
    )
    try:
        meta = tomllib.loads(content)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"PEP 723: the `# /// script` block is not valid TOML: {e}") from None
    deps = meta.get("dependencies", [])
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        raise ValueError("PEP 723: `dependencies` must be a list of strings")
    python = meta.get("requires-python", "")
    if not isinstance(python, str):
        raise ValueError("PEP 723: `requires-python` must be a string")
    return deps, python


# --- results --------------------------------------------------------------
