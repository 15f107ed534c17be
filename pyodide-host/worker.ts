// The Worker thread of a pyrun worker: owns Pyodide and speaks the pipe
// protocol on stdin/stdout itself, so a call costs no postMessage hop. The
// main thread (main.ts) only turns SIGUSR2 into Pyodide's interrupt flag.

/// <reference lib="deno.worker" />

import { dropDynlibs, restoreDynlibs, saveDynlibs, watchDynlibs } from "./dynlibs.ts";
// @ts-types="./node_modules/pyodide/pyodide.d.ts"
import { loadPyodide, type PyodideInterface } from "./node_modules/pyodide/pyodide.mjs";
import {
  type HostConfig,
  type PackageFile,
  parseRestore,
  PROTOCOL_VERSION,
  type Request,
  type Restore,
  type RunRequest,
} from "./protocol.ts";
import { clearFolder, guardFiles } from "./guards.ts";
import { mountHostFolders } from "./mounts.ts";
import { toolChannel } from "./toolcalls.ts";
import { readLines, writeLine } from "./lines.ts";
import { errorText, send, serve } from "./serve.ts";
import { warmCode, warmer } from "./warm.ts";
import { namespaces } from "./sessions.ts";
import {
  checkpointFile,
  type Compiled,
  compilePyodide,
  continueClock,
  type HostFunctions,
  installHost,
  makeCheckpoint,
  restoreFiles,
  restoreOptions,
  sendCheckpoint,
  type SnapshotRead,
  snapshotSource,
} from "./checkpoint.ts";
import { ChunkSums } from "./chunks.ts";

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
  prepare(): void;
  preloaded(files: string): void;
  setup(
    emit: (line: string) => void,
    wait: (ms: number) => boolean,
    live: () => boolean,
    load: unknown,
    clear: (path: string) => void,
  ): void;
  interrupt(): boolean;
  /** Makes every later call share one interpreter state (a Python session). */
  keep_state(): void;
  /** Cleans up after the last call; its result must be out first. */
  settle(): void;
  /** Called through callPromising, so that Python may switch stacks. */
  run: {
    callPromising(
      id: string,
      code: string,
      globals: string,
      maxOutput: number,
      rich: string,
    ): Promise<string>;
  };
}

