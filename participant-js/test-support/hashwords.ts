/** The test-only random source of `tests/js_vectors.py`, word for word: known answers, never a device's randomness. */
import { createHash } from "node:crypto";

import { type ExactRandomness, randbelowFromWords } from "../src/exact.js";

export class HashWords implements ExactRandomness {
  private counter = 0n;

  constructor(private readonly seed: Uint8Array) {}

  words(count: number): bigint[] {
    const out: bigint[] = [];
    for (let i = 0; i < count; i++) {
      const index = Buffer.alloc(8);
      index.writeBigUInt64LE(this.counter++);
      const digest = createHash("sha256").update(this.seed).update(index).digest();
      out.push(digest.readBigUInt64LE(0));
    }
    return out;
  }

  randbelow(n: bigint): bigint {
    return randbelowFromWords((count) => this.words(count), n);
  }
}
