// pyrun's R worker: R (webR, R compiled to WebAssembly) behind the same
// pipe protocol as the Python worker (docs/protocol.md, "Engines: R"). The
// supervisor starts it with one argument, the JSON HostConfig.
//
// webR runs R on a thread of its own (node:worker_threads) and talks to it
// over a SharedArrayBuffer channel, so this main thread stays free: it owns
// the pipes, and SIGUSR2 from the supervisor becomes webR.interrupt(). R's
// side of the work (running a call, its value, plots, the reset after a
// stateless call) is pyrun.R.

import { type REnvironment, type RObject, type Shelter, WebR } from "webr";
import {
  type EngineConfig as RConfig,
  parseEngineConfig,
  PROTOCOL_VERSION,
  type Result,
  type RunRequest,
} from "../protocol.ts";
import { errorText, send, serve } from "../serve.ts";
import { capsOf, durationMs, RichCap, StreamCap } from "../events.ts";
import { guardRThread, mountHostFolders, setUpRThread } from "./thread.ts";
import { clearFolder } from "../guards.ts";
import { checkNamespaces } from "../sessions.ts";
import { toJSON, toPlain } from "./value.ts";

/** R's home and working directory inside webR's file system. */
const HOME = "/home/web_user";
/**
 * The folders a session of a shared session worker keeps, by where a call
 * sees them, and their names in its store folder (sessions.ts).
 */
const SESSION_FOLDERS: [string, string][] = [[HOME, "home"], ["/output", "output"], [
  "/tmp",
  "tmp",
]];
/** pyrun.R's folder for the plots of the default device. */
const PLOT_DIR = "/pyrun/plots";
/** How long a call's end waits for the marker line after its output (RWorker.run). */
const MARKER_WAIT_MS = 1000;
/** How long R may take to start before the worker gives up (status 70). */
const START_TIMEOUT_MS = 120_000;

async function start(cfg: RConfig): Promise<void> {
  const began = performance.now();
  const dist = new URL("../node_modules/webr/dist/", import.meta.url).pathname;
  const webR = new WebR({
    baseUrl: dist,
    homedir: HOME,
    // An interrupt at top level of a non-interactive R quits R, and R's
    // exit then tries to run `rm -Rf` on its temporary folder (docs/architecture.md, Facts).
    interactive: true,
    // Never webR's default, the repository on the network: nothing is
    // fetched, and webr::install is refused in pyrun.R.
    repoUrl: "file:///nonexistent/",
    // Emscripten makes LANG from navigator.language, which in a process
    // with no LANG (the supervisor passes none) is "en-US-u-va-posix":
    // "en_US-u-va-posix.UTF-8", which Fontconfig warns of on stderr at a
    // call's first text in a plot. The same locale, spelt as one.
    REnv: { LANG: "en_US.UTF-8" },
  });
  let timer: ReturnType<typeof setTimeout> | undefined;
  await Promise.race([
    webR.init(),
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error("R did not start in time")), START_TIMEOUT_MS);
    }),
  ]);
  clearTimeout(timer);
  await setUpRThread(webR, cfg.heap_limit);
  await mountHostFolders(webR, cfg.mounts);
  await guardRThread(
    webR,
    HOME,
    ["/output", PLOT_DIR],
    cfg.mounts,
    cfg.session ? SESSION_FOLDERS : null,
  );
  // pyrun.R empties folders with clearFolder, in R's thread: Emscripten's
  // readdir gives whole names, where R's list.files gets them cut at 255
  // bytes. It goes into the source, as pyrun.R locks its environment.
  const source = (await Deno.readTextFile(new URL("./pyrun.R", import.meta.url)))
    .replace(`"<<pyrun:clearFolder>>"`, () => JSON.stringify(`(${clearFolder.toString()})`));
  const helper = await webR.evalR(source) as REnvironment;
  const shelter = await new webR.Shelter();
  const worker = new RWorker(webR, shelter, helper, cfg);
  worker.readConsole();

  // [0]: interrupt signals so far; [1]: signals sent before the running
  // call began (the run's `interrupts`); a signal not above it is stale.
  let signals = 0;
  Deno.addSignalListener("SIGUSR2", () => {
    signals++;
    // Once per call: webR queues each interrupt and delivers it at one of
    // R's later checks, so the supervisor's repeats would pile up behind a
    // slow first one and end the clean-up after the call.
    if (worker.running && signals > worker.mark && !worker.interrupted) {
      worker.interrupted = true;
      webR.interrupt();
    }
  });

  send({
    type: "ready",
    protocol: PROTOCOL_VERSION,
    engine: "r",
    versions: { r: webR.versionR, webr: webR.version },
    startup_ms: Math.round(performance.now() - began),
    settles: true,
  });

  await serve({
    check: (req) =>
      worker.lost
        ? `bad request: this worker must be replaced: ${worker.lost}`
        : req.namespace !== undefined && (!cfg.session || typeof req.namespace !== "string")
        ? "bad request: namespace needs a session worker"
        : "",
    async run(req) {
      if (req.namespace !== undefined) {
        const drop = Array.isArray(req.drop) ? req.drop.map(String) : [];
        checkNamespaces(req.namespace, drop);
        try {
          await worker.enter(req.namespace, drop);
        } catch (e) {
          // Half switched, no session's state can be trusted: the worker ends.
          console.error(`pyrun R worker: switching sessions failed: ${errorText(e)}`);
          Deno.exit(70);
        }
      }
      return worker.run(req);
    },
    async settle(req, answered) {
      let why = "";
      try {
        why = await worker.cleanUp(req);
      } catch (e) {
        // A worker that cannot reset R must not take another call.
        console.error(`pyrun R worker: clean-up failed: ${errorText(e)}`);
        Deno.exit(70);
      }
      // The reset after the call is done: the supervisor may send the
      // next request (docs/protocol.md, Idle), unless R could not be set back.
      if (answered) send({ type: "idle", id: req.id, ...(why ? { recycle: why } : {}) });
    },
  }, cfg.max_line);
  Deno.exit(0);
}

