// The pipe protocol between pyrun's supervisor (Go) and this worker.
// docs/protocol.md is the specification; supervisor/protocol.go is the Go side.

export const PROTOCOL_VERSION = 6;

/** Start-up settings, passed as the one command-line argument (JSON). */
export interface HostConfig {
  /** Cap on the wasm heap in bytes; 0 means Pyodide's own 4 GiB ceiling. */
  heap_limit: number;
  /** Longest stdin line accepted, in bytes. */
  max_line: number;
  /**
   * A memory snapshot to start from (a file the worker may read); "" for a
   * plain start. The supervisor has checked its checksum.
   */
  snapshot: string;
  /** The snapshot's size in bytes; a file of another size is not used. */
  snapshot_size: number;
  /**
   * Make a memory snapshot instead of serving calls: stdout carries its
   * bytes and nothing else, then the process exits.
   */
  make_snapshot: boolean;
  /** Packages to load before ready (--deps), from the supervisor's cache. */
  preload: PackageFile[];
  /**
   * A Python session's worker: calls share globals, modules and files (docs/protocol.md,
   * Sessions).
   */
  session: boolean;
  /** Host folders to mount (--mount); absent: none. */
  mounts?: Mount[];
  /** Calls of its own to run while idle before the first request (warm.ts); absent: none. */
  warm_calls?: number;
}

/** A host folder the code sees at path; writable only when rw. Every engine's. */
export interface Mount {
  path: string;
  host: string;
  rw?: boolean;
}

/** An input file of a call: a path relative to the working directory. */
export interface InputFile {
  path: string;
  /** The file's bytes in base64. */
  data: string;
}

/** A package file in the supervisor's cache, checked and read-only. */
export interface PackageFile {
  name: string;
  version: string;
  path: string;
  /** Its top-level modules. */
  imports?: string[];
}

/** Messages the supervisor sends, one JSON object per stdin line. */
export type Request =
  /** Run up to calls of the warming calls now, while idle (warm.ts); no answer. */
  | { type: "warm"; calls: number }
  | {
    type: "run";
    id: string;
    code: string;
    /** A JSON object of names to bind in the call's globals, as text; absent for none. */
    globals?: string;
    max_output: number;
    /** How many interrupt signals the supervisor has sent this worker so far. */
    interrupts: number;
    // Rich results (docs/protocol.md): handed to pyrun_display as one JSON text.
    input_files?: InputFile[];
    keep_output?: boolean;
    max_displays?: number;
    max_display_bytes?: number;
    max_files?: number;
    max_file_bytes?: number;
    /** The catalog of tools the call's code may call (mcp_tools), as JSON text; absent for none. */
    tools?: string;
    /**
     * A session worker shared by several sessions: the namespace the call runs in, and the
     * namespaces of ended sessions to forget first (docs/protocol.md, Sessions). Absent: the
     * worker's one state.
     */
    namespace?: string;
    drop?: string[];
  }
  | { type: "ping"; id: string }
  | {
    /** The answer to a need event: files to load, or why there are none. */
    type: "packages";
    id: string;
    files?: PackageFile[];
    error?: string;
  }
  | {
    /** The answer to a tool_call event: the tool's result, or why there is none. */
    type: "tool_result";
    id: string;
    call: string;
    result?: unknown;
    error?: string;
  };

/** Messages the worker sends, one JSON object per stdout line. */
export type Event =
  | {
    type: "ready";
    protocol: number;
    /** The language this worker runs: "python" here; "r", "javascript" for the other engines. */
    engine: string;
    /** What the engine runs, by name: for Python {python, pyodide}. */
    versions: Record<string, string>;
    pyodide: string;
    python: string;
    startup_ms: number;
    /** Whether the worker started from the snapshot it was given. */
    snapshot: boolean;
    /** Why the snapshot given was not used. */
    snapshot_error?: string;
    /** Warming calls it runs while it waits for its first request (warm.ts); absent: none. */
    warm_calls?: number;
    /** It sends "idle" after each call's result, once it has cleaned up after the call. */
    settles?: boolean;
  }
  | { type: "output"; id: string; stream: "stdout" | "stderr"; text: string }
  | { type: "package"; id: string; text: string }
  | {
    /** Packages a call needs before it runs; the supervisor answers with "packages". */
    type: "need";
    id: string;
    imports?: string[];
    requires?: string[];
    requires_python?: string;
    loaded: Record<string, string>;
  }
  | {
    /** A host call of the running call's code; the supervisor answers with "tool_result". */
    type: "tool_call";
    id: string;
    call: string;
    server: string;
    tool: string;
    /** The arguments object, as JSON text. */
    args: string;
  }
  | { type: "pong"; id: string }
  /** After a call's result: cleaned up after it, ready for the next request. */
  | { type: "idle"; id: string }
  | { type: "error"; id?: string; error: string };
// The "result" event is built by pyrun_helper.py, which owns its fields;
// the "display" and "file" events by pyrun_display.py.
