/**
 * The mechanisms' own draws from the platform's CSPRNG against their exact probabilities: 25,000
 * reports each, a χ² statistic below the critical value at 1 − 10^-6 (from scipy, in
 * test/vectors.json): a share off by a few percent fails. Exactness itself, to the last bit, is
 * what the known answers check (test/known_answers.test.ts: the same draws as the Python
 * participant's from one test-only random stream).
 */
import assert from "node:assert/strict";
import { test } from "node:test";

import { DirectEncoding, SecureRandom, UnaryEncoding } from "../src/index.js";
import { discreteLaplace } from "../src/exact.js";
import { vectors } from "../test-support/vectors.js";

const DRAWS = 25_000;
const TWO64 = 2 ** 64;

function chi2(counts: number[], probabilities: number[], draws: number): number {
  return counts.reduce((sum, c, i) => sum + (c - draws * probabilities[i]) ** 2 / (draws * probabilities[i]), 0);
}

test("DE's reports follow its exact distribution", () => {
  const source = new SecureRandom();
  for (const [epsilon, d, value] of [[1, 8, 3], [0.5, 2, 0], [4, 5, 4]]) {
    const oracle = new DirectEncoding(epsilon, d);
    const counts = new Array(d).fill(0);
    for (let i = 0; i < DRAWS; i++) counts[oracle.perturb(value, source)]++;
    const keep = Number(oracle.keepThreshold) / TWO64;
    const probabilities = Array.from({ length: d }, (_, v) => (v === value ? keep : (1 - keep) / (d - 1)));
    const statistic = chi2(counts, probabilities, DRAWS);
    assert.ok(statistic < vectors.chi2[String(d - 1)], `DE ε=${epsilon} d=${d}: χ² ${statistic}`);
  }
});

test("SUE's and OUE's bits follow their exact probabilities", () => {
  const source = new SecureRandom();
  for (const name of ["SUE", "OUE"] as const) {
    const d = 8;
    const value = 5;
    const oracle = new UnaryEncoding(name, 1, d);
    const ones = new Array(d).fill(0);
    for (let i = 0; i < DRAWS; i++) oracle.perturb(value, source).forEach((bit, j) => (ones[j] += bit ? 1 : 0));
    const [tp, tq] = oracle.thresholds.map((t) => Number(t) / TWO64);
    // each bit a Bernoulli: its standardised count squared, summed over the d independent bits
    const statistic = ones.reduce((sum, c, j) => {
      const p = j === value ? tp : tq;
      return sum + (c - DRAWS * p) ** 2 / (DRAWS * p * (1 - p));
    }, 0);
    assert.ok(statistic < vectors.chi2[String(d)], `${name}: χ² ${statistic}`);
  }
});

test("the secure source's integers are uniform, also across a power of two", () => {
  const source = new SecureRandom();
  for (const n of [2n, 5n, 17n]) {
    const counts = new Array(Number(n)).fill(0);
    for (let i = 0; i < DRAWS; i++) counts[Number(source.randbelow(n))]++;
    const statistic = chi2(counts, new Array(Number(n)).fill(1 / Number(n)), DRAWS);
    assert.ok(statistic < vectors.chi2[String(Number(n) - 1)], `randbelow(${n}): χ² ${statistic}`);
  }
});

test("the exact discrete Laplace follows P(k) ∝ exp(−γ|k|)", () => {
  const source = new SecureRandom();
  for (const [n, d] of [[3n, 7n]]) {
    const gamma = Number(n) / Number(d);
    const r = Math.exp(-gamma);
    const pmf = (k: number) => ((1 - r) / (1 + r)) * r ** Math.abs(k);
    // cells −6 … 6, and the two tails beyond
    const cells = Array.from({ length: 13 }, (_, i) => i - 6);
    const probabilities = [...cells.map(pmf)];
    const tail = (1 - probabilities.reduce((a, b) => a + b, 0)) / 2;
    probabilities.push(tail, tail);
    const counts = new Array(15).fill(0);
    for (const k of discreteLaplace(source, { n, d }, DRAWS).map(Number)) {
      counts[Math.abs(k) <= 6 ? k + 6 : k < 0 ? 13 : 14]++;
    }
    const statistic = chi2(counts, probabilities, DRAWS);
    assert.ok(statistic < vectors.chi2["16"], `γ=${gamma}: χ² ${statistic}`);
  }
});

test("a coin is heads exactly when its word is below the threshold: a word equal to it is tails", () => {
  const fixed = (words: bigint[]) => {
    let at = 0;
    return { words: (n: number) => words.slice(at, (at += n)), randbelow: () => 0n };
  };
  const oue = new UnaryEncoding("OUE", 1, 3);
  const [tp, tq] = oue.thresholds;
  // Bits 0..2 from tq-words, then the true bit (value 1) from a tp-word.
  assert.deepEqual(oue.perturb(1, fixed([tq - 1n, tq, tq + 1n, tp])), [true, false, false]);
  assert.deepEqual(oue.perturb(1, fixed([tq, tq - 1n, tq, tp - 1n])), [false, true, false]);
  const de = new DirectEncoding(1, 4);
  assert.equal(de.perturb(2, fixed([de.keepThreshold])), 0); // tails: the other value drawn (randbelow 0 → 0)
  assert.equal(de.perturb(2, fixed([de.keepThreshold - 1n])), 2); // heads: kept
});
