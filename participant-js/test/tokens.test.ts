/**
 * Anonymous tokens (src/tokens.ts) against the Python participant's known answers
 * (`tests/js_vectors.py`, committed as test/vectors.json): RFC 9474's vectors of the two PSS
 * variants through @cloudflare/blindrsa-ts as the device calls it, the challenge, token input,
 * TokenRequest and token of fixed views byte for byte, and a signature under any other key refused.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { mock, test } from "node:test";

import { RSABSSA } from "@cloudflare/blindrsa-ts";

import { CollectionSpec, LedgerError, Limits, ShuffledView, SpecError, viewDigest } from "../src/index.js";
import { Ledger, type LedgerData, fromBase64 } from "../src/ledger.js";
import { fileLedger } from "../src/node.js";
import {
  BlindSignatureError, SUITE, challenge, finish, fromBase64Url, issuingKey, keyId, toBase64Url, tokenInput, tokenLength, tokenRequest,
} from "../src/tokens.js";
import { vectors } from "../test-support/vectors.js";

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex");
const bytes = (text: string) => new Uint8Array(Buffer.from(text, "hex"));

/** Run `work` with the platform's randomness replaced by `draws`, handed out in turn (each exactly as long as asked for); all of them must be drawn. */
async function drawing<T>(draws: Uint8Array[], work: () => Promise<T>): Promise<T> {
  const queue = [...draws];
  const stub = mock.method(globalThis.crypto, "getRandomValues", <A extends ArrayBufferView | null>(array: A): A => {
    const out = array as unknown as Uint8Array;
    if (out.length === 0) return array; // an empty prefix (the deterministic variant) draws nothing
    const next = queue.shift();
    assert.ok(next !== undefined && next.length === out.length, `an unexpected draw of ${out.length} bytes`);
    out.set(next);
    return array;
  });
  try {
    const result = await work();
    assert.equal(queue.length, 0, "fewer draws than the known answer made");
    return result;
  } finally {
    stub.mock.restore();
  }
}

async function viewOf(v: Record<string, unknown>): Promise<ShuffledView> {
  const spec = CollectionSpec.fromDict(v.spec);
  return ShuffledView.fromDict({ ...v, fingerprint: await spec.fingerprint() });
}

test("RFC 9474's vectors of the PSS variants, blinded and finalized by blindrsa-ts on the key as the device imports it", async () => {
  assert.deepEqual(
    vectors.blind_rsa.map((v: { name: string }) => v.name),
    ["RSABSSA-SHA384-PSS-Randomized", "RSABSSA-SHA384-PSS-Deterministic"],
  );
  for (const v of vectors.blind_rsa) {
    const { key, size } = await issuingKey(v.issuer_key);
    assert.equal(size, 512, v.name);
    const suite = v.name.endsWith("Deterministic") ? SUITE : RSABSSA.SHA384.PSS.Randomized();
    const prefix = bytes(v.msg_prefix);
    const input = await drawing(prefix.length ? [prefix] : [], async () => suite.prepare(bytes(v.msg)));
    assert.equal(hex(input), v.input_msg, v.name);
    const { blindedMsg, inv } = await drawing([bytes(v.salt), bytes(v.r)], () => suite.blind(key, input));
    assert.equal(hex(blindedMsg), v.blinded_msg, v.name);
    assert.equal(hex(inv), v.inv, v.name);
    assert.equal(hex(await suite.finalize(key, input, bytes(v.blind_sig), inv)), v.sig, v.name);
    assert.ok(await suite.verify(key, bytes(v.sig), input));
    const altered = bytes(v.blind_sig);
    altered[100] ^= 1;
    await assert.rejects(suite.finalize(key, input, altered, inv), /invalid signature/);
  }
});

