// The pipe protocol between pyrun's supervisor (Go) and its worker programs:
// every engine's (Python: main.ts and worker.ts; R: webr/main.ts;
// JavaScript: js/main.ts) messages, typed once here. docs/protocol.md is the
// specification; supervisor/protocol.go is the Go side, and its
// TestProtocolMatchesTypeScript holds the two to one version and one set of
// messages. It imports nothing, so that no engine loads another's runtime.

export const PROTOCOL_VERSION = 6;

/** The start-up settings every engine reads (HostConfig's common part). */
export interface EngineConfig {
  /**
   * Cap on memory in bytes: Python's and R's wasm heap (0: wasm32's own
   * 4 GiB), the JavaScript worker's RSS (0: none).
   */
  heap_limit: number;
  /** Longest stdin line accepted, in bytes. */
  max_line: number;
  /** A session's worker: calls share the engine's state and files (docs/sessions.md). */
  session: boolean;
  /** Host folders to mount (--mount); empty: none. */
  mounts: Mount[];
}

/** The common part of the HostConfig argument (JSON), as every engine parses it. */
export function parseEngineConfig(raw: Record<string, unknown>): EngineConfig {
  return {
    heap_limit: Number(raw.heap_limit ?? 0),
    max_line: Number(raw.max_line ?? 16 << 20),
    session: raw.session === true,
    mounts: parseMounts(raw.mounts),
  };
}

/** The HostConfig's mounts (the supervisor sends them checked and clean). */
function parseMounts(raw: unknown): Mount[] {
  if (!Array.isArray(raw)) return [];
  return raw.map((m) => ({ path: String(m.path), host: String(m.host), rw: m.rw === true }));
}

/** The Python worker's start-up settings, the one command-line argument (JSON). */
export interface HostConfig extends EngineConfig {
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
  /** Calls of its own to run while idle before the first request (warm.ts); absent: none. */
  warm_calls?: number;
  /**
   * A session's worker that takes checkpoints (checkpoint.ts): it boots with
   * Pyodide's _makeSnapshot and reaches the host's functions through
   * `from js import pyrunHost`.
   */
  checkpoints?: boolean;
  /** A checkpoint to start from instead of the snapshot (implies checkpoints). */
  restore?: Restore;
  /**
   * A parked restore (implies checkpoints): start as far as a restore goes
   * without its checkpoint, then wait for the restore line on stdin that
   * names it (docs/protocol.md, Parked restores).
   */
  park?: boolean;
}

/** The line that hands a parked worker its checkpoint: a Restore. */
export interface RestoreRequest extends Restore {
  type: "restore";
}

/** The Restore in raw (a HostConfig's restore, or a restore line's), checked. */
export function parseRestore(raw: Record<string, unknown>): Restore {
  const r: Restore = {
    path: String(raw.path ?? ""),
    mem: Number(raw.mem),
    fs: Number(raw.fs),
    clock: Number(raw.clock ?? 0),
  };
  if (!r.path || !(r.mem > 0) || !(r.fs >= 0)) {
    throw new Error("bad restore: path, mem and fs are needed");
  }
  if (typeof raw.keep === "string" && raw.keep) r.keep = raw.keep;
  const s = raw.sums as Record<string, unknown> | undefined;
  if (
    s && typeof s === "object" && typeof s.token === "string" && s.token &&
    typeof s.sums === "string" && Number.isSafeInteger(s.heap) && Array.isArray(s.seed) &&
    s.seed.length === 4 && s.seed.every((x) => typeof x === "string" && /^-?[0-9]{1,20}$/.test(x))
  ) {
    r.sums = { token: s.token, seed: s.seed as string[], sums: s.sums, heap: s.heap as number };
  }
  return r;
}

/**
 * The sums of a restored checkpoint's heap chunks, which the supervisor
 * made as it wrote the restore's file (supervisor/chunksums.go): the
 * worker takes them as its last checkpoint's, named token, so that its
 * next checkpoint asked with since = token leaves out the chunks still as
 * restored (chunks.ts). seed: the four signed 64-bit seeds, in decimal;
 * sums: four a chunk, little-endian, base64; heap: the heap's bytes.
 */
export interface RestoredSums {
  token: string;
  seed: string[];
  sums: string;
  heap: number;
}

/**
 * A checkpoint file: mem bytes of memory snapshot, then fs bytes of the files'
 * blob; clock is performance.now() when it was taken.
 */
