// Increments of a session worker's checkpoints (docs/protocol.md,
// Checkpoints): the worker keeps sums of its heap's chunks as they were at
// its last checkpoint asked with chunks, and the next one asked with since
// naming it sends only the chunks whose sums changed; the supervisor copies
// the others' frames from the record it made of that one. A 50 MB session's
// checkpoint after a small call sent its whole heap, 91 MiB, through the
// pipe and had it XORed and compressed again (issue 37); now it sends a few
// chunks, after summing the heap in wasm at memory speed (10-20 ms for 91
// MiB; plain JavaScript took 40-70).
//
// The sums: each 16 bytes of a chunk go into four 64-bit lanes, the first 8
// into lanes a and b, the next 8 into c and d, each lane acc = rotl((acc ^
// x) * K, r) from a random seed of this process (or, in a restored worker,
// the seed the supervisor summed the restored heap with: adopt). For fixed
// words each step is a bijection of acc (xor, an odd multiplier, a
// rotation), so a chunk
// that differs in one word always has another sum; two chunks whose
// differences cancel must match in both lanes a word goes to, 128 bits
// that depend on the seed, which Python never sees (it is in JavaScript
// and in wasm locals, not in the heap): an accidental match is about 2^-128
// a changed chunk. One made on purpose gains Python nothing: code in the
// worker can write any byte of the heap anyway (ctypes), and what a wrong
// chunk changes is its own worker's restore.

import { CHECKPOINT_CHUNK, type RestoredSums } from "./protocol.ts";

/** What a checkpoint sends of the heap (ChunkSums.increment). */
export interface Increment {
  /** This checkpoint's name, for an increment to it later; "": none can be. */
  token: string;
  /** When set: an increment to the checkpoint so named, which has the chunks kept. */
  since?: string;
  /** The heap's bytes sent: the chunks not kept, views of the heap. */
  parts: Uint8Array[];
  /** The chunks left out, as [first, count] ranges, and their bytes. */
  kept: [number, number][];
  leftOut: number;
}

type SumFn = (p: number, n: number, a: bigint, b: bigint, c: bigint, d: bigint) => bigint[];

/** The sums of a heap's chunks at the last checkpoint, and the means to make them. */
export class ChunkSums {
  #token = "";
  #sums = new BigInt64Array(0); // four a chunk
  #heapLen = 0;
  #seed = crypto.getRandomValues(new BigInt64Array(4));
  #memory?: WebAssembly.Memory;
  #sum?: SumFn;

  /**
   * Takes the sums of a restored checkpoint (made by the supervisor, with
   * its seed) as those of the last checkpoint: the next one asked with
   * since = r.token leaves out the chunks that are still as restored. Sums
   * of another count than the heap's chunks are not taken.
   */
  adopt(r: RestoredSums): void {
    const bin = atob(r.sums);
    const chunks = Math.ceil(r.heap / CHECKPOINT_CHUNK);
    if (r.heap % 16 || bin.length !== 32 * chunks) return;
    const raw = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) raw[i] = bin.charCodeAt(i);
    this.#sums = new BigInt64Array(raw.buffer);
    this.#seed = BigInt64Array.from(r.seed, (s) => BigInt.asIntN(64, BigInt(s)));
    this.#heapLen = r.heap;
    this.#token = r.token;
  }

  /**
   * Sums heap (a view of memory, from its start) by chunks and keeps the
   * sums under a new token. When since is the token of the sums kept
   * before, the chunks whose sums are the same are left out.
   */
  increment(memory: unknown, heap: Uint8Array, since: string): Increment {
    const full = { token: "", parts: [heap], kept: [], leftOut: 0 };
    if (!(memory instanceof WebAssembly.Memory) || heap.byteOffset !== 0 || heap.length % 16) {
      this.#token = "";
      return full;
    }
    if (this.#memory !== memory) {
      this.#sum = sumFunction(memory);
      this.#memory = memory;
    }
    const sum = this.#sum!;
    const C = CHECKPOINT_CHUNK, n = Math.ceil(heap.length / C);
    const sums = new BigInt64Array(4 * n);
    const [s0, s1, s2, s3] = this.#seed;
    for (let i = 0; i < n; i++) {
      sums.set(sum(i * C, Math.min(C, heap.length - i * C), s0, s1, s2, s3), 4 * i);
    }
    const comparable = since !== "" && since === this.#token;
    const old = this.#sums, oldLen = this.#heapLen;
    const chunkLen = (len: number, i: number) => Math.min(C, len - i * C);
    // Chunk i as it was: of the same length, and the same sums.
    const same = (i: number) =>
      comparable && i * C < oldLen && chunkLen(oldLen, i) === chunkLen(heap.length, i) &&
      old[4 * i] === sums[4 * i] && old[4 * i + 1] === sums[4 * i + 1] &&
      old[4 * i + 2] === sums[4 * i + 2] && old[4 * i + 3] === sums[4 * i + 3];
    const inc: Increment = { token: crypto.randomUUID(), parts: [], kept: [], leftOut: 0 };
    for (let i = 0; i < n;) {
      let j = i;
      const keep = same(i);
      while (j < n && same(j) === keep) j++;
      const from = i * C, to = Math.min(j * C, heap.length);
      if (keep) {
        inc.kept.push([i, j - i]);
        inc.leftOut += to - from;
      } else {
        inc.parts.push(heap.subarray(from, to));
      }
      i = j;
    }
    this.#token = inc.token;
    this.#sums = sums;
    this.#heapLen = heap.length;
    if (inc.kept.length) inc.since = since;
    else inc.parts = [heap];
    return inc;
  }
}

