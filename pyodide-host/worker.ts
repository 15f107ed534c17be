// The Worker thread of a pyrun worker: owns Pyodide and speaks the pipe
// protocol on stdin/stdout itself, so a call costs no postMessage hop. The
// main thread (main.ts) only turns SIGUSR2 into Pyodide's interrupt flag.

/// <reference lib="deno.worker" />

// @ts-types="./node_modules/pyodide/pyodide.d.ts"
import { loadPyodide, type PyodideInterface } from "./node_modules/pyodide/pyodide.mjs";
import { type Event, type HostConfig, PROTOCOL_VERSION, type Request } from "./protocol.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Writes one protocol line; nothing else may write to stdout. */
export function writeLine(line: string): void {
  const bytes = encoder.encode(line + "\n");
  let off = 0;
  while (off < bytes.length) off += Deno.stdout.writeSync(bytes.subarray(off));
}

function send(ev: Event): void {
  writeLine(JSON.stringify(ev));
}

/** Yields stdin lines; a line longer than max is reported as null and skipped. */
export async function* readLines(
  r: ReadableStream<Uint8Array>,
  max: number,
): AsyncGenerator<string | null> {
  let buf: Uint8Array = new Uint8Array(0);
  let skipping = false;
  for await (const chunk of r) {
    let start = 0;
    for (let i = 0; i < chunk.length; i++) {
      if (chunk[i] !== 10) continue;
      const piece = chunk.subarray(start, i);
      start = i + 1;
      if (skipping) {
        skipping = false;
        continue;
      }
      if (buf.length + piece.length > max) {
        buf = new Uint8Array(0);
        yield null;
        continue;
      }
      const line = buf.length ? concat(buf, piece) : piece;
      buf = new Uint8Array(0);
      yield decoder.decode(line);
    }
    const rest = chunk.subarray(start);
    if (skipping) continue;
    if (buf.length + rest.length > max) {
      buf = new Uint8Array(0);
      skipping = true;
      yield null;
      continue;
    }
    buf = concat(buf, rest);
  }
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

/** Caps the wasm heap so that allocations past it raise MemoryError in Python. */
function capWasmHeap(limit: number): void {
  if (limit <= 0) return;
  const grow = WebAssembly.Memory.prototype.grow;
  WebAssembly.Memory.prototype.grow = function (this: WebAssembly.Memory, delta: number) {
    if (this.buffer.byteLength + delta * 65536 > limit) {
      throw new RangeError(`pyrun: memory limit of ${limit} bytes reached`);
    }
    return grow.call(this, delta);
  };
}

interface Helper {
  setup(
    emit: (line: string) => void,
    wait: (ms: number) => boolean,
    live: () => boolean,
    lockImports: unknown,
    load: unknown,
  ): void;
  interrupt(): boolean;
  run(id: string, code: string, globals: string, maxOutput: number): Promise<string>;
}

interface Shared {
  flag: Int32Array; // Pyodide's interrupt flag
  count: Int32Array; // interrupt signals the main thread has handled
  start: Int32Array; // signals the supervisor had sent when the running call began
}

/** Whether the latest interrupt signal was meant for the running call. */
function live(s: Shared): boolean {
  return Atomics.load(s.count, 0) > Atomics.load(s.start, 0);
}

async function start(cfg: HostConfig, shared: Shared): Promise<void> {
  const began = performance.now();
  capWasmHeap(cfg.heap_limit);
  // Pyodide's start-up chatter must not reach stdout.
  console.log = console.info = console.debug = console.error;
  const py = await loadPyodide({
    // Explicit: Pyodide would derive it from a stack trace, which Deno
    // rewrites through pyodide.mjs's source map into a folder that does not exist.
    indexURL: new URL("./node_modules/pyodide/", import.meta.url).pathname,
    stdout: (s) => console.error(s),
    stderr: (s) => console.error(s),
    env: { HOME: "/home/pyodide" },
  });
  py.setInterruptBuffer(shared.flag);
  const helper = await installHelper(py);
  let current = "";
  const load = async (names: { toJs(): string[] }) => {
    const errors: string[] = [];
    await py.loadPackage(names.toJs(), {
      messageCallback: (text: string) => send({ type: "package", id: current, text }),
      errorCallback: (text: string) => errors.push(text),
    });
    return errors;
  };
  const wait = (ms: number) => {
    Atomics.wait(shared.flag, 0, 0, ms);
    // Consume the interrupt here: the sleep raises KeyboardInterrupt itself.
    return Atomics.exchange(shared.flag, 0, 0) !== 0 && live(shared);
  };
  helper.setup(writeLine, wait, () => live(shared), py.toPy(await lockImports(py)), load);
  // An interrupt while the call awaits (asyncio.sleep, a fetch) finds no
  // Python code running to notice the flag: cancel the call's task instead.
  // A notice for a signal the current call started after is stale.
  self.onmessage = (e: MessageEvent<{ type: string; count: number }>) => {
    if (e.data.type !== "interrupt" || !current || e.data.count <= Atomics.load(shared.start, 0)) {
      return;
    }
    // No Python runs while this handler does. A flag still set has found no
    // Python to stop; a cleared one may have stopped only a callback. Either
    // way the call's task, if still parked in an await, is cancelled.
    Atomics.store(shared.flag, 0, 0);
    helper.interrupt();
  };
  const python = py.runPython("import sys; sys.version.split()[0]") as string;
  send({
    type: "ready",
    protocol: PROTOCOL_VERSION,
    pyodide: py.version,
    python,
    startup_ms: Math.round(performance.now() - began),
  });

  for await (const line of readLines(Deno.stdin.readable, cfg.max_line)) {
    if (line === null) {
      send({ type: "error", error: `request line longer than ${cfg.max_line} bytes` });
      continue;
    }
    let req: Request;
    try {
      req = JSON.parse(line);
    } catch (e) {
      send({ type: "error", error: `bad request: ${e}` });
      continue;
    }
    switch (req?.type) {
      case "ping":
        send({ type: "pong", id: String(req.id) });
        break;
      case "run": {
        if (typeof req.id !== "string" || typeof req.code !== "string") {
          send({ type: "error", id: req.id, error: "bad request: run needs id and code" });
          break;
        }
        beginCall(shared, req.interrupts ?? 0);
        current = req.id;
        const globals = req.globals && Object.keys(req.globals).length
          ? JSON.stringify(req.globals)
          : "";
        try {
          writeLine(await helper.run(req.id, req.code, globals, req.max_output || 65536));
        } catch (e) {
          send({
            type: "error",
            id: req.id,
            error: `host failure: ${e instanceof Error ? e.message : e}`,
          });
        }
        current = "";
        break;
      }
      default:
        // JSON.parse may have returned anything, whatever req's type says.
        send({
          type: "error",
          error: `bad request: unknown type ${JSON.stringify((req as { type?: unknown })?.type)}`,
        });
    }
  }
  self.postMessage({ type: "eof" });
}

/**
 * Marks the start of a call: a signal numbered up to want was sent for an
 * earlier call and must not interrupt this one, however late it arrives.
 */
function beginCall(s: Shared, want: number): void {
  Atomics.store(s.start, 0, want);
  Atomics.store(s.flag, 0, 0);
}

async function installHelper(py: PyodideInterface): Promise<Helper> {
  const source = await Deno.readTextFile(new URL("./pyrun_helper.py", import.meta.url));
  py.FS.mkdirTree("/lib/pyrun");
  py.FS.writeFile("/lib/pyrun/pyrun_helper.py", source);
  py.runPython("import sys; sys.path.insert(0, '/lib/pyrun')");
  const mod = py.pyimport("pyrun_helper") as unknown as Helper;
  py.runPython("import sys; sys.path.remove('/lib/pyrun')");
  return mod;
}

/** Maps each importable top-level name in Pyodide's lock file to its package. */
async function lockImports(py: PyodideInterface): Promise<Record<string, string>> {
  const api = (py as unknown as { _api?: { lockfile_packages?: Record<string, LockPkg> } })._api;
  const pkgs = api?.lockfile_packages ?? {};
  const out: Record<string, string> = {};
  for (const [name, p] of Object.entries(pkgs)) {
    for (const imp of p.imports ?? []) out[imp] ??= name;
  }
  return await Promise.resolve(out);
}

interface LockPkg {
  imports?: string[];
}

self.addEventListener("error", (e) => {
  // A callback a call left behind (a timer, an event handler) that throws
  // must not end the worker, and with it a later call.
  e.preventDefault();
  console.error(`pyrun worker: uncaught error: ${e.message}`);
  if ((e.error as { pyodide_fatal_error?: boolean } | undefined)?.pyodide_fatal_error) {
    self.postMessage({ type: "fatal" });
  }
});

self.addEventListener("unhandledrejection", (e) => {
  // An interrupted async call can surface here; the call's own result reports it.
  e.preventDefault();
  console.error(`pyrun worker: unhandled rejection: ${e.reason}`);
  if (e.reason?.pyodide_fatal_error) {
    // Pyodide is unusable after a fatal error (a JavaScript stack overflow
    // in deeply nested code, say): end the process so the call is reported
    // as crashed at once and the worker replaced, instead of hanging.
    self.postMessage({ type: "fatal" });
  }
});

self.onmessage = (e: MessageEvent<{ cfg: HostConfig; buf: SharedArrayBuffer }>) => {
  self.onmessage = null;
  const shared = {
    flag: new Int32Array(e.data.buf, 0, 1),
    count: new Int32Array(e.data.buf, 4, 1),
    start: new Int32Array(e.data.buf, 8, 1),
  };
  start(e.data.cfg, shared).catch((err) => {
    console.error(`pyrun worker: ${err?.stack ?? err}`);
    self.postMessage({ type: "fatal" });
  });
};
