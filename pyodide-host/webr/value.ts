// An R value as JSON (docs/protocol.md, Engines: R). pyrun.R's to_plain has
// already turned data frames, factors, dates and matrices into plain lists
// and vectors; this file maps webR's toJs tree of those onto JSON.

/** webR's toJs tree (WebRDataJs), as far as pyrun uses it. */
interface Node {
  type: string;
  names?: (string | null)[] | null;
  values?: unknown[];
  value?: string;
}

/**
 * A vector of length 1 is a scalar, a longer one an array, a named one an
 * object; an unnamed list is an array, a named one an object; NULL and NA
 * are null.
 */
export function toPlain(v: unknown): unknown {
  if (v === null || v === undefined || typeof v !== "object") return v ?? null;
  const n = v as Node;
  switch (n.type) {
    case "null":
      return null;
    case "string":
      return n.value ?? null;
    case "list":
    case "pairlist": {
      const values = (n.values ?? []).map(toPlain);
      return n.names ? named(n.names, values) : values;
    }
    case "logical":
    case "integer":
    case "double":
    case "character":
    case "raw":
    case "complex": {
      const values = (n.values ?? []).map((x) => x ?? null);
      if (n.names) return named(n.names, values);
      return values.length === 1 ? values[0] : values;
    }
    default:
      return null;
  }
}

function named(names: (string | null)[], values: unknown[]): Record<string, unknown> {
  const o: Record<string, unknown> = {};
  values.forEach((v, i) => {
    o[names[i] || String(i + 1)] = v;
  });
  return o;
}

/** JSON text, indented; Inf and -Inf, which JSON lacks, as strings. */
export function toJSON(v: unknown): string {
  return JSON.stringify(v, (_k, x) => {
    if (typeof x === "number" && !Number.isFinite(x)) {
      return Number.isNaN(x) ? null : x > 0 ? "Infinity" : "-Infinity";
    }
    return x;
  }, 2);
}
