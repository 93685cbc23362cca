/**
 * Test support: read ledger files as a device would (claim a report, mark it sent) and print what
 * became of each, as one JSON list: "ok", the name of the ParticipantError, or "crash: ..." for
 * any other exception (which the tests exist to catch).
 *
 *     node dist/test-support/ledger_read.js FILE...
 */
import { Limits, ParticipantError } from "../src/index.js";
import { fileLedger } from "../src/node.js";

const limits = new Limits({ maxEpsilon: 2, budget: { total: 1e6, perDays: 30 }, maxCollections: 1e6 });
const asked = {
  origin: "http://device.example", collection: "fuzz", uid: "u".repeat(32), fingerprint: "f".repeat(64),
  epsilon: 1, question: "q".repeat(64), group: null,
};
const outcomes: string[] = [];
for (const path of process.argv.slice(2)) {
  try {
    const ledger = fileLedger(path);
    await ledger.entries();
    const claim = await ledger.claim(asked, limits, () => new Uint8Array([1, 2, 3]), (old) => old);
    await ledger.markSent(claim.key);
    outcomes.push("ok");
  } catch (error) {
    outcomes.push(error instanceof ParticipantError ? error.name : `crash: ${(error as Error).name}: ${(error as Error).message}`);
  }
}
console.log(JSON.stringify(outcomes));
