/**
 * How long this device takes to draw: the seconds per entry of a report that the draw-time limit
 * estimates with. Each is the larger of a fixed estimate for a slow device (about four times what
 * this implementation takes on the development machine, `bench/device.py`: an exact discrete
 * Laplace sample 45 to 55 µs, a 64-bit coin word 75 to 165 ns in Node 20) and twice what this device measured
 * the first time it needed the figure, so that a device slower than the estimate (an old phone, a
 * loaded machine) refuses what it could not draw in time.
 */
import { makeOracle } from "./mechanisms.js";
import { SecureRandom } from "./random.js";

export type Work = "noise" | "coins" | "index";

/** Seconds per entry on a slow device, before this device has measured itself. */
export const SLOW_DEVICE: Record<Work, number> = { noise: 2e-4, coins: 6e-7, index: 0 };
/** What any draw is estimated at, whatever its domain (an index: DE, the one-bit mean). */
export const SECONDS_PER_DRAW = 1e-4;

let measured: Record<Work, number> | null = null;

/** Seconds per entry of `draw` over `entries`: the best of three after one to warm up (a cold sampler is not this device's speed). */
function timed(draw: () => void, entries: number): number {
  draw();
  let best = Infinity;
  for (let i = 0; i < 3; i++) {
    const start = performance.now();
    draw();
    best = Math.min(best, performance.now() - start);
  }
  return best / 1000 / entries;
}

/** Seconds per entry of each kind of work on this device (measured once, in about 15 ms). */
export function secondsPerEntry(): Record<Work, number> {
  if (measured === null) {
    const source = new SecureRandom();
    const noise = makeOracle("SHE", 1, 64);
    const coins = makeOracle("OUE", 1, 8192);
    measured = {
      noise: Math.max(SLOW_DEVICE.noise, 2 * timed(() => noise.perturb(0, source), 64)),
      coins: Math.max(SLOW_DEVICE.coins, 2 * timed(() => coins.perturb(0, source), 8192)),
      index: 0,
    };
  }
  return measured;
}

/** The estimated seconds this device takes to draw a report of `entries` entries of `work`. */
export function drawSeconds(work: Work, entries: number): number {
  return SECONDS_PER_DRAW + secondsPerEntry()[work] * entries;
}

/**
 * The longest a draw may hold this thread: a browser page's main thread (where a longer draw
 * would freeze the page) at most 0.1 s; elsewhere (Node, a worker) no bound beyond the app's.
 */
export const MAIN_THREAD_SECONDS = 0.1;

export function onBrowserMainThread(): boolean {
  return typeof (globalThis as { document?: unknown }).document !== "undefined";
}
