/**
 * Anonymous tokens for shuffled collections that take reports only from enrolled people, as the
 * Python participant's `participant/tokens.py` makes them (the same bytes): Privacy Pass's publicly
 * verifiable tokens (RFC 9577 and 9578, token type 2), blinded and finalized with
 * RSABSSA-SHA384-PSS-Deterministic (RFC 9474) by `@cloudflare/blindrsa-ts` on Web Crypto.
 *
 * - **The issuing key** is the collection's own RSA key (2048 bits or more), published in its spec
 *   (`shuffle.issuer_key`, DER SubjectPublicKeyInfo in URL-safe base64), so the view the shuffler
 *   pins holds it. `token_key_id` is the SHA-256 of that DER.
 * - **The challenge** (RFC 9577's TokenChallenge): `token_type` 2, `issuer_name` `"ldpnb"`,
 *   `redemption_context` the view's digest (32 bytes), `origin_info` the collection's id.
 * - **The token input** (RFC 9578, 6.1): `token_type ‖ nonce ‖ SHA-256(challenge) ‖ token_key_id`,
 *   the nonce being `SHA-256("ldpnb token nonce v1" ‖ sealed report)`: a token is bound to the one
 *   sealed report it was issued for.
 * - **Issuance**: the device blinds the token input ({@link tokenRequest}: `token_type ‖ last byte
 *   of token_key_id ‖ blinded message`), the issuer signs it blind, the device unblinds and checks
 *   the signature under the view's key ({@link finish}) before it keeps the token, and sends the
 *   sealed report with the token behind it. The shuffler checks the token and strips it.
 */
import { RSABSSA } from "@cloudflare/blindrsa-ts";

import { ParticipantError, SpecError } from "./errors.js";
import { type ShuffledView } from "./view.js";

export const TOKEN_TYPE = 2;
const utf8 = (text: string) => new TextEncoder().encode(text);
export const ISSUER_NAME = utf8("ldpnb");
const NONCE_PREFIX = utf8("ldpnb token nonce v1");
/** token_type (2) ‖ nonce (32) ‖ challenge digest (32) ‖ token_key_id (32). */
export const INPUT_BYTES = 2 + 32 + 32 + 32;
/** The smallest modulus an issuing key may have, in bits (Privacy Pass's tokens use 2048). */
export const MIN_BITS = 2048;

/** A blind signature step refused its input: an issuer's answer that is not a signature under the view's issuing key. Nothing was sent. */
export class BlindSignatureError extends ParticipantError {}

/** The blind-signature suite of token type 2: RSABSSA-SHA384-PSS-Deterministic (its `finalize` verifies the signature). */
export const SUITE = RSABSSA.SHA384.PSS.Deterministic();

/** An issuing key as Web Crypto holds it: the key, its DER, `token_key_id` and the modulus's length in bytes (Nk). */
export interface IssuingKey {
  key: CryptoKey;
  der: Uint8Array;
  keyId: Uint8Array;
  size: number;
}

/** URL-safe base64 without padding, decoded. */
export function fromBase64Url(text: string): Uint8Array {
  const standard = text.replace(/-/g, "+").replace(/_/g, "/");
  return Uint8Array.from(atob(standard + "=".repeat((4 - (standard.length % 4)) % 4)), (c) => c.charCodeAt(0));
}

