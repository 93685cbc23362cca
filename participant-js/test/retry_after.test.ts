/**
 * The JavaScript participant waits what a 429 or 503 answer's `Retry-After` asks, within the app's
 * bounds (`maxRetryAfter`, `retryDeadline`), re-sending the same bytes; when its attempts end, the
 * error names the party that refused and the option its operator raises, as the Python client
 * (`tests/test_retry_after.py`). Against a real HTTP server on 127.0.0.1; times are lower bounds
 * only (a busy machine stretches them).
 */
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { type AddressInfo } from "node:net";
import { test } from "node:test";

import { encode } from "@msgpack/msgpack";

import { Client, SubmissionFailed } from "../src/index.js";
import { Ledger } from "../src/ledger.js";
import { JITTER, retryAfter, waitBefore } from "../src/retrying.js";

const memory = () =>
  new Ledger({
    async update(change) {
      return change({ version: 2, entries: {}, spent: {} }).result;
    },
  });

interface Seen {
  at: number;
  body: Buffer;
}

/** A server answering each request from `script` (status, headers, JSON body), then 201 accepted; records arrivals. */
async function answering(script: [number, Record<string, string>, object?][]): Promise<{ url: string; seen: Seen[]; close: () => Promise<void> }> {
  const seen: Seen[] = [];
  const server = createServer((request: IncomingMessage, response: ServerResponse) => {
    const chunks: Buffer[] = [];
    request.on("data", (chunk: Buffer) => chunks.push(chunk));
    request.on("end", () => {
      seen.push({ at: performance.now() / 1000, body: Buffer.concat(chunks) });
      const next = script.shift();
      if (next === undefined) {
        response.writeHead(201, { "Content-Type": "application/msgpack" }).end(encode({ status: "accepted" }));
        return;
      }
      const [status, headers, body] = next;
      response.writeHead(status, { "Content-Type": "application/json", ...headers }).end(JSON.stringify(body ?? { error: "slow down", status }));
    });
  });
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, seen, close: () => new Promise((done) => server.close(() => done())) };
}

const REPORT = new Uint8Array([0x81, 0xa1, 0x61, 0x01]);

test("a 429 asking one second is waited, then the same bytes are sent again", async () => {
  const server = await answering([[429, { "Retry-After": "1" }]]);
  try {
    const client = new Client(server.url, { ledger: memory(), backoff: 0.01 });
    assert.equal(await client.sendReport("c1", REPORT), "accepted");
    const [first, again] = server.seen;
    assert.ok(again.at - first.at >= 1.0, `waited ${again.at - first.at} s of the 1 s asked`);
    assert.deepEqual([...again.body], [...REPORT]);
    assert.deepEqual([...first.body], [...REPORT]);
  } finally {
    await server.close();
  }
});

test("an HTTP-date is waited too", async () => {
  const server = await answering([[503, { "Retry-After": new Date(Date.now() + 2000).toUTCString() }]]);
  try {
    const client = new Client(server.url, { ledger: memory(), backoff: 0.01 });
    assert.equal(await client.sendReport("c1", REPORT), "accepted");
    const [first, again] = server.seen;
    assert.ok(again.at - first.at >= 0.9, `waited ${again.at - first.at} s`); // whole seconds: at least 1 of the 2
  } finally {
    await server.close();
  }
});

test("a malformed Retry-After falls back to the backoff", async () => {
  const server = await answering([
    [429, { "Retry-After": "1e9" }],
    [429, { "Retry-After": "soon" }],
    [503, { "Retry-After": "-3" }],
    [429, { "Retry-After": "12 s" }],
  ]);
  const [realTimeout, realRandom] = [globalThis.setTimeout, Math.random];
  const delays: number[] = [];
  globalThis.setTimeout = ((handler: () => void, ms?: number, ...rest: unknown[]) => {
    delays.push(ms ?? 0);
    return realTimeout(handler, ms, ...rest);
  }) as typeof setTimeout;
  Math.random = () => 0.5;
  try {
    // A cap of 5 s: were "1e9" read as a number of seconds, the client would give up at once.
    const client = new Client(server.url, { ledger: memory(), backoff: 0.01, maxRetryAfter: 5 });
    assert.equal(await client.sendReport("c1", REPORT), "accepted");
  } finally {
    globalThis.setTimeout = realTimeout;
    Math.random = realRandom;
    await server.close();
  }
  assert.equal(server.seen.length, 5);
  const backoffs = delays.filter((ms) => [10, 20, 40, 80].includes(Math.round(ms)));
  assert.deepEqual(backoffs.map(Math.round), [10, 20, 40, 80], `${delays}`);
  assert.ok(delays.every((ms) => ms < 10_000), `${delays}`); // "12 s" read as 12 would wait 12 s or more
});

