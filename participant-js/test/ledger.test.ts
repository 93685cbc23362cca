/**
 * The ledger's text and files as the device reads them: a key repeated in one object refused, only
 * a ledger exactly of the first format read as one, and each report bound to its entry (a report
 * named by another entry refused, nothing drawn or sent), as the Python participant reads them
 * (`tests/test_ledger_shapes.py` has both read the same files).
 */
import assert from "node:assert/strict";
import { test } from "node:test";

import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, readdirSync, renameSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { inflateSync } from "node:zlib";

import { Limits } from "../src/index.js";
import { type Entry, LedgerError, firstFormatPlace, parseJson, reportBinding } from "../src/ledger.js";
import { fileLedger } from "../src/node.js";
import { memoryLedger } from "../test-support/memory_ledger.js";

const refused = (text: string) => assert.throws(() => parseJson(text, "test"), (e: Error) => e instanceof LedgerError && /repeats a key/.test(e.message), text);

test("JSON repeating a key in any object is refused, however the key is spelt and wherever it lies", () => {
  refused('{"version": 4, "entries": {}, "entries": {}}');
  refused('{"version": 4, "entries": {"k": {"epsilon": 2.0, "epsilon": 0.0}}}');
  refused('{"a": 1, "\\u0061": 1}'); // one key, spelt twice
  refused('{"__proto__": 1, "__proto__": 2}');
  refused('[{"x": [{"a": 1, "a": 1}]}]');
  refused('{"a": {"b": {"c": {"d": 1, "d": 1}}}}');
  refused('{"a\\"": 1, "a\\u0022": 2}');
});

test("JSON holding what looks like a repeated key inside its strings is read as JSON.parse reads it", () => {
  for (const text of [
    '{"a": "\\"a\\": 1, \\"a\\": 2", "b": "{:}"}',
    '{"a\\\\": "x\\\\", "a\\\\\\"": ":", "a": 1}', // even and odd runs of backslashes before a quote
    '{"__proto__": {"a": 1}, "b": [":", "\\":\\""]}',
    '{"\\u00e7\\ud83d\\ude00\\ud800": {}, "c": [[], {}, [{}]]}',
    " [ 1 , { \"a\" :\t\"b\" } ] ",
  ])
    assert.deepEqual(parseJson(text, "test"), JSON.parse(text), text);
  // Nesting deeper than a recursive walk could follow.
  const deep = "[".repeat(200_000) + "]".repeat(200_000);
  assert.ok(Array.isArray(parseJson(deep, "test")));
  assert.throws(() => parseJson('{"a": 1', "test"), (e: Error) => e instanceof LedgerError && /not valid JSON/.test(e.message));
});

test("only an entry exactly as the first format's device wrote it is one of that format", () => {
  const entry = {
    report: "cmVwb3J0", sent: true, reserved_at: 1.7e9, sent_at: 1.7e9 + 1,
    collection: "HTTP://X.example:80//api/collections/c/1", fingerprint: "f".repeat(64),
  };
  assert.deepEqual(firstFormatPlace("u".repeat(32), entry), ["http://x.example/api", "c/1"]);
  const { sent_at: _, ...unsent } = entry;
  assert.deepEqual(firstFormatPlace("u".repeat(32), { ...unsent, sent: false }), ["http://x.example/api", "c/1"]);
  // The review's: no URL, fingerprint or time, and an empty report.
  assert.equal(firstFormatPlace("x".repeat(32), { sent: true, report: "" }), null);
  for (const bent of [
    { ...entry, report: "" }, { ...entry, epsilon: 0 }, { ...entry, fingerprint: "F".repeat(64) }, { ...entry, collection: "c1" },
    { ...entry, collection: "http://x.example/collections/" }, { ...entry, collection: "ftp://x.example/collections/c" },
    { ...entry, reserved_at: 2 ** 34 }, { ...entry, toString: 1 },
  ])
    assert.equal(firstFormatPlace("u".repeat(32), bent), null, JSON.stringify(bent));
  for (const field of ["report", "sent", "reserved_at", "collection", "fingerprint"])
    assert.equal(firstFormatPlace("u".repeat(32), Object.fromEntries(Object.entries(entry).filter(([k]) => k !== field))), null, field);
  // A uid of at least 16 characters, counted as Python counts them (15 astral characters are 30 UTF-16 units).
  assert.equal(firstFormatPlace("😀".repeat(15), entry), null);
  assert.deepEqual(firstFormatPlace("😀".repeat(16), entry), ["http://x.example/api", "c/1"]);
});

