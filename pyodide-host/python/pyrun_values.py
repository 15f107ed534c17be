"""The value of a call's last expression as JSON (``dump_json``).

Imported by pyrun_helper before any call runs, so its references (json's
``dumps``) are pyrun's own: a call that patches json does not change how
the next call's value is reported."""

import base64
import dataclasses
import datetime
import decimal
import enum
import json
import math
import uuid

_dumps = json.dumps


def dump_json(value):
    """The JSON text of a call's return value.

    JSON types map to themselves; tuples, sets and frozensets become arrays (sets
    sorted when their items sort); bytes become text when they are UTF-8 and
    ``{"$bytes_base64": ...}`` otherwise; dataclasses and objects with
    ``model_dump`` (pydantic) become objects; numpy-like values use ``tolist()``
    or ``item()``; dates and times become ISO 8601 text; Decimal, UUID and
    complex become text; NaN and infinities become the strings "NaN",
    "Infinity" and "-Infinity"; anything else becomes its ``repr()``.
    """
    return _dumps(_jsonable(value, 0, set()), indent=2, ensure_ascii=False)


_MAX_DEPTH = 200


def _jsonable(v, depth, seen):
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, enum.Enum):
        return _jsonable(v.value, depth + 1, seen)
    if isinstance(v, int):
        return int(v)
    if isinstance(v, str):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
        return float(v)
    if depth > _MAX_DEPTH:
        return repr(v)
    if isinstance(v, (dict, list, tuple, set, frozenset)) or dataclasses.is_dataclass(v):
        if id(v) in seen:
            return "<cycle>"
        seen = seen | {id(v)}
    d = depth + 1
    if isinstance(v, dict):
        return {_key(k): _jsonable(x, d, seen) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x, d, seen) for x in v]
    if isinstance(v, (set, frozenset)):
        items = list(v)
        try:
            items.sort()
        except TypeError:
            pass
        return [_jsonable(x, d, seen) for x in items]
    if isinstance(v, (bytes, bytearray, memoryview)):
        b = bytes(v)
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError:
            return {"$bytes_base64": base64.b64encode(b).decode("ascii")}
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {
            f.name: _jsonable(getattr(v, f.name), d, seen) for f in dataclasses.fields(v)
        }
    if isinstance(v, (datetime.datetime, datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, datetime.timedelta):
        return v.total_seconds()
    if isinstance(v, (decimal.Decimal, uuid.UUID, complex)):
        return str(v)
    kind = type(v)
    module = getattr(kind, "__module__", "") or ""
    if module.startswith("numpy") or module.startswith("pandas"):
        for attr in ("tolist", "item", "to_dict"):
            fn = getattr(v, attr, None)
            if callable(fn):
                try:
                    return _jsonable(fn(), d, seen)
                except Exception:
                    break
    if module.startswith("pyodide.ffi"):
        try:
            return _jsonable(v.to_py(), d, seen)
        except Exception:
            pass
    dump = getattr(v, "model_dump", None)
    if callable(dump) and not isinstance(v, type):
        try:
            return _jsonable(dump(mode="json"), d, seen)
        except Exception:
            pass
    return repr(v)


def _key(k):
    if isinstance(k, str):
        return k
    if k is None or isinstance(k, (bool, int, float)):
        return _dumps(k)
    return str(k)
