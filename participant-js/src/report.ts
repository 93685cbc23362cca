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

/**
 * Every input's value for `record`: the class code, then each feature's joint input a·k + c
 * (categorical, or the bins of prepared continuous values); for a Gaussian model the class code
 * and the class-hiding vectors (each prepared coordinate at the person's class, zeros elsewhere,
 * and its square). Validated whole: a RecordError names the first field that does not fit.
 */
export function recordInputs(record: RawRecord, spec: CollectionSpec): (number | number[])[] {
  const code = (field: string, categories: string[]): number => {
    if (!(field in record) || record[field] === null || record[field] === undefined) throw new RecordError(field, "missing");
    const value = String(record[field]);
    const index = categories.indexOf(value);
    if (index < 0) throw new RecordError(field, `unknown value '${value}'; expected one of ${categories.join(", ")}`);
    return index;
  };
  const prep = spec.continuous;
  const z = prep === null ? null : prep.transform(record);
  const c = code(spec.label, spec.classes);
  const k = spec.nClasses;
  if (spec.model === "discrete") {
    const codes = z === null ? spec.features.map((f) => code(f.name, f.categories)) : prep!.discretise(z);
    return [c, ...codes.map((a) => a * k + c)];
  }
  const hidden = z!.map((v) => Array.from({ length: k }, (_, j) => (j === c ? v : 0)));
  const squares = hidden.map((row) => row.map((v) => v * v));
  if (spec.approach === 3) return [c, ...hidden.flatMap((row, i) => [row, squares[i]])];
  return [c, hidden.flat(), squares.flat()];
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

export class Participant {
  constructor(
    readonly spec: CollectionSpec,
    readonly source: ExactRandomness = new SecureRandom(),
  ) {}

  /**
   * The one report for `record` (every feature name and the label mapped to its value). `group`
   * is the input the operator assigned, required when the spec assigns inputs and refused
   * otherwise. Raises {@link RecordError} before anything is drawn.
   */
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

  /** Throw the RecordError {@link report} would, drawing nothing. */
  validate(record: RawRecord, group?: number): void {
    this.chosen(group);
    recordInputs(record, this.spec);
  }

  /**
   * The one report for `record` (every feature name and the label mapped to its value). `group`
   * is the input the operator assigned, required when the spec assigns inputs and refused
   * otherwise. Throws {@link RecordError} before anything is drawn.
   */
  report(record: RawRecord, group?: number, reportId?: Uint8Array): Report {
    const chosen = this.chosen(group);
    const inputs = recordInputs(record, this.spec);
    const input = chosen ?? chooseInput(this.spec, this.source);
    const payload = this.spec.oracles[input].perturb(inputs[input], this.source);
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