/** One R process's calls, one at a time. */
class RWorker {
  /** Whether a call's code runs now (interrupts apply only then). */
  running = false;
  /** Whether the running call was sent its interrupt (one per call). */
  interrupted = false;
  /** The run's `interrupts`: signals up to this number were for earlier calls. */
  mark = 0;
  /**
   * Why R can take no other call, once a call left it so short of memory
   * that it could not report the error (RWorker.unreported); "" while it can.
   */
  lost = "";
  /** Where R's console lines go: the running call's output; null: nowhere. */
  private out: OutputCap | null = null;
  /**
   * The line pyrun.R's run() writes after all of a call's own (its
   * flush_console): random, so that no output of the call is taken for it.
   */
  private marker = `pyrun-end-${crypto.randomUUID()}`;
  /** Resolves the running call's wait for its marker line. */
  private ended: (() => void) | null = null;
  /**
   * The last error R printed to the running call's stderr itself ("Error:
   * ..." and its indented lines): R's own top level, or webR's handler,
   * writes it for an error that no handler of pyrun.R's could report.
   */
  private printed = "";

  constructor(
    private webR: WebR,
    private shelter: Shelter,
    private helper: REnvironment,
    private cfg: RConfig,
  ) {}

  /**
   * Hands R's console lines to the running call as they come. webR's
   * worker thread posts each line R writes to stdout or stderr (print,
   * cat, message, pyrun.R's warnings) as a message when its newline is
   * written, in the order written across both streams; run() evaluates the
   * call with captureStreams off, so that they come while it runs rather
   * than all at its end. Lines while no call runs (R's banner, pyrun's own
   * evaluations) are dropped. It runs as long as the worker does.
   */
  async readConsole(): Promise<void> {
    for (;;) {
      const msg = await this.webR.read();
      if (msg.type === "closed") return;
      if (msg.type === "stdout" && String(msg.data) === this.marker) {
        this.ended?.();
        continue;
      }
      if (this.out && (msg.type === "stdout" || msg.type === "stderr")) {
        const line = String(msg.data);
        if (msg.type === "stderr" && line.startsWith("Error")) this.printed = line;
        else if (msg.type === "stderr" && this.printed && /^\s/.test(line)) {
          this.printed += "\n" + line;
        }
        this.out.write(msg.type, line + "\n");
      }
    }
  }

  /**
   * Makes ns the session namespace of the next call, and forgets those of
   * drop (pyrun.R's enter(): its environment, files, random state, options).
   */
  async enter(ns: string, drop: string[]): Promise<void> {
    await this.strings(`enter(${rString(ns)}, c(${drop.map(rString).join(",")}))`);
  }

  /** Evaluates R code in pyrun.R's environment for its character vector. */
  private strings(code: string): Promise<string[]> {
    return pastInterrupt(() => this.webR.evalRRaw(code, "string[]", { env: this.helper }));
  }

