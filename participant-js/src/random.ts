/**
 * The device's randomness: the platform's CSPRNG (`crypto.getRandomValues`, in browsers and in
 * Node ≥ 20). Never `Math.random`: a report must not be predictable from earlier ones or a seed.
 */
import { type ExactRandomness, randbelowFromWords } from "./exact.js";

/** Uniform 64-bit words and exact integers from `crypto.getRandomValues`. */
export class SecureRandom implements ExactRandomness {
  words(count: number): bigint[] {
    const out = new BigUint64Array(count);
    // getRandomValues fills at most 65,536 bytes a call.
    for (let start = 0; start < count; start += 8192) {
      globalThis.crypto.getRandomValues(out.subarray(start, Math.min(count, start + 8192)));
    }
    return Array.from(out);
  }

  randbelow(n: bigint): bigint {
    return randbelowFromWords((count) => this.words(count), n);
  }
}
