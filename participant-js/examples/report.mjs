#!/usr/bin/env node
// Send one person's report from Node, keeping the device's ledger in a file:
//
//     node examples/report.mjs URL COLLECTION_ID LEDGER RECORD_JSON
//
// Prints one line. Exit 0 when the service accepted the report, 1 when the device or the service
// refused it (already reported, over the budget or the limits, a record the spec does not take),
// 2 for a wrong command line.
import { Client, ParticipantError } from "@ldpnb/participant";
import { fileLedger } from "@ldpnb/participant/node";

const [url, collection, ledger, recordJson, ...rest] = process.argv.slice(2);
if (!recordJson || rest.length) {
  console.error("usage: node examples/report.mjs URL COLLECTION_ID LEDGER RECORD_JSON");
  process.exit(2);
}
let record;
try {
  record = JSON.parse(recordJson);
} catch {
  console.error(`report.mjs: RECORD_JSON is not JSON: ${recordJson}`);
  process.exit(2);
}
try {
  const client = new Client(url, { ledger: fileLedger(ledger) });
  const status = await client.submit(collection, record);
  console.log(`${status}: one report sent to ${collection}`);
} catch (error) {
  if (!(error instanceof ParticipantError || error instanceof RangeError)) throw error;
  console.log(`refused (${error.name}): ${error.message}`);
  process.exit(1);
}
