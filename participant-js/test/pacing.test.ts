/**
 * The pace ends on the precise clock: a report never leaves before its deadline, whatever the
 * deadline's sub-millisecond part (a timer alone fires on whole milliseconds from when it was set,
 * carrying the draw's time along).
 */
import assert from "node:assert/strict";
import { test } from "node:test";

import { pacedWait, sleepUntil } from "../src/client.js";

test("paced waits end on the next whole multiple of the pace", () => {
  for (const [elapsed, pace, wait] of [[0, 0.2, 0.2], [0.05, 0.2, 0.15], [0.25, 0.2, 0.15], [0.61, 0.2, 0.19], [0.3, 0, 0]]) {
    assert.ok(Math.abs(pacedWait(elapsed, pace) - wait) < 1e-9, `${elapsed}, ${pace}`);
  }
});

test("a paced wait ends at its deadline on the precise clock, never before", async () => {
  for (let i = 0; i < 40; i++) {
    const deadline = performance.now() / 1000 + 0.005 + Math.random() * 0.003; // a sub-millisecond part of every kind
    await sleepUntil(deadline);
    const over = performance.now() / 1000 - deadline;
    assert.ok(over >= 0, `left ${-over * 1000} ms early`);
  }
  // The deadline, not a duration: a loaded machine may deschedule the spin (a median 7 ms late was
  // seen), never make it early; how soon after is no test's to judge against a clock.
});
