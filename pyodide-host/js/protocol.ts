// The messages between the JavaScript engine's host thread (main.ts) and
// the Worker that runs the user's code (runner.ts). The pipe protocol's
// messages are every engine's, in ../protocol.ts.

import type { Mount } from "../protocol.ts";
import type { Caps } from "../events.ts";

export type { Caps, Mount };

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
