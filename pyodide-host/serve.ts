// The request loop every engine's worker program runs (docs/protocol.md,
// Requests): it reads stdin's lines, decodes and checks each request,
// answers ping, and hands run and warm requests to its Engine, writing what
// the engine returns. Python (worker.ts), R (webr/main.ts) and JavaScript
// (js/main.ts) each implement Engine. It imports nothing but the protocol
// and the line reader, so that no engine loads another's runtime.

import type { Event, Request, RunRequest } from "./protocol.ts";
import { readLines, writeLine } from "./lines.ts";

/** Writes one event; nothing else may write to stdout. */
export function send(ev: Event): void {
  writeLine(JSON.stringify(ev));
}

/** What a worker program does with the requests the loop hands it. */
export interface Engine {
  /** Why a run request with an id and code is still bad ("bad request: ..."), or "". */
  check?(req: RunRequest): string;
  /**
   * Runs one call; its output and rich results go out as it runs. Returns
   * its result event, or the line of one (Python's helper writes the JSON).
   * A throw is a failure of the host, reported as an error event.
   */
  run(req: RunRequest): Promise<Event | string>;
  /**
   * After a call's result (or error, when answered is false) is out: the
   * clean-up after the call, and the idle event of an engine that settles.
   */
  settle?(req: RunRequest, answered: boolean): Promise<void>;
  /** The supervisor's go-ahead for more warming calls (warm.ts); absent: warm is refused. */
  warm?(calls: number): void;
  /**
   * Takes a checkpoint between calls and sends it (checkpoint.ts): a
   * "checkpoint" event, its bytes after it; absent: checkpoint is refused.
   */
  checkpoint?(id: string, chunks: boolean, since: string): void;
}

/** Where the loop reads its lines, when the engine reads some too. */
export interface Input {
  /** The stdin lines; the engine may read answers from them during a call. */
  lines: AsyncGenerator<string | null>;
  /** How the loop takes the next line (Python's warmer runs calls while it waits). */
  next?(lines: AsyncGenerator<string | null>): Promise<IteratorResult<string | null>>;
}

/** Serves requests until stdin ends. */
export async function serve(
  engine: Engine,
  maxLine: number,
  input: Input = { lines: readLines(Deno.stdin, maxLine) },
): Promise<void> {
  const { lines } = input;
  const next = input.next ?? ((l: AsyncGenerator<string | null>) => l.next());
  for (;;) {
    const n = await next(lines);
    if (n.done) return;
    const line = n.value;
    if (line === null) {
      send({ type: "error", error: `request line longer than ${maxLine} bytes` });
      continue;
    }
    let req: Request;
    try {
      req = JSON.parse(line);
    } catch (e) {
      send({ type: "error", error: `bad request: ${e}` });
      continue;
    }
    // JSON.parse may have returned anything, whatever req's type says.
    const type = (req as { type?: unknown } | null)?.type;
    if (type === "ping") {
      send({ type: "pong", id: String((req as { id?: unknown }).id) });
    } else if (type === "warm" && engine.warm) {
      engine.warm(Number((req as { calls?: unknown }).calls) || 0);
    } else if (type === "checkpoint" && engine.checkpoint) {
      const r = req as { id?: unknown; chunks?: unknown; since?: unknown };
      engine.checkpoint(
        String(r.id),
        r.chunks === true,
        typeof r.since === "string" ? r.since : "",
      );
    } else if (type === "run") {
      await runOne(engine, req as RunRequest);
    } else {
      send({ type: "error", error: `bad request: unknown type ${JSON.stringify(type)}` });
    }
  }
}

async function runOne(engine: Engine, req: RunRequest): Promise<void> {
  if (typeof req.id !== "string" || typeof req.code !== "string") {
    send({ type: "error", id: req.id, error: "bad request: run needs id and code" });
    return;
  }
  const why = engine.check?.(req);
  if (why) {
    send({ type: "error", id: req.id, error: why });
    return;
  }
  let answered = false;
  try {
    const res = await engine.run(req);
    writeLine(typeof res === "string" ? res : JSON.stringify(res));
    answered = true;
  } catch (e) {
    send({ type: "error", id: req.id, error: `host failure: ${errorText(e)}` });
  }
  await engine.settle?.(req, answered);
}

/** An error's message, or what was thrown. */
export function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
