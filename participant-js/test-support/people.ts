/**
 * Test support: several devices (a ledger each), each submitting its steps in turn, possibly to
 * several spellings of one address; prints each person's outcomes (the service's status, or the
 * name of the ParticipantError) as one JSON list of lists.
 *
 *     node dist/test-support/people.js OPTIONS_JSON PEOPLE_JSON
 *
 * PEOPLE_JSON: [{ledger, steps: [[url, collection id, record], ...]}, ...], run 25 at a time.
 */
import { Client, Limits, ParticipantError } from "../src/index.js";
import { fileLedger } from "../src/node.js";

const [optionsJson, peopleJson] = process.argv.slice(2);
const options = JSON.parse(optionsJson);
const people: { ledger: string; steps: [string, string, Record<string, unknown>][] }[] = JSON.parse(peopleJson);

async function person(p: (typeof people)[number]): Promise<string[]> {
  const ledger = fileLedger(p.ledger);
  const outcomes: string[] = [];
  for (const [url, collection, record] of p.steps) {
    try {
      const client = new Client(url, {
        ledger,
        limits: new Limits({ maxEpsilon: options.maxEpsilon, budget: options.budget }),
        pace: options.pace ?? 0.001,
        retries: options.retries ?? 0,
      });
      outcomes.push(await client.submit(collection, record));
    } catch (error) {
      if (!(error instanceof ParticipantError)) throw error;
      outcomes.push(`${error.name}: ${error.message}`);
    }
  }
  return outcomes;
}

const results: string[][] = [];
for (let start = 0; start < people.length; start += 25) {
  results.push(...(await Promise.all(people.slice(start, start + 25).map(person))));
}
console.log(JSON.stringify(results));
