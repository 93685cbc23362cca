/**
 * SHA-256, synchronous: the ledger computes its markers inside a storage's transaction (an
 * IndexedDB transaction cannot wait on Web Crypto), a few digests a change. The digest is the
 * Stanford JavaScript Crypto Library's, as the blind-signature library vendors it (already in the
 * browser bundle for RFC 9474's arithmetic), not one written here.
 */
import * as vendored from "@cloudflare/blindrsa-ts/lib/src/sjcl/index.js";

// Its declaration says `export =`; the module itself (ECMAScript) exports the library as its default.
const sjcl = (vendored as unknown as { default: typeof vendored }).default;

/** The SHA-256 of `bytes` (32 bytes). */
export function sha256(bytes: Uint8Array): Uint8Array {
  const digest = sjcl.hash.sha256.hash(sjcl.codec.bytes.toBits(Array.from(bytes)));
  return Uint8Array.from(sjcl.codec.bytes.fromBits(digest));
}
