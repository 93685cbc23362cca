/**
 * The frequency oracles a device randomises with, drawing from an {@link ExactRandomness} in the
 * same order and with the same thresholds as the Python participant, so that a known-answer test
 * can hold the two to identical reports from identical words.
 */
import {
  type ExactRandomness,
  type Rational,
  coins,
  discreteLaplace,
  expLower,
  rationalOf,
  reduce,
  thresholdDown,
  thresholdUp,
} from "./exact.js";

export type Protocol = "DE" | "SUE" | "OUE" | "SHE" | "THE";
export const PROTOCOLS: readonly string[] = ["DE", "SUE", "OUE", "SHE", "THE", "auto"];
/** The protocols this library draws (the continuous features' mean mechanisms are not here yet). */
export const SUPPORTED: readonly Protocol[] = ["DE", "SUE", "OUE", "SHE", "THE"];
/** The grid real-valued reports are released on (the Python participant's `protocols.noise.GRID`). */
export const GRID = 2 ** -10;

/** One report row: an index (DE), a bit vector (SUE, OUE) or real values on the grid (SHE, THE). */
export type Payload = number | boolean[] | Float64Array;

/** What randomises one input: a frequency oracle (a value in [0, d)) or a mean mechanism (a vector in [-1, 1]^dim). */
export interface Mechanism {
  readonly name: string;
  readonly epsilon: number;
  perturb(value: number | number[], source: ExactRandomness): Payload;
}

export interface Oracle extends Mechanism {
  readonly name: Protocol;
  readonly domainSize: number;
  /** One person's report of `value` in [0, domainSize). */
  perturb(value: number, source: ExactRandomness): Payload;
}

function checkValue(value: number, d: number): void {
  if (!Number.isInteger(value) || value < 0 || value >= d) throw new RangeError(`value ${value} outside [0, ${d})`);
}

/** DE: the true value kept with probability exactly T/2^64, T from E/(E + d − 1), E <= e^ε. */
export class DirectEncoding implements Oracle {
  readonly name = "DE";
  readonly keepThreshold: bigint;

  constructor(
    readonly epsilon: number,
    readonly domainSize: number,
  ) {
    const e = expLower(rationalOf(epsilon));
    this.keepThreshold = thresholdDown({ n: e.n, d: e.n + BigInt(domainSize - 1) * e.d });
  }

  get p(): number {
    const e = Math.exp(this.epsilon);
    return e / (e + this.domainSize - 1);
  }

  get q(): number {
    return 1 / (Math.exp(this.epsilon) + this.domainSize - 1);
  }

  perturb(value: number, source: ExactRandomness): number {
    checkValue(value, this.domainSize);
    // An index among the other d − 1 values, shifted past the true one, then the keep coin.
    let other = Number(source.randbelow(BigInt(this.domainSize - 1)));
    if (other >= value) other += 1;
    const [keep] = coins(source, this.keepThreshold, 1);
    return keep ? value : other;
  }
}

/** SUE and OUE: every bit but the true one set with probability T_q/2^64, the true one T_p/2^64. */
export class UnaryEncoding implements Oracle {
  readonly thresholds: [bigint, bigint];

  constructor(
    readonly name: "SUE" | "OUE",
    readonly epsilon: number,
    readonly domainSize: number,
  ) {
    let p: Rational;
    let q: Rational;
    if (name === "SUE") {
      // p/(1−p) <= H and (1−q)/q <= H with H <= e^{ε/2}: the ratio is at most H² <= e^ε.
      const half = rationalOf(epsilon);
      const h = expLower({ n: half.n, d: half.d * 2n });
      p = { n: h.n, d: h.n + h.d };
      q = { n: h.d, d: h.n + h.d };
    } else {
      // p = 1/2 exactly; (1−q)/q <= E <= e^ε.
      const e = expLower(rationalOf(epsilon));
      p = { n: 1n, d: 2n };
      q = { n: e.d, d: e.n + e.d };
    }
    this.thresholds = [thresholdDown(p), thresholdUp(q)];
  }

  get p(): number {
    return this.name === "SUE" ? Math.exp(this.epsilon / 2) / (Math.exp(this.epsilon / 2) + 1) : 0.5;
  }

  get q(): number {
    return this.name === "SUE" ? 1 / (Math.exp(this.epsilon / 2) + 1) : 1 / (Math.exp(this.epsilon) + 1);
  }

  perturb(value: number, source: ExactRandomness): boolean[] {
    checkValue(value, this.domainSize);
    const [tp, tq] = this.thresholds;
    const bits = coins(source, tq, this.domainSize);
    bits[value] = coins(source, tp, 1)[0];
    return bits;
  }
}

/**
 * SHE and THE: the one-hot vector plus GRID·K per entry, K exact discrete Laplace of rate
 * ε·GRID/2 (two values' vectors differ by 2 in L1 norm, so every report's ratio is at most e^ε,
 * exactly). THE's threshold is applied by the aggregator: the device draws alike.
 */
export class HistogramEncoding implements Oracle {
  readonly rate: Rational;

  constructor(
    readonly name: "SHE" | "THE",
    readonly epsilon: number,
    readonly domainSize: number,
  ) {
    const e = rationalOf(epsilon);
    const grid = rationalOf(GRID);
    this.rate = reduce({ n: e.n * grid.n, d: e.d * grid.d * 2n });
  }

