/**
 * What the device refuses on its own: a platform without Web Crypto, and a spec whose draw would
 * take longer than the app allows on this implementation's own sampler, or than a browser page's
 * main thread may be held.
 */
import assert from "node:assert/strict";
import { test } from "node:test";

import { createServer } from "node:http";
import { type AddressInfo } from "node:net";

import { Client, CollectionSpec, InsecureContext, LimitExceeded, Limits, Participant, RecordError, SpecError, SubmissionFailed } from "../src/index.js";
import { MAIN_THREAD_SECONDS } from "../src/calibration.js";
import { Ledger } from "../src/ledger.js";

const memory = () =>
  new Ledger({
    async update(change) {
      return change({ version: 2, entries: {}, spent: {} }).result;
    },
  });

test("without Web Crypto (an insecure page) every call is one error of the family, saying what is needed", async () => {
  const real = Object.getOwnPropertyDescriptor(globalThis, "crypto")!;
  const client = new Client("http://127.0.0.1:9", { ledger: memory(), retries: 0 });
  try {
    Object.defineProperty(globalThis, "crypto", { value: { getRandomValues: real.get?.call(globalThis).getRandomValues }, configurable: true });
    await assert.rejects(client.fetchCollection("x"), (e: Error) => e instanceof InsecureContext && /https or from localhost/.test(e.message));
    await assert.rejects(client.submit("x", {}), InsecureContext);
    Object.defineProperty(globalThis, "crypto", { value: undefined, configurable: true });
    await assert.rejects(client.submit("x", {}), InsecureContext);
  } finally {
    Object.defineProperty(globalThis, "crypto", real);
  }
});

const she = (entries: number) => ({ features: [{ name: "f", categories: Array.from({ length: entries / 2 }, (_, i) => `v${i}`) }], classes: ["a", "b"], protocol: "SHE", epsilon: 1 });

test("the draw-time limit is the Python participant's constants, never measured here: the largest SHE spec admitted is the same on every device", () => {
  const limits = new Limits({ maxDrawSeconds: 0.25 });
  const largest = 2 * Math.floor((0.25 - 1e-4) / 1e-4 / 2); // SECONDS_PER_INDEX + SECONDS_PER_NOISE per entry
  limits.checkSpec(she(largest), "fits");
  assert.throws(() => limits.checkSpec(she(largest + 2), "over"), (e: Error) => e instanceof LimitExceeded && /on a slow device/.test(e.message));
  // How long this machine takes to draw it is bench/device.py's to measure (a loaded machine stretches it).
  const spec = CollectionSpec.fromDict({ ...she(largest), theta: 0.25 });
  // It draws (one input at random: the class's 2 entries, or the feature's `largest`).
  const drawn = (new Participant(spec).report({ f: "v1", class: "a" }, undefined).payload as Float64Array).length;
  assert.ok(drawn === 2 || drawn === largest, `${drawn}`);
});

test("on a browser page's main thread no draw may be estimated past MAIN_THREAD_SECONDS, short of a long task", () => {
  const limits = new Limits();
  const largest = 2 * Math.floor((MAIN_THREAD_SECONDS - 1e-4) / 1e-4 / 2);
  assert.equal(largest, 248);
  (globalThis as { document?: unknown }).document = {};
  try {
    limits.checkSpec(she(largest), "fits");
    assert.throws(() => limits.checkSpec(she(largest + 2), "over"), /main thread/);
  } finally {
    delete (globalThis as { document?: unknown }).document;
  }
  limits.checkSpec(she(largest + 2), "fits in Node");
});

test("a shuffled spec whose inputs are assigned is refused: an assigned input hides a report only among its own", () => {
  const shuffled = { ...she(4), protocol: "DE", shuffle: { min_batch: 100, delta: 1e-4 } };
  assert.doesNotThrow(() => CollectionSpec.fromDict(shuffled));
  assert.throws(() => CollectionSpec.fromDict({ ...shuffled, input_selection: "assigned" }), /choose their input at random/);
  assert.doesNotThrow(() => CollectionSpec.fromDict({ ...she(4), protocol: "DE", input_selection: "assigned" }));
});

test("a record's keys the spec does not know are warned of on the console, and the report is drawn as for any record", () => {
  const spec = CollectionSpec.fromDict({ features: [{ name: "age", categories: ["Young", "Old"] }], classes: ["a", "b"], protocol: "DE", epsilon: 1, label: "y" });
  const warned: string[] = [];
  const real = console.warn;
  console.warn = (message: string) => void warned.push(message);
  try {
    const report = new Participant(spec).report({ Age: "Young", y: "a" });
    assert.ok(report.input === 0 || report.input === 1);
    new Participant(spec).report({ age: "Young", y: "a" });
  } finally {
    console.warn = real;
  }
  assert.equal(warned.length, 1);
  assert.match(warned[0], /'Age'.*its fields: 'age', 'y'/);
});

