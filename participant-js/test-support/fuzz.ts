/**
 * Test support: one device per case (a ledger of its own) submits to a hostile service that
 * answers each case as it likes; prints how often each outcome came, and every case that ended in
 * anything but a ParticipantError (which the fuzz test exists to catch).
 *
 *     node dist/test-support/fuzz.js URL LEDGER_DIR CASES_JSON     (CASES_JSON: [[collection id, record], ...])
 */
import { join } from "node:path";

import { Client, ParticipantError } from "../src/index.js";
import { fileLedger } from "../src/node.js";

const [url, dir, casesJson] = process.argv.slice(2);
const counts: Record<string, number> = {};
const crashes: string[] = [];
for (const [i, [collection, record]] of (JSON.parse(casesJson) as [string, Record<string, unknown>][]).entries()) {
  const client = new Client(url, { ledger: fileLedger(join(dir, `ledger${i}.json`)), pace: 0.001, retries: 0 });
  let outcome: string;
  try {
    await client.submit(collection, record);
    outcome = "sent";
  } catch (error) {
    outcome = error instanceof ParticipantError ? error.name : "crash";
    if (outcome === "crash") crashes.push(`${collection}: ${(error as Error).name}: ${(error as Error).message}`);
  }
  counts[outcome] = (counts[outcome] ?? 0) + 1;
}
console.log(JSON.stringify({ counts, crashes }));
