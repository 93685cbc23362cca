/**
 * Test support: the anonymous token a Node device obtains for a sealed report, its code spent at
 * the collection's issuer; prints `{"request", "token"}` (hex) as JSON, or the name and message of
 * the ParticipantError.
 *
 *     node dist/test-support/token.js AGGREGATOR_URL SHUFFLER_URL COLLECTION CODE SEALED_HEX
 *
 * The view is the one the shuffler pins; the request is posted as the device posts it (msgpack).
 */
import { decode, encode } from "@msgpack/msgpack";

import { Client, Limits, ParticipantError } from "../src/index.js";
import { fileLedger } from "../src/node.js";
import { finish, tokenRequest } from "../src/tokens.js";

const [url, shuffler, collection, code, sealedHex] = process.argv.slice(2);
const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex");
try {
  const client = new Client(url, { ledger: fileLedger("/dev/null/unused"), shuffler, limits: new Limits({ minBatch: 2, minDummyShare: 0 }) });
  const view = await client.fetchView(collection);
  const sealed = new Uint8Array(Buffer.from(sealedHex, "hex"));
  const { request, inverse } = await tokenRequest(view, sealed);
  const answer = await fetch(`${client.collectionUrl(collection)}/tokens`, {
    method: "POST",
    body: encode({ code, request }),
    headers: { "Content-Type": "application/msgpack", Accept: "application/msgpack" },
  });
  const body = new Uint8Array(await answer.arrayBuffer());
  if (answer.status !== 200) throw new ParticipantError(`the issuer answered ${answer.status}: ${new TextDecoder().decode(body)}`);
  const data = decode(body) as { response: Uint8Array };
  console.log(JSON.stringify({ request: hex(request), token: hex(await finish(view, sealed, data.response, inverse)) }));
} catch (error) {
  if (!(error instanceof ParticipantError)) throw error;
  console.log(JSON.stringify({ error: `${error.name}: ${error.message}` }));
}