/** A ledger storage kept in memory from one call to the next, as a file or IndexedDB keeps it; `data()` is what it holds. */
const kept = () => {
  let stored: any = { version: 2, entries: {} };
  return {
    data: () => stored,
    async update<T>(change: (data: any) => { result: T; write: boolean }): Promise<T> {
      const copy = JSON.parse(JSON.stringify(stored));
      const { result, write } = change(copy);
      if (write) stored = copy;
      return result;
    },
  };
};

test("the memo forgets a question not asked for memoDays, even on a ledger nothing was written to since", async () => {
  const storage = kept();
  let clock = 1_000_000_000;
  const ledger = new Ledger(storage as any, () => clock);
  const limits = new Limits();
  const asked = (collection: string) => ({ origin: "https://a.example", collection, uid: collection.padEnd(32, "u"), fingerprint: "f".repeat(64), epsilon: 0.25, question: "q".repeat(64), group: null });
  const first = await ledger.claim(asked("c1"), limits, () => new Uint8Array([1]), () => assert.fail("no memo yet"));
  assert.equal(first.spent, 0.25);
  await ledger.markSent(first.key);
  clock += 30 * 86_400;
  const within = await ledger.claim(asked("c2"), limits, () => assert.fail("the memo answers"), (old) => old);
  assert.equal(within.spent, 0);
  await ledger.markSent(within.key);
  clock += 400 * 86_400;
  const later = await ledger.claim(asked("c3"), limits, () => new Uint8Array([2]), () => assert.fail("forgotten"));
  assert.equal(later.spent, 0.25);
});

test("an acknowledged shuffled entry keeps neither its report nor its sealed copy, as the Python device's", async () => {
  const storage = kept();
  const ledger = new Ledger(storage as any);
  const bytes = (text: string) => new TextEncoder().encode(text);
  const asked = { origin: "https://a.example", collection: "s", uid: "s".repeat(32), fingerprint: "f".repeat(64), epsilon: 0.25, question: "", group: null };
  const claim = await ledger.claim(asked, new Limits(), () => bytes("report"), () => assert.fail("never memoised"), async (body) => bytes(`sealed:${body.length}`));
  assert.ok(storage.data().entries[claim.key].report && storage.data().entries[claim.key].sealed, "a retry has its bytes");
  await ledger.markSent(claim.key);
  const entry = storage.data().entries[claim.key];
  assert.deepEqual([entry.report, entry.sealed, entry.sent, entry.epsilon], ["", "", true, 0.25]);
});

test("the direct option is a list of collection ids: one string, or anything else, is refused at construction", () => {
  const options = { ledger: memory(), shuffler: "http://127.0.0.1:9" };
  assert.deepEqual([...new Client("http://127.0.0.1:9", { ...options, direct: ["a", "b"] }).direct].sort(), ["a", "b"]);
  assert.equal(new Client("http://127.0.0.1:9", options).direct.size, 0);
  assert.throws(() => new Client("http://127.0.0.1:9", { ...options, direct: "ab" as any }), (e: Error) => e instanceof RangeError && /not one string/.test(e.message));
  assert.throws(() => new Client("http://127.0.0.1:9", { ...options, direct: 3 as any }), RangeError);
  assert.throws(() => new Client("http://127.0.0.1:9", { ...options, direct: null as any }), RangeError);
  assert.throws(() => new Client("http://127.0.0.1:9", { ...options, direct: ["a", 3] as any }), /collection ids \(strings\)/);
});

test("minBatch is a positive integer and minDummyShare a finite number >= 0, by default 100 and 1 (DUMMY_SHARE)", () => {
  const limits = new Limits();
  assert.deepEqual([limits.minBatch, limits.minDummyShare], [100, 1]);
  assert.deepEqual([new Limits({ minBatch: 2, minDummyShare: 0 }).minBatch, new Limits({ minDummyShare: 0 }).minDummyShare], [2, 0]);
  for (const minBatch of [0, -1, 2.5, Infinity, NaN, "100" as any]) assert.throws(() => new Limits({ minBatch }), /minBatch/, String(minBatch));
  for (const minDummyShare of [-0.1, Infinity, NaN, "1" as any]) assert.throws(() => new Limits({ minDummyShare }), /minDummyShare/, String(minDummyShare));
});

