// pyrun's JavaScript/TypeScript worker process (docs/protocol.md, Engines:
// JavaScript). This host thread owns the pipes and may read only its own
// program files, TypeScript's parser and the mounted folders, which it
// reads and writes for the code; each call's code runs in a Deno Worker
// with no permissions at all, with mounts too (runner.ts): a fresh
// single-use Worker per call (one is always started ahead), or one Worker
// for every call of a session. The host
// treats the Worker's messages as untrusted: it ignores those without the
// Worker's token and caps everything it passes on.

import type * as TS from "../node_modules/typescript/lib/typescript.d.ts";
import { send, serve } from "../serve.ts";
import type { FromRunner } from "./protocol.ts";
import { type Caps, capsOf, durationMs, fromBase64, RichCap, StreamCap } from "../events.ts";
import {
  type EngineConfig as HostConfig,
  type Mount,
  parseEngineConfig,
  PROTOCOL_VERSION,
  type Result,
  type RunRequest,
} from "../protocol.ts";
import { mapPositions, rewrite } from "./rewrite.ts";

/** How long an interrupted call's Worker has to show that it is parked in an await. */
const PROBE_MS = 150;
/** How often a running call's memory is looked at. */
const MEMORY_POLL_MS = 25;

/**
 * TypeScript's compiler (we use its parser only), evaluated from its file
 * with no `process` and no `require`: it then sets up no Node system and
 * reads no environment variables, which the host has no permission for.
 */
function loadTypeScript(): typeof TS {
  const src = Deno.readTextFileSync(
    new URL("../node_modules/typescript/lib/typescript.js", import.meta.url),
  );
  const module = { exports: {} as typeof TS };
  new Function("module", "exports", "require", "process", src)(
    module,
    module.exports,
    undefined,
    undefined,
  );
  return module.exports;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null;
}

