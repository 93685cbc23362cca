/**
 * Test support: submit records in turn and print what became of each, as one JSON list: the
 * service's status, or the name and message of the ParticipantError.
 *
 *     node dist/test-support/submit.js URL LEDGER OPTIONS_JSON STEPS_JSON
 *
 * OPTIONS_JSON: {maxEpsilon, budget: {total, perDays}, minBatch, minDummyShare, limits: {other
 * Limits options}, pace, backoff, retries, expected, shuffler, direct}. STEPS_JSON: [[collection id, record, ledger?, seed?, group?, token?], ...]
 * (token: the enrollment token, or for a shuffled collection taking reports only from enrolled people the person's code).
 * A step naming a ledger is a device of its own (that ledger file); the others share LEDGER. A
 * step naming a seed draws from the test-only words of that seed (HashWords), so that devices
 * given one seed draw alike.
 */
import { Client, Limits, ParticipantError } from "../src/index.js";
import { fileLedger } from "../src/node.js";
import { HashWords } from "./hashwords.js";

const [url, ledger, optionsJson, stepsJson] = process.argv.slice(2);
const options = JSON.parse(optionsJson);
const device = (path: string, seed?: string | null) =>
  new Client(url, {
    source: seed ? new HashWords(new TextEncoder().encode(seed)) : undefined,
    ledger: fileLedger(path),
    limits: new Limits({
      maxEpsilon: options.maxEpsilon, budget: options.budget, minBatch: options.minBatch, minDummyShare: options.minDummyShare, ...options.limits,
    }),
    pace: options.pace ?? 0.01,
    backoff: options.backoff ?? 0.01,
    retries: options.retries ?? 5,
    shuffler: options.shuffler ?? undefined,
    direct: options.direct ?? undefined,
  });
const shared = device(ledger);
const outcomes: string[] = [];
for (const [collection, record, own, seed, group, token] of JSON.parse(stepsJson)) {
  try {
    const client = own ? device(own, seed) : shared;
    outcomes.push(await client.submit(collection, record, { expected: options.expected, group: group ?? undefined, token: token ?? undefined }));
  } catch (error) {
    if (!(error instanceof ParticipantError)) throw error;
    outcomes.push(`${error.name}: ${error.message}`);
  }
}
console.log(JSON.stringify(outcomes));