test("a wait past the cap or the deadline ends the attempts at once, naming the party and the option", async () => {
  let server = await answering([[429, { "Retry-After": "61" }]]);
  try {
    const client = new Client(server.url, { ledger: memory(), retries: 5 }); // maxRetryAfter defaults to 60
    const failed = await client.sendReport("c1", REPORT).then(
      () => assert.fail("sent"),
      (error: unknown) => error as SubmissionFailed,
    );
    assert.ok(failed instanceof SubmissionFailed);
    assert.equal(server.seen.length, 1);
    assert.ok(failed.message.startsWith(`the aggregator at ${server.url} refused: POST ${server.url}/collections/c1/reports`), failed.message);
    assert.ok(failed.message.includes("it asks to wait 61 s, over maxRetryAfter (60 s)"), failed.message);
    assert.ok(failed.message.endsWith("its operator can raise python -m aggregator serve --rate-limit"), failed.message);
    assert.equal(failed.retryAfter, 61);
    assert.equal(failed.status, 429);
  } finally {
    await server.close();
  }
  // The shuffler the app pins, naming its limit's option in its answer.
  server = await answering([
    [429, { "Retry-After": "60" }, { error: "too many reports from this address (at most 1 a minute)", option: "--per-address" }],
  ]);
  try {
    const client = new Client("http://127.0.0.1:9", { ledger: memory(), retries: 5, maxRetryAfter: 5, shuffler: server.url });
    const failed = await client.sendReport("c1", REPORT, client.shuffler).catch((error: unknown) => error as SubmissionFailed);
    assert.ok(failed instanceof SubmissionFailed);
    assert.ok(failed.message.startsWith(`the shuffler at ${server.url} refused:`), failed.message);
    assert.ok(failed.message.includes("last: 429 too many reports from this address (at most 1 a minute)"), failed.message);
    assert.ok(failed.message.endsWith("its operator can raise python -m shuffler serve --per-address"), failed.message);
    assert.equal(failed.option, "python -m shuffler serve --per-address");
  } finally {
    await server.close();
  }
  server = await answering([[503, { "Retry-After": "2" }]]);
  try {
    const client = new Client(server.url, { ledger: memory(), retries: 5, retryDeadline: 1.5 });
    await assert.rejects(client.sendReport("c1", REPORT), (e: Error) => e instanceof SubmissionFailed && /another wait would pass retryDeadline \(1.5 s\)/.test(e.message) && /was unavailable/.test(e.message));
    assert.equal(server.seen.length, 1);
  } finally {
    await server.close();
  }
});

test("the wait is the asked one jittered upwards, or the backoff when longer; bad bounds are refused", () => {
  assert.equal(retryAfter("7", 0), 7);
  assert.equal(retryAfter(" 2.5 ", 0), 2.5);
  assert.equal(retryAfter("Wed, 21 Oct 2015 07:28:00 GMT", 1445412470000), 10);
  assert.equal(retryAfter("Wed, 21 Oct 2015 07:28:00 GMT", 1445412490000), 0);
  for (const malformed of [null, "", "soon", "-1", "inf", "NaN", "1e3", "Wed, 21 Oct 2015 07:28:00", "Infinity"])
    assert.equal(retryAfter(malformed, 0), null, String(malformed));
  for (const draw of [0, 0.5, 0.999]) {
    const wait = waitBefore(1, 0.2, 3, draw);
    assert.ok(wait >= 3 && wait <= 3 * (1 + JITTER), `${wait}`);
    assert.equal(waitBefore(4, 1, 3, draw), Math.max(8 * (0.5 + draw), 3 * (1 + JITTER * draw)));
  }
  assert.equal(waitBefore(1, 0.2, null, 0.5), 0.2);
  for (const name of ["maxRetryAfter", "retryDeadline"])
    for (const bad of [-1, Infinity, "60", NaN])
      assert.throws(() => new Client("http://127.0.0.1:9", { ledger: memory(), [name]: bad }), (e: Error) => e instanceof RangeError && e.message.includes(name));
});
