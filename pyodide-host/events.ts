// A call's events within its caps (docs/protocol.md, Rules and Rich
// results), as the R (webr/main.ts) and JavaScript (js/main.ts) engines
// send them; Python's helper applies the same caps in pyrun_helper.py and
// pyrun_display.py. It imports nothing but the protocol and the writer.

import type { Result, RunRequest } from "./protocol.ts";
import { send } from "./serve.ts";

/** The caps of one call, from its run request. */
export interface Caps {
  max_output: number;
  max_displays: number;
  max_display_bytes: number;
  max_files: number;
  max_file_bytes: number;
}

/** The caps of a run request that leaves them out (or sends 0). */
export const DEFAULT_CAPS: Caps = {
  max_output: 65536,
  max_displays: 16,
  max_display_bytes: 4 << 20,
  max_files: 64,
  max_file_bytes: 64 << 20,
};

/** A run request's caps: its positive numbers, the defaults for the rest. */
export function capsOf(req: RunRequest): Caps {
  const pick = (v: unknown, d: number) => typeof v === "number" && v > 0 ? Math.floor(v) : d;
  return {
    max_output: pick(req.max_output, DEFAULT_CAPS.max_output),
    max_displays: pick(req.max_displays, DEFAULT_CAPS.max_displays),
    max_display_bytes: pick(req.max_display_bytes, DEFAULT_CAPS.max_display_bytes),
    max_files: pick(req.max_files, DEFAULT_CAPS.max_files),
    max_file_bytes: pick(req.max_file_bytes, DEFAULT_CAPS.max_file_bytes),
  };
}

/** Each display or file event carries at most this many bytes of its item. */
export const PIECE = 1 << 20;

/**
 * Caps each of a call's streams to max characters (max_output): take
 * returns what of a text may go out, and counts what may not.
 */
export class StreamCap {
  private left: Record<string, number>;
  private cut: Record<string, number> = {};

  constructor(max: number) {
    this.left = { stdout: max, stderr: max };
  }

  /** The part of text within the stream's cap ("" for none); the rest is counted dropped. */
  take(stream: "stdout" | "stderr", text: string): string {
    const keep = Math.max(0, Math.min(text.length, this.left[stream]));
    if (keep < text.length) this.drop(stream, text.length - keep);
    this.left[stream] -= keep;
    return keep < text.length ? text.slice(0, keep) : text;
  }

  /** Counts n more characters of the stream dropped (by the engine's own cap). */
  drop(stream: "stdout" | "stderr", n: number): void {
    this.cut[stream] = (this.cut[stream] ?? 0) + n;
  }

  /** The result's dropped field: absent when nothing was. */
  dropped(): Pick<Result, "dropped"> {
    return Object.keys(this.cut).length ? { dropped: { ...this.cut } } : {};
  }
}

/**
 * Sends display and file events within the call's caps on their number and
 * bytes, each item in pieces of PIECE bytes; counts the items held back.
 */
export class RichCap {
  private count = { display: 0, file: 0 };
  private bytes = { display: 0, file: 0 };
  private held = { display: 0, file: 0 };
  private maxCount: { display: number; file: number };
  private maxBytes: { display: number; file: number };

  constructor(private id: string, caps: Caps) {
    this.maxCount = { display: caps.max_displays, file: caps.max_files };
    this.maxBytes = { display: caps.max_display_bytes, file: caps.max_file_bytes };
  }

  /** A display of mime; with a path, the file at path under /output/. */
  send(kind: "display" | "file", mime: string, data: Uint8Array, path?: string): void {
    if (
      this.count[kind] >= this.maxCount[kind] ||
      this.bytes[kind] + data.length > this.maxBytes[kind]
    ) {
      this.held[kind]++;
      return;
    }
    this.count[kind]++;
    this.bytes[kind] += data.length;
    let off = 0;
    do {
      const end = Math.min(off + PIECE, data.length);
      const piece = base64(data.subarray(off, end));
      const more = end < data.length ? { more: true } : {};
      if (kind === "file") {
        send({
          type: "file",
          id: this.id,
          path: path ?? "",
          mime_type: mime,
          data: piece,
          ...more,
        });
      } else {
        send({ type: "display", id: this.id, mime_type: mime, data: piece, ...more });
      }
      off = end;
    } while (off < data.length);
  }

  /** Counts n more items held back (by the engine's own caps). */
  hold(kind: "display" | "file", n: number): void {
    this.held[kind] += n;
  }

  /** The result's displays_dropped and files_dropped: absent when none were. */
  dropped(): Pick<Result, "displays_dropped" | "files_dropped"> {
    return {
      ...(this.held.display ? { displays_dropped: this.held.display } : {}),
      ...(this.held.file ? { files_dropped: this.held.file } : {}),
    };
  }
}

/** A result's duration_ms since began (performance.now()), to the microsecond. */
export function durationMs(began: number): number {
  return Math.round((performance.now() - began) * 1000) / 1000;
}

/** Bytes as base64. */
export function base64(b: Uint8Array): string {
  return (b as unknown as { toBase64(): string }).toBase64();
}

/** base64 as bytes; throws on bad base64. */
export function fromBase64(s: string): Uint8Array {
  return (Uint8Array as unknown as { fromBase64(s: string): Uint8Array }).fromBase64(s);
}
