/**
 * Test support: the seconds one submit's ledger work takes (claim a fresh report of 8 KiB, mark
 * it sent) on each ledger file given, as one JSON list.
 *
 *     node dist/test-support/ledger_time.js FILE...
 */
import { Limits } from "../src/index.js";
import { fileLedger } from "../src/node.js";

const timings: number[] = [];
for (const [i, path] of process.argv.slice(2).entries()) {
  const ledger = fileLedger(path);
  const asked = {
    origin: "http://x.example", collection: `today${i}`, uid: "t".repeat(32), fingerprint: "f".repeat(64),
    epsilon: 0.25, question: "t".repeat(64), group: null,
  };
  const start = performance.now();
  const claim = await ledger.claim(asked, new Limits(), () => globalThis.crypto.getRandomValues(new Uint8Array(8192)), (old) => old);
  await ledger.markSent(claim.key);
  timings.push((performance.now() - start) / 1000);
}
console.log(JSON.stringify(timings));