function randomToken(): string {
  const b = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/** One user Worker with its token. */
class Slot {
  readonly worker: Worker;
  readonly token = randomToken();
  readonly ready: Promise<void>;
  /** The call's handler of the runner's messages; set while one runs. */
  onMessage: ((m: FromRunner) => void) | null = null;
  /** Called when the Worker fails (an error the runner did not catch). */
  onFail: ((why: string) => void) | null = null;
  failed = "";

  constructor(url: string, mounts: Mount[]) {
    this.worker = new Worker(url, {
      type: "module",
      name: "pyrun-javascript",
      // No permission at all, with mounts too: the host reads and writes
      // them for the code (fsForRunner).
      deno: { permissions: "none" },
    } as WorkerOptions);
    let ok!: () => void;
    let fail!: (e: Error) => void;
    this.ready = new Promise((res, rej) => {
      ok = res;
      fail = rej;
    });
    this.ready.catch(() => {}); // reported where it is awaited
    this.worker.onmessage = (e: MessageEvent<unknown>) => {
      const m = e.data;
      if (!isObject(m) || m.k !== this.token) return;
      if (m.type === "ready") ok();
      else if (m.type === "fs") fsForRunner(m, mounts);
      else this.onMessage?.(m as FromRunner);
    };
    this.worker.onerror = (e: ErrorEvent) => {
      e.preventDefault();
      this.failed = e.message || "it failed";
      fail(new Error(this.failed));
      this.onFail?.(this.failed);
    };
    this.worker.postMessage({ type: "init", token: this.token, mounts });
  }

  terminate(): void {
    this.onMessage = this.onFail = null;
    this.worker.terminate();
  }
}

/** Linux's NAME_MAX: no name in a path may be longer, in UTF-8 bytes (Python's and R's rule too). */
const NAME_MAX = 255;
const encoder = new TextEncoder();

function nameOK(part: string): boolean {
  return part !== "" && part !== "." && part !== ".." && encoder.encode(part).length <= NAME_MAX;
}

/** A path the call may be given or return: relative, without . or .. parts or names past NAME_MAX. */
function goodPath(p: unknown): p is string {
  if (typeof p !== "string" || !p || p.length > 4096 || p.startsWith("/")) return false;
  return p.split("/").every(nameOK);
}

/**
 * Where a sandbox path under a mount is on the host, with its mount,
 * resolved as POSIX does ("." and ".." taken away, never above "/"), as the
 * runner's mounted() does; null for a path under none.
 */
function onHostPath(path: string, mounts: Mount[]): { host: string; mount: Mount } | null {
  if (!path.startsWith("/")) return null;
  const parts: string[] = [];
  for (const p of path.split("/")) {
    if (p === "" || p === ".") continue;
    if (p === "..") parts.pop();
    else parts.push(p);
  }
  const clean = "/" + parts.join("/");
  for (const m of mounts) {
    if (clean === m.path || clean.startsWith(m.path + "/")) {
      return { host: m.host + clean.slice(m.path.length), mount: m };
    }
  }
  return null;
}

const FS_ERRORS: Record<string, string> = {
  NotFound: "no such file or folder",
  NotCapable: "permission denied",
  PermissionDenied: "permission denied",
  AlreadyExists: "it exists",
  IsADirectory: "it is a folder",
  NotADirectory: "not a folder",
};

/**
 * Runs a file operation on a mounted folder for the runner (pyrun.readFile,
 * readDir, writeFile), which waits on m.answer (FromRunner "fs"). A write
 * goes only into a read-write mount: the file made with mode 0664 and its
 * folders with 0775, less the process's umask (open's mode applies only to
 * a file it makes: an existing file keeps its own), never a name past
 * NAME_MAX. Answered whatever the message holds, unless it has no buffer
 * to answer in; an error is the reason, never the host path.
 */
function fsForRunner(m: Record<string, unknown>, mounts: Mount[]): void {
  const buf = m.answer;
  if (!(buf instanceof SharedArrayBuffer) || !buf.growable || buf.byteLength < 16) return;
  const state = new Int32Array(buf, 0, 4);
  let result: Uint8Array = new Uint8Array();
  let why = "";
  try {
    const at = typeof m.path === "string" ? onHostPath(m.path, mounts) : null;
    if (!at) {
      why = "not in a mounted folder";
    } else if (m.op === "read") {
      result = Deno.readFileSync(at.host);
    } else if (m.op === "readDir") {
      const names: string[] = [];
      for (const e of Deno.readDirSync(at.host)) names.push(e.isDirectory ? e.name + "/" : e.name);
      result = encoder.encode(JSON.stringify(names.sort()));
    } else if (m.op !== "write" || !(m.data instanceof Uint8Array)) {
      why = "not an operation pyrun knows";
    } else if (!at.mount.rw) {
      why = `${at.mount.path} is mounted read-only`;
    } else if (
      at.host.length <= at.mount.host.length ||
      !at.host.slice(at.mount.host.length + 1).split("/").every(nameOK)
    ) {
      why = `not a file name, or a name in it is longer than ${NAME_MAX} bytes`;
    } else {
      const parent = at.host.slice(0, at.host.lastIndexOf("/"));
      if (parent.length > at.mount.host.length) {
        Deno.mkdirSync(parent, { recursive: true, mode: 0o775 });
      }
      const f = Deno.openSync(at.host, { write: true, create: true, truncate: true, mode: 0o664 });
      try {
        for (let off = 0; off < m.data.length;) off += f.writeSync(m.data.subarray(off));
      } finally {
        f.close();
      }
    }
  } catch (e) {
    why = FS_ERRORS[(e as Error)?.name] ?? "it failed";
  }
  if (why) result = encoder.encode(why);
  try {
    buf.grow(16 + result.length);
  } catch {
    why = "it is too big to read";
    result = encoder.encode(why);
    buf.grow(16 + result.length);
  }
  new Uint8Array(buf, 16, result.length).set(result);
  Atomics.store(state, 1, why ? 1 : 0);
  Atomics.store(state, 2, result.length);
  Atomics.store(state, 0, 1);
  Atomics.notify(state, 0);
}

const MIME_TYPES: Record<string, string> = {
  png: "image/png",
  jpg: "image/jpeg",
  jpeg: "image/jpeg",
  gif: "image/gif",
  webp: "image/webp",
  svg: "image/svg+xml",
  html: "text/html",
  htm: "text/html",
  txt: "text/plain",
  md: "text/markdown",
  csv: "text/csv",
  json: "application/json",
  js: "text/javascript",
  ts: "text/plain",
  xml: "application/xml",
  pdf: "application/pdf",
};

function mimeOf(path: string): string {
  const dot = path.lastIndexOf(".");
  return (dot > path.lastIndexOf("/") && MIME_TYPES[path.slice(dot + 1).toLowerCase()]) ||
    "application/octet-stream";
}

const MIME = /^[A-Za-z0-9][\w.+-]*\/[\w.+-]+$/;

/** Code at least this long has its parse tree collected at once (collectAfterParse). */
const BIG_CODE = 64 << 10;

/** V8's gc(), exposed by --v8-flags=--expose-gc (supervisor/engine_javascript.go). */
const collect = (globalThis as { gc?: (options: Record<string, string>) => void }).gc;

/**
 * Collects the garbage of a big call's parse and gives its memory back.
 * TypeScript's tree of a MiB of dense code (130,000 short statements) takes
 * 150-250 MiB of this thread's heap, and V8 collects it when it sees fit
 * and keeps the pages it freed: the process's RSS, which heap_limit bounds,
 * stayed at its peak, and the next big call ended memory-error with nothing
 * of its own held. V8's last-resort collection (what it does under memory
 * pressure) also returns the pages: RSS went from 317 MiB back to 86 MiB.
 * Small code, whose tree is young garbage, is left to V8.
 */
function collectAfterParse(length: number): void {
  if (length >= BIG_CODE) collect?.({ type: "major", execution: "sync", flavor: "last-resort" });
}

class Host {
  private readonly url: string;
  private spare: Slot | null = null;
  private session: Slot | null = null;
  /**
   * A shared session worker's sessions, by namespace: a Worker (a realm,
   * with its timers and files) each (docs/protocol.md, Sessions).
   */
  private spaces = new Map<string, Slot>();
  private signals = 0;
  private seq = 0;
  private probes = 0;
  /** Interrupts the running call, if any. */
  private interruptCurrent: (() => void) | null = null;

  constructor(private readonly ts: typeof TS, runner: string, private readonly cfg: HostConfig) {
    this.url = URL.createObjectURL(new Blob([runner], { type: "application/typescript" }));
    Deno.addSignalListener("SIGUSR2", () => {
      this.signals++;
      this.interruptCurrent?.();
    });
  }

  /** Starts the first Worker; resolves when it can take a call. */
  async start(): Promise<void> {
    const slot = new Slot(this.url, this.cfg.mounts);
    if (this.cfg.session) this.session = slot;
    else this.spare = slot;
    await slot.ready;
  }

  private take(ns: string | undefined): Slot {
    if (this.cfg.session && ns !== undefined) {
      let slot = this.spaces.get(ns);
      if (!slot) {
        slot = new Slot(this.url, this.cfg.mounts);
        this.spaces.set(ns, slot);
      }
      return slot;
    }
    if (this.cfg.session) {
      if (!this.session) this.session = new Slot(this.url, this.cfg.mounts);
      return this.session;
    }
    const slot = this.spare ?? new Slot(this.url, this.cfg.mounts);
    this.spare = null;
    return slot;
  }

  async run(req: RunRequest): Promise<Result> {
    const began = performance.now();
    const mark = typeof req.interrupts === "number" ? req.interrupts : 0;
    const caps = capsOf(req);
    const done = (r: Omit<Result, "type" | "id" | "duration_ms">): Result => ({
      type: "result",
      id: req.id,
      ...r,
      duration_ms: durationMs(began),
    });
    const inputs: [string, Uint8Array][] = [];
    for (const f of Array.isArray(req.input_files) ? req.input_files : []) {
      if (!isObject(f) || !goodPath(f.path) || typeof f.data !== "string") {
        return done({
          status: "run-error",
          error: `pyrun: bad input file ${JSON.stringify(isObject(f) ? f.path : f)}: ` +
            "paths are relative, without . or .. parts, and data is base64",
        });
      }
      try {
        inputs.push([f.path, fromBase64(f.data)]);
      } catch {
        return done({ status: "run-error", error: `pyrun: input file ${f.path}: bad base64` });
      }
    }
    const rw = rewrite(this.ts, req.code, this.cfg.session);
    collectAfterParse(req.code.length);
    if (rw.error !== undefined) return done({ status: "run-error", error: rw.error });
    const ns = typeof req.namespace === "string" ? req.namespace : undefined;
    if (ns !== undefined && !this.cfg.session) {
      throw new Error("bad request: namespace needs a session worker");
    }
    for (const d of Array.isArray(req.drop) ? req.drop : []) {
      if (d === ns) continue;
      this.spaces.get(String(d))?.terminate();
      this.spaces.delete(String(d));
    }
    const slot = this.take(ns);
    try {
      await slot.ready;
    } catch (e) {
      if (slot === this.session) this.session = null;
      if (ns !== undefined) this.spaces.delete(ns);
      throw new Error(`the JavaScript worker did not start: ${(e as Error).message}`);
    }
    const result = await this.call(
      slot,
      req.id,
      rw.code,
      caps,
      inputs,
      req.keep_output === true,
      mark,
      done,
    );
    if (result.error) result.error = mapPositions(result.error, rw.position);
    if (!this.cfg.session) {
      slot.terminate();
    } else if (result.recycle) {
      slot.terminate();
      if (ns !== undefined) this.spaces.delete(ns);
      else this.session = null;
    }
    return result;
  }

  private call(
    slot: Slot,
    id: string,
    code: string,
    caps: Caps,
    inputs: [string, Uint8Array][],
    keepOutput: boolean,
    mark: number,
    done: (r: Omit<Result, "type" | "id" | "duration_ms">) => Result,
  ): Promise<Result> {
    const seq = ++this.seq;
    const streams = new StreamCap(caps.max_output);
    const rich = new RichCap(id, caps);
    let probe = 0;
    let probeTimer: ReturnType<typeof setTimeout> | undefined;
    let memoryTimer: ReturnType<typeof setInterval> | undefined;
    return new Promise<Result>((resolve) => {
      let finished = false;
      const finish = (r: Omit<Result, "type" | "id" | "duration_ms">) => {
        if (finished) return;
        finished = true;
        clearTimeout(probeTimer);
        clearInterval(memoryTimer);
        slot.onMessage = slot.onFail = null;
        this.interruptCurrent = null;
        resolve(done({ ...r, ...streams.dropped() }));
      };
      const recycleWhy = (why: string) => this.cfg.session ? { recycle: why } : {};
      const output = (stream: "stdout" | "stderr", text: string) => {
        text = streams.take(stream, text);
        if (text) send({ type: "output", id, stream, text });
      };
      const capText = (key: "value" | "error", text: unknown): Partial<Result> => {
        if (typeof text !== "string") return {};
        if (text.length <= caps.max_output) return { [key]: text };
        return { [key]: text.slice(0, caps.max_output), [`${key}_cut`]: true };
      };
      const result = (m: Extract<FromRunner, { type: "result" }>) => {
        if (isObject(m.dropped)) {
          for (const s of ["stdout", "stderr"] as const) {
            const n = m.dropped[s];
            if (typeof n === "number" && n > 0 && Number.isFinite(n)) {
              streams.drop(s, Math.floor(n));
            }
          }
        }
        if (typeof m.files_dropped === "number") {
          rich.hold("file", Math.max(0, m.files_dropped | 0));
        }
        for (const f of Array.isArray(m.files) ? m.files : []) {
          if (!Array.isArray(f) || !goodPath(f[0]) || !(f[1] instanceof Uint8Array)) continue;
          const [path, data] = f as [string, Uint8Array];
          rich.send("file", mimeOf(path), data, path);
        }
        if (typeof m.displays_dropped === "number") {
          rich.hold("display", Math.max(0, m.displays_dropped | 0));
        }
        const status = m.status === "success" ? "success" : "run-error";
        finish({
          status,
          ...(status === "success" ? capText("value", m.value) : capText("error", m.error)),
          // Only a call that ends with its result says what it held back.
          ...rich.dropped(),
        });
      };
      slot.onMessage = (m) => {
        if (finished) return;
        switch (m.type) {
          case "output":
            if (
              m.seq === seq && (m.stream === "stdout" || m.stream === "stderr") &&
              typeof m.text === "string"
            ) output(m.stream, m.text);
            return;
          case "display": {
            if (
              m.seq !== seq || typeof m.mime_type !== "string" || m.mime_type.length > 255 ||
              !MIME.test(m.mime_type) || !(m.data instanceof Uint8Array)
            ) return;
            rich.send("display", m.mime_type, m.data);
            return;
          }
          case "result":
            if (m.seq === seq) result(m);
            return;
          case "exit": {
            if (m.seq !== seq) return;
            const how = typeof m.how === "string" ? m.how.slice(0, 64) : "exit";
            const why = `the call ended its JavaScript worker (${how})`;
            finish(
              m.code === 0 ? { status: "success", ...recycleWhy(why) } : {
                status: "run-error",
                error: `pyrun: ${why}, status ${m.code | 0}`,
                ...recycleWhy(why),
              },
            );
            return;
          }
          case "alive":
            if (probe && m.n === probe) {
              // Parked in an await: the call can be given up without harm.
              slot.worker.postMessage({ type: "abandon", seq });
              finish({
                status: "interrupted",
                error: "Interrupted: the call was stopped while it waited",
              });
            }
            return;
        }
      };
      slot.onFail = (why) =>
        finish({
          status: "run-error",
          error: `pyrun: the JavaScript worker failed: ${why}`,
          ...recycleWhy("the call's JavaScript worker failed"),
        });
      this.interruptCurrent = () => {
        if (this.signals <= mark || probe) return; // a signal meant for an earlier call
        probe = ++this.probes;
        slot.worker.postMessage({ type: "probe", n: probe });
        probeTimer = setTimeout(() =>
          finish({
            status: "interrupted",
            error: "Interrupted: the call was stopped while it ran JavaScript",
            // Neither terminate() nor anything else stops a busy Worker:
            // only the end of the process does.
            recycle: "the call could not be stopped inside its JavaScript worker",
          }), PROBE_MS);
      };
      if (this.cfg.heap_limit > 0) {
        memoryTimer = setInterval(() => {
          if (Deno.memoryUsage().rss > this.cfg.heap_limit) {
            finish({
              status: "memory-error",
              error: `MemoryError: the call used more than ${this.cfg.heap_limit} bytes`,
              recycle: "the call ran out of memory",
            });
          }
        }, MEMORY_POLL_MS);
      }
      if (slot.failed) return slot.onFail(slot.failed);
      slot.worker.postMessage({ type: "run", seq, code, caps, inputs, keep_output: keepOutput });
      // A signal that came before the call began but after its mark.
      if (this.signals > mark) this.interruptCurrent();
    });
  }

  /**
   * After a call's result is written: the next call's Worker starts now
   * (8-40 ms), so that it is ready when the call comes. Not at the call's
   * start, where it would slow the call down.
   */
  prepareNext(): void {
    if (!this.cfg.session && !this.spare) this.spare = new Slot(this.url, this.cfg.mounts);
  }
}

async function main(): Promise<void> {
  const began = performance.now();
  // Only the protocol writer may touch stdout.
  console.log = console.info = console.debug = console.error;
  const cfg = parseEngineConfig(JSON.parse(Deno.args[0] ?? "{}"));
  let host: Host;
  let ts: typeof TS;
  try {
    ts = loadTypeScript();
    const runner = Deno.readTextFileSync(new URL("./runner.ts", import.meta.url));
    host = new Host(ts, runner, cfg);
    await host.start();
  } catch (e) {
    console.error(`pyrun javascript worker: start failed: ${(e as Error)?.stack ?? e}`);
    Deno.exit(70);
  }
  send({
    type: "ready",
    protocol: PROTOCOL_VERSION,
    engine: "javascript",
    versions: { deno: Deno.version.deno, v8: Deno.version.v8, typescript: ts.version },
    startup_ms: Math.round(performance.now() - began),
  });
  await serve({
    check: (req) =>
      req.globals !== undefined || req.tools !== undefined
        ? "bad request: globals and tools are for Python only"
        : "",
    run: (req) => host.run(req),
    settle: () => Promise.resolve(host.prepareNext()),
  }, cfg.max_line);
  Deno.exit(0);
}

if (import.meta.main) main();