export interface Restore {
  path: string;
  mem: number;
  fs: number;
  clock: number;
  /**
   * A checkpoint of a shared session worker taken for one of its sessions:
   * that session's namespace, the only one the restored worker keeps (the
   * others are dropped before it is ready; sessions.ts).
   */
  keep?: string;
  /** The sums of the checkpoint's heap chunks, when the supervisor made them. */
  sums?: RestoredSums;
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

/** A call to run: every engine's fields; globals and tools are Python's only. */
export interface RunRequest {
  type: "run";
  id: string;
  code: string;
  /** A JSON object of names to bind in the call's globals, as text; absent for none. */
  globals?: string;
  /** Caps each of stdout and stderr, in characters; 0 or absent: 65536. */
  max_output?: number;
  /** How many interrupt signals the supervisor has sent this worker so far; absent: 0. */
  interrupts?: number;
  // Rich results (docs/protocol.md): Python hands them to pyrun_display as one JSON text.
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
   * namespaces of ended sessions to forget first (docs/protocol.md, Sessions); the call's own
   * namespace in drop: the session's last call, forgotten once its result is out. Absent: the
   * worker's one state.
   */
  namespace?: string;
  drop?: string[];
}

/** How much of the heap one chunk of a checkpoint's increment holds (supervisor.CheckpointChunk). */
export const CHECKPOINT_CHUNK = 256 << 10;

/** Messages the supervisor sends, one JSON object per stdin line. */
export type Request =
  /** Run up to calls of the warming calls now, while idle (warm.ts); no answer. */
  | { type: "warm"; calls: number }
  | RunRequest
  | { type: "ping"; id: string }
  /**
   * Take a checkpoint now, between calls (checkpoint.ts): the answer is a
   * "checkpoint" event, followed by its bytes when it has no error. chunks:
   * name it (its token) and keep its heap chunks' sums, for an increment to
   * it later; since: the token of an earlier checkpoint whose chunks the
   * supervisor holds, to which this one may be an increment.
   */
  | { type: "checkpoint"; id: string; chunks?: boolean; since?: string }
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

/** A call's last event: how it ended. */
export interface Result {
  type: "result";
  id: string;
  status: "success" | "run-error" | "install-error" | "memory-error" | "interrupted";
  /** The value of the code's last expression, as JSON text. */
  value?: string;
  /** The worker cut value (or error) at max_output. */
  value_cut?: boolean;
  error?: string;
  error_cut?: boolean;
  /** The packages the call loaded (Python). */
  dependencies?: string[];
  /** Characters of each stream dropped past max_output. */
  dropped?: Record<string, number>;
  /** Why the worker must be replaced after this call; absent: it need not be. */
  recycle?: string;
  duration_ms: number;
  displays_dropped?: number;
  files_dropped?: number;
}

/** Messages the worker sends, one JSON object per stdout line. */
export type Event =
  | {
    type: "ready";
    protocol: number;
    /** The language this worker runs: "python", "r" or "javascript". */
    engine: string;
    /** What the engine runs, by name: for Python {python, pyodide}. */
    versions: Record<string, string>;
    /** Python's only, as versions has them. */
    pyodide?: string;
    python?: string;
    startup_ms: number;
    /** Whether the worker started from the snapshot it was given (Python). */
    snapshot?: boolean;
    /** Why the snapshot given was not used. */
    snapshot_error?: string;
    /** Warming calls it runs while it waits for its first request (warm.ts); absent: none. */
    warm_calls?: number;
    /** It sends "idle" after each call's result, once it has cleaned up after the call. */
    settles?: boolean;
  }
  /** A parked restore, compiled and waiting for its restore line (HostConfig park). */
  | { type: "parked" }
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
  /** A piece of one rich result (base64 data); more: the next display event continues it. */
  | { type: "display"; id: string; mime_type: string; data: string; more?: boolean }
  /** A piece of one file the call left under /output/. */
  | { type: "file"; id: string; path: string; mime_type: string; data: string; more?: boolean }
  | Result
  | { type: "pong"; id: string }
  /** After a call's result: cleaned up after it, ready for the next request. */
  | { type: "idle"; id: string; recycle?: string }
  | { type: "idle"; id: string }
  | {
    /**
     * The answer to a checkpoint request: on success, mem + fs raw bytes
     * follow the line on stdout (checkpoint.ts), less left_out of an
     * increment; else error says why not. token names the checkpoint (asked
     * with chunks); since, when set, is the one this is an increment to:
     * the heap's chunks kept lists ([first, count] ranges; chunk i is the
     * CHECKPOINT_CHUNK bytes at the heap's offset plus i * CHECKPOINT_CHUNK)
     * are that one's, and their left_out bytes are not sent.
     */
    type: "checkpoint";
    id: string;
    mem?: number;
    fs?: number;
    clock?: number;
    token?: string;
    since?: string;
    kept?: [number, number][];
    left_out?: number;
    error?: string;
  }
  | { type: "error"; id?: string; error: string };
// Python's "result" event is built by pyrun_helper.py, its "display" and
// "file" events by pyrun_display.py, to these types.
