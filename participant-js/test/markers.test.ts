/**
 * The ledger against an aggregator that bends it (issue 79's review), as `tests/test_ledger_markers.py`
 * holds it for the Python device: a collection whose entry left the ledger is refused for a year
 * (its marker), one origin's collections never refuse another's, and a service that never
 * acknowledges holds at most `maxCollections` entries. The device's clock is advanced by hand.
 */
import assert from "node:assert/strict";
import { test } from "node:test";

import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { AlreadyReported, Limits } from "../src/index.js";
import { type Asked, Ledger, LedgerError, marker, reportedProblem } from "../src/ledger.js";
import { LimitExceeded } from "../src/limits.js";
import { fileLedger } from "../src/node.js";
import { memoryLedger } from "../test-support/memory_ledger.js";

const DAY = 86_400;
const utf8 = (text: string) => new TextEncoder().encode(text);

const asked = (name: string, origin = "http://x.example", changes: Partial<Asked> = {}): Asked => ({
  origin, collection: name, uid: name.padEnd(32, "u"), fingerprint: "f".repeat(64), epsilon: 0.05, question: name.padEnd(64, "q"), group: null, ...changes,
});
const X = asked("X", "http://x.example", { uid: "x".repeat(32), question: "x".repeat(64) });
const never = () => assert.fail("nothing drawn");
const seal = async (body: Uint8Array) => body;

async function report(ledger: Ledger, question: Asked, limits = new Limits(), shuffled = false): Promise<void> {
  await ledger.markSent((await ledger.claim(question, limits, () => utf8("drawn"), (old) => old, shuffled ? seal : undefined)).key);
}

test("markers are the Python participant's: 16 bytes of SHA-256 of kind, origin and name", () => {
  assert.equal(marker("collection", "http://x", "c1"), "a9ba80239641ffacd4148f935497b055");
  assert.equal(marker("uid", "http://x", "\ud800é"), "7b66469a09dba5b707fe5503c0d145bd"); // a lone surrogate as U+FFFD
});

test("a direct collection whose entry left is refused by its id and by its uid; another origin's is another collection", async () => {
  const { ledger, state } = memoryLedger();
  const limits = new Limits({ maxMemoPerOrigin: 2 });
  await report(ledger, X, limits);
  state.now += DAY;
  for (let i = 0; i < 2; i++) await report(ledger, asked(`Q${i}`), limits);
  state.now += 32 * DAY;
  await report(ledger, asked("Z"), limits);
  assert.ok(!("http://x.example X" in state.stored.entries));
  await assert.rejects(ledger.claim(X, limits, never, never), (e: Error) => e instanceof AlreadyReported && /already reported to collection 'X'/.test(e.message));
  await assert.rejects(ledger.claim({ ...X, collection: "X-again" }, limits, never, never), AlreadyReported);
  assert.equal((await ledger.claim({ ...X, origin: "http://y.example" }, limits, () => utf8("y"), never)).spent, 0.05);
});

test("a shuffled collection is refused 32 days later, and answered afresh after a year", async () => {
  const { ledger, state } = memoryLedger();
  const shuffled = asked("S", "http://x.example", { question: "", epsilon: 2 });
  await report(ledger, shuffled, new Limits(), true);
  state.now += 32 * DAY;
  await report(ledger, asked("T", "http://x.example", { question: "" }), new Limits(), true);
  await assert.rejects(ledger.claim(shuffled, new Limits(), never, never, seal), AlreadyReported);
  state.now += (365 - 32 + 2) * DAY;
  await report(ledger, asked("U", "http://x.example", { question: "" }), new Limits(), true);
  assert.equal((await ledger.claim(shuffled, new Limits(), () => utf8("again"), never, seal)).spent, 2);
});

test("a memoised copy whose entry left is not answered again from the memo", async () => {
  const { ledger, state } = memoryLedger();
  for (const name of ["X1", "X2", "X3"]) {
    await report(ledger, { ...X, collection: name, uid: name.padEnd(32, "u") });
    state.now += 1;
  }
  state.now += 32 * DAY;
  await report(ledger, asked("Z"));
  assert.deepEqual(Object.keys(state.stored.entries).sort(), ["http://x.example X3", "http://x.example Z"]);
  await assert.rejects(ledger.claim({ ...X, collection: "X2", uid: "X2".padEnd(32, "u") }, new Limits(), never, never), AlreadyReported);
});

test("one origin at its cap never refuses another", async () => {
  const { ledger } = memoryLedger();
  const limits = new Limits({ maxCollections: 5 });
  for (let i = 0; i < 5; i++) await report(ledger, { ...X, collection: `A${i}`, uid: `A${i}`.padEnd(32, "u") }, limits);
  await assert.rejects(ledger.claim({ ...X, collection: "A5", uid: "A5".padEnd(32, "u") }, limits, never, never),
    (e: Error) => e instanceof LimitExceeded && /holds 5 collections at http:\/\/x.example .*\(maxCollections\)/.test(e.message));
  assert.equal((await ledger.claim(asked("B0", "http://b.example"), limits, () => utf8("b"), never)).spent, 0.05);
});

