/**
 * A collection whose reports reach the aggregator through a shuffler: the spec's `shuffle` block,
 * read as the Python participant's `participant/shuffled.py` reads it (the same refusals, the same
 * canonical JSON, so the same fingerprint). A collection that takes reports only from enrolled
 * people adds `issuer_key`, the public key that issues their anonymous tokens (`tokens.ts`).
 */
import { SpecError } from "./errors.js";
import { PyFloat, type PyValue } from "./pyjson.js";

export const MIN_BATCH_RANGE: [number, number] = [2, 1e9];
export const DUMMIES_RANGE: [number, number] = [0, 1e9];
export const KEMS: Record<number, string> = { 0x0020: "DHKEM(X25519, HKDF-SHA256)" };
export const KDFS: Record<number, string> = { 0x0001: "HKDF-SHA256" };
export const AEADS: Record<number, string> = { 0x0001: "AES-128-GCM" };
const HEX_KEY = /^[0-9a-f]{64}$/;
const URL_SHAPE = /^https?:\/\/[^\s/?#]+(\/[^\s?#]*)?$/;
// An issuing key: DER SubjectPublicKeyInfo in URL-safe base64 without padding (an RSA key of 2048
// to 4096 bits takes about 400 to 750 characters).
const ISSUER_KEY = /^[A-Za-z0-9_-]{100,1000}$/;

function integer(value: unknown, what: string, low: number, high: number): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < low || value > high)
    throw new SpecError(`${what} must be an integer from ${low} to ${high}`);
  return value;
}

const isMapping = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** The aggregator's HPKE public key reports are sealed to: its id, the suite (RFC 9180 identifiers) and the X25519 public key in hex. */
export interface SealingKey {
  id: number;
  kem: number;
  kdf: number;
  aead: number;
  publicKey: string;
}

function sealingKey(data: unknown): SealingKey {
  const fields = ["aead", "id", "kdf", "kem", "public_key"];
  if (!isMapping(data) || Object.keys(data).sort().join() !== fields.join())
    throw new SpecError("shuffle.key must be a mapping of id, kem, kdf, aead and public_key");
  const key: SealingKey = {
    id: integer(data.id, "shuffle.key.id", 0, 255),
    kem: integer(data.kem, "shuffle.key.kem", 0, 0xffff),
    kdf: integer(data.kdf, "shuffle.key.kdf", 0, 0xffff),
    aead: integer(data.aead, "shuffle.key.aead", 0, 0xffff),
    publicKey: data.public_key as string,
  };
  if (!(key.kem in KEMS) || !(key.kdf in KDFS) || !(key.aead in AEADS))
    throw new SpecError(`shuffle.key names a suite this library does not seal with (${key.kem}, ${key.kdf}, ${key.aead})`);
  if (typeof key.publicKey !== "string" || !HEX_KEY.test(key.publicKey))
    throw new SpecError("shuffle.key.public_key must be an X25519 public key: 64 lower-case hex digits");
  return key;
}

/**
 * How a collection's reports are shuffled; `url` and `key` are null in a spec that is only
 * simulated. `issuerKey` (the issuing key's DER SubjectPublicKeyInfo, URL-safe base64 without
 * padding), when set, admits only reports carrying an anonymous token it issued.
 */
export class Shuffle {
  private constructor(
    readonly minBatch: number,
    readonly delta: number,
    readonly url: string | null,
    readonly key: SealingKey | null,
    readonly dummies: number,
    readonly issuerKey: string | null = null,
  ) {}

  static fromDict(data: unknown): Shuffle {
    if (!isMapping(data)) throw new SpecError("shuffle must be a mapping of min_batch and delta (and the shuffler's url and key)");
    const unknown = Object.keys(data).filter((k) => !["min_batch", "delta", "url", "key", "dummies", "issuer_key"].includes(k));
    if (unknown.length) throw new SpecError(`unknown shuffle fields: ${unknown.sort().join(", ")}`);
    if (!("min_batch" in data) || !("delta" in data)) throw new SpecError("shuffle needs min_batch (the fewest reports released at once) and delta");
    const minBatch = integer(data.min_batch, "shuffle.min_batch", ...MIN_BATCH_RANGE);
    const delta = data.delta;
    if (typeof delta !== "number" || !Number.isFinite(delta) || delta <= 0 || delta >= 1) throw new SpecError("shuffle.delta must lie in (0, 1)");
    if (delta * minBatch >= 1)
      throw new SpecError(`shuffle.delta ${delta} is not below 1/min_batch = 1/${minBatch}: at that delta one person's record of every batch could be published outright`);
    const dummies = integer(data.dummies ?? 0, "shuffle.dummies", ...DUMMIES_RANGE);
    const url = data.url ?? null;
    if (url !== null && (typeof url !== "string" || url.length > 2048 || !URL_SHAPE.test(url)))
      throw new SpecError("shuffle.url must be the shuffler's http(s) URL");
    const issuerKey = data.issuer_key ?? null;
    if (issuerKey !== null && (typeof issuerKey !== "string" || !ISSUER_KEY.test(issuerKey)))
      throw new SpecError("shuffle.issuer_key must be an issuing key's DER SubjectPublicKeyInfo in URL-safe base64");
    const key = data.key === undefined || data.key === null ? null : sealingKey(data.key);
    return new Shuffle(minBatch, delta, url as string | null, key, dummies, issuerKey as string | null);
  }

  toDict(): PyValue {
    const out: Record<string, PyValue> = { min_batch: this.minBatch, delta: new PyFloat(this.delta) };
    if (this.dummies) out.dummies = this.dummies;
    if (this.url !== null) out.url = this.url;
    if (this.key !== null) {
      const k = this.key;
      out.key = { id: k.id, kem: k.kem, kdf: k.kdf, aead: k.aead, public_key: k.publicKey };
    }
    if (this.issuerKey !== null) out.issuer_key = this.issuerKey;
    return out;
  }

  /** Throw SpecError unless a device can send through this shuffler (its URL and key). */
  checkSendable(): void {
    if (this.url === null || this.key === null)
      throw new SpecError("this collection is shuffled but its spec names no shuffler url or sealing key; refusing to report");
  }
}
