/**
 * Test support only (no ledger: an app must not send this way): fetch a collection's published
 * spec, check its fingerprint, draw one report for the record and post it. Prints the service's
 * status and answer as one JSON line.
 *
 *     node dist/test-support/post_once.js URL ID RECORD_JSON
 */
import { CollectionSpec, Participant, packReport } from "../src/index.js";

const [url, id, recordJson] = process.argv.slice(2);
const published = await (await fetch(`${url}/collections/${id}`)).json();
const spec = CollectionSpec.fromDict(published.spec);
const fingerprint = await spec.fingerprint();
if (fingerprint !== published.fingerprint) {
  console.log(JSON.stringify({ refused: `fingerprint ${fingerprint} is not the published ${published.fingerprint}` }));
  process.exit(1);
}
const report = new Participant(spec).report(JSON.parse(recordJson));
const answer = await fetch(`${url}/collections/${id}/reports`, {
  method: "POST",
  headers: { "Content-Type": "application/msgpack" },
  body: Buffer.from(packReport(report, await spec.fingerprintDigest())),
});
console.log(JSON.stringify({ status: answer.status, input: report.input, answer: await answer.json() }));
