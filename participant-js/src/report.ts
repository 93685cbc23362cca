/**
 * One person's report: the input chosen independently of the data, randomised with that input's
 * oracle, and packed in the service's msgpack wire format.
 */
import { encode } from "@msgpack/msgpack";

import { RecordError } from "./errors.js";
import type { ExactRandomness } from "./exact.js";
import type { Payload } from "./mechanisms.js";
import { SecureRandom } from "./random.js";
import type { CollectionSpec } from "./spec.js";

export interface Report {
  /** The input the report carries: 0 the class, i + 1 feature i jointly with the class. */
  input: number;
  payload: Payload;
  /** 16 random bytes that make a re-send idempotent. */
  reportId: Uint8Array;
}

export type RawRecord = Record<string, unknown>;

/** `record`'s own value of `field` (never one inherited from Object's prototype). */
function own(record: RawRecord, field: string): unknown {
  return Object.prototype.hasOwnProperty.call(record, field) ? record[field] : undefined;
}

/** The 0-based code of `value` (compared as written) among a field's declared codes, or null for a missing or undeclared value. */
function declared(value: unknown, codes: Map<string, number>): number | null {
  return value === undefined || value === null ? null : codes.get(String(value)) ?? null;
}

/** A double with 53 random bits in [0, 1), exactly as the Python participant's `random()` draws it. */
function uniform(source: ExactRandomness): number {
  return Number(source.words(1)[0] >> 11n) * 2 ** -53;
}

/**
 * Input `i`'s value for `record` (a number, or the class-hiding vector of a Gaussian input), as
 * the Python participant's `record_input`: a field the spec declares no value for (missing, a
 * category or class the spec leaves out, a continuous value that is not a finite number) takes a
 * value drawn uniformly from the declared ones, so the report is still ε-LDP for the person and
 * whether the device sends never tells what the record held. The substitutes are drawn whatever
 * the record holds, in a fixed order (the class, then the reported feature's category, or every
 * continuous input's value). Throws RecordError only for a record that is not a mapping.
 */
export function recordInput(record: RawRecord, spec: CollectionSpec, i: number, source: ExactRandomness): number | number[] {
  if (typeof record !== "object" || record === null || Array.isArray(record))
    throw new RecordError("record", "must be a mapping of field name to value");
  const k = spec.nClasses;
  const classDraw = Number(source.randbelow(BigInt(k)));
  const c = declared(own(record, spec.label), spec.classCodes) ?? classDraw;
  const prep = spec.continuous;
  if (prep === null) {
    if (i === 0) return c;
    const feature = spec.features[i - 1];
    const categoryDraw = Number(source.randbelow(BigInt(feature.categories.length)));
    const a = declared(own(record, feature.name), spec.categoryCodes[i - 1]) ?? categoryDraw;
    return a * k + c;
  }
  const raw: Record<string, number> = {};
  for (const f of prep.inputs) {
    const drawn = f.low + uniform(source) * (f.high - f.low);
    const value = own(record, f.name);
    raw[f.name] = typeof value === "number" && Number.isFinite(value) ? value : drawn;
  }
  const z = prep.transform(raw);
  if (spec.model === "discrete") return i === 0 ? c : prep.discretise(z)[i - 1] * k + c;
  if (i === 0) return c;
  const hidden = z.map((v) => Array.from({ length: k }, (_, j) => (j === c ? v : 0)));
  const squares = hidden.map((row) => row.map((v) => v * v));
  if (spec.approach === 3) return (i % 2 === 1 ? hidden : squares)[(i - 1) >> 1];
  return (i === 1 ? hidden : squares).flat();
}

/** The input a person reports, from the source only (never the record): the Python participant's draws. */
export function chooseInput(spec: CollectionSpec, source: ExactRandomness): number {
  const n = spec.nInputs;
  if (spec.classShare === null) return Number(source.randbelow(BigInt(n)));
  const feature = 1 + Number(source.randbelow(BigInt(n - 1)));
  // A double with 53 random bits, exactly as the Python participant draws it: the share is public
  // and the comparison does not look at the record.
  const uniform = Number(source.words(1)[0] >> 11n) * 2 ** -53;
  return uniform < spec.classShare ? 0 : feature;
}

/** `finite` as the Python participant's `_finite`: a finite number (a string, a boolean or NaN is not). */
function finite(value: unknown): boolean {
  return typeof value === "number" && Number.isFinite(value);
}

/**
 * One person's side of a collection. `strict` refuses (RecordError, before anything is drawn) a
 * record holding a key the spec does not know, lacking one of its fields, or holding a value it
 * does not declare; by default such a record is reported, an unknown key and a value that differs
 * from a declared one only in case warned of on the console, and an undeclared value replaced by
 * one drawn uniformly from the declared ones. The refusal depends only on the record's keys and
 * values against the spec and comes before any draw: the app sees it, the service never does, as
 * nothing is sent. A refused person does not report at all, though, and a missing report is what a
 * service can notice: strict suits development and records the app builds itself.
 */
export class Participant {
  constructor(
    readonly spec: CollectionSpec,
    readonly source: ExactRandomness = new SecureRandom(),
    readonly strict: boolean = false,
  ) {}

  /** The input the operator assigned, checked (null when inputs are chosen at random); draws nothing. */
  private chosen(group?: number): number | null {
    if (this.spec.budget !== "one-report") throw new RecordError("budget", `this collection's budget is '${this.spec.budget}'`);
    if (this.spec.inputSelection === "assigned") {
      if (group === undefined || !Number.isInteger(group))
        throw new RecordError("group", "this collection assigns inputs: pass the group index you were given");
      if (group < 0 || group >= this.spec.nInputs) throw new RecordError("group", `must lie in [0, ${this.spec.nInputs - 1}]`);
      return group;
    }
    if (group !== undefined) throw new RecordError("group", "this collection picks the input at random; do not pass a group");
    return null;
  }

