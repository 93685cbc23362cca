/**
 * A shuffled collection as its shuffler pinned it, as the Python participant's
 * `participant/view.py` reads it: the one view every device reports under. The device learns a
 * shuffled collection's spec, uid, key and floor from the shuffler the app pinned, never from the
 * aggregator alone, and refuses a collection whose aggregator answer differs from the view. The
 * view's digest binds the collection's id and uid, the spec's digest, the batch floor and the
 * dummies; every sealed report carries it, in the clear and in HPKE's `info`:
 *
 *     SHA-256("ldpnb shuffled view v1" 0x00 ‖ spec digest (32) ‖ min_batch (u64) ‖ dummies (u64)
 *             ‖ len(id) (u16) ‖ id ‖ len(uid) (u16) ‖ uid)          (integers big-endian, text UTF-8)
 */
import { ClientError } from "./errors.js";
import { type Limits } from "./limits.js";
import { CollectionSpec, SpecError, hexOf } from "./spec.js";

const PREFIX = new TextEncoder().encode("ldpnb shuffled view v1\u0000");
export const DIGEST_BYTES = 32;

/** The 32-byte digest of a view (see the module's text). */
export async function viewDigest(collection: string, uid: string, specDigest: Uint8Array, minBatch: number, dummies: number): Promise<Uint8Array> {
  const id = new TextEncoder().encode(collection);
  const u = new TextEncoder().encode(uid);
  const bytes = new Uint8Array(PREFIX.length + 32 + 16 + 2 + id.length + 2 + u.length);
  const view = new DataView(bytes.buffer);
  let at = 0;
  bytes.set(PREFIX, at);
  at += PREFIX.length;
  bytes.set(specDigest, at);
  at += 32;
  view.setBigUint64(at, BigInt(minBatch));
  view.setBigUint64(at + 8, BigInt(dummies));
  at += 16;
  view.setUint16(at, id.length);
  bytes.set(id, at + 2);
  at += 2 + id.length;
  view.setUint16(at, u.length);
  bytes.set(u, at + 2);
  return new Uint8Array(await globalThis.crypto.subtle.digest("SHA-256", bytes));
}

const isWhole = (v: unknown): v is number => typeof v === "number" && Number.isInteger(v) && v >= 0 && v < 2 ** 53;

export class ShuffledView {
  private constructor(
    readonly collection: string,
    readonly uid: string,
    readonly spec: CollectionSpec,
    readonly fingerprint: string,
    readonly minBatch: number,
    readonly dummies: number,
    readonly digest: Uint8Array,
  ) {}

  /** The view a shuffler's answer describes, checked: the spec's size against `limits` before it is built, the spec, its fingerprint, its floor and dummies against the spec's, and the digest. */
  static async fromDict(data: unknown, limits?: Limits): Promise<ShuffledView> {
    if (typeof data !== "object" || data === null) throw new ClientError("the shuffler's view of the collection is not a mapping");
    const { spec: raw, uid, fingerprint, id, min_batch: minBatch, dummies, digest } = data as Record<string, unknown>;
    if (typeof id !== "string" || typeof fingerprint !== "string" || typeof digest !== "string")
      throw new ClientError("the shuffler's view names a collection, fingerprint or digest that is not text");
    if (typeof uid !== "string" || uid.length < 16 || uid.length > 256) throw new SpecError("the view names no usable collection identity (uid)");
    limits?.checkSpec(raw, id);
    const spec = CollectionSpec.fromDict(raw);
    if ((await spec.fingerprint()) !== fingerprint) throw new ClientError("the shuffler's view does not match its spec's fingerprint; refusing to report");
    if (spec.shuffle === null) throw new SpecError(`collection '${id}' is not shuffled: it has no shuffled view`);
    if (!isWhole(minBatch) || !isWhole(dummies)) throw new SpecError("the view's min_batch and dummies must be whole numbers");
    if (minBatch < spec.shuffle.minBatch || dummies < spec.shuffle.dummies)
      throw new SpecError(
        `the shuffler's view of '${id}' holds batches to ${minBatch} people and ${dummies} dummies, below the spec's ` +
          `${spec.shuffle.minBatch} and ${spec.shuffle.dummies}; refusing to report`,
      );
    const computed = await viewDigest(id, uid, await spec.fingerprintDigest(), minBatch, dummies);
    if (hexOf(computed) !== digest) throw new ClientError("the shuffler's view does not match its digest; refusing to report");
    return new ShuffledView(id, uid, spec, fingerprint, minBatch, dummies, computed);
  }

  /** Throw SpecError unless the aggregator published this very collection: the id asked for, the view's uid and spec. */
  checkPublished(collection: string, uid: string, fingerprint: string): void {
    if (this.collection !== collection)
      throw new SpecError(`the shuffler answered for collection '${this.collection}', not '${collection}'; refusing to report`);
    if (this.uid !== uid || this.fingerprint !== fingerprint)
      throw new SpecError(
        `the aggregator publishes collection '${collection}' with another identity or spec than the view its shuffler pinned ` +
          "(a device told something else, or a collection recreated under the same id); refusing to report",
      );
  }
}
