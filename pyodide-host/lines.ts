// The pipe's lines (docs/protocol.md, Rules), read and written the same way by
// every engine's worker program: worker.ts (Python), js/main.ts and
// webr/main.ts. It imports nothing, so that no engine loads another's runtime.

const encoder = new TextEncoder();
const decoder = new TextDecoder();
// How much one read takes: a request line is usually far shorter.
const readSize = 64 * 1024;

/** Writes one protocol line; nothing else may write to stdout. */
export function writeLine(line: string): void {
  const bytes = encoder.encode(line + "\n");
  let off = 0;
  while (off < bytes.length) off += Deno.stdout.writeSync(bytes.subarray(off));
}

/** What readLines reads from: Deno.stdin, or any reader like it. */
export interface Reader {
  read(p: Uint8Array): Promise<number | null>;
}

/**
 * Yields the reader's lines; a line longer than max is reported as null and
 * skipped. It reads with r.read into one buffer rather than through
 * Deno.stdin.readable, whose ReadableStream cost every request a fresh
 * 64 KiB chunk and a chain of promises (about a quarter of a Python worker's CPU
 * per warm call, scripts/bench -only warm).
 */
export async function* readLines(r: Reader, max: number): AsyncGenerator<string | null> {
  // The start of a line that spans chunks, kept as pieces and joined once.
  let pieces: Uint8Array[] = [];
  let size = 0;
  let skipping = false;
  const buf = new Uint8Array(readSize);
  for (;;) {
    const n = await r.read(buf);
    if (n === null) return;
    const chunk = buf.subarray(0, n);
    let start = 0;
    for (let i = chunk.indexOf(10); i >= 0; i = chunk.indexOf(10, start)) {
      const piece = chunk.subarray(start, i);
      start = i + 1;
      if (skipping) {
        skipping = false;
        continue;
      }
      if (size + piece.length > max) {
        pieces = [];
        size = 0;
        yield null;
        continue;
      }
      const line = size ? join([...pieces, piece], size + piece.length) : piece;
      pieces = [];
      size = 0;
      yield decoder.decode(line);
    }
    const rest = chunk.subarray(start);
    if (skipping || !rest.length) continue;
    if (size + rest.length > max) {
      pieces = [];
      size = 0;
      skipping = true;
      yield null;
      continue;
    }
    // The next read reuses the buffer: keep a copy.
    pieces.push(rest.slice());
    size += rest.length;
  }
}

function join(parts: Uint8Array[], size: number): Uint8Array {
  const out = new Uint8Array(size);
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}
