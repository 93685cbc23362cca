/**
 * When a client asks a party again, and what it says when it stops asking, as the Python
 * participant's `participant/retrying.py`.
 *
 * A 5xx or 429 answer, or no answer, is tried again (the same bytes: a report is idempotent by its
 * id). Before each new attempt the client waits its own backoff or, when a 429 or 503 answer's
 * `Retry-After` asks longer, that long and up to a fifth more (the jitter that keeps devices
 * refused together from returning together; never less than asked). Two bounds the app sets keep a
 * service from stalling a device: one wait asked beyond `maxRetryAfter` seconds ends the attempts
 * at once, and so does a wait that would carry them past `retryDeadline` seconds from the first.
 * The wait depends only on the answer, the attempt's number and the clock, never on the person's
 * record or the noise drawn: it tells the party nothing it did not say itself.
 */

/** Seconds: the longest `Retry-After` a client honours by default; one asking longer ends the attempts. */
export const DEFAULT_MAX_RETRY_AFTER = 60;
/** Seconds: how long after its first attempt a request may still be tried again, by default. */
export const DEFAULT_RETRY_DEADLINE = 300;
/** The share of an asked wait a device may add to it, at random, so that devices do not return in lockstep. */
export const JITTER = 0.2;

const SHUFFLER_OPTIONS = ["--per-address", "--per-collection", "--max-waiting"];

/**
 * The seconds a `Retry-After` header asks to wait: its delta-seconds, or its HTTP-date less `now`
 * (milliseconds since the epoch; 0 for a date passed); null when it is absent or malformed.
 */
export function retryAfter(value: string | null, now: number): number | null {
  if (value === null) return null;
  if (/^\s*\d+(\.\d+)?\s*$/.test(value)) return Number(value);
  const when = /^[A-Za-z]{3,9}, .* GMT$/.test(value.trim()) ? Date.parse(value) : NaN; // an HTTP-date is GMT
  return when >= 0 ? Math.max(0, (when - now) / 1000) : null;
}

/**
 * Seconds to wait before attempt number `attempt` (from 1, the first retry): `backoff` doubled each
 * attempt, jittered by `draw` (uniform in [0, 1), never the person's data) between half and one and
 * a half times, or the `asked` seconds plus up to {@link JITTER} of them when that is longer.
 */
export function waitBefore(attempt: number, backoff: number, asked: number | null, draw: number): number {
  const own = backoff * 2 ** (attempt - 1) * (0.5 + draw);
  return asked === null ? own : Math.max(own, asked * (1 + JITTER * draw));
}

/**
 * `[party, option]` for a request to `url`: `"the shuffler at ORIGIN"` when `url` is on the
 * `shuffler` origin the app pins, else the aggregator's (`aggregator`); and, for a 429 (`status`),
 * the `serve` option that lifts its limit (`"python -m shuffler serve --per-address"`): the one its
 * answer `named` when that is one of the party's own, else the party's limit per address.
 */
export function refuser(url: string, shuffler: string | null, aggregator: string, status: number | null, named: unknown): [string, string | null] {
  const isShuffler = shuffler !== null && url.startsWith(`${shuffler}/`);
  const who = `the ${isShuffler ? "shuffler" : "aggregator"} at ${isShuffler ? shuffler : aggregator}`;
  if (status !== 429) return [who, null];
  if (!isShuffler) return [who, "python -m aggregator serve --rate-limit"];
  return [who, `python -m shuffler serve ${SHUFFLER_OPTIONS.includes(named as string) ? named : "--per-address"}`];
}

/** How the last answer reads in an error: its status and its JSON `error` (printable, at most 200 characters). */
export function lastAnswer(status: number, data: unknown): string {
  const error = (data as { error?: unknown } | null)?.error;
  return typeof error === "string" ? `${status} ${error.slice(0, 200).replace(/[\x00-\x1f\x7f]/g, "?")}` : `${status}`;
}