test("a view is refused below the app's floor or its share of dummies, and taken exactly at them", () => {
  const limits = new Limits({ minBatch: 50, minDummyShare: 0.5 });
  limits.checkView({ minBatch: 50, dummies: 25 }, "c");
  limits.checkView({ minBatch: 51, dummies: 26 }, "c"); // ceil(0.5 * 51)
  const refused = (view: { minBatch: number; dummies: number }, why: RegExp) =>
    assert.throws(() => limits.checkView(view, "c"), (e: Error) => e instanceof LimitExceeded && why.test(e.message) && /nothing was drawn or sent$/.test(e.message));
  refused({ minBatch: 49, dummies: 1000 }, /batches of 49 people and 1000 dummies.*at least 50 people \(minBatch\)/);
  refused({ minBatch: 50, dummies: 24 }, /25 dummies, 0\.5 times the floor \(minDummyShare\)/);
  refused({ minBatch: 51, dummies: 25 }, /26 dummies/);
  new Limits().checkView({ minBatch: 100, dummies: 100 }, "c");
  assert.throws(() => new Limits().checkView({ minBatch: 100, dummies: 99 }, "c"), LimitExceeded);
  assert.throws(() => new Limits().checkView({ minBatch: 10, dummies: 10 }, "c"), LimitExceeded);
});

/**
 * One loopback server as both an aggregator publishing the unshuffled collection "plain" and a
 * shuffler answering its view with `viewStatus`; `seen` counts requests by method and path.
 */
async function plainCollection(viewStatus: number, viewReason?: string) {
  const raw = { features: [{ name: "f", categories: ["a", "b"] }], classes: ["x", "y"], protocol: "DE", epsilon: 1 };
  const answer = JSON.stringify({ id: "plain", uid: "u".repeat(32), fingerprint: await CollectionSpec.fromDict(raw).fingerprint(), spec: raw });
  const seen: Record<string, number> = {};
  const server = createServer((request, response) => {
    const key = `${request.method} ${request.url}`;
    seen[key] = (seen[key] ?? 0) + 1;
    const [status, body] =
      key === "GET /collections/plain" ? [200, answer]
      : key === "GET /collections/plain/view" ? [viewStatus, JSON.stringify({ error: "said by the test", reason: viewReason })]
      : key === "POST /collections/plain/reports" ? [201, JSON.stringify({ status: "accepted" })]
      : [404, "{}"];
    request.resume();
    response.writeHead(status, { "Content-Type": "application/json" }).end(body);
  });
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, seen, close: () => new Promise((done) => server.close(done)) };
}

test("an app pinning a shuffler reports to an unshuffled collection only when it names it and its shuffler knows no shuffled one of that id", async () => {
  const record = { f: "a", class: "x" };
  const outcome = async (viewStatus: number, options: { direct?: string[]; shuffler?: boolean; reason?: string }) => {
    const site = await plainCollection(viewStatus, options.reason);
    const storage = kept();
    const client = new Client(site.url, {
      ledger: new Ledger(storage as any), pace: 0.001, retries: 0, direct: options.direct,
      shuffler: options.shuffler === false ? undefined : site.url,
    });
    try {
      const said = await client.submit("plain", record).catch((e: Error) => e);
      return { said, seen: site.seen, entries: Object.keys(storage.data().entries).length };
    } finally {
      await site.close();
    }
  };
  const refused = (result: { said: unknown; seen: Record<string, number>; entries: number }, kind: Function, why: RegExp) => {
    assert.ok(result.said instanceof kind && why.test((result.said as Error).message), String(result.said));
    assert.equal(result.seen["POST /collections/plain/reports"], undefined);
    assert.equal(result.entries, 0); // nothing drawn or recorded
  };
  const notNamed = await outcome(404, { reason: "unknown" });
  refused(notNamed, SpecError, /'plain' is not shuffled, and this app pins a shuffler.*\(the direct option: \[\]\); nothing was sent$/);
  assert.equal(notNamed.seen["GET /collections/plain/view"], undefined);
  refused(await outcome(200, { direct: ["plain"] }), SpecError, /holds a shuffled view of collection 'plain', which the aggregator shows unshuffled/);
  refused(await outcome(400, { direct: ["plain"] }), SpecError, /answered 400 .*refusing to report directly/);
  refused(await outcome(503, { direct: ["plain"] }), SubmissionFailed, /view failed after 1 attempts/);
  // Shuffled at the aggregator, its batches too large for one request: not a direct collection.
  refused(await outcome(409, { direct: ["plain"], reason: "too_large" }), SpecError, /answered 409 \(too_large\) .*refusing to report directly/);
  refused(await outcome(404, { direct: ["plain"] }), SpecError, /answered 404 \(no reason\) .*refusing to report directly/);
  for (const [status, reason] of [[404, "unknown"], [409, "not_shuffled"]] as const) {
    const named = await outcome(status, { direct: ["other", "plain"], reason });
    assert.equal(named.said, "accepted");
    assert.deepEqual([named.seen["GET /collections/plain/view"], named.seen["POST /collections/plain/reports"], named.entries], [1, 1, 1]);
  }
  const unpinned = await outcome(200, { shuffler: false });
  assert.equal(unpinned.said, "accepted");
  assert.equal(unpinned.seen["GET /collections/plain/view"], undefined);
});

