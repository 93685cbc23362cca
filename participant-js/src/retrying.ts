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
const DELTA = /^\s*\d+(\.\d+)?\s*$/;
// An HTTP-date as Python's participant reads one: a day's name, a comma and a date in GMT.
const HTTP_DATE = /^\s*[A-Za-z]{3,9}, .*\bGMT\s*$/;

/**
 * The seconds a `Retry-After` header asks to wait: its delta-seconds, or its HTTP-date less `now`
 * (milliseconds since the epoch; 0 for a date passed); null when it is absent or malformed.
 */
export function retryAfter(value: string | null, now: number): number | null {
  if (value === null) return null;
  if (DELTA.test(value)) return Number(value);
  if (!HTTP_DATE.test(value)) return null;
  const when = Date.parse(value);
  return Number.isNaN(when) ? null : Math.max(0, (when - now) / 1000);
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

/** `["the shuffler at ORIGIN", true]` when `url` is on the `shuffler` origin the app pins, else the aggregator's (`aggregator`). */
export function party(url: string, shuffler: string | null, aggregator: string): [string, boolean] {
  if (shuffler !== null && url.startsWith(`${shuffler}/`)) return [`the shuffler at ${shuffler}`, true];
  return [`the aggregator at ${aggregator}`, false];
}

/**
 * The `serve` option (`"python -m shuffler serve --per-address"`) that lifts the limit a 429 answer
 * `said` (its message) and `named` (its `option` field, taken only when it is one of the party's
 * own); null for any other answer.
 */
export function option(status: number | null, isShuffler: boolean, said: string, named: unknown): string | null {
  if (status !== 429) return null;
  if (!isShuffler) return "python -m aggregator serve --rate-limit";
  const chosen =
    typeof named === "string" && SHUFFLER_OPTIONS.includes(named)
      ? named
      : said.includes("wait for a batch")
        ? "--max-waiting"
        : said.includes("a second")
          ? "--per-collection"
          : "--per-address";
  return `python -m shuffler serve ${chosen}`;
}

/** How the last answer reads in an error: its status and its JSON `error` (printable, at most 200 characters), or its size. */
export function lastAnswer(status: number, data: unknown, size: number): string {
  const error = typeof data === "object" && data !== null ? (data as { error?: unknown }).error : undefined;
  if (typeof error === "string") return `${status} ${error.slice(0, 200).replace(/[\p{Cc}\p{Cf}]/gu, "?")}`;
  return `${status} (${size} bytes)`;
}