test("the challenge, token input, TokenRequest and token are the Python participant's, byte for byte", async () => {
  assert.equal(vectors.tokens.length, 2);
  for (const v of vectors.tokens) {
    const view = await viewOf(v);
    const sealed = bytes(v.sealed);
    assert.equal(hex(view.digest), v.digest);
    assert.equal(hex(challenge(view)), v.challenge, v.id);
    assert.equal(hex(await keyId(view.spec.shuffle!.issuerKey!)), v.key_id);
    assert.equal(hex(await tokenInput(view, sealed)), v.token_input, v.id);
    assert.equal(await tokenLength(view), v.token_length);
    // Blinded with the salt and the blind the Python participant drew: the same request.
    const { request, inverse } = await drawing([bytes(v.salt), bytes(v.r)], () => tokenRequest(view, sealed));
    assert.equal(hex(request), v.request, v.id);
    assert.equal(hex(inverse), v.inverse, v.id);
    // The issuer's blind signature, finished: the very token the Python participant finished.
    assert.equal(hex(await finish(view, sealed, bytes(v.blind_signature), inverse)), v.token, v.id);
  }
});

test("finish refuses anything but a signature of this report under the view's issuing key", async () => {
  const [v, w] = vectors.tokens;
  const view = await viewOf(v);
  const sealed = bytes(v.sealed);
  const inverse = bytes(v.inverse);
  // The Python issuer's signature of another report (another collection's view: another input).
  await assert.rejects(finish(view, sealed, bytes(w.blind_signature), bytes(w.inverse)), BlindSignatureError);
  // This report's signature, for another sealed report.
  const other = bytes(v.sealed);
  other[0] ^= 1;
  await assert.rejects(finish(view, other, bytes(v.blind_signature), inverse), BlindSignatureError);
  // Not a signature at all: too short, or zeros.
  await assert.rejects(finish(view, sealed, bytes(v.blind_signature).slice(1), inverse), BlindSignatureError);
  await assert.rejects(finish(view, sealed, new Uint8Array(512), inverse), BlindSignatureError);
  assert.equal(hex(await finish(view, sealed, bytes(v.blind_signature), inverse)), v.token); // and the right one taken
});

test("a fresh issuing key of 2048 bits: a request its holder signs blind finishes to a token that verifies, another key's does not", async () => {
  const pairs = await Promise.all(
    [0, 1].map(() => RSABSSA.SHA384.generateKey({ modulusLength: 2048, publicExponent: Uint8Array.of(1, 0, 1) })),
  );
  // The other key's modulus the larger: it signs whatever the device blinds under its own (a
  // smaller one would refuse some blinded messages outright), under the wrong key.
  const modulus = async (pair: CryptoKeyPair) => BigInt(`0x${hex(fromBase64Url((await crypto.subtle.exportKey("jwk", pair.publicKey)).n!))}`);
  const [own, other] = (await modulus(pairs[0])) < (await modulus(pairs[1])) ? pairs : [pairs[1], pairs[0]];
  const issuerKey = toBase64Url(new Uint8Array(await crypto.subtle.exportKey("spki", own.publicKey)));
  const v = vectors.tokens[0];
  const spec = { ...v.spec, shuffle: { ...v.spec.shuffle, issuer_key: issuerKey } };
  const parsed = CollectionSpec.fromDict(spec);
  const digest = await viewDigest(v.id, v.uid, await parsed.fingerprintDigest(), v.min_batch, v.dummies);
  const view = await ShuffledView.fromDict({ ...v, spec, fingerprint: await parsed.fingerprint(), digest: hex(digest) });
  const sealed = bytes(v.sealed);
  assert.equal(await tokenLength(view), 98 + 256);
  const { request, inverse } = await tokenRequest(view, sealed);
  assert.equal(request.length, 3 + 256);
  assert.deepEqual([...request.slice(0, 3)], [0, 2, (await keyId(issuerKey))[31]]);
  const token = await finish(view, sealed, await SUITE.blindSign(own.privateKey, request.slice(3)), inverse);
  assert.equal(hex(token.slice(0, 98)), hex(await tokenInput(view, sealed)));
  assert.ok(await SUITE.verify((await issuingKey(issuerKey)).key, token.slice(98), token.slice(0, 98)));
  await assert.rejects(finish(view, sealed, await SUITE.blindSign(other.privateKey, request.slice(3)), inverse), BlindSignatureError);
  // Two requests for one report look nothing alike: the issuer cannot tell a repeat.
  assert.notEqual(hex((await tokenRequest(view, sealed)).request), hex(request));
});

