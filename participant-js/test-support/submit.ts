/**
 * Test support: submit records in turn from one device (a file ledger) and print what became of
 * each, as one JSON list: the service's status, or the name of the ParticipantError.
 *
 *     node dist/test-support/submit.js URL LEDGER OPTIONS_JSON STEPS_JSON
 *
 * OPTIONS_JSON: {maxEpsilon, budget: {total, perDays}, pace, backoff, retries}; STEPS_JSON: [[collection id, record], ...].
 */
import { Client, Limits, ParticipantError } from "../src/index.js";
import { fileLedger } from "../src/node.js";

const [url, ledger, optionsJson, stepsJson] = process.argv.slice(2);
const options = JSON.parse(optionsJson);
const client = new Client(url, {
  ledger: fileLedger(ledger),
  limits: new Limits({ maxEpsilon: options.maxEpsilon, budget: options.budget }),
  pace: options.pace ?? 0.01,
  backoff: options.backoff ?? 0.01,
  retries: options.retries ?? 5,
});
const outcomes: string[] = [];
for (const [collection, record] of JSON.parse(stepsJson)) {
  try {
    outcomes.push(await client.submit(collection, record));
  } catch (error) {
    if (!(error instanceof ParticipantError)) throw error;
    outcomes.push(`${error.name}: ${error.message}`);
  }
}
console.log(JSON.stringify(outcomes));