/** pyodide-host/python/mcp_tools.py: the tools a call may call, as Python functions. */
interface McpTools {
  _setup(call: (server: string, tool: string, args: string) => Promise<string>): void;
  _begin(catalog: string): void;
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

/** Pyodide's options common to every start. */
function pyodideOptions(): Parameters<typeof loadPyodide>[0] {
  return {
    // Explicit: Pyodide would derive it from a stack trace, which Deno
    // rewrites through pyodide.mjs's source map into a folder that does not exist.
    indexURL: new URL("./node_modules/pyodide/", import.meta.url).pathname,
    // Pyodide's default stdin is Deno's prompt(), which reads this
    // process's stdin: the protocol. A read of fd 0 gets end of file.
    stdin: () => null,
    stdout: (s) => console.error(s),
    stderr: (s) => console.error(s),
    env: { HOME: "/home/pyodide" },
  };
}

/**
 * A plain start: Pyodide from scratch, then pyrun's helper imported and
 * prepared. This is also what a memory snapshot holds.
 */
async function plainStart(makeSnapshot: boolean): Promise<PyodideInterface> {
  const py = await loadPyodide({ ...pyodideOptions(), _makeSnapshot: makeSnapshot });
  const helper = await importHelper(py);
  helper.prepare();
  return py;
}

/**
 * Starts Pyodide from the memory snapshot when there is one, else plainly.
 * A snapshot that cannot be used is no reason to fail: the worker starts
 * plainly and says why in its ready announcement. The main thread has read
 * the file (main.ts, readSnapshot) while this thread booted.
 */
async function boot(
  cfg: HostConfig,
  snap: SnapshotRead,
): Promise<{ py: PyodideInterface; snapshotError: string }> {
  if (cfg.restore) {
    // A checkpoint that cannot be used fails the start: a plain start
    // would be a session without its state (docs/sessions.md).
    if (!snap.bytes) throw new Error(`checkpoint not read: ${snap.error ?? "no bytes"}`);
    continueClock(cfg.restore.clock);
    const mem = snapshotSource(snap.bytes.subarray(0, cfg.restore.mem));
    const opts = await restoreOptions(mem, pyodideOptions()!.indexURL!);
    const py = await loadPyodide(
      { ...pyodideOptions(), ...opts } as Parameters<typeof loadPyodide>[0],
    );
    restoreFiles(py.FS, snap.bytes.subarray(cfg.restore.mem));
    return { py, snapshotError: "" };
  }
  if (!cfg.snapshot) return { py: await plainStart(!!cfg.checkpoints), snapshotError: "" };
  let snapshotError: string;
  try {
    if (!snap.bytes) throw new Error(snap.error ?? "it was not read");
    // Pyodide checks the snapshot's magic number and build id. A session
    // that takes checkpoints must boot able to make snapshots itself.
    const py = await loadPyodide(
      {
        ...pyodideOptions(),
        _loadSnapshot: snap.bytes,
        ...(cfg.checkpoints ? { _makeSnapshot: true } : {}),
      } as Parameters<typeof loadPyodide>[0],
    );
    return { py, snapshotError: "" };
  } catch (e) {
    snapshotError = `snapshot ${cfg.snapshot} not used: ${e instanceof Error ? e.message : e}`;
    console.error(`pyrun worker: ${snapshotError}; starting without it`);
  }
  return { py: await plainStart(!!cfg.checkpoints), snapshotError };
}

/**
 * A parked restore (docs/protocol.md, Parked restores): Pyodide is loaded as
 * far as it goes without the checkpoint's memory, which is then awaited from
 * the restore line the supervisor sends once a session needs it. Before it
 * parks: the wasm compiled, its code warmed from the base snapshot, snap
 * (warmElsewhere), and the module instantiated on a memory of the base
 * snapshot's size (restoreOptions, ahead). What is left after the line is
 * the restore proper: the checkpoint read into the memory, Pyodide's
 * bootstrap on it, the files unpacked.
 */
async function bootParked(
  cfg: HostConfig,
  lines: AsyncGenerator<string | null>,
  snap: SnapshotRead,
): Promise<{ py: PyodideInterface; snapshotError: string; at: number }> {
  let files = new Uint8Array(0);
  let at = 0;
  let give!: (r: Restore) => void;
  let fail!: (e: Error) => void;
  const spec = new Promise<Restore>((resolve, reject) => {
    give = resolve;
    fail = reject;
  });
  const mem = spec.then((r) => {
    let read;
    try {
      read = checkpointFile(r.path, r.mem, r.fs);
    } catch (e) {
      throw new Error(`checkpoint not read: ${errorText(e)}`);
    }
    cfg.restore = r;
    continueClock(r.clock);
    files = read.files;
    return read.source;
  });
  mem.catch(() => {}); // its failure is the load's, awaited below
  const indexURL = pyodideOptions()!.indexURL!;
  const compiled = compilePyodide(indexURL);
  if (snap.bytes) {
    const base = snap.bytes;
    snap.bytes = undefined; // moved to the warming Worker, which frees it
    const began = performance.now();
    try {
      await warmElsewhere(compiled, base);
      const ms = Math.round(performance.now() - began);
      console.error(`pyrun worker: parked restore warmed from the base snapshot in ${ms} ms`);
    } catch (e) {
      // Only slower: the restore compiles what it runs itself.
      console.error(`pyrun worker: warming the parked restore failed: ${errorText(e)}`);
    }
  }
  // Instantiated ahead on a stand-in of the base snapshot's size, when known.
  let instantiated!: () => void;
  const ahead = new Promise<void>((resolve) => instantiated = resolve);
  const opts = await restoreOptions(
    mem,
    indexURL,
    compiled,
    cfg.snapshot_size > 0 ? { standIn: cfg.snapshot_size, instantiated } : undefined,
  );
  if (cfg.snapshot_size <= 0) instantiated();
  const loading = loadPyodide(
    { ...pyodideOptions(), ...opts } as Parameters<typeof loadPyodide>[0],
  );
  loading.catch(() => {}); // its failure is awaited below
  await Promise.race([ahead, loading.then(() => {}, () => {})]);
  // Compiled and loaded as far as it goes: the supervisor may hand it a restore.
  send({ type: "parked" });
  const next = await lines.next();
  at = performance.now();
  if (next.done) {
    // The supervisor let it go unused (pyrun stopping, a new configuration).
    self.postMessage({ type: "eof" });
    return new Promise(() => {});
  }
  try {
    if (next.value === null) throw new Error("the restore line is too long");
    const req = JSON.parse(next.value) as Record<string, unknown>;
    if (req?.type !== "restore") {
      throw new Error(`a ${JSON.stringify(req?.type)} line before the restore line`);
    }
    give(parseRestore(req));
  } catch (e) {
    fail(e instanceof Error ? e : new Error(String(e)));
  }
  const py = await loading;
  restoreFiles(py.FS, files);
  return { py, snapshotError: "", at };
}

/** Rounds of warming calls (warm.ts) a parked restore runs (warmCompiled). */
const PARKED_WARM_ROUNDS = 2;

/**
 * Warms a parked restore's compiled module. V8 compiles a wasm function on
 * its first call (Liftoff) and optimizes it (TurboFan) once it has run
 * enough, and that code is the module's, shared by every instance of it in
 * the process, in any Worker. So a throwaway Pyodide, started from the base
 * snapshot on the module, runs the warming calls: the restore's bootstrap
 * and its session's next calls then find their code compiled (bootstrap
 * 35-60 ms cold, 15-20 warm; docs/performance.md, Restores and forks).
 * It runs in a Worker of its own (this module again, given a WarmOnly),
 * ended after, which frees all it had: a throwaway run in this Worker was
 * mostly still held after a forced collection (a parked process of 220
 * MiB instead of 140).
 */
async function warmElsewhere(compiled: Compiled, base: Uint8Array<ArrayBuffer>): Promise<void> {
  const module = await compiled.module;
  const w = new Worker(import.meta.url, { type: "module" });
  try {
    await new Promise<void>((resolve, reject) => {
      w.onmessage = (e: MessageEvent<{ error?: string }>) =>
        e.data?.error ? reject(new Error(e.data.error)) : resolve();
      w.onerror = (e) => {
        e.preventDefault();
        reject(new Error(e.message));
      };
      const msg: WarmOnly = { warmOnly: { module, size: compiled.size, base } };
      w.postMessage(msg, [base.buffer]);
    });
  } finally {
    w.terminate();
  }
}

/** What warmElsewhere's Worker is given: the module, its file's size, the base snapshot. */
interface WarmOnly {
  warmOnly: { module: WebAssembly.Module; size: number; base: Uint8Array };
}

/** A warming Worker's work (warmElsewhere): Pyodide from base on module, the calls. */
async function warmCompiled(w: WarmOnly["warmOnly"]): Promise<void> {
  const indexURL = pyodideOptions()!.indexURL!;
  const opts = await restoreOptions(snapshotSource(w.base), indexURL, {
    module: Promise.resolve(w.module),
    size: w.size,
  });
  const quiet = () => {};
  const py = await loadPyodide(
    { ...pyodideOptions(), stdout: quiet, stderr: quiet, ...opts } as Parameters<
      typeof loadPyodide
    >[0],
  );
  const helper = py.pyimport("pyrun_helper") as unknown as Helper;
  const none = JSON.stringify({ error: "pyrun: no packages for a warming call" });
  helper.setup(quiet, () => false, () => false, () => Promise.resolve(none), quiet);
  for (let i = 0; i < PARKED_WARM_ROUNDS; i++) {
    for (const code of warmCode) {
      await helper.run.callPromising("warm", code, "", 65536, "");
      helper.settle();
    }
  }
}

/**
 * Makes a memory snapshot of a freshly started Pyodide with pyrun's helper
 * prepared and writes it to stdout, which carries nothing else in this mode.
 * Nothing process-specific may be in it: no interrupt buffer, no functions
 * of this host, no working directory (see pyrun_helper.prepare).
 */
async function makeSnapshot(): Promise<void> {
  const py = await plainStart(true);
  const bytes = py.makeMemorySnapshot();
  let off = 0;
  while (off < bytes.length) off += Deno.stdout.writeSync(bytes.subarray(off));
}

async function start(cfg: HostConfig, shared: Shared, snap: SnapshotRead): Promise<void> {
  // The start's own clock: a restore moves performance.now on to the
  // checkpoint's (continueClock), which would count in its start-up time.
  const clock = performance.now.bind(performance);
  const began = clock();
  // Pyodide's start-up chatter must not reach stdout.
  console.log = console.info = console.debug = console.error;
  if (cfg.make_snapshot) {
    await makeSnapshot();
    self.postMessage({ type: "eof" });
    return;
  }
  capWasmHeap(cfg.heap_limit);
  // The host's functions Python reaches by name (checkpoint.ts), made below.
  const host: HostFunctions = {};
  if (cfg.checkpoints) installHost(["emit", "wait", "live", "load", "clear", "call"], host);
  const lines = readLines(Deno.stdin, cfg.max_line);
  let readyFrom = began;
  let booted: { py: PyodideInterface; snapshotError: string };
  if (cfg.park) {
    const parked = await bootParked(cfg, lines, snap);
    // Its start is the restore's, from the line that asked for it.
    readyFrom = parked.at;
    booted = parked;
  } else {
    booted = await boot(cfg, snap);
  }
  const { py, snapshotError } = booted;
  const restored = !!cfg.restore;
  py.setInterruptBuffer(shared.flag);
  const helper = py.pyimport("pyrun_helper") as unknown as Helper;
  let current = "";
  // Taken before any call runs: a call may patch site later.
  const site = py.runPython("import site; site.getsitepackages()[0]") as string;
  const loadFiles = packageLoader(py, site);
  // Native code loaded from here on is recorded with checkpoints (dynlibs.ts),
  // or they say why it cannot be; files added to site-packages are kept.
  const tableAtReady = (py as unknown as { _module: { wasmTable?: { length: number } } })._module
    .wasmTable?.length ?? 0;
  // A restored checkpoint's side modules load again first (dynlibs.ts).
  const M = (py as unknown as { _module: unknown })._module;
  const restoredLibs = restored ? restoreDynlibs(M) : [];
  const dynlibs = watchDynlibs();
  const sums = new ChunkSums(); // of the last checkpoint asked with chunks (chunks.ts)
  // Or of the checkpoint restored, as the supervisor summed it.
  if (cfg.restore?.sums) sums.adopt(cfg.restore.sums);
  dynlibs.push(...restoredLibs);
  const siteAtReady = new Set(py.FS.readdir(site) as string[]);
  // A restored checkpoint holds its preloaded packages already.
  if (cfg.preload.length && !restored) {
    const errors = await loadFiles(cfg.preload, (text) => console.error(text));
    if (errors.length) throw new Error(`preloading packages failed: ${errors.join("; ")}`);
    helper.preloaded(JSON.stringify(cfg.preload));
  }
  // A warming call's lines (warm.ts) go nowhere: no call asked for them.
  let muted = false;
  // Packages for a call: the need line goes to the supervisor, which
  // answers on stdin with files in its cache (docs/protocol.md, Packages).
  const load = async (need: string): Promise<string> => {
    // A warming call imports only what the snapshot holds; were it to
    // need more, its request must not reach the supervisor.
    if (muted) return JSON.stringify({ error: "pyrun: no packages for a warming call" });
    writeLine(need);
    const next = await lines.next();
    if (next.done) {
      return JSON.stringify({ error: "pyrun: stdin ended while waiting for packages" });
    }
    let ans: Request;
    try {
      ans = JSON.parse(next.value ?? "null");
    } catch (e) {
      return JSON.stringify({ error: `pyrun: bad packages answer: ${e}` });
    }
    if (ans?.type !== "packages" || ans.id !== current) {
      return JSON.stringify({ error: "pyrun: the supervisor did not answer with packages" });
    }
    if (ans.error) return JSON.stringify({ error: ans.error });
    const files = ans.files ?? [];
    const errors = await fileGuard.loading(() =>
      loadFiles(files, (text) => send({ type: "package", id: current, text }))
    );
    return JSON.stringify({ files, errors });
  };
  const wait = (ms: number) => {
    Atomics.wait(shared.flag, 0, 0, ms);
    // Consume the interrupt here: the sleep raises KeyboardInterrupt itself.
    return Atomics.exchange(shared.flag, 0, 0) !== 0 && live(shared);
  };
  const emit = (line: string) => {
    if (!muted) writeLine(line);
  };
  // pyrun's clean-up empties folders through Emscripten's FS, whose
  // readdir gives whole names (guards.ts, clearFolder).
  const clear = (path: string) => clearFolder(py.FS, path);
  const liveNow = () => live(shared);
  // Code mode: mcp_tools calls tools through the supervisor (toolcalls.ts).
  const mcpTools = py.pyimport("mcp_tools") as unknown as McpTools;
  const tools = toolChannel(lines, () => current, send);
  if (cfg.checkpoints) {
    // Python reaches these by name, so that a checkpoint holds paths that
    // resolve to the restored process's own functions (checkpoint.ts).
    Object.assign(host, { emit, wait, live: liveNow, load, clear, call: tools.call });
    if (!restored) {
      py.runPython(
        "import pyrun_helper, mcp_tools\nfrom js import pyrunHost as _h\n" +
          "pyrun_helper.setup(_h.emit, _h.wait, _h.live, _h.load, _h.clear)\n" +
          "mcp_tools._setup(_h.call)\ndel _h",
      );
    }
  } else {
    helper.setup(emit, wait, liveNow, load, clear);
    mcpTools._setup(tools.call);
  }
  // Mounts first: making their folders is a change the guard refuses.
  const mounts = cfg.mounts ?? [];
  mountHostFolders(py, mounts);
  // From here on Python can change the file system only in the scratch
  // folders, /output/ and read-write mounts (guards.ts).
  const rw = mounts.filter((m) => m.rw).map((m) => m.path);
  const change = ["/home/pyodide", "/tmp", "/output", ...rw];
  const fileGuard = guardFiles(py.FS, { change, write: [...change, "/dev"], host: rw });
  // A session's state starts with its first call: warming calls before it
  // run as stateless calls do and leave nothing behind.
  let stateKept = !cfg.session || restored;
  // A session worker may hold several sessions' namespaces (sessions.ts).
  const spaces = cfg.session
    ? namespaces(py.FS, fileGuard, py.pyimport("pyrun_sessions") as never)
    : null;
  // A restored checkpoint of a shared session worker holds its namespaces:
  // the one it was taken for stays, the others go (sessions.ts, resume).
  if (spaces && restored) spaces.resume(cfg.restore!.keep ?? "");
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
    engine: "python",
    versions: { python, pyodide: py.version },
    pyodide: py.version,
    python,
    startup_ms: Math.round(clock() - readyFrom),
    snapshot: !!cfg.snapshot && !snapshotError,
    ...(snapshotError ? { snapshot_error: snapshotError } : {}),
    ...(cfg.warm_calls ? { warm_calls: cfg.warm_calls } : {}),
    settles: true,
  });

  let lastCatalog = ""; // the tools catalog of the last call
  // One call, a warming call's too (warm.ts): the line of its result.
  const call = async (req: RunRequest): Promise<string> => {
    beginCall(shared, req.interrupts ?? 0);
    current = req.id;
    const catalog = typeof req.tools === "string" ? req.tools : "";
    // A call without tools after one without finds mcp_tools as _begin
    // would leave it: spare the trip into Python (~30 us a call).
    if (catalog || lastCatalog) mcpTools._begin(catalog);
    lastCatalog = catalog;
    try {
      return await helper.run.callPromising(
        req.id,
        req.code,
        req.globals ?? "",
        req.max_output || 65536,
        richOptions(req),
      );
    } finally {
      current = "";
    }
  };
  // The clean-up after a call, once its result is out: the caller need
  // not wait for it. False: the worker cannot clean up, and serves no one.
  const cleanUp = async (): Promise<boolean> => {
    try {
      helper.settle();
      spaces?.settle();
    } catch (e) {
      console.error(`pyrun worker: cleaning up after a call failed: ${errorText(e)}`);
      self.postMessage({ type: "fatal" });
      return false;
    }
    // Answers to host calls the run left outstanding come first.
    await tools.idle();
    return true;
  };
  const warming = warmer(restored ? 0 : cfg.warm_calls ?? 0, async (line) => {
    const req = JSON.parse(line) as RunRequest;
    // No signal sent so far is meant for it.
    req.interrupts = Atomics.load(shared.count, 0);
    muted = true;
    try {
      // Its result, or its failure, goes nowhere.
      await call(req).catch(() => {});
      await cleanUp();
    } finally {
      muted = false;
    }
  });
  await serve(
    {
      check: (req) =>
        req.globals !== undefined && typeof req.globals !== "string"
          ? "bad request: globals must be JSON text"
          : req.namespace !== undefined && (!spaces || typeof req.namespace !== "string")
          ? "bad request: namespace needs a session worker"
          : "",
      warm: (calls) => warming.allow(calls),
      checkpoint(id, chunks, since) {
        const dynlibsOrWhy = () => {
          try {
            return saveDynlibs(M, dynlibs, tableAtReady);
          } catch (e) {
            return `the session's native code could not be recorded: ${errorText(e)}`;
          }
        };
        const why = !cfg.checkpoints ? "this worker takes no checkpoints" : dynlibsOrWhy();
        if (why) {
          send({ type: "checkpoint", id, error: why });
          return;
        }
        try {
          const added = (py.FS.readdir(site) as string[]).filter((n) => !siteAtReady.has(n))
            .map((n) => `${site}/${n}`);
          // /sessions: the folders of the namespaces switched out (sessions.ts).
          const roots = ["/home/pyodide", "/tmp", "/output", "/sessions", ...added];
          try {
            const c = makeCheckpoint(
              py,
              roots,
              mounts.map((m) => m.path),
              chunks ? { sums, since } : undefined,
            );
            sendCheckpoint(id, c);
          } finally {
            dropDynlibs(M);
          }
        } catch (e) {
          send({ type: "checkpoint", id, error: `checkpoint failed: ${errorText(e)}` });
        }
      },
      run(req) {
        warming.stop();
        if (!stateKept) {
          helper.keep_state();
          stateKept = true;
        }
        if (spaces && req.namespace !== undefined) {
          try {
            spaces.enter(req.namespace, Array.isArray(req.drop) ? req.drop.map(String) : []);
          } catch (e) {
            // Half switched, no session's state can be trusted: the worker ends.
            const why = `switching sessions failed: ${e instanceof Error ? e.message : e}`;
            console.error(`pyrun worker: ${why}`);
            self.postMessage({ type: "fatal" });
            throw new Error(why);
          }
        }
        return call(req);
      },
      async settle(req) {
        // The supervisor hands the worker no call before this (docs/protocol.md, Idle).
        if (await cleanUp()) send({ type: "idle", id: req.id });
      },
    },
    cfg.max_line,
    { lines, next: (l) => warming.untilLine(l) },
  );
  self.postMessage({ type: "eof" });
}