test("a report's name binds its field, entry key, question and group as the Python participant's report_name", () => {
  const drawn = createHash("sha256").update("drawn").digest();
  const name = (field: "report" | "sealed", key: string, entry: Partial<Entry>) =>
    createHash("sha256").update(reportBinding(field, key, entry as Entry)).update(drawn).digest("hex");
  // Known answers from participant/ledger_format.py.
  assert.equal(name("report", "http://x c1", { question: "q".repeat(64), group: 3 }), "5bc2a28e8e1b9a46f40da8c00e8e12b3adf814b4efddae102c3b75c93960efee");
  assert.equal(name("sealed", 'http://x ç😀\ud800"\\', { group: -0 }), "a8ef3766ca0b8b15db29004cbcfaa455399b9c233efe423cf9a3b86adb9477e1");
  assert.equal(name("report", "http://x c", {}), "e64aa2cc82242726eea0707a1443b53d98e9ddd0e67e28a7f3b9e3b3ff17adaa");
  assert.equal(name("report", "http://x big", { question: "", group: 2 ** 70 }), "93da43bc45ee5b44a720214b953f8c61d65a1d1eda7d1b09831d44437a5970bb");
});

const limits = new Limits({ maxEpsilon: 2, budget: { total: 3, perDays: 30 } });
const asked = (collection: string, question: string) => ({
  origin: "http://x.example", collection, uid: collection.padEnd(32, "u"), fingerprint: "f".repeat(64), epsilon: 1, question, group: null,
});
const utf8 = (text: string) => new TextEncoder().encode(text);

/** A Node file ledger in a fresh directory holding the collections `c1`, `c2`, `c3` (each its own question: the whole budget of 3 spent), all sent. */
async function spent(): Promise<string> {
  const path = join(mkdtempSync(join(tmpdir(), "ldpnb-ledger-")), "ledger.json");
  const ledger = fileLedger(path);
  for (const c of ["c1", "c2", "c3"]) await ledger.markSent((await ledger.claim(asked(c, c.repeat(32)), limits, () => utf8(`answer ${c}`), () => assert.fail("no memo"))).key);
  return path;
}

test("a ledger file repeating a key is refused, nothing drawn: no second report, no budget given back", async () => {
  const path = await spent();
  const text = readFileSync(path, "utf8");
  await assert.rejects(fileLedger(path).claim(asked("c4", "d".repeat(64)), limits, () => assert.fail("drawn"), () => assert.fail("memo")), /BudgetExceeded|spent epsilon=3/);
  const bent = [
    `${text.slice(0, -1)}, "entries": {}}`, // every entry forgotten
    text.replaceAll('"epsilon":1,', '"epsilon":1,"epsilon":0,'), // every spend given back
  ];
  for (const variant of bent) {
    assert.notEqual(variant, text);
    writeFileSync(path, variant);
    for (const collection of ["c1", "c4"])
      await assert.rejects(
        fileLedger(path).claim(asked(collection, "d".repeat(64)), limits, () => assert.fail("drawn"), () => assert.fail("memo")),
        (e: Error) => e instanceof LedgerError && /repeats a key/.test(e.message),
      );
    assert.equal(readFileSync(path, "utf8"), variant, "left as it was");
  }
});

test("two entries' report names swapped (each file still matching its bytes) are refused: one question never gets another's answer", async () => {
  const path = await spent();
  const data = JSON.parse(readFileSync(path, "utf8"));
  const [k1, k2] = Object.keys(data.entries);
  [data.entries[k1].report, data.entries[k2].report] = [data.entries[k2].report, data.entries[k1].report];
  writeFileSync(path, JSON.stringify(data));
  // A new collection asking c1's question: the memo would repeat c1's answer, and finds c2's.
  await assert.rejects(
    fileLedger(path).claim(asked("c5", "c1".repeat(32)), limits, () => assert.fail("drawn"), (old) => old),
    (e: Error) => e instanceof LedgerError && /another entry's bytes of, the report of 'http:\/\/x.example c1'/.test(e.message),
  );
});

test("a version 3 ledger (its files named by their bytes alone) is read, and moved to version 6 by the next write", async () => {
  const path = await spent();
  const reports = `${path}.reports`;
  const data = JSON.parse(readFileSync(path, "utf8"));
  const current = new Set(readdirSync(reports));
  for (const entry of Object.values(data.entries) as Entry[]) {
    const old = createHash("sha256").update(inflateSync(readFileSync(join(reports, entry.report)))).digest("hex");
    renameSync(join(reports, entry.report), join(reports, old));
    entry.report = old;
  }
  const older = new Set(readdirSync(reports));
  delete data.spent; delete data.reported; // versions 5 and 6's alone
  writeFileSync(path, JSON.stringify({ ...data, version: 3 }));
  const ledger = fileLedger(path);
  const entries = await ledger.entries();
  assert.equal(new TextDecoder().decode(Uint8Array.from(atob(entries["http://x.example c2"].report), (c) => c.charCodeAt(0))), "answer c2");
  assert.equal(JSON.parse(readFileSync(path, "utf8")).version, 3, "read, not yet written");
  const clone = await ledger.claim(asked("c5", "c2".repeat(32)), limits, () => assert.fail("drawn"), (old) => old);
  assert.deepEqual([new TextDecoder().decode(clone.body), clone.spent], ["answer c2", 0]);
  const written = JSON.parse(readFileSync(path, "utf8"));
  assert.equal(written.version, 6);
  const names = new Set(readdirSync(reports));
  assert.ok([...current].every((name) => names.has(name)), "each report named again as version 4 names it");
  assert.ok([...older].every((name) => !names.has(name)), "and its version 3 name gone");
  assert.equal(names.size, current.size + 1, "with the clone's report");
});

