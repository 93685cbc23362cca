/**
 * What the draw-time limit estimates a draw at: the same constants as the Python participant's
 * (`participant/limits.py`), never measured on the device, so that which specs a device admits
 * depends on the app's limits alone, never on the machine, its load, or the implementation (a
 * limit measured on the device would tell a service both, and a first measurement would delay
 * the first report). They are a slow device's seconds per entry: about four times what Python
 * takes on the development machine (an exact discrete Laplace sample 29 µs, a coin 21 ns), and
 * about twice what Node 20 takes there (54 µs, 172 ns per word), `bench/device.py`.
 */

export type Work = "noise" | "coins" | "index";

/** Seconds per entry on a slow device: Python's SECONDS_PER_NOISE and SECONDS_PER_COIN. */
export const SLOW_DEVICE: Record<Work, number> = { noise: 1e-4, coins: 6e-8, index: 0 };
/** What any draw is estimated at, whatever its domain (an index: DE, the one-bit mean): Python's SECONDS_PER_INDEX. */
export const SECONDS_PER_DRAW = 1e-4;

/** The estimated seconds a slow device takes to draw a report of `entries` entries of `work`. */
export function drawSeconds(work: Work, entries: number): number {
  return SECONDS_PER_DRAW + SLOW_DEVICE[work] * entries;
}

/**
 * The longest a draw may be estimated at (in the units above) on a browser page's main thread,
 * where a task over 50 ms is a long task that holds the page: 0.025 s, 249 SHE entries, which
 * Chromium draws in 25 to 45 ms on the development machine (about 100 µs a sample, 175 under
 * load). Elsewhere (Node, a worker) no bound beyond the app's.
 */
export const MAIN_THREAD_SECONDS = 0.025;

export function onBrowserMainThread(): boolean {
  return typeof (globalThis as { document?: unknown }).document !== "undefined";
}