  perturb(value: number, source: ExactRandomness): Float64Array {
    checkValue(value, this.domainSize);
    const noise = discreteLaplace(source, this.rate, this.domainSize);
    const report = Float64Array.from(noise, (k) => GRID * Number(k));
    report[value] += 1;
    return report;
  }
}

function checkVector(values: number[], dim: number): void {
  if (values.length !== dim || !values.every((v) => Number.isFinite(v) && Math.abs(v) <= 1))
    throw new RangeError(`values must be ${dim} finite numbers in [-1, 1]`);
}

/**
 * Each value moved to one of its two neighbouring grid points, the upper one with probability
 * exactly ⌊f·2^64⌋/2^64 (f the distance from the lower point in grid units): one word per value,
 * compared as integers, whatever the values (the Python participant's `round_to_grid`).
 */
export function roundToGrid(source: ExactRandomness, values: number[]): number[] {
  const words = source.words(values.length);
  return values.map((v, i) => {
    const scaled = v / GRID;
    const lower = Math.floor(scaled);
    const threshold = BigInt(Math.floor((scaled - lower) * 2 ** 64));
    return (lower + (words[i] < threshold ? 1 : 0)) * GRID;
  });
}

/**
 * The Laplace mechanism of scale Δ/ε on every coordinate, released on the grid: each coordinate
 * rounded to the grid at random, plus GRID·K, K exact discrete Laplace of rate ε·GRID/Δ.
 */
export class LaplaceMean implements Mechanism {
  readonly name = "laplace";
  readonly rate: Rational;

  constructor(
    readonly epsilon: number,
    readonly dim: number,
    readonly sensitivity: number,
  ) {
    const e = rationalOf(epsilon);
    const grid = rationalOf(GRID);
    const delta = rationalOf(sensitivity);
    this.rate = reduce({ n: e.n * grid.n * delta.d, d: e.d * grid.d * delta.n });
  }

  perturb(values: number[], source: ExactRandomness): Float64Array {
    checkVector(values, this.dim);
    const noise = discreteLaplace(source, this.rate, this.dim); // drawn first, as the Python participant draws
    const rounded = roundToGrid(source, values);
    return Float64Array.from(rounded, (v, i) => v + GRID * Number(noise[i]));
  }
}

/**
 * Nguyen et al.'s one-bit mechanism (the paper's approach 2): a coordinate j chosen uniformly, and
 * one coin whose threshold is computed in fixed point on integers of one size whatever the value
 * (so the draw's time does not tell the value), kept within the bounds the privacy needs.
 */
export class OneBitMean implements Mechanism {
  readonly name = "onebit";
  readonly bounds: [bigint, bigint];
  readonly slope: bigint;

  constructor(
    readonly epsilon: number,
    readonly dim: number,
  ) {
    const e = expLower(rationalOf(epsilon));
    this.bounds = [thresholdUp({ n: e.d, d: e.n + e.d }), thresholdDown({ n: e.n, d: e.n + e.d })];
    this.slope = thresholdDown({ n: e.n - e.d, d: e.n + e.d });
  }

  /** The coin's threshold over 2^64 for a value v in [-1, 1]. */
  threshold(v: number): bigint {
    const [lo, hi] = this.bounds;
    const offset = (1n << 63n) - this.slope;
    const x = BigInt(Math.trunc(v * 2 ** 62)) + (1n << 63n);
    const t = offset + ((x * this.slope) >> 63n);
    return t < lo ? lo : t > hi ? hi : t;
  }

  perturb(values: number[], source: ExactRandomness): number {
    checkVector(values, this.dim);
    const j = Number(source.randbelow(BigInt(this.dim)));
    const [u] = coins(source, this.threshold(values[j]), 1);
    return 2 * j + (u ? 1 : 0);
  }
}

/**
 * The exact variance of one report's count estimates summed over the domain, its value spread
 * evenly over it: what `auto` compares (the Python participant's `total_variance`).
 */
function totalVariance(p: number, q: number, d: number): number {
  const t = 1 / d;
  const each = (t * p * (1 - p) + (1 - t) * q * (1 - q)) / (p - q) ** 2;
  // numpy sums d equal terms pairwise; the comparison is between two protocols far apart except
  // at one domain size per ε, where either is as good.
  let total = 0;
  for (let i = 0; i < d; i++) total += each;
  return total;
}

/** The oracle named `protocol` for a domain of `d` values; `auto` is DE or OUE by their variances. */
export function makeOracle(protocol: string, epsilon: number, d: number): Oracle {
  if (protocol === "auto") {
    const de = new DirectEncoding(epsilon, d);
    const oue = new UnaryEncoding("OUE", epsilon, d);
    return totalVariance(oue.p, oue.q, d) < totalVariance(de.p, de.q, d) ? oue : de;
  }
  if (protocol === "DE") return new DirectEncoding(epsilon, d);
  if (protocol === "SUE" || protocol === "OUE") return new UnaryEncoding(protocol, epsilon, d);
  if (protocol === "SHE" || protocol === "THE") return new HistogramEncoding(protocol, epsilon, d);
  throw new RangeError(`protocol ${protocol} is not drawn by this library yet (it draws ${SUPPORTED.join(", ")})`);
}