  /**
   * Throw the RecordError {@link report} would (a group the spec does not take, a record that is
   * not a mapping; with `strict`, an unknown key, a missing field or an undeclared value), drawing
   * nothing. Otherwise keys the spec does not know (a misspelt field) and values differing from a
   * declared one only in case are warned of on the console, on the device only: what is drawn and
   * sent does not change.
   */
  validate(record: RawRecord, group?: number): void {
    this.chosen(group);
    if (typeof record !== "object" || record === null || Array.isArray(record))
      throw new RecordError("record", "must be a mapping of field name to value");
    const fields = [...(this.spec.continuous === null ? this.spec.features : this.spec.continuous.inputs).map((f) => f.name), this.spec.label];
    const known = new Set(fields); // a wide spec's record holds tens of thousands of keys: no scan per key
    const unknown = Object.keys(record).filter((key) => !known.has(key));
    if (unknown.length && this.strict)
      throw new RecordError(unknown[0], `not a field of this spec (its fields: ${listed(fields)}); strict: nothing drawn or sent`);
    if (unknown.length)
      console.warn(
        `ldpnb: the record holds ${listed(unknown)}, which this spec does not know (its fields: ${listed(fields)}): ` +
          "not reported; a field meant instead is reported as a value drawn uniformly from its declared ones",
      );
    for (const [name, value, choices] of this.undeclared(record)) {
      // A lookup by folded case for the one field at fault: no scan of a wide spec.
      const meant = typeof value === "string" ? new Map(choices.map((c) => [c.toLowerCase(), c])).get(value.toLowerCase()) : undefined;
      const hint = meant !== undefined ? `did you mean '${meant}'? ` : "";
      if (this.strict) {
        const what = value === undefined || value === null ? "missing" : `${typeof value === "string" ? `'${value}'` : String(value)} is not declared`;
        const expected = choices.length ? `one of ${listed(choices)}` : "a finite number";
        throw new RecordError(name, `${what}: ${hint}expected ${expected}; strict: nothing drawn or sent`);
      }
      if (meant !== undefined)
        console.warn(`ldpnb: the record's '${name}' is '${value}', which this spec does not declare: ${hint}reported as a value drawn uniformly from the declared ones`);
    }
  }

  /** `[field, value, declared values]` of each field whose value `record` lacks or the spec does not declare (none declared for a continuous field: any finite number). */
  private *undeclared(record: RawRecord): Generator<[string, unknown, readonly string[]]> {
    const spec = this.spec;
    const label = own(record, spec.label);
    if (declared(label, spec.classCodes) === null) yield [spec.label, label, spec.classes];
    if (spec.continuous === null) {
      for (let i = 0; i < spec.features.length; i++) {
        const feature = spec.features[i];
        const value = own(record, feature.name);
        if (declared(value, spec.categoryCodes[i]) === null) yield [feature.name, value, feature.categories];
      }
    } else {
      for (const f of spec.continuous.inputs) {
        const value = own(record, f.name);
        if (!finite(value)) yield [f.name, value, []];
      }
    }
  }

  /**
   * The one report for `record` (the raw feature names and the label mapped to values). `group`
   * is the input the operator assigned, required when the spec assigns inputs and refused
   * otherwise (RecordError, nothing drawn). The input is chosen first, from the source alone; a
   * value the spec does not declare is reported as one drawn from the declared ones ({@link recordInput}).
   */
  report(record: RawRecord, group?: number, reportId?: Uint8Array): Report {
    this.validate(record, group);
    return this.draw(record, group, reportId);
  }

  /** {@link report} for a record and group {@link validate} passed (the client validates first, then draws: one warning, not two). */
  draw(record: RawRecord, group?: number, reportId?: Uint8Array): Report {
    const input = this.chosen(group) ?? chooseInput(this.spec, this.source);
    const payload = this.spec.oracles[input].perturb(recordInput(record, this.spec, input, this.source), this.source);
    const id = reportId ?? globalThis.crypto.getRandomValues(new Uint8Array(16));
    return { input, payload, reportId: id };
  }
}

/** A bit vector packed most significant bit first, padding bits zero (`numpy.packbits`). */
export function packBits(bits: boolean[]): Uint8Array {
  const out = new Uint8Array(Math.ceil(bits.length / 8));
  bits.forEach((bit, i) => {
    if (bit) out[i >> 3] |= 0x80 >> (i & 7);
  });
  return out;
}

/** Real values as little-endian float64 bytes. */
export function floatBytes(values: Float64Array): Uint8Array {
  const out = new DataView(new ArrayBuffer(8 * values.length));
  values.forEach((v, i) => out.setFloat64(8 * i, v, true));
  return new Uint8Array(out.buffer);
}

/** The report in the service's msgpack format: `{id, spec, input, value}` (and `token` if given). */
export function packReport(report: Report, specDigest: Uint8Array, token?: string): Uint8Array {
  const payload = report.payload;
  const value =
    typeof payload === "number"
      ? payload
      : payload instanceof Float64Array
        ? floatBytes(payload)
        : packBits(payload);
  const wire: Record<string, unknown> = { id: report.reportId, spec: specDigest, input: report.input, value };
  if (token !== undefined) wire.token = token;
  return encode(wire);
}

/** `names` quoted and comma-separated, the first `most` of them. */
function listed(names: readonly string[], most = 12): string {
  const shown = names.slice(0, most).map((n) => `'${n}'`).join(", ");
  return names.length > most ? `${shown} and ${names.length - most} more` : shown;
}