/** A run's rich-result fields as pyrun_display takes them: JSON, or "" for none. */
function richOptions(req: RunRequest): string {
  const { keep_output, max_displays, max_display_bytes, max_files, max_file_bytes } = req;
  const files = req.input_files;
  if (
    files === undefined && keep_output === undefined && max_displays === undefined &&
    max_display_bytes === undefined && max_files === undefined && max_file_bytes === undefined
  ) return "";
  return JSON.stringify({
    files,
    keep_output,
    max_displays,
    max_display_bytes,
    max_files,
    max_file_bytes,
  });
}

/**
 * Marks the start of a call: a signal numbered up to want was sent for an
 * earlier call and must not interrupt this one, however late it arrives.
 */
function beginCall(s: Shared, want: number): void {
  Atomics.store(s.start, 0, want);
  Atomics.store(s.flag, 0, 0);
}

/** pyrun's Python modules (python/): the helper and what it imports, and code mode's. */
const PYTHON_MODULES = [
  "pyrun_helper.py",
  "pyrun_guard.py",
  "pyrun_display.py",
  "pyrun_needs.py",
  "pyrun_values.py",
  "mcp_tools.py",
  "pyrun_sessions.py",
];

/**
 * Imports pyrun's helper, and mcp_tools (which calls import themselves and
 * find in sys.modules), from the runtime folder into Pyodide.
 */