/**
 * The sum of n bytes (a multiple of 16) at p in memory, in wasm, as its
 * four lanes. The module is assembled here (some 120 bytes): it imports
 * memory, so that it reads the heap where it is.
 */
function sumFunction(memory: WebAssembly.Memory): SumFn {
  const K = [0x9e3779b97f4a7c15n, 0xc2b2ae3d27d4eb4fn, 0x165667b19e3779f9n, 0xd6e8feb86659fd93n];
  const ROT = [31, 27, 33, 29];
  // Locals: 0 p, 1 n, 2-5 the lanes (i64), 6 end (i32), 7 x (i64).
  const get = (i: number) => [0x20, i], set = (i: number) => [0x21, i];
  const lane = (acc: number, k: bigint, r: number) => [
    ...get(acc),
    ...get(7),
    0x85, // i64.xor
    0x42,
    ...sleb(BigInt.asIntN(64, k)),
    0x7e, // i64.const k, i64.mul
    0x42,
    r,
    0x89, // i64.const r, i64.rotl
    ...set(acc),
  ];
  const load = (offset: number) => [...get(0), 0x29, 3, offset, ...set(7)]; // i64.load
  const body = [
    2,
    1,
    0x7f,
    1,
    0x7e, // locals: one i32, one i64
    ...get(0),
    ...get(1),
    0x6a,
    ...set(6), // end = p + n
    0x02,
    0x40,
    0x03,
    0x40, // block, loop
    ...get(0),
    ...get(6),
    0x4f,
    0x0d,
    1, // br_if p >= end (to the block's end)
    ...load(0),
    ...lane(2, K[0], ROT[0]),
    ...lane(3, K[1], ROT[1]),
    ...load(8),
    ...lane(4, K[2], ROT[2]),
    ...lane(5, K[3], ROT[3]),
    ...get(0),
    0x41,
    16,
    0x6a,
    ...set(0), // p += 16
    0x0c,
    0,
    0x0b,
    0x0b, // br to the loop; end, end
    ...get(2),
    ...get(3),
    ...get(4),
    ...get(5),
    0x0b,
  ];
  const str = (s: string) => [s.length, ...new TextEncoder().encode(s)];
  const section = (id: number, b: number[]) => [id, ...uleb(b.length), ...b];
  const bytes = new Uint8Array([
    0,
    0x61,
    0x73,
    0x6d,
    1,
    0,
    0,
    0, // "\0asm", version 1
    // (i32, i32, i64 x 4) -> (i64 x 4)
    ...section(1, [1, 0x60, 6, 0x7f, 0x7f, 0x7e, 0x7e, 0x7e, 0x7e, 4, 0x7e, 0x7e, 0x7e, 0x7e]),
    ...section(2, [1, ...str("m"), ...str("memory"), 2, 0, 0]), // import m.memory, min 0
    ...section(3, [1, 0]),
    ...section(7, [1, ...str("sum"), 0, 0]), // export function 0 as "sum"
    ...section(10, [1, ...uleb(body.length), ...body]),
  ]);
  const inst = new WebAssembly.Instance(new WebAssembly.Module(bytes), { m: { memory } });
  return inst.exports.sum as unknown as SumFn;
}

function uleb(n: number): number[] {
  const out: number[] = [];
  do {
    let b = n & 0x7f;
    n >>>= 7;
    if (n) b |= 0x80;
    out.push(b);
  } while (n);
  return out;
}

function sleb(v: bigint): number[] {
  const out: number[] = [];
  for (;;) {
    const b = Number(v & 0x7fn);
    v >>= 7n;
    if ((v === 0n && !(b & 0x40)) || (v === -1n && (b & 0x40))) {
      out.push(b);
      return out;
    }
    out.push(b | 0x80);
  }
}
