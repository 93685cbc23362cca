/**
 * Preparing continuous values on the device, as a collection's spec prescribes, step for step as
 * the Python participant's `participant/continuous.py`: each raw value clipped to its declared
 * range and mapped to [-1, 1]; optionally a published projection z = W (x − c), each output clipped
 * to its own range and mapped again; for a discrete model, equal-width bins over [-1, 1].
 */
import { RecordError, SpecError } from "./errors.js";
import { PyFloat, type PyValue } from "./pyjson.js";

export const MAX_BINS = 10_000;

export interface ContinuousFeature {
  name: string;
  low: number;
  high: number;
}

export interface Projection {
  method: string;
  matrix: number[][];
  center: number[];
  outputs: ContinuousFeature[];
}

function finite(value: unknown): value is number {
  return typeof value === "number" && Number.isFinite(value);
}

function feature(data: unknown): ContinuousFeature {
  if (typeof data !== "object" || data === null) throw new SpecError("continuous inputs must be a list of {name, low, high}");
  const { name, low, high, ...rest } = data as Record<string, unknown>;
  if (Object.keys(rest).length) throw new SpecError(`invalid continuous feature: unexpected ${Object.keys(rest).join(", ")}`);
  if (typeof name !== "string" || !name) throw new SpecError("continuous feature name must be a non-empty string");
  if (!finite(low) || !finite(high)) throw new SpecError(`feature '${name}': low and high must be finite numbers`);
  if (!(low < high)) throw new SpecError(`feature '${name}': low must be below high`);
  return { name, low, high };
}

function featureDict(f: ContinuousFeature): PyValue {
  return { name: f.name, low: new PyFloat(f.low), high: new PyFloat(f.high) };
}

/** Clip to [low, high] and map linearly onto [-1, 1], as numpy computes it. */
function normalise(x: number, f: ContinuousFeature): number {
  const clipped = Math.min(Math.max(x, f.low), f.high);
  return (2.0 * (clipped - f.low)) / (f.high - f.low) - 1.0;
}

export class Preparation {
  readonly inputs: ContinuousFeature[];
  readonly projection: Projection | null;
  readonly bins: number | null;

  constructor(data: unknown) {
    if (typeof data !== "object" || data === null || Array.isArray(data))
      throw new SpecError("continuous must be a mapping with inputs, projection and bins");
    const raw = data as Record<string, unknown>;
    const unknown = Object.keys(raw).filter((k) => !["inputs", "projection", "bins"].includes(k));
    if (unknown.length) throw new SpecError(`unknown continuous fields: ${unknown.sort().join(", ")}`);
    if (!Array.isArray(raw.inputs) || raw.inputs.length === 0) throw new SpecError("continuous inputs must list at least one feature");
    this.inputs = raw.inputs.map(feature);
    const names = this.inputs.map((f) => f.name);
    if (new Set(names).size !== names.length) throw new SpecError("continuous feature names must be unique");
    this.projection = raw.projection === undefined || raw.projection === null ? null : this.parseProjection(raw.projection);
    const bins = raw.bins ?? null;
    if (bins !== null && (!Number.isInteger(bins) || (bins as number) < 2 || (bins as number) > MAX_BINS))
      throw new SpecError(`bins must be an integer from 2 to ${MAX_BINS}`);
    this.bins = bins as number | null;
  }

  private parseProjection(data: unknown): Projection {
    if (typeof data !== "object" || data === null) throw new SpecError("projection must be a mapping with matrix, center and outputs");
    const { matrix, center, outputs, method = "custom", ...rest } = data as Record<string, unknown>;
    if (Object.keys(rest).length) throw new SpecError(`invalid projection: unexpected ${Object.keys(rest).join(", ")}`);
    if (!Array.isArray(outputs)) throw new SpecError("projection needs one declared output range per row");
    const outs = outputs.map(feature);
    if (!Array.isArray(matrix) || !Array.isArray(center) || !matrix.every(Array.isArray))
      throw new SpecError("projection matrix and center must be numbers");
    const rows = matrix as unknown[][];
    if (!center.every(finite) || !rows.every((r) => r.every(finite))) throw new SpecError("projection matrix and center must be numbers");
    if (rows.length !== outs.length || !rows.every((r) => r.length === center.length))
      throw new SpecError("projection matrix does not fit its center and outputs");
    if (center.length !== this.inputs.length)
      throw new SpecError(`projection expects ${center.length} inputs, the spec declares ${this.inputs.length}`);
    if (typeof method !== "string") throw new SpecError("projection method must be text");
    return { method, matrix: rows as number[][], center: center as number[], outputs: outs };
  }

  /** The prepared coordinates: the projection's outputs, or the inputs themselves. */
  get outputs(): ContinuousFeature[] {
    return this.projection?.outputs ?? this.inputs;
  }

  /** A record's prepared coordinates in [-1, 1]; RecordError naming a missing or non-number value. */
  transform(record: Record<string, unknown>): number[] {
    const x = this.inputs.map((f) => {
      const value = record[f.name];
      if (value === undefined || value === null) throw new RecordError(f.name, "missing");
      if (typeof value !== "number") throw new RecordError(f.name, `must be a number, got ${JSON.stringify(value)}`);
      if (!Number.isFinite(value)) throw new RecordError(f.name, "must be a finite number, got NaN or inf");
      return normalise(value, f);
    });
    if (this.projection === null) return x;
    const { matrix, center, outputs } = this.projection;
    return matrix.map((row, j) => {
      let z = 0;
      row.forEach((w, i) => (z += (x[i] - center[i]) * w));
      return normalise(z, outputs[j]);
    });
  }

  /** Each prepared coordinate's equal-width bin over [-1, 1]; the top edge falls in the last bin. */
  discretise(z: number[]): number[] {
    const bins = this.bins!;
    return z.map((v) => Math.min(Math.trunc(((v + 1.0) / 2.0) * bins), bins - 1));
  }

  binLabels(): string[] {
    return Array.from({ length: this.bins ?? 0 }, (_, b) => `bin${b}`);
  }

  toDict(): PyValue {
    const out: Record<string, PyValue> = { inputs: this.inputs.map(featureDict) };
    if (this.projection !== null) {
      const p = this.projection;
      out.projection = {
        method: p.method,
        matrix: p.matrix.map((row) => row.map((w) => new PyFloat(w))),
        center: p.center.map((c) => new PyFloat(c)),
        outputs: p.outputs.map(featureDict),
      };
    }
    if (this.bins !== null) out.bins = this.bins;
    return out;
  }
}