  async run(req: RunRequest): Promise<Result> {
    const began = performance.now();
    const id = req.id;
    const caps = capsOf(req);
    const out = new OutputCap(id, caps.max_output);
    const rich = new RichCap(id, caps);
    const keep = req.keep_output === true;
    const files: { path: string; data: Uint8Array }[] = [];
    for (const f of req.input_files ?? []) {
      const path = typeof f?.path === "string" ? f.path : "";
      if (!path || path.startsWith("/") || path.split("/").includes("..")) {
        const error = `Error: input file path ${JSON.stringify(path)} must be relative, without ..`;
        return { type: "result", id, status: "run-error", error, duration_ms: durationMs(began) };
      }
      // R's file system refuses such a name (guards.ts): a clear error
      // rather than a failure of the worker.
      if (path.split("/").some((p) => new TextEncoder().encode(p).length > 255)) {
        const error = `Error: a name in input file path ${JSON.stringify(path)} is over 255 bytes`;
        return { type: "result", id, status: "run-error", error, duration_ms: durationMs(began) };
      }
      files.push({ path: `${HOME}/${path}`, data: decodeBase64(String(f.data ?? "")) });
    }
    const parents = files.map((f) => rString(f.path.slice(0, f.path.lastIndexOf("/"))));
    // A stateless worker's /output/ is empty: the previous call's clean-up
    // (or the start) left it so. Only a kept one needs its stamps.
    const before = keep || parents.length
      ? stamps(await this.strings(`before(${keep ? "TRUE" : "FALSE"}, c(${parents.join(",")}))`))
      : new Map<string, string>();
    for (const f of files) {
      try {
        await this.webR.FS.writeFile(f.path, f.data);
      } catch (e) {
        // A path whose folder is a file, say: the call's error, not the worker's.
        const where = JSON.stringify(f.path.slice(HOME.length + 1));
        const error = `Error: input file ${where} could not be written: ${
          e instanceof Error ? e.message : e
        }`;
        return { type: "result", id, status: "run-error", error, duration_ms: durationMs(began) };
      }
    }
    await pastInterrupt(() => this.helper.bind("code", req.code));
    this.mark = req.interrupts ?? 0;
    this.interrupted = false;
    this.running = true;
    this.printed = "";
    this.out = out;
    const ended = new Promise<void>((resolve) => this.ended = resolve);
    let captured;
    let thrown = "";
    try {
      captured = await this.shelter.captureR(`run(code, ${rString(this.marker)})`, {
        env: this.helper,
        captureStreams: false,
        captureConditions: false,
        captureGraphics: false,
        withAutoprint: false,
        throwJsException: false,
      });
    } catch (e) {
      // An interrupt that lands in webR's own code around run()'s
      // handlers comes out as a JavaScript error; its output was sent.
      if (this.interrupted && interrupted(e)) {
        return {
          type: "result",
          id,
          status: "interrupted",
          error: "interrupted",
          duration_ms: durationMs(began),
        };
      }
      // So does R's jump to its top level with no interrupt: an error no
      // handler could take (R's "memory exhausted"), invokeRestart("abort").
      thrown = errorText(e);
    } finally {
      this.running = false;
      // webR's answer can overtake the call's last console lines (seen
      // under load): they are all in once the marker line run() wrote
      // after them is. A call whose run() did not end (an interrupt in
      // webR's own code) has none: a second is all it waits then.
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([
        ended,
        new Promise<void>((resolve) => timer = setTimeout(resolve, MARKER_WAIT_MS)),
      ]);
      clearTimeout(timer);
      this.ended = null;
      this.out = null;
      out.flush();
    }
    let res: RunList | null = null;
    try {
      if (captured) res = runList(toPlain(await (captured.result as RObject).toJs()));
    } catch (e) {
      thrown = errorText(e); // webR could not convert it
    }
    const ev = res ? await this.reported(id, res, rich, before) : this.unreported(id, thrown);
    return { ...ev, ...out.dropped(), ...rich.dropped(), duration_ms: durationMs(began) };
  }

  /** The result of a call whose run() returned its list: res. */
  private async reported(
    id: string,
    res: RunList,
    rich: RichCap,
    before: Map<string, string>,
  ): Promise<Result> {
    await this.sendRich(rich, before, toStrings(res.rich));
    const ev: Result = { type: "result", id, status: res.status, duration_ms: 0 };
    if (res.has_value === true) ev.value = toJSON(res.value);
    if (typeof res.error === "string" && ev.status !== "success") ev.error = res.error;
    if (OUT_OF_MEMORY.test(String(res.error ?? ""))) {
      ev.status = "memory-error";
      ev.recycle = "the call ran out of memory";
    }
    return ev;
  }

