/**
 * A collection's published spec, as the Python participant reads it: validated, its oracles
 * resolved, and its fingerprint (the SHA-256 of its canonical JSON) computed the same way, so
 * that a report is built only for the spec the service published.
 */
import { Preparation } from "./continuous.js";
import { SpecError } from "./errors.js";
import { LaplaceMean, type Mechanism, OneBitMean, PROTOCOLS, makeOracle } from "./mechanisms.js";
import { PyFloat, type PyValue, canonicalJson } from "./pyjson.js";
import { Shuffle } from "./shuffled.js";

export const SPEC_VERSION = 1;
export const EPSILON_RANGE: [number, number] = [1e-3, 50];
const PAPER_THETA = 0.25;
const KNOWN = new Set([
  "version", "features", "classes", "label", "protocol", "epsilon", "theta", "input_selection",
  "continuous", "model", "approach", "budget", "class_share", "shuffle",
]);

export { SpecError };

export interface Feature {
  name: string;
  categories: string[];
}

function names(values: unknown, what: string): string[] {
  if (!Array.isArray(values) || values.length === 0) throw new SpecError(`${what} must be a non-empty list of strings`);
  if (!values.every((v) => typeof v === "string" && v.length > 0))
    throw new SpecError(`${what} must hold non-empty strings`);
  if (new Set(values).size !== values.length) throw new SpecError(`${what} must not repeat a value`);
  return values as string[];
}

function finite(value: unknown): number | null {
  return typeof value === "number" && Number.isFinite(value) ? value : null;
}

/** A field's value, or `fallback` when it is absent. A null is a value (refused where not
 * allowed), as the Python device reads it: only `theta`, `class_share`, `continuous` and
 * `shuffle` take null for absent, in both. */
const orDefault = (value: unknown, fallback: unknown): unknown => (value === undefined ? fallback : value);

export class CollectionSpec {
  readonly features: Feature[];
  readonly classes: string[];
  readonly label: string;
  readonly protocol: string;
  readonly epsilon: number;
  readonly theta: number;
  readonly inputSelection: "uniform" | "assigned";
  readonly budget: "one-report" | "per-input" | "split";
  readonly classShare: number | null;
  /** How reports reach the aggregator through a shuffler, or null for a collection reported to directly. */
  readonly shuffle: Shuffle | null;
  /** Continuous features' preparation (ranges, projection, bins), or null for categorical ones. */
  readonly continuous: Preparation | null;
  readonly model: "discrete" | "gaussian";
  readonly approach: 1 | 2 | 3;
  /**
   * One mechanism per input: the class, then each feature jointly with the class (discrete), or
   * the class-hiding vectors of a Gaussian model (approach 3: a value and a square input per
   * coordinate; 1 and 2: one input of every coordinate's values and one of their squares).
   */
  readonly oracles: Mechanism[];

