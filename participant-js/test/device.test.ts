/**
 * What the device refuses on its own: a platform without Web Crypto, and a spec whose draw would
 * take longer than the app allows on this implementation's own sampler, or than a browser page's
 * main thread may be held.
 */
import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, CollectionSpec, InsecureContext, LimitExceeded, Limits, Participant } from "../src/index.js";
import { MAIN_THREAD_SECONDS, secondsPerEntry } from "../src/calibration.js";
import { Ledger } from "../src/ledger.js";

const memory = () =>
  new Ledger({
    async update(change) {
      return change({ version: 2, entries: {} }).result;
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

test("the draw-time limit follows this sampler: the largest SHE spec admitted draws within the limit, the next is refused", () => {
  const limits = new Limits({ maxDrawSeconds: 0.25 });
  const perNoise = secondsPerEntry().noise;
  const largest = 2 * Math.floor((0.25 - 1e-4) / perNoise / 2);
  limits.checkSpec(she(largest), "fits");
  assert.throws(() => limits.checkSpec(she(largest + 2), "over"), (e: Error) => e instanceof LimitExceeded && /on this device/.test(e.message));
  const spec = CollectionSpec.fromDict({ ...she(largest), theta: 0.25 });
  const started = performance.now();
  new Participant(spec).report({ f: "v1", class: "a" }, undefined);
  assert.ok((performance.now() - started) / 1000 < 0.25, "the admitted draw took longer than the limit");
});

test("on a browser page's main thread no draw may take longer than a tenth of a second", () => {
  const limits = new Limits();
  const perNoise = secondsPerEntry().noise;
  const largest = 2 * Math.floor((MAIN_THREAD_SECONDS - 1e-4) / perNoise / 2);
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
