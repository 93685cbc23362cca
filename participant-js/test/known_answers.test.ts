/**
 * Known answers from the Python participant (`tests/js_vectors.py`, committed as test/vectors.json): float repr, canonical JSON and fingerprints, coin thresholds, `auto`'s choice,
 * and whole reports drawn from the same words, packed byte for byte as the Python one packs them.
 */
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  CollectionSpec, Participant, RecordError, ShuffledView, SpecError, floatRepr, info, makeOracle, normaliseOrigin, packReport, recordInput,
  sealedLength, viewDigest,
} from "../src/index.js";
import { expLower, reduce } from "../src/exact.js";
import { DirectEncoding, UnaryEncoding } from "../src/mechanisms.js";
import { HashWords } from "../test-support/hashwords.js";
import { vectors } from "../test-support/vectors.js";

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex");

test("floats are written as Python's repr writes them", () => {
  for (const [x, repr] of vectors.floats) assert.equal(floatRepr(x), repr, `repr(${x})`);
});

test("every spec gives Python's canonical JSON, fingerprint and protocols, and sealed reports its length", async () => {
  for (const v of vectors.specs) {
    const spec = CollectionSpec.fromDict(v.dict);
    if (v.sealed_length !== null) assert.equal(sealedLength(spec, await spec.fingerprintDigest()), v.sealed_length, v.seed);
    assert.equal(spec.canonicalJson(), v.canonical);
    assert.equal(await spec.fingerprint(), v.fingerprint);
    assert.equal(await spec.question(), v.question);
    assert.deepEqual(
      spec.oracles.map((o) => o.name),
      v.protocols,
    );
  }
});

test("continuous records are prepared as the Python participant prepares them", () => {
  for (const v of vectors.specs.filter((x: { inputs: unknown }) => x.inputs !== null)) {
    const spec = CollectionSpec.fromDict(v.dict);
    const record = v.reports[1].record;
    assert.equal(spec.nInputs, v.inputs.length);
    v.inputs.forEach((expected: number[], i: number) => {
      const got = recordInput(record, spec, i, new HashWords(new TextEncoder().encode("inputs")));
      const values = Array.isArray(got) ? got : [got];
      assert.equal(values.length, expected.length);
      values.forEach((x, j) => assert.ok(Math.abs(x - expected[j]) <= 1e-12, `input ${i}[${j}]: ${x} against ${expected[j]}`));
    });
  }
});

test("a spec changed in any field changes its fingerprint", async () => {
  const base = vectors.specs[0].dict;
  const changes = [{ epsilon: 1.0000000000000002 }, { label: "y" }, { classes: ["no", "yes"] }, { theta: 0.3 }];
  for (const change of changes) {
    assert.notEqual(await CollectionSpec.fromDict({ ...base, ...change }).fingerprint(), vectors.specs[0].fingerprint);
  }
});

test("coin thresholds equal the Python participant's, to the last of 64 bits", () => {
  for (const v of vectors.thresholds) {
    const oracle = makeOracle(v.protocol, v.epsilon, v.d);
    const got = oracle instanceof DirectEncoding ? [oracle.keepThreshold] : (oracle as UnaryEncoding).thresholds;
    assert.deepEqual(got.map(String), v.t, `${v.protocol} ε=${v.epsilon} d=${v.d}`);
  }
});

test("the certified lower bound of e^x is the Python participant's, digit for digit", () => {
  for (const v of vectors.exp_lower) {
    const bound = expLower({ n: BigInt(v.x[0]), d: BigInt(v.x[1]) });
    const reduced = reduce(bound);
    assert.deepEqual([String(reduced.n), String(reduced.d)], v.bound);
  }
});

test("auto chooses DE or OUE as the Python participant does", () => {
  for (const v of vectors.auto) assert.equal(makeOracle("auto", v.epsilon, v.d).name, v.protocol, `ε=${v.epsilon} d=${v.d}`);
});

