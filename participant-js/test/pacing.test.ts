/**
 * The pace ends on the precise clock: a report never leaves before its deadline, whatever the
 * deadline's sub-millisecond part (a timer alone fires on whole milliseconds from when it was set,
 * carrying the draw's time along), and leaves soon after it.
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
  // Beside each wait, a plain timer to the same kind of deadline, measured together: a loaded
  // machine delays both alike, and the pace must end no later than the timer does.
  const late: number[] = [];
  const timer: number[] = [];
  for (let i = 0; i < 40; i++) {
    const deadline = performance.now() / 1000 + 0.005 + Math.random() * 0.003; // a sub-millisecond part of every kind
    await sleepUntil(deadline);
    const over = performance.now() / 1000 - deadline;
    assert.ok(over >= 0, `left ${-over * 1000} ms early`);
    late.push(over);
    const plain = performance.now() / 1000 + 0.005 + Math.random() * 0.003;
    await new Promise((done) => setTimeout(done, Math.ceil((plain - performance.now() / 1000) * 1000)));
    timer.push(performance.now() / 1000 - plain);
  }
  late.sort((a, b) => a - b);
  timer.sort((a, b) => a - b);
  assert.ok(late[20] <= timer[20] + 0.001, `median ${late[20] * 1000} ms after the deadline, a timer's ${timer[20] * 1000} ms`);
});