test("an issuing key is refused as the Python device refuses it: not RSA, or under 2048 bits", async () => {
  assert.deepEqual(
    vectors.issuer_keys.map((k: { refused: boolean }) => k.refused),
    [false, false, true, true],
  );
  for (const { issuer_key: text, refused } of vectors.issuer_keys) {
    if (refused) await assert.rejects(issuingKey(text), SpecError, text.slice(0, 40));
    else assert.ok((await issuingKey(text)).size >= 256);
  }
  await assert.rejects(issuingKey("A".repeat(100)), /not an RSA public key/);
});

const utf8 = (text: string) => new TextEncoder().encode(text);
const asked = (collection: string, question = "") => ({
  origin: "https://a.example", collection, uid: collection.padEnd(32, "u"), fingerprint: "f".repeat(64), epsilon: 0.25, question, group: null,
});

/** reseal's rules on `ledger`: only an unsent shuffled entry takes another sealed copy, which a claim then hands out. */
async function resealing(ledger: Ledger): Promise<void> {
  const limits = new Limits();
  const shuffled = await ledger.claim(asked("s"), limits, () => utf8("report"), () => assert.fail("never memoised"), async () => utf8("sealed"));
  await ledger.reseal(shuffled.key, utf8("sealed+request+inverse"));
  await ledger.reseal(shuffled.key, utf8("sealed+token"));
  const again = await ledger.claim(asked("s"), limits, () => assert.fail("claimed already"), () => assert.fail("never memoised"));
  assert.deepEqual([new TextDecoder().decode(again.sealed!), new TextDecoder().decode(again.body), again.sent], ["sealed+token", "report", false]);
  const direct = await ledger.claim(asked("d", "q".repeat(64)), limits, () => utf8("direct"), () => assert.fail("no memo yet"));
  await assert.rejects(ledger.reseal(direct.key, utf8("x")), LedgerError); // not shuffled
  await assert.rejects(ledger.reseal("https://a.example nowhere", utf8("x")), LedgerError); // no entry
  await ledger.markSent(shuffled.key);
  await assert.rejects(ledger.reseal(shuffled.key, utf8("x")), /no unsent shuffled entry/); // acknowledged: nothing to attach a token to
}

test("reseal replaces an unsent shuffled entry's sealed copy, and nothing else, in a storage of any kind", async () => {
  let data: LedgerData = { version: 3, entries: {}, spent: {} };
  const memory = new Ledger({
    async update(change) {
      const copy = structuredClone(data);
      const { result, write } = change(copy);
      if (write) data = copy;
      return result;
    },
  });
  await resealing(memory);
});

test("reseal in the Node file ledger: the new copy in a file of its own, the one it replaced removed once the ledger no longer names it", async () => {
  const path = join(mkdtempSync(join(tmpdir(), "ldpnb-reseal-")), "ledger.json");
  const ledger = fileLedger(path);
  const files = () => readdirSync(`${path}.reports`).sort();
  const claim = await ledger.claim(asked("s"), new Limits(), () => utf8("report"), () => assert.fail("never memoised"), async () => utf8("sealed"));
  const before = files();
  assert.equal(before.length, 2); // the report and its sealed copy
  await ledger.reseal(claim.key, utf8("sealed+token"));
  const after = files();
  assert.equal(after.length, 2);
  assert.equal(after.filter((name) => before.includes(name)).length, 1, "the report's file stays, the old sealed copy's goes");
  assert.equal(new TextDecoder().decode(fromBase64((await ledger.entries())[claim.key].sealed!)), "sealed+token");
  await resealing(fileLedger(join(mkdtempSync(join(tmpdir(), "ldpnb-reseal-")), "ledger.json")));
});
