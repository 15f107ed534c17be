// Warming calls: a fresh worker runs its first calls several times slower
// than later ones, because V8 runs Pyodide's WebAssembly on its baseline
// code (Liftoff) until its optimising compiler (TurboFan) has compiled the
// hot functions, which it starts only once they have run enough
// (scripts/bench/README.md, "First calls"). So a worker that is idle before
// its first call spends the wait running calls of its own, whose lines go
// nowhere, up to HostConfig.warm_calls of them, in batches the supervisor
// lets it run (warm requests) while nothing else wants the CPU, until a run
// request comes. A request waits for at most the one warming call running.

/** What warming calls run, in turn: the kinds of work calls do most. */
export const warmCode: readonly string[] = [
  "print(1)",
  "x = 1 + 1\nx",
  [
    "d = {str(i): [i, i * 2.5, None, 's' * (i % 7)] for i in range(8)}",
    "print(len(d), sorted(d)[:2], f'{sum(range(10)) / 3:.2f}')",
  ].join("\n"),
  [
    "def f(n):",
    "    return n if n < 2 else f(n - 1) + f(n - 2)",
    "try:",
    "    raise ValueError(f(5))",
    "except ValueError as e:",
    "    print(repr(e), 'a,b'.split(','))",
  ].join("\n"),
  "1 / 0",
];

/** How long a worker waits for a request before it starts warming calls. */
const idleBeforeWarming = 50;

export interface Warmer {
  /**
   * The next request line, running warming calls while none has come.
   * Only this may read lines between calls, so that no line is lost.
   */
  untilLine(
    lines: AsyncGenerator<string | null>,
  ): Promise<IteratorResult<string | null>>;
  /** The supervisor's go-ahead (a warm request): n more calls when idle. */
  allow(n: number): void;
  /** No more warming calls: the worker has had a call of its own. */
  stop(): void;
}

/**
 * A warmer that runs up to calls warming calls through run, each given as
 * the line of a run request, as the supervisor would send it.
 */
export function warmer(calls: number, run: (line: string) => Promise<void>): Warmer {
  let left = calls;
  let allowed = 0; // of them, those the supervisor has let run so far
  let done = 0;
  return {
    async untilLine(lines) {
      const next = lines.next();
      let wait = idleBeforeWarming;
      while (allowed > 0 && left > 0) {
        let timer: ReturnType<typeof setTimeout> | undefined;
        const idle = new Promise<"idle">((r) => timer = setTimeout(() => r("idle"), wait));
        const first = await Promise.race([next, idle]);
        clearTimeout(timer);
        if (first !== "idle") return first;
        left--;
        allowed--;
        const began = performance.now();
        await run(
          JSON.stringify({ type: "run", id: "warm", code: warmCode[done++ % warmCode.length] }),
        );
        // Rest as long as the call took: warming takes at most about half
        // a core, so that it slows other workers' calls less.
        wait = performance.now() - began;
      }
      return await next;
    },
    allow(n) {
      allowed += Math.max(0, Math.floor(n));
    },
    stop() {
      left = 0;
    },
  };
}