test("the same words give the same reports, packed byte for byte", async () => {
  for (const v of vectors.specs) {
    const spec = CollectionSpec.fromDict(v.dict);
    const digest = await spec.fingerprintDigest();
    const participant = new Participant(spec, new HashWords(new TextEncoder().encode(v.seed)));
    if (spec.budget !== "one-report") {
      assert.throws(() => participant.report(v.record), RecordError);
      continue;
    }
    v.reports.forEach((r: { record: Record<string, string>; group: number | null; input: number; wire: string }, j: number) => {
      const report = participant.report(r.record, r.group ?? undefined, new Uint8Array(16).fill(j));
      assert.equal(report.input, r.input, `report ${j} of ${v.seed} (${v.dict.protocol}, ${v.dict.model ?? "discrete"})`);
      assert.equal(hex(packReport(report, digest)), r.wire, `report ${j} of ${v.seed}`);
    });
  }
});

test("every spelling of an address is keyed as the Python participant keys it", () => {
  for (const [url, origin] of vectors.origins) assert.equal(normaliseOrigin(url), origin, url);
});

test("the draws a report makes never depend on the record; only a group the spec does not take is refused", () => {
  const spec = CollectionSpec.fromDict(vectors.specs[0].dict);
  let drawn = 0;
  const source = {
    words: (n: number) => ((drawn += n), Array(n).fill(0n)),
    randbelow: () => ((drawn += 1), 0n),
  };
  const participant = new Participant(spec, source);
  const counts = [{ colour: "red", size: "S", class: "yes" }, { colour: "red", size: "S" }, { colour: "mauve", size: "S", class: "maybe" }, {}].map(
    (record) => {
      const before = drawn;
      participant.report(record);
      return drawn - before;
    },
  );
  assert.equal(new Set(counts).size, 1, `draws per record: ${counts}`);
  drawn = 0;
  assert.throws(() => participant.report({ colour: "red", size: "S", class: "yes" }, 1), /group/);
  assert.throws(() => participant.report([] as unknown as Record<string, unknown>), /record: must be a mapping/);
  assert.equal(drawn, 0);
});

test("specs this library cannot honour are refused, naming why", () => {
  const base = vectors.specs[0].dict;
  assert.throws(() => CollectionSpec.fromDict({ ...base, epsilon: 0 }), SpecError);
  assert.throws(() => CollectionSpec.fromDict({ ...base, epsilon: 51 }), SpecError);
  assert.throws(() => CollectionSpec.fromDict({ ...base, protocol: "THE", theta: null }), /must state theta/);
  assert.throws(() => CollectionSpec.fromDict({ ...base, continuous: { ranges: {} } }), /unknown continuous fields: ranges/);
  assert.throws(() => CollectionSpec.fromDict({ ...base, surprise: 1 }), /unknown spec fields: surprise/);
  assert.throws(() => CollectionSpec.fromDict({ ...base, version: 2 }), /version/);
});

test("a shuffled collection's view digest and HPKE info are Python's, byte for byte", async () => {
  assert.ok(vectors.views.length >= 4);
  for (const v of vectors.views) {
    const spec = CollectionSpec.fromDict(v.spec);
    const digest = await viewDigest(v.id, v.uid, await spec.fingerprintDigest(), v.min_batch, v.dummies);
    assert.equal(hex(digest), v.digest);
    assert.equal(hex(info(digest)), v.info);
    const view = await ShuffledView.fromDict({ ...v, fingerprint: await spec.fingerprint() });
    assert.equal(hex(view.digest), v.digest);
  }
});

test("every spec shape a service might publish is read or refused as the Python device reads or refuses it", async () => {
  const differ: string[] = [];
  for (const v of vectors.spec_shapes) {
    let fingerprint: string | null = null;
    try {
      fingerprint = await CollectionSpec.fromDict(v.dict).fingerprint();
    } catch (exc) {
      if (!(exc instanceof SpecError)) throw exc;
    }
    if ((fingerprint !== null) !== v.reads || (v.reads && fingerprint !== v.fingerprint))
      differ.push(`${JSON.stringify(v.dict)}: ${v.why ?? "read by Python"}`);
  }
  assert.deepEqual(differ, []);
});
