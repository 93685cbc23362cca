/**
 * Exact sampling, step for step as the Python participant's `protocols/exact.py`: every
 * probability a report is drawn with is a rational number the code states, so the privacy ratio
 * holds exactly, not to double precision.
 *
 * Coins compare a uniform 64-bit integer with an integer threshold T: the realised probability is
 * exactly T/2^64. Thresholds come from a certified lower bound E <= e^ε ({@link expLower}),
 * rounding the probability that may be larger down and the one that may be smaller up.
 */

/** A source of exactly uniform integers: what every mechanism draws from. */
export interface ExactRandomness {
  /** `count` uniform 64-bit words. */
  words(count: number): bigint[];
  /** A uniform integer in [0, n), for any positive n. */
  randbelow(n: bigint): bigint;
}

/** A non-negative rational number n/d (d > 0). */
export interface Rational {
  n: bigint;
  d: bigint;
}

export const WORD_BITS = 64n;
export const ONE = 1n << WORD_BITS;

/** The exact rational value of a finite double (doubles are binary fractions). */
export function rationalOf(x: number): Rational {
  if (!Number.isFinite(x)) throw new RangeError(`not a finite number: ${x}`);
  if (Number.isInteger(x)) return { n: BigInt(x), d: 1n };
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  const bits = view.getBigUint64(0);
  const negative = bits >> 63n === 1n;
  const exponent = Number((bits >> 52n) & 0x7ffn);
  let mantissa = bits & ((1n << 52n) - 1n);
  let power: number;
  if (exponent === 0) {
    power = -1074;
  } else {
    mantissa |= 1n << 52n;
    power = exponent - 1075;
  }
  // x = mantissa * 2^power, power < 0 here (integers were handled above)
  const n = negative ? -mantissa : mantissa;
  return reduce({ n, d: 1n << BigInt(-power) });
}

function gcd(a: bigint, b: bigint): bigint {
  a = a < 0n ? -a : a;
  while (b) [a, b] = [b, a % b];
  return a;
}

export function reduce(r: Rational): Rational {
  const g = gcd(r.n, r.d);
  return g > 1n ? { n: r.n / g, d: r.d / g } : r;
}

/**
 * A rational L <= e^x for rational x >= 0: the Taylor series' partial sum in fixed point of
 * `bits` bits, every term rounded down (all terms are positive, so each rounding and the
 * truncation only lower it). The same digits as the Python participant's `exp_lower`.
 */
export function expLower(x: Rational, bits = 128n): Rational {
  if (x.n < 0n) throw new RangeError("expLower takes x >= 0");
  const scale = 1n << bits;
  let term = scale;
  let total = 0n;
  let k = 0n;
  while (term) {
    total += term;
    k += 1n;
    term = (term * x.n) / (x.d * k); // non-negative: BigInt division is the floor
  }
  return { n: total, d: scale };
}

/** The largest T with T/2^64 <= p (p in [0, 1]). */
export function thresholdDown(p: Rational): bigint {
  return (p.n * ONE) / p.d;
}

/** The smallest T with T/2^64 >= p (p in [0, 1]). */
export function thresholdUp(p: Rational): bigint {
  return (p.n * ONE + p.d - 1n) / p.d;
}

/** `size` independent coins, each true with probability exactly threshold/2^64. */
export function coins(source: ExactRandomness, threshold: bigint, size: number): boolean[] {
  return source.words(size).map((word) => word < threshold);
}

/** True with probability exactly n/d. */
export function bernoulli(source: ExactRandomness, p: Rational): boolean {
  return source.randbelow(p.d) < p.n;
}

/** The number of bits of a positive integer. */
export function bitLength(n: bigint): number {
  return n.toString(2).length;
}

/**
 * A uniform integer in [0, n) from 64-bit words: the fewest words holding n's bits, masked to
 * them, drawn again while the result is n or more (so every value is exactly equally likely).
 */
export function randbelowFromWords(words: (count: number) => bigint[], n: bigint): bigint {
  if (n <= 0n) throw new RangeError("randbelow takes n > 0");
  const k = bitLength(n);
  const count = Math.ceil(k / 64);
  const mask = (1n << BigInt(k)) - 1n;
  for (;;) {
    const drawn = words(count);
    let r = 0n;
    drawn.forEach((w, j) => {
      r |= w << BigInt(64 * j);
    });
    r &= mask;
    if (r < n) return r;
  }
}

function compare(a: Rational, b: Rational): number {
  const left = a.n * b.d;
  const right = b.n * a.d;
  return left < right ? -1 : left > right ? 1 : 0;
}

/** True with probability exactly exp(−gamma), rational gamma >= 0 (Canonne, Kamath and Steinke, algorithm 1). */
export function bernoulliExp(source: ExactRandomness, gamma: Rational): boolean {
  let g = reduce(gamma);
  const one: Rational = { n: 1n, d: 1n };
  while (compare(g, one) > 0) {
    if (!bernoulliExp(source, one)) return false;
    g = reduce({ n: g.n - g.d, d: g.d });
  }
  let k = 1n;
  while (bernoulli(source, reduce({ n: g.n, d: g.d * k }))) k += 1n;
  return k % 2n === 1n;
}

/**
 * `size` integers with P(k) ∝ exp(−gamma·|k|) exactly (CKS algorithm 2, rate s/t = gamma), drawn
 * as the Python participant's `discrete_laplace` draws them, word for word. Its running time
 * follows the noise: the client paces every report so that the moment one leaves does not.
 */
export function discreteLaplace(source: ExactRandomness, gamma: Rational, size: number): bigint[] {
  const { n: s, d: t } = reduce(gamma);
  const out: bigint[] = [];
  while (out.length < size) {
    const u = source.randbelow(t);
    if (!bernoulliExp(source, { n: u, d: t })) continue;
    let v = 0n;
    while (bernoulliExp(source, { n: 1n, d: 1n })) v += 1n;
    const y = (u + t * v) / s;
    const negative = source.randbelow(2n) === 1n;
    if (negative && y === 0n) continue;
    out.push(negative ? -y : y);
  }
  return out;
}
