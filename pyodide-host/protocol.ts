// The pipe protocol between pyrun's supervisor (Go) and this worker.
// PROTOCOL.md is the specification; supervisor/protocol.go is the Go side.

export const PROTOCOL_VERSION = 1;

/** Start-up settings, passed as the one command-line argument (JSON). */
export interface HostConfig {
  /** Cap on the wasm heap in bytes; 0 means Pyodide's own 4 GiB ceiling. */
  heap_limit: number;
  /** Longest stdin line accepted, in bytes. */
  max_line: number;
}

/** Messages the supervisor sends, one JSON object per stdin line. */
export type Request =
  | {
    type: "run";
    id: string;
    code: string;
    globals?: Record<string, unknown>;
    max_output: number;
    /** How many interrupt signals the supervisor has sent this worker so far. */
    interrupts: number;
  }
  | { type: "ping"; id: string };

/** Messages the worker sends, one JSON object per stdout line. */
export type Event =
  | {
    type: "ready";
    protocol: number;
    pyodide: string;
    python: string;
    startup_ms: number;
  }
  | { type: "output"; id: string; stream: "stdout" | "stderr"; text: string }
  | { type: "package"; id: string; text: string }
  | { type: "pong"; id: string }
  | { type: "error"; id?: string; error: string };
// The "result" event is built by pyrun_helper.py, which owns its fields.
