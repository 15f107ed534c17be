// The pipe's lines (PROTOCOL.md, Rules), read and written the same way by
// every engine's worker program: worker.ts (Python), js/main.ts and
// webr/main.ts. It imports nothing, so that no engine loads another's runtime.

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Writes one protocol line; nothing else may write to stdout. */
export function writeLine(line: string): void {
  const bytes = encoder.encode(line + "\n");
  let off = 0;
  while (off < bytes.length) off += Deno.stdout.writeSync(bytes.subarray(off));
}

/** Yields stdin lines; a line longer than max is reported as null and skipped. */
export async function* readLines(
  r: ReadableStream<Uint8Array>,
  max: number,
): AsyncGenerator<string | null> {
  // The start of a line that spans chunks, kept as pieces and joined once.
  let pieces: Uint8Array[] = [];
  let size = 0;
  let skipping = false;
  for await (const chunk of r) {
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
    // The reader may reuse its chunk: keep a copy.
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