/** Bytes as URL-safe base64 without padding (a spec's `issuer_key`). */
export function toBase64Url(bytes: Uint8Array): string {
  let text = "";
  for (const b of bytes) text += String.fromCharCode(b);
  return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

export function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

const u16 = (value: number) => Uint8Array.of(value >> 8, value & 0xff);

async function sha256(bytes: Uint8Array): Promise<Uint8Array> {
  return new Uint8Array(await globalThis.crypto.subtle.digest("SHA-256", bytes as unknown as ArrayBuffer));
}

const keys = new Map<string, Promise<IssuingKey>>(); // imported keys, by their spec text

async function imported(text: string): Promise<IssuingKey> {
  let der: Uint8Array;
  let key: CryptoKey;
  try {
    der = fromBase64Url(text);
    key = await globalThis.crypto.subtle.importKey("spki", der as unknown as ArrayBuffer, { name: "RSA-PSS", hash: "SHA-384" }, true, ["verify"]);
  } catch {
    throw new SpecError("the collection's issuing key is not an RSA public key (DER SubjectPublicKeyInfo); refusing to report");
  }
  const bits = (key.algorithm as RsaHashedKeyAlgorithm).modulusLength;
  if (!(bits >= MIN_BITS)) throw new SpecError(`the issuing key has ${bits} bits; at least ${MIN_BITS} are needed; refusing to report`);
  return { key, der, keyId: await sha256(der), size: Math.ceil(bits / 8) };
}

/**
 * The issuing key a spec's `issuer_key` names, imported with Web Crypto (RSA-PSS, SHA-384);
 * SpecError when it is not an RSA key of at least 2048 bits.
 */
export function issuingKey(issuerKey: string): Promise<IssuingKey> {
  let key = keys.get(issuerKey);
  if (key === undefined) {
    if (keys.size >= 256) keys.clear();
    key = imported(issuerKey);
    keys.set(issuerKey, key);
  }
  return key;
}

/** The view's `issuer_key` text; SpecError when its collection takes no tokens. */
export function issuerOf(view: ShuffledView): string {
  const text = view.spec.shuffle?.issuerKey ?? null;
  if (text === null) throw new SpecError(`collection '${view.collection}' takes no tokens`);
  return text;
}

/** `token_key_id`: the SHA-256 of the issuing key's DER SubjectPublicKeyInfo (32 bytes). */
export async function keyId(issuerKey: string): Promise<Uint8Array> {
  return (await issuingKey(issuerKey)).keyId;
}

/** The collection's TokenChallenge (RFC 9577, 2.1.1), as bytes. */
export function challenge(view: ShuffledView): Uint8Array {
  const origin = utf8(view.collection);
  return concat(u16(TOKEN_TYPE), u16(ISSUER_NAME.length), ISSUER_NAME, Uint8Array.of(view.digest.length), view.digest, u16(origin.length), origin);
}

/** Bytes of a token of the view's collection: the token input and the signature. */
export async function tokenLength(view: ShuffledView): Promise<number> {
  return INPUT_BYTES + (await issuingKey(issuerOf(view))).size;
}

/** What the issuer signs blind for the report `sealed`: `token_type ‖ nonce ‖ challenge digest ‖ token_key_id`. */
export async function tokenInput(view: ShuffledView, sealed: Uint8Array): Promise<Uint8Array> {
  const nonce = await sha256(concat(NONCE_PREFIX, sealed));
  return concat(u16(TOKEN_TYPE), nonce, await sha256(challenge(view)), await keyId(issuerOf(view)));
}

/**
 * A TokenRequest for the report `sealed` (RFC 9578, 6.1: `token_type ‖ truncated token_key_id ‖
 * blinded message`) and the blind's inverse (Nk bytes, big-endian), which {@link finish} needs.
 */
export async function tokenRequest(view: ShuffledView, sealed: Uint8Array): Promise<{ request: Uint8Array; inverse: Uint8Array }> {
  const issuer = await issuingKey(issuerOf(view));
  const { blindedMsg, inv } = await SUITE.blind(issuer.key, await tokenInput(view, sealed));
  return { request: concat(u16(TOKEN_TYPE), issuer.keyId.subarray(31), blindedMsg), inverse: inv };
}

/**
 * The token for the report `sealed` from the issuer's TokenResponse (its blind signature) and the
 * blind's `inverse`, checked under the view's key before it is returned: an issuer signing with
 * any other key, or answering anything but a signature, is refused (BlindSignatureError).
 */
export async function finish(view: ShuffledView, sealed: Uint8Array, response: Uint8Array, inverse: Uint8Array): Promise<Uint8Array> {
  const issuer = await issuingKey(issuerOf(view));
  const message = await tokenInput(view, sealed);
  if (!(response instanceof Uint8Array) || response.length !== issuer.size)
    throw new BlindSignatureError(`the issuer's answer is not a blind signature of ${issuer.size} bytes; nothing was sent`);
  let signature: Uint8Array;
  try {
    signature = await SUITE.finalize(issuer.key, message, response, inverse);
  } catch (error) {
    throw new BlindSignatureError(
      `the issuer's answer is not a signature under the collection's issuing key (${(error as Error).message}); nothing was sent`,
    );
  }
  return concat(message, signature);
}