/** A source that refuses to be drawn from: a refusal it never reaches came before any draw. */
const untouchable = new Proxy({}, { get: () => () => { throw new Error("drawn from"); } }) as any;

test("strict refuses an unknown key, a missing field or an undeclared value before anything is drawn", () => {
  const spec = CollectionSpec.fromDict({ features: [{ name: "age", categories: ["Young", "Old"] }], classes: ["Yes", "No"], protocol: "DE", epsilon: 1, label: "y" });
  const refusals: [Record<string, unknown>, RegExp][] = [
    [{ age: "Young", y: "Yes", Age: "Young" }, /^Age: not a field of this spec .*strict: nothing drawn or sent$/],
    [{ age: "young", y: "Yes" }, /^age: 'young' is not declared: did you mean 'Young'\? expected one of 'Young', 'Old'; strict/],
    [{ age: "Ancient", y: "Yes" }, /^age: 'Ancient' is not declared: expected one of 'Young', 'Old'/],
    [{ age: "Old", y: "yes" }, /^y: 'yes' is not declared: did you mean 'Yes'\?/],
    [{ y: "Yes" }, /^age: missing: expected one of/],
  ];
  for (const [record, why] of refusals) {
    assert.throws(() => new Participant(spec, untouchable, true).report(record), (e: Error) => e instanceof RecordError && why.test(e.message), JSON.stringify(record));
    const real = console.warn;
    console.warn = () => {};
    try {
      assert.ok(new Participant(spec).report(record).input <= 1); // by default reported as before
    } finally {
      console.warn = real;
    }
  }
  const numeric = CollectionSpec.fromDict({ classes: ["a", "b"], protocol: "DE", epsilon: 1, label: "y", continuous: { inputs: [{ name: "x", low: 0, high: 1 }], bins: 2 } });
  for (const x of [Number.NaN, "0.5", null])
    assert.throws(() => new Participant(numeric, untouchable, true).report({ x, y: "a" }), /RecordError: x: .*expected a finite number; strict/);
  assert.ok(new Participant(numeric, undefined, true).report({ x: 0.5, y: "a" }).input <= 1);
});

test("by default a value differing from a declared one only in case is warned of on the console, and reported as before", () => {
  const spec = CollectionSpec.fromDict({ features: [{ name: "age", categories: ["Young", "Old"] }], classes: ["a", "b"], protocol: "DE", epsilon: 1, label: "y" });
  const warned: string[] = [];
  const real = console.warn;
  console.warn = (message: string) => void warned.push(message);
  try {
    new Participant(spec).report({ age: "Young", y: "a" });
    new Participant(spec).report({ age: "Ancient", y: "a" }); // a person's value the spec left out: not the app's bug
    assert.deepEqual(warned, []);
    assert.ok(new Participant(spec).report({ age: "young", y: "a" }).input <= 1);
  } finally {
    console.warn = real;
  }
  assert.equal(warned.length, 1);
  assert.match(warned[0], /the record's 'age' is 'young', which this spec does not declare: did you mean 'Young'\? reported as a value drawn/);
});

test("a strict client refuses such a record with nothing sent and nothing in its ledger, and sends a declared one", async () => {
  const site = await plainCollection(404, "unknown");
  const storage = kept();
  const client = new Client(site.url, { ledger: new Ledger(storage as any), pace: 0.001, retries: 0, strict: true });
  try {
    for (const record of [{ f: "A", class: "x" }, { f: "a", class: "x", F: "a" }, { class: "x" }])
      await assert.rejects(client.submit("plain", record), (e: Error) => e instanceof RecordError && /strict: nothing drawn or sent$/.test(e.message));
    assert.equal(site.seen["POST /collections/plain/reports"], undefined);
    assert.equal(Object.keys(storage.data().entries).length, 0);
    assert.equal(await client.submit("plain", { f: "a", class: "x" }), "accepted");
    assert.equal(site.seen["POST /collections/plain/reports"], 1);
  } finally {
    await site.close();
  }
});