  private constructor(data: Record<string, unknown>) {
    const unknown = Object.keys(data).filter((k) => !KNOWN.has(k));
    if (unknown.length) throw new SpecError(`unknown spec fields: ${unknown.sort().join(", ")}`);
    const version = orDefault(data.version, SPEC_VERSION);
    if (version !== SPEC_VERSION) throw new SpecError(`unsupported spec version ${String(version)}`);
    const model = orDefault(data.model, "discrete");
    if (model !== "discrete" && model !== "gaussian") throw new SpecError("model must be discrete or gaussian");
    this.model = model;
    this.continuous = data.continuous === undefined || data.continuous === null ? null : new Preparation(data.continuous);
    const required = ["classes", "protocol", "epsilon", ...(this.continuous === null ? ["features"] : [])];
    const missing = required.filter((k) => !(k in data));
    if (missing.length) throw new SpecError(`missing spec fields: ${missing.join(", ")}`);
    const declared = data.features ?? [];
    if (!Array.isArray(declared)) throw new SpecError("features must be a list of {name, categories} mappings");
    const features: Feature[] = declared.map((f: unknown) => {
      if (typeof f !== "object" || f === null) throw new SpecError("features must be a list of {name, categories} mappings");
      const { name, categories } = f as Record<string, unknown>;
      if (typeof name !== "string" || !name) throw new SpecError("feature name must be a non-empty string");
      return { name, categories: names(categories, `feature '${name}' categories`) };
    });
    if (this.continuous !== null && model === "discrete") {
      if (this.continuous.bins === null) throw new SpecError("a discrete model of continuous features needs bins");
      if (features.length) throw new SpecError("features are derived from the continuous preparation; leave them out");
      this.features = this.continuous.outputs.map((o) => ({ name: o.name, categories: this.continuous!.binLabels() }));
    } else if (model === "gaussian") {
      if (this.continuous === null) throw new SpecError("a gaussian model needs continuous features (the 'continuous' field)");
      if (features.length) throw new SpecError("a gaussian model takes continuous features only; leave 'features' out");
      this.features = [];
    } else {
      if (!features.length) throw new SpecError("features must list at least one feature");
      this.features = features;
    }
    const approach = orDefault(data.approach, 3);
    if (approach !== 1 && approach !== 2 && approach !== 3) throw new SpecError("approach must be one of 1, 2, 3");
    this.approach = approach;
    const featureNames = this.features.length ? this.features.map((f) => f.name) : this.continuous!.outputs.map((o) => o.name);
    if (new Set(featureNames).size !== featureNames.length) throw new SpecError("feature names must be unique");
    this.classes = names(data.classes, "classes");
    if (this.classes.length < 2) throw new SpecError("classes must list at least two class labels");
    const label = orDefault(data.label, "class");
    if (typeof label !== "string" || !label || featureNames.includes(label))
      throw new SpecError("label must be a non-empty name distinct from the features");
    this.label = label;
    if (typeof data.protocol !== "string" || !PROTOCOLS.includes(data.protocol))
      throw new SpecError(`protocol must be one of ${PROTOCOLS.join(", ")}`);
    this.protocol = data.protocol;
    const epsilon = finite(data.epsilon);
    const [low, high] = EPSILON_RANGE;
    if (epsilon === null || epsilon < low || epsilon > high)
      throw new SpecError(`epsilon must be a number from ${low} to ${high}`);
    this.epsilon = epsilon;
    const theta = data.theta === undefined || data.theta === null ? null : finite(data.theta);
    if (data.theta !== undefined && data.theta !== null && (theta === null || theta <= 0 || theta >= 1))
      throw new SpecError("theta must lie in (0, 1)");
    // THE's threshold, when left out, is the variance-optimal one the service resolves and publishes.
    if (theta === null && this.protocol === "THE") throw new SpecError("a THE spec must state theta (the service publishes it)");
    this.theta = theta ?? PAPER_THETA;
    const budget = orDefault(data.budget, "one-report");
    if (budget !== "one-report" && budget !== "per-input" && budget !== "split")
      throw new SpecError("budget must be one of one-report, per-input, split");
    this.budget = budget;
    const selection = orDefault(data.input_selection, "uniform");
    if (selection !== "uniform" && selection !== "assigned") throw new SpecError("input_selection must be uniform or assigned");
    this.inputSelection = selection;
    if (data.class_share === undefined || data.class_share === null) {
      this.classShare = null;
    } else {
      const share = finite(data.class_share);
      if (share === null || share <= 0 || share >= 1) throw new SpecError("class_share must lie in (0, 1)");
      if (budget !== "one-report" || selection !== "uniform")
        throw new SpecError("class_share goes with one report per person and inputs chosen at random");
      this.classShare = share;
    }
    this.shuffle = data.shuffle === undefined || data.shuffle === null ? null : Shuffle.fromDict(data.shuffle);
    if (this.shuffle !== null && budget !== "one-report") throw new SpecError("a shuffled collection takes one report per person (budget one-report)");
    if (this.shuffle !== null && selection !== "uniform")
      throw new SpecError("a shuffled collection's devices choose their input at random (input_selection uniform): an assigned input hides a report only among the batch's reports of the same input");
    const r = this.continuous?.outputs.length ?? 0;
    const count = model === "discrete" ? this.features.length + 1 : approach === 3 ? 2 * r + 1 : 3;
    const eps = budget === "split" ? epsilon / count : epsilon;
    if (eps < low) throw new SpecError(`split among ${count} inputs, epsilon leaves ${eps} per input, below ${low}`);
    const k = this.classes.length;
    try {
      const classOracle = makeOracle(this.protocol, eps, k);
      if (model === "discrete") {
        this.oracles = [classOracle, ...this.features.map((f) => makeOracle(this.protocol, eps, f.categories.length * k))];
      } else if (approach === 3) {
        this.oracles = [classOracle, ...Array.from({ length: 2 * r }, () => new LaplaceMean(eps, k, 2))];
      } else if (approach === 1) {
        this.oracles = [classOracle, new LaplaceMean(eps, r * k, 2 * r), new LaplaceMean(eps, r * k, 2 * r)];
      } else {
        this.oracles = [classOracle, new OneBitMean(eps, r * k), new OneBitMean(eps, r * k)];
      }
    } catch (error) {
      throw new SpecError((error as Error).message);
    }
  }