  /**
   * The result of a call whose run() returned no list of its own: an
   * error got past its handlers, and R printed it itself (printed). webR's
   * handler around run() took it (captureR's result is then NULL), or
   * nothing did and R jumped to its top level (captureR throws, thrown).
   * Either way R unwound the call. Past its memory, R could not even
   * allocate the error's text in run()'s handler: what the call holds
   * stays (a session's values; a stateless call's until the clean-up,
   * which would need memory too), so the worker skips the clean-up and
   * takes no other call. Otherwise (invokeRestart("abort"), say) the
   * clean-up sets R back as after any call.
   */
  private unreported(id: string, thrown: string): Result {
    const said = this.printed.replace(/^Error:\s*/, "");
    if (OUT_OF_MEMORY.test(said) || OUT_OF_MEMORY.test(thrown)) {
      this.lost = "the call ran out of memory";
      return {
        type: "result",
        id,
        status: "memory-error",
        error: `Error: R ran out of memory (${said || thrown})`,
        recycle: this.lost,
        duration_ms: 0,
      };
    }
    const error = this.printed ||
      `Error: the call ended outside pyrun's handlers, without a result (${thrown || "no error"})`;
    return { type: "result", id, status: "run-error", error, duration_ms: 0 };
  }

  /**
   * Ends a call, after its result is sent (the next request waits for it
   * all the same): pyrun's plot files go, and after a stateless call
   * everything it left (pyrun.R's cleanup), /output/ unless kept. Returns
   * "" or why R could not be set back (the worker is then replaced). A
   * lost worker's R is not touched: the worker is replaced anyway.
   */
  async cleanUp(req: RunRequest): Promise<string> {
    if (this.lost) return this.lost;
    const why = await this.reset(req);
    return why ? `the call changed R in a way pyrun cannot undo: ${why}` : "";
  }

  /** pyrun.R's cleanup(): "" or why R could not be set back. */
  private async reset(req: RunRequest): Promise<string> {
    const keep = req.keep_output === true;
    const code = `cleanup(${keep ? "TRUE" : "FALSE"}, ${this.cfg.session ? "TRUE" : "FALSE"})`;
    try {
      // An interrupt still pending from the call ends the first try.
      return await pastInterrupt(() =>
        this.webR.evalRRaw(`tryCatch(${code}, interrupt = function(i) ${code})`, "string", {
          env: this.helper,
        })
      );
    } finally {
      await this.shelter.purge();
    }
  }

  /**
   * Sends the plots of after()'s list as displays, then the files under
   * /output/ that are new or changed since before(), in path order. A page
   * a device wrote to a file under /output/ is that file: it goes once, as
   * the file (even unchanged since before(): it was drawn again), not also
   * as a display, which showed one plot as two images.
   */
  private async sendRich(rich: RichCap, before: Map<string, string>, list: string[]) {
    // A count past the list's pairs would read pages that are not there.
    const n = Math.max(0, Math.min(Number(list[0]) || 0, Math.floor((list.length - 1) / 2)));
    const after = [...stamps(list.slice(1 + 2 * n))];
    const listed = new Set(after.map(([path]) => path));
    const drawn = new Set<string>();
    for (let i = 1; i < 1 + 2 * n; i += 2) {
      const page = list[i + 1];
      const file = page.startsWith("/output/") ? page.slice("/output/".length) : "";
      if (listed.has(file)) {
        drawn.add(file);
        continue;
      }
      const data = await this.readFile(page);
      if (data) rich.send("display", list[i], data);
    }
    after.sort(([a], [b]) => a < b ? -1 : a > b ? 1 : 0);
    for (const [path, stamp] of after) {
      if (before.get(path) === stamp && !drawn.has(path)) continue;
      const data = await this.readFile(`/output/${path}`);
      if (data) rich.send("file", mimeType(path), data, path);
    }
  }

  /**
   * A file's bytes; null for one that cannot be read (removed since it was
   * listed, or a name R's listing cut short): it is skipped, as a file
   * that is not there, never the end of the call.
   */
  private async readFile(path: string): Promise<Uint8Array | null> {
    try {
      return await this.webR.FS.readFile(path);
    } catch {
      return null;
    }
  }
}

/**
 * Runs an evaluation of pyrun's own again when an interrupt meant for the
 * call before ended it: the supervisor repeats SIGUSR2 until a call's
 * result arrives, so one can land as the call ends and stay pending in
 * webR until R next checks for interrupts. webR reports that as "a
 * non-local transfer of control"; the next try finds it consumed.
 */
async function pastInterrupt<T>(f: () => Promise<T>): Promise<T> {
  for (let i = 0;; i++) {
    try {
      return await f();
    } catch (e) {
      if (i >= 2 || !interrupted(e)) throw e;
    }
  }
}