test("a service that never acknowledges holds at most maxCollections entries, whatever their age", async () => {
  const { ledger, state } = memoryLedger();
  const limits = new Limits({ maxCollections: 6 });
  let refused = 0;
  for (let month = 0; month < 4; month++) {
    for (let i = 0; i < 4; i++)
      try {
        await ledger.claim({ ...X, collection: `m${month}-${i}`, uid: `m${month}-${i}`.padEnd(32, "u") }, limits, () => utf8("x"), (old) => old);
      } catch (error) {
        assert.ok(error instanceof LimitExceeded && /maxCollections/.test(error.message));
        refused++;
      }
    state.now += 31 * DAY;
  }
  assert.deepEqual([Object.keys(state.stored.entries).length, refused], [6, 10]);
  await ledger.claim(asked("other", "http://b.example"), limits, () => utf8("b"), never);
});

test("the memo's bound is per origin only: one origin's questions never give up another's answers", async () => {
  const { ledger } = memoryLedger();
  const limits = new Limits({ maxCollections: 3, maxMemoPerOrigin: 3 });
  await report(ledger, asked("kept", "http://b.example"), limits);
  for (let i = 0; i < 3; i++) await report(ledger, asked(`a${i}`), limits);
  const copy = await ledger.claim({ ...asked("again", "http://b.example"), question: "kept".padEnd(64, "q") }, limits, never, (old) => utf8(`memo:${new TextDecoder().decode(old)}`));
  assert.deepEqual([new TextDecoder().decode(copy.body), copy.spent], ["memo:drawn", 0]);
});

test("markers of any shape the device does not write are refused, in files too; version 5 is read and written as 6", async () => {
  const mark = marker("collection", "http://x.example", "X");
  const bent: [unknown, string][] = [
    [[], "not a mapping"], [{ "01": mark }, "a day that is none"], [{ [String(Math.floor(2 ** 33 / DAY) + 1)]: mark }, "a day that is none"],
    [{ 7: "" }, "not markers"], [{ 7: mark.slice(1) }, "not markers"], [{ 7: mark + "0" }, "not markers"], [{ 7: mark.toUpperCase() }, "not markers"],
    [{ 7: 5 }, "not markers"], [{ 7: mark + mark }, "repeat a marker"], [{ 7: mark, 8: mark }, "repeat a marker"],
  ];
  const dir = mkdtempSync(join(tmpdir(), "markers-"));
  for (const [i, [reported, problem]] of bent.entries()) {
    assert.ok(reportedProblem(reported)?.includes(problem), problem);
    const path = join(dir, `bent${i}.json`);
    writeFileSync(path, JSON.stringify({ version: 6, entries: {}, spent: {}, reported }));
    await assert.rejects(fileLedger(path).claim(X, new Limits(), never, never), (e: Error) => e instanceof LedgerError && e.message.includes(problem));
  }
  for (const [i, shape] of [{ version: 5, entries: {}, spent: {}, reported: {} }, { version: 6, entries: {}, spent: {} }].entries()) {
    writeFileSync(join(dir, `shape${i}.json`), JSON.stringify(shape));
    await assert.rejects(fileLedger(join(dir, `shape${i}.json`)).claim(X, new Limits(), never, never), /not a mapping of version/);
  }
  const path = join(dir, "v5.json");
  writeFileSync(path, JSON.stringify({ version: 5, entries: {}, spent: { 7: "1/2" } }));
  await fileLedger(path).claim(X, new Limits(), () => utf8("x"), never);
  const written = JSON.parse(readFileSync(path, "utf8"));
  assert.deepEqual([written.version, written.reported], [6, {}]);
  const today = Math.floor(Date.now() / 1000 / DAY);
  writeFileSync(path, JSON.stringify({ version: 6, entries: {}, spent: {}, reported: { [today - 40]: marker("uid", "http://x.example", X.uid) } }));
  await assert.rejects(fileLedger(path).claim(X, new Limits(), never, never), AlreadyReported);
});

test("a clock set back is refused by a ledger that read the file before, as by one just started", async () => {
  const dir = mkdtempSync(join(tmpdir(), "ldpnb-clock-"));
  const path = join(dir, "ledger.json");
  const limits = new Limits({ budget: { total: 1, perDays: 30 } });
  const real = Date.now;
  let now = real();
  Date.now = () => now;
  try {
    const ledger = fileLedger(path);
    await report(ledger, asked("A", "http://x.example", { epsilon: 0.5 }), limits);
    now -= 20 * DAY * 1000;
    for (const reader of [ledger, fileLedger(path)])
      await assert.rejects(reader.claim(asked("B", "http://x.example", { epsilon: 0.5 }), limits, never, never), /past this device's clock/);
    now += 20 * DAY * 1000;
    await report(ledger, asked("B", "http://x.example", { epsilon: 0.5 }), limits); // the clock right again
  } finally {
    Date.now = real;
  }
});

test("a report acknowledged late keeps its collection refused a year from its acknowledgement", async () => {
  const { ledger, state } = memoryLedger();
  const { key } = await ledger.claim(X, new Limits(), () => utf8("drawn"), never);
  state.now += 364.5 * DAY;
  await ledger.markSent(key);
  state.now += 2 * DAY;
  await report(ledger, asked("Z")); // any write lets the old entry leave
  assert.equal(state.stored.entries["http://x.example X"], undefined);
  await assert.rejects(ledger.claim(X, new Limits(), never, never), AlreadyReported);
});
