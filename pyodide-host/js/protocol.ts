// The JavaScript engine's messages: the pipe protocol it shares with the
// Python worker (docs/protocol.md; these are the fields it uses), and the
// messages between its host thread (main.ts) and the Worker that runs the
// user's code (runner.ts).

import type { Mount } from "../protocol.ts";

export const PROTOCOL_VERSION = 6;

/** Start-up settings, the one command-line argument (JSON). */
export interface HostConfig {
  /** Process RSS in bytes past which a running call ends as memory-error; 0: none. */
  heap_limit: number;
  /** Longest stdin line accepted, in bytes. */
  max_line: number;
  /** Calls share one Worker, so state lasts (a session). */
  session: boolean;
  /** Host folders the code sees (--mount); empty: none. */
  mounts: Mount[];
}

/** The host folders of --mount, as every engine is sent them. */
export type { Mount };

export interface InputFile {
  path: string;
  /** base64 */
  data: string;
}

export type Request =
  | {
    type: "run";
    id: string;
    code: string;
    max_output?: number;
    interrupts?: number;
    input_files?: InputFile[];
    keep_output?: boolean;
    max_displays?: number;
    max_display_bytes?: number;
    max_files?: number;
    max_file_bytes?: number;
    globals?: unknown;
    tools?: unknown;
    /**
     * A session worker shared by several sessions: the namespace (a Worker, a realm of its own)
     * the call runs in, and namespaces of ended sessions to end first (docs/protocol.md, Sessions).
     */
    namespace?: string;
    drop?: string[];
  }
  | { type: "ping"; id: string };

export interface Result {
  type: "result";
  id: string;
  status: "success" | "run-error" | "interrupted" | "memory-error";
  value?: string;
  value_cut?: boolean;
  error?: string;
  error_cut?: boolean;
  dropped?: Record<string, number>;
  recycle?: string;
  duration_ms: number;
  displays_dropped?: number;
  files_dropped?: number;
}

export type Event =
  | {
    type: "ready";
    protocol: number;
    engine: "javascript";
    versions: Record<string, string>;
    startup_ms: number;
  }
  | { type: "output"; id: string; stream: "stdout" | "stderr"; text: string }
  | { type: "display"; id: string; mime_type: string; data: string; more?: boolean }
  | { type: "file"; id: string; path: string; mime_type: string; data: string; more?: boolean }
  | { type: "pong"; id: string }
  | { type: "error"; id?: string; error: string }
  | Result;

/** The caps of one call, as the runner and the host both apply them. */
export interface Caps {
  max_output: number;
  max_displays: number;
  max_display_bytes: number;
  max_files: number;
  max_file_bytes: number;
}

/** Host to runner. */
export type ToRunner =
  | { type: "init"; token: string; mounts: Mount[] }
  | {
    type: "run";
    seq: number;
    code: string;
    caps: Caps;
    /** Input files, by path relative to the (virtual) working folder. */
    inputs: [string, Uint8Array][];
    keep_output: boolean;
  }
  | { type: "probe"; n: number }
  /** The host gave up on call seq (interrupted while it waited): drop what it still sends. */
  | { type: "abandon"; seq: number };

/**
 * Runner to host. Every message carries the token the host gave the runner
 * in init, which the user's code cannot read: the host ignores a message
 * without it.
 */
export type FromRunner =
  & { k: string }
  & (
    | { type: "ready" }
    | { type: "output"; seq: number; stream: "stdout" | "stderr"; text: string }
    | { type: "display"; seq: number; mime_type: string; data: Uint8Array }
    | {
      type: "result";
      seq: number;
      status: "success" | "run-error";
      value?: string;
      error?: string;
      dropped: Record<string, number>;
      files: [string, Uint8Array][];
      displays_dropped: number;
      files_dropped: number;
    }
    | { type: "exit"; seq: number; how: string; code: number }
    | { type: "alive"; n: number }
    /**
     * A file operation on a mounted folder, for the code (its Worker has
     * no permission for them): read a file, list a folder (JSON names,
     * a folder's ending in "/"), write a file (data) in a read-write
     * mount. The host answers in answer, a growable SharedArrayBuffer:
     * Int32 [1] 1 for an error, [2] the length of the result or the
     * error's text (UTF-8) from byte 16, then [0] set to 1 and notified.
     */
    | {
      type: "fs";
      op: "read" | "readDir" | "write";
      path: string;
      data?: Uint8Array;
      answer: SharedArrayBuffer;
    }
  );

export const DEFAULT_CAPS: Caps = {
  max_output: 65536,
  max_displays: 16,
  max_display_bytes: 4 << 20,
  max_files: 64,
  max_file_bytes: 64 << 20,
};