/** Whether webR's error is an R interrupt's. */
function interrupted(e: unknown): boolean {
  return /non-local transfer|interrupt/i.test(String(e));
}

/** R's messages of a call that ran out of memory. */
const OUT_OF_MEMORY = /cannot allocate|could not allocate|memory exhausted|memory limit/;

/** What pyrun.R's run() returns, as far as main.ts relies on it. */
type RunList = Record<string, unknown> & { status: "success" | "run-error" | "interrupted" };

/**
 * run()'s list, from captureR's result as plain values; null for anything
 * else: webR's NULL when an error got past run()'s handlers.
 */
function runList(v: unknown): RunList | null {
  if (v === null || typeof v !== "object" || Array.isArray(v)) return null;
  const status = (v as Record<string, unknown>).status;
  return status === "success" || status === "run-error" || status === "interrupted"
    ? v as RunList
    : null;
}

/** A character vector of toPlain's: one string is a scalar. */
function toStrings(v: unknown): string[] {
  if (v === null || v === undefined) return [];
  return (Array.isArray(v) ? v : [v]).map(String);
}

/** path -> stamp, from before()'s flat list. */
function stamps(flat: string[]): Map<string, string> {
  const m = new Map<string, string>();
  for (let i = 0; i + 1 < flat.length; i += 2) m.set(flat[i], flat[i + 1]);
  return m;
}

/**
 * Resolves after one turn of the event loop, once every microtask queued
 * before it has run: a message on a channel of its own (~50 us), since a
 * setTimeout takes a millisecond or more (2 ms in a loop, measured), which
 * every call would pay. The channel is closed at once: an open one would
 * keep the event loop alive, and a worker whose R thread has ended (code
 * that calls Deno.exit there) must end too rather than hang.
 */
function nextTurn(): Promise<void> {
  return new Promise((resolve) => {
    const { port1, port2 } = new MessageChannel();
    port1.onmessage = () => {
      port1.close();
      port2.close();
      resolve();
    };
    port2.postMessage(0);
  });
}

/**
 * Caps a call's stdout and stderr, each to max characters (docs/protocol.md),
 * and sends them: the lines that come in one turn of the event loop go
 * together, at its end, as one event per run of one stream.
 */
class OutputCap {
  private cap: StreamCap;
  private pending: { stream: "stdout" | "stderr"; text: string } | null = null;
  private scheduled = false;

  constructor(private id: string, max: number) {
    this.cap = new StreamCap(max);
  }

  write(stream: "stdout" | "stderr", text: string): void {
    const piece = this.cap.take(stream, text);
    if (!piece) return;
    // Consecutive lines of one stream travel as one event.
    if (this.pending && this.pending.stream === stream && this.pending.text.length < 8192) {
      this.pending.text += piece;
      return;
    }
    this.flush();
    this.pending = { stream, text: piece };
    if (this.scheduled) return;
    this.scheduled = true;
    nextTurn().then(() => {
      this.scheduled = false;
      this.flush();
    });
  }

  flush(): void {
    if (!this.pending) return;
    send({ type: "output", id: this.id, stream: this.pending.stream, text: this.pending.text });
    this.pending = null;
  }

  dropped(): Pick<Result, "dropped"> {
    return this.cap.dropped();
  }
}

/** An R string literal for s. */
function rString(s: string): string {
  return JSON.stringify(s);
}

const MIME: Record<string, string> = {
  png: "image/png",
  jpg: "image/jpeg",
  jpeg: "image/jpeg",
  gif: "image/gif",
  svg: "image/svg+xml",
  pdf: "application/pdf",
  csv: "text/csv",
  tsv: "text/tab-separated-values",
  txt: "text/plain",
  json: "application/json",
  html: "text/html",
  md: "text/markdown",
  rds: "application/octet-stream",
};

function mimeType(path: string): string {
  const ext = path.slice(path.lastIndexOf(".") + 1).toLowerCase();
  return MIME[ext] ?? "application/octet-stream";
}

function decodeBase64(s: string): Uint8Array {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

function main(): void {
  // Only the protocol writer may touch stdout; webR logs with console.*.
  console.log =
    console.info =
    console.debug =
    console.warn =
      console.error;
  const cfg = parseEngineConfig(JSON.parse(Deno.args[0] ?? "{}"));
  start(cfg).catch((err) => {
    console.error(`pyrun R worker: ${err?.stack ?? err}`);
    Deno.exit(70);
  });
}

if (import.meta.main) main();