  /** Parse and validate a spec as the service publishes it (`GET /collections/{id}`'s `spec`). */
  static fromDict(data: unknown): CollectionSpec {
    if (typeof data !== "object" || data === null || Array.isArray(data)) throw new SpecError("a spec must be a mapping");
    return new CollectionSpec(data as Record<string, unknown>);
  }

  private codes: { classes: Map<string, number>; categories: Map<string, number>[] } | null = null;

  /** Each class label's 0-based code. */
  get classCodes(): Map<string, number> {
    return this.indexed().classes;
  }

  /** Each feature's categories with their 0-based codes, in feature order. */
  get categoryCodes(): Map<string, number>[] {
    return this.indexed().categories;
  }

  private indexed(): { classes: Map<string, number>; categories: Map<string, number>[] } {
    const codes = (values: string[]) => new Map(values.map((v, j) => [v, j]));
    this.codes ??= { classes: codes(this.classes), categories: this.features.map((f) => codes(f.categories)) };
    return this.codes;
  }

  /**
   * Throw SpecError unless every field `expected` names is a categorical feature or the label of
   * this spec, declaring at least the values listed: what an app pins so that a spec leaving out
   * a value its people hold is refused before any record is read.
   */
  checkExpected(expected: Record<string, string[]>): void {
    const declared = new Map<string, string[]>(this.features.map((f) => [f.name, f.categories]));
    declared.set(this.label, this.classes);
    for (const [name, values] of Object.entries(expected)) {
      if (!Array.isArray(values)) throw new TypeError(`expected['${name}'] must be a list of values`);
      const known = declared.get(name);
      if (known === undefined || (this.continuous !== null && name !== this.label))
        throw new SpecError(`the spec has no categorical field '${name}', which this app expects; refusing to report`);
      const missing = values.map(String).filter((v) => !known.includes(v));
      if (missing.length)
        throw new SpecError(`the spec's '${name}' leaves out ${JSON.stringify(missing)}, which this app expects; refusing to report`);
    }
  }

  get nClasses(): number {
    return this.classes.length;
  }

  get nInputs(): number {
    return this.oracles.length;
  }

  /** What one person spends: ε, or (n + 1)·ε when every input is reported at ε (budget per-input). */
  get epsilonPerPerson(): number {
    return this.budget === "per-input" ? this.epsilon * this.nInputs : this.epsilon;
  }

  /** The spec as the Python participant's `to_dict` writes it (floats marked as floats). */
  toDict(): PyValue {
    const out: Record<string, PyValue> = {
      version: SPEC_VERSION,
      features: this.features.map((f) => ({ name: f.name, categories: [...f.categories] })),
      classes: [...this.classes],
      label: this.label,
      protocol: this.protocol,
      epsilon: new PyFloat(this.epsilon),
      theta: new PyFloat(this.theta),
      input_selection: this.inputSelection,
    };
    if (this.budget !== "one-report") out.budget = this.budget;
    if (this.classShare !== null) out.class_share = new PyFloat(this.classShare);
    if (this.shuffle !== null) out.shuffle = this.shuffle.toDict();
    if (this.continuous !== null) {
      delete out.features; // derived from the preparation
      out.continuous = this.continuous.toDict();
      out.model = this.model;
      if (this.model === "gaussian") out.approach = this.approach;
    }
    return out;
  }

  /** The canonical JSON the fingerprint digests. */
  canonicalJson(): string {
    return canonicalJson(this.toDict());
  }

  /** SHA-256 (32 bytes) of the canonical JSON: what every report carries as `spec`. */
  async fingerprintDigest(): Promise<Uint8Array> {
    const bytes = new TextEncoder().encode(this.canonicalJson());
    return new Uint8Array(await globalThis.crypto.subtle.digest("SHA-256", bytes));
  }

  /**
   * The hex SHA-256 of what decides a report's distribution given a record: the canonical spec
   * without θ (applied by the aggregator, never by the device) and with THE named SHE. Two specs
   * with one question get one memoised answer from a device (the ledger's memo).
   */
  async question(): Promise<string> {
    const deviceSide = this.toDict() as Record<string, PyValue>;
    delete deviceSide.theta;
    if (deviceSide.protocol === "THE") deviceSide.protocol = "SHE";
    const bytes = new TextEncoder().encode(canonicalJson(deviceSide));
    return hexOf(new Uint8Array(await globalThis.crypto.subtle.digest("SHA-256", bytes)));
  }

  /** The digest in hex, as the service publishes it. */
  async fingerprint(): Promise<string> {
    return hexOf(await this.fingerprintDigest());
  }
}

export function hexOf(bytes: Uint8Array): string {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}