test("many devices asked one question at two origins are linked by their answers no better than chance; a uid published at another origin is a new collection there", async () => {
  const { CollectionSpec, Participant } = await import("../src/index.js");
  const { packReport } = await import("../src/report.js");
  const { decode } = await import("@msgpack/msgpack");
  const spec = CollectionSpec.fromDict({ features: [{ name: "f", categories: ["0", "1", "2", "3", "4", "5", "6", "7"] }], classes: ["a", "b"], protocol: "SHE", epsilon: 1 });
  const [fingerprint, question, digest] = [await spec.fingerprint(), await spec.question(), await spec.fingerprintDigest()];
  const record = { f: "3", class: "a" };
  const origins = ["http://one.example", "http://two.example"];
  const sent: [number, Float64Array][][] = [[], []];
  for (let device = 0; device < 20; device++) {
    const ledger = fileLedger(join(mkdtempSync(join(tmpdir(), "ldpnb-link-")), "ledger.json"));
    const participant = new Participant(spec);
    for (const [o, origin] of origins.entries()) {
      const uid = createHash("sha256").update(`${origin} ${device}`).digest("hex").slice(0, 32); // each service's own
      const claim = await ledger.claim({ origin, collection: "c", uid, fingerprint, epsilon: 1, question, group: null }, limits,
        () => packReport(participant.draw(record), digest), (old) => old);
      const wire = decode(claim.body) as { input: number; value: Uint8Array };
      sent[o].push([wire.input, new Float64Array(wire.value.slice().buffer)]);
    }
    // The first origin's uid published at the second (another service claiming it): a new
    // collection there (another question: a fresh draw), neither refused nor re-sent, either of
    // which would tell the second origin what the device did at the first.
    const uid = createHash("sha256").update(`${origins[0]} ${device}`).digest("hex").slice(0, 32);
    const again = await ledger.claim({ origin: origins[1], collection: "other", uid, fingerprint, epsilon: 1, question: "o".repeat(64), group: null }, limits,
      () => new Uint8Array([7]), () => assert.fail("nothing repeated"));
    assert.deepEqual([again.sent, again.spent, [...again.body]], [false, 1, [7]]);
  }
  const distance = (a: [number, Float64Array], b: [number, Float64Array]) =>
    a[0] !== b[0] ? Infinity : a[1].reduce((total, v, i) => total + (v - b[1][i]) ** 2, 0);
  let linked = 0;
  for (let i = 0; i < 20; i++) {
    const distances = sent[1].map((b) => distance(sent[0][i], b));
    const nearest = distances.indexOf(Math.min(...distances));
    if (Number.isFinite(distances[nearest]) && nearest === i) linked++;
  }
  // Chance links about one device (Poisson(1)): 7 or more happens once in 12,000 runs; the memo
  // sending one origin's answer to the other linked 20 of 20.
  assert.ok(linked < 7, `${linked} of 20 devices linked across origins`);
});

