/**
 * Sealed reports, as the Python participant's `participant/sealing.py` seals them: the packed
 * report, its length in front and zeros behind to the collection's one length, sealed with HPKE
 * (RFC 9180, base mode: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM, by `@hpke/core`)
 * to the aggregator's public key the spec names, under the collection's view as its shuffler
 * pinned it: the view's digest goes in front of the sealed bytes (the shuffler refuses another)
 * and into HPKE's `info` (`"ldpnb sealed report v2 "` ‖ digest), so a report opens only under
 * that view. The shuffler carries the sealed bytes and reads none of them; only the aggregator
 * opens them.
 */
import { Aes128Gcm, CipherSuite, DhkemX25519HkdfSha256, HkdfSha256 } from "@hpke/core";

import { DirectEncoding, HistogramEncoding, LaplaceMean, OneBitMean, type Payload, UnaryEncoding } from "./mechanisms.js";
import { packReport } from "./report.js";
import { type CollectionSpec, SpecError } from "./spec.js";
import { DIGEST_BYTES, type ShuffledView } from "./view.js";

const INFO = new TextEncoder().encode("ldpnb sealed report v2 ");
export const ENC_BYTES = 32;
export const TAG_BYTES = 16;
const LENGTH_BYTES = 4;

let suite: CipherSuite | null = null;
const cipherSuite = () => (suite ??= new CipherSuite({ kem: new DhkemX25519HkdfSha256(), kdf: new HkdfSha256(), aead: new Aes128Gcm() }));

function largestPayload(oracle: unknown): Payload {
  if (oracle instanceof UnaryEncoding) return new Array(oracle.domainSize).fill(false);
  if (oracle instanceof HistogramEncoding) return new Float64Array(oracle.domainSize);
  if (oracle instanceof LaplaceMean) return new Float64Array(oracle.dim);
  if (oracle instanceof DirectEncoding) return oracle.domainSize - 1;
  if (oracle instanceof OneBitMean) return 2 * oracle.dim - 1;
  throw new SpecError("a mechanism this library cannot seal");
}

/** Bytes of every sealed report's plaintext: the length prefix and the longest packed report of any input. */
export function paddedLength(spec: CollectionSpec, digest: Uint8Array): number {
  const id = new Uint8Array(16);
  const longest = Math.max(...spec.oracles.map((o, input) => packReport({ input, payload: largestPayload(o), reportId: id }, digest).length));
  return LENGTH_BYTES + longest;
}

/** Bytes of every sealed report of a collection of `spec`: the view's digest, `enc`, the padded report and the tag. */
export function sealedLength(spec: CollectionSpec, digest: Uint8Array): number {
  return DIGEST_BYTES + ENC_BYTES + paddedLength(spec, digest) + TAG_BYTES;
}

/** HPKE's `info` for reports of the view whose digest is `viewDigest`. */
export function info(viewDigest: Uint8Array): Uint8Array {
  const out = new Uint8Array(INFO.length + viewDigest.length);
  out.set(INFO);
  out.set(viewDigest, INFO.length);
  return out;
}

function hexBytes(hex: string): Uint8Array {
  return Uint8Array.from(hex.match(/../g)!.map((b) => parseInt(b, 16)));
}

/** Throw SpecError unless reports can be sealed for `spec` here: a shuffler URL and a usable key. */
export async function checkSealable(spec: CollectionSpec): Promise<void> {
  if (spec.shuffle === null) throw new SpecError("this collection is not shuffled");
  spec.shuffle.checkSendable();
  try {
    await cipherSuite().kem.deserializePublicKey(hexBytes(spec.shuffle.key!.publicKey).buffer as ArrayBuffer);
  } catch {
    throw new SpecError("the collection's sealing key is not an X25519 public key; refusing to report");
  }
}

/** The sealed form of the packed report `packed` for `view` (whose spec's digest is `digest`): the view's digest ‖ enc ‖ ciphertext. */
export async function seal(packed: Uint8Array, view: ShuffledView, digest: Uint8Array): Promise<Uint8Array> {
  const spec = view.spec;
  const size = paddedLength(spec, digest);
  if (LENGTH_BYTES + packed.length > size) throw new RangeError("a packed report longer than any report of its spec");
  const padded = new Uint8Array(size);
  new DataView(padded.buffer).setUint32(0, packed.length);
  padded.set(packed, LENGTH_BYTES);
  const hpke = cipherSuite();
  const recipientPublicKey = await hpke.kem.deserializePublicKey(hexBytes(spec.shuffle!.key!.publicKey).buffer as ArrayBuffer);
  const sender = await hpke.createSenderContext({ recipientPublicKey, info: info(view.digest).buffer as ArrayBuffer });
  const ciphertext = new Uint8Array(await sender.seal(padded.buffer as ArrayBuffer));
  const out = new Uint8Array(DIGEST_BYTES + ENC_BYTES + ciphertext.length);
  out.set(view.digest, 0);
  out.set(new Uint8Array(sender.enc), DIGEST_BYTES);
  out.set(ciphertext, DIGEST_BYTES + ENC_BYTES);
  return out;
}