async function importHelper(py: PyodideInterface): Promise<Helper> {
  py.FS.mkdirTree("/lib/pyrun");
  for (const name of PYTHON_MODULES) {
    const source = await Deno.readTextFile(new URL(`./python/${name}`, import.meta.url));
    py.FS.writeFile(`/lib/pyrun/${name}`, source);
  }
  py.runPython("import sys; sys.path.insert(0, '/lib/pyrun')");
  py.pyimport("mcp_tools");
  py.pyimport("pyrun_sessions");
  const mod = py.pyimport("pyrun_helper") as unknown as Helper;
  py.runPython("import sys; sys.path.remove('/lib/pyrun')");
  return mod;
}

/**
 * Returns the function that loads package files from the supervisor's
 * cache, in order (dependencies first), and returns the loader's errors.
 * Pure-Python wheels are unpacked into site-packages with Pyodide's own
 * unpacker: in a process that has not loaded a package yet, loadPackage
 * spends ~250 ms before it unpacks anything, and unpacking a small wheel
 * takes ~40 ms. Other files (wheels with native code, Pyodide's own
 * archives) go through loadPackage, which also links their libraries and
 * reports failures through errorCallback rather than by throwing.
 */
function packageLoader(
  py: PyodideInterface,
  site: string,
): (files: PackageFile[], message: (text: string) => void) => Promise<string[]> {
  // Taken before any call runs: a call may patch the loader later.
  const unpack = (py.pyimport("pyodide._package_loader") as unknown as { unpack_buffer: Unpacker })
    .unpack_buffer;
  return async (files, message) => {
    const errors: string[] = [];
    const native: string[] = [];
    for (const f of files) {
      if (!f.path.endsWith("-none-any.whl")) {
        native.push(f.path);
        continue;
      }
      message(`Loading ${f.name} ${f.version}`);
      try {
        unpack.callKwargs({
          buffer: Deno.readFileSync(f.path),
          filename: f.path.slice(f.path.lastIndexOf("/") + 1),
          extract_dir: site,
        });
        message(`Loaded ${f.name}`);
      } catch (e) {
        const why = e instanceof Error ? e.message : String(e);
        errors.push(`The following error occurred while loading ${f.name}: ${why}`);
      }
    }
    if (!native.length) return errors;
    try {
      await py.loadPackage(native, {
        messageCallback: message,
        errorCallback: (text: string) => errors.push(text),
        checkIntegrity: false, // the supervisor checked every file's SHA-256
      });
    } catch (e) {
      errors.push(e instanceof Error ? e.message : String(e));
    }
    return errors;
  };
}

/** Pyodide's wheel unpacker, pyodide._package_loader.unpack_buffer. */
interface Unpacker {
  callKwargs(kw: { buffer: Uint8Array; filename: string; extract_dir: string }): void;
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

self.onmessage = (
  e: MessageEvent<({ cfg: HostConfig; buf: SharedArrayBuffer } & SnapshotRead) | WarmOnly>,
) => {
  self.onmessage = null;
  if ("warmOnly" in e.data) {
    // A parked restore's warming Worker (warmElsewhere).
    warmCompiled(e.data.warmOnly).then(
      () => self.postMessage({}),
      (err) => self.postMessage({ error: errorText(err) }),
    );
    return;
  }
  const shared = {
    flag: new Int32Array(e.data.buf, 0, 1),
    count: new Int32Array(e.data.buf, 4, 1),
    start: new Int32Array(e.data.buf, 8, 1),
  };
  start(e.data.cfg, shared, { bytes: e.data.bytes, error: e.data.error }).catch((err) => {
    console.error(`pyrun worker: ${err?.stack ?? err}`);
    self.postMessage({ type: "fatal" });
  });
};