test("the yearly cap (3 times the total by default) refuses what the rolling window alone would allow over a year", async () => {
  const { BudgetExceeded } = await import("../src/limits.js");
  const { ledger, state } = memoryLedger({ version: 5, entries: {}, spent: {} }, 1_000_000_000);
  const defaults = new Limits({ maxEpsilon: 8 });
  assert.deepEqual([defaults.budget.yearly, new Limits({ budget: { total: 2, perDays: 30 } }).budget.yearly], [24, 6]);
  assert.throws(() => new Limits({ budget: { total: 8, perDays: 30, yearly: 0 } }), /budget.yearly/);
  const month = (m: number, epsilon: number) => ({ origin: "http://x.example", collection: `m${m}`, uid: `${m}`.padEnd(32, "u"), fingerprint: "f".repeat(64), epsilon, question: `${m}`.padEnd(64, "q"), group: null });
  for (let m = 0; m < 3; m++) {
    await ledger.markSent((await ledger.claim(month(m, 8), defaults, () => utf8(`m${m}`), () => assert.fail("no memo"))).key);
    state.now += 31 * 86_400;
  }
  await assert.rejects(ledger.claim(month(3, 1), defaults, () => assert.fail("nothing drawn"), () => assert.fail("no memo")),
    (e: Error) => e instanceof BudgetExceeded && /in the last 365 days; another 1 would pass this app's yearly cap of 24/.test(e.message));
  assert.equal(Object.keys(state.stored.entries).length, 3, "spend older than the rolling window stays while the year counts it");
  state.now += (365 - 3 * 31 + 1) * 86_400; // the first month's 8 counts no more
  assert.equal((await ledger.claim(month(4, 8), defaults, () => utf8("m4"), () => assert.fail("no memo"))).spent, 8);
});

test("a hostile stream of new questions leaves a bounded ledger, the memo's oldest answers given up first, every spend counted (as the Python device's)", async () => {
  const { BudgetExceeded } = await import("../src/limits.js");
  const start = 1_000_000_000;
  const { ledger, state } = memoryLedger({ version: 5, entries: {}, spent: {} }, start);
  const ask = (name: string, epsilon: number, limits: Limits, origin = "http://x.example") =>
    ledger.claim({ origin, collection: name, uid: name.padEnd(32, "u"), fingerprint: "f".repeat(64), epsilon, question: name.split("@")[0].padEnd(64, "q"), group: null },
      limits, () => utf8(`fresh ${name}`), () => utf8("memo"));
  // Two new questions a day for 400 days (a 10-day window, a memo of 10: a window holds twice the
  // questions the memo keeps): at most the window and a day's entries, the memo's, and a sum a day
  // for a year.
  const perDay = 2;
  const hostile = new Limits({ budget: { total: 8, perDays: 10 }, maxMemoPerOrigin: 10 });
  let drawn = 0;
  for (let day = 0; day < 400; day++)
    for (let i = 0; i < perDay; i++) {
      state.now = start + day * 86_400 + i * 3600;
      await ledger.markSent((await ask(`d${day}-${i}`, 0.001, hostile)).key);
      if (day >= 400 - 365) drawn++;
      assert.ok(Object.keys(state.stored.entries).length <= perDay * 11 + 10 && Object.keys(state.stored.spent).length <= 367);
    }
  assert.equal(Object.values(state.stored.entries).filter((e: any) => e.report).length, 10, "the memo's answers alone keep a report");
  const counted = Object.values(state.stored.spent).reduce((n: number, t: any) => n + Number(t.split("/")[0]) / Number(t.split("/")[1]), 0) +
    Object.values(state.stored.entries).reduce((n: number, e: any) => n + e.epsilon, 0);
  assert.ok(counted >= drawn * 0.001 - 1e-9 && counted <= (drawn + perDay) * 0.001 + 1e-9, `${counted} counted for ${drawn} draws`);
  // The memo of 3 at an origin: the answer given longest ago goes first; another origin's stay.
  state.stored = { version: 5, entries: {}, spent: {} };
  const three = new Limits({ maxEpsilon: 8, maxMemoPerOrigin: 3 });
  const at = async (day: number, name: string, epsilon = 0.5, origin?: string) => {
    state.now = start + day * 86_400;
    const claim = await ask(name, epsilon, three, origin);
    await ledger.markSent(claim.key);
    return claim.spent;
  };
  await at(0, "y@0", 0.5, "http://y.example");
  for (const [day, question] of ["a", "b", "c", "d"].entries()) await at(day + 1, `${question}@${day + 1}`);
  assert.deepEqual([await at(5, "d@5"), await at(6, "b@6"), await at(7, "a@7"), await at(8, "c@8"), await at(9, "y@9", 0.5, "http://y.example")], [0, 0, 0.5, 0.5, 0]);
  const withReports = Object.values(state.stored.entries).filter((e: any) => e.report).map((e: any) => e.collection).sort();
  assert.deepEqual(withReports, ["a@7", "b@2", "b@6", "c@8", "y@0", "y@9"]);
  // Two months of 8 ε, their entries leaving for their days' sums: the yearly cap still counts them.
  for (const month of [0, 1]) await at(40 + 31 * month, `m${month}@m`, 8);
  for (const filler of ["e", "f", "g"]) await at(110, `${filler}@110`, 0.001);
  assert.ok(!Object.values(state.stored.entries).some((e: any) => e.question.startsWith("m")) && Object.keys(state.stored.spent).length >= 2);
  state.now = start + 111 * 86_400;
  await assert.rejects(ask("n@111", 5, three), (e: Error) => e instanceof BudgetExceeded && /another 5 would pass this app's yearly cap of 24/.test(e.message));
  assert.equal((await ask("o@111", 4, three)).spent, 4);
});
