// pyrun worker process. The supervisor starts it with one argument, the JSON
// HostConfig, and talks to it over stdin/stdout (docs/protocol.md).
//
// This main thread stays idle so that it can always react: Pyodide runs on a
// Worker thread (worker.ts), which owns the pipes. SIGUSR2 from the supervisor
// sets Pyodide's interrupt flag (KeyboardInterrupt in the running call).
// Never use SIGUSR1: Deno also starts its inspector on it.

import { type HostConfig, parseEngineConfig, parseRestore } from "./protocol.ts";
import { readSnapshot } from "./checkpoint.ts";

export function parseConfig(args: string[]): HostConfig {
  const raw = JSON.parse(args[0] ?? "{}");
  return {
    ...parseEngineConfig(raw),
    snapshot: String(raw.snapshot ?? ""),
    snapshot_size: Number(raw.snapshot_size ?? 0),
    make_snapshot: raw.make_snapshot === true,
    preload: Array.isArray(raw.preload) ? raw.preload : [],
    warm_calls: Number(raw.warm_calls ?? 0),
    checkpoints: raw.checkpoints === true || !!raw.restore || raw.park === true,
    ...(raw.restore ? { restore: parseRestore(raw.restore) } : {}),
    ...(raw.park === true ? { park: true } : {}),
  };
}

function main(): void {
  // Only the protocol writer in the Worker may touch stdout.
  console.log = console.info = console.debug = console.error;
  const cfg = parseConfig(Deno.args);
  // [0]: Pyodide's interrupt flag; [1]: interrupt signals handled so far;
  // [2]: signals the supervisor had sent when the running call began, set by
  // the Worker thread. Signals coalesce (the kernel and Deno merge a signal
  // that arrives while one is pending), so [1] may lag what was sent, never
  // lead it: a signal whose number is not above [2] was meant for an earlier
  // call, and the Worker thread and Python ignore it.
  const buf = new SharedArrayBuffer(12);
  const flag = new Int32Array(buf, 0, 1);
  const count = new Int32Array(buf, 4, 1);
  const worker = new Worker(new URL("./worker.ts", import.meta.url), { type: "module" });
  Deno.addSignalListener("SIGUSR2", () => {
    const n = Atomics.add(count, 0, 1) + 1;
    Atomics.store(flag, 0, 2); // 2 = SIGINT: Python's handler raises KeyboardInterrupt
    Atomics.notify(flag, 0); // wakes pyrun's time.sleep
    worker.postMessage({ type: "interrupt", count: n });
  });
  worker.onmessage = (e: MessageEvent<{ type: string }>) => {
    if (e.data.type === "eof") Deno.exit(0);
    if (e.data.type === "fatal") Deno.exit(70);
  };
  worker.onerror = (e) => {
    e.preventDefault();
    console.error(`pyrun worker thread failed: ${e.message}`);
    Deno.exit(70);
  };
  // The snapshot is read here, while the Worker thread boots its isolate
  // and loads Pyodide's modules (50-150 ms), instead of after, on the path
  // to ready; its bytes are moved to the Worker, not copied.
  // A restored session's checkpoint comes the same way (checkpoint.ts); a
  // parked worker's, later, to the Worker itself (worker.ts, bootParked),
  // which is given the snapshot to warm its compiled code with.
  const snap = cfg.restore
    ? readSnapshot(cfg.restore.path, cfg.restore.mem + cfg.restore.fs)
    : cfg.snapshot
    ? readSnapshot(cfg.snapshot, cfg.snapshot_size)
    : {};
  worker.postMessage({ cfg, buf, ...snap }, snap.bytes ? [snap.bytes.buffer] : []);
}

if (import.meta.main) main();
