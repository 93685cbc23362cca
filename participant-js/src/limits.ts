/**
 * What the app lets one device spend and do, as the Python participant's `Limits`: no service can
 * raise any of it, and every limit is checked on what the service published before anything is drawn.
 */
import { ClientError } from "./errors.js";
import { MAIN_THREAD_SECONDS, type Work, drawSeconds, onBrowserMainThread } from "./calibration.js";
import { SpecError } from "./spec.js";
import { type ShuffledView } from "./view.js";

/** The collection asks more ε than the app accepts, or the device's budget would be passed. Nothing was drawn or sent. */
export class BudgetExceeded extends ClientError {}
/** What a service published or answered is larger than the app's limits allow. Nothing was drawn or sent. */
export class LimitExceeded extends ClientError {}

/**
 * The dummies a shuffled collection's batch must carry by default, as a share of its floor: it
 * mirrors protocols.shuffling.DUMMY_SHARE, the share a shuffler adds when its operator names none.
 */
export const DUMMY_SHARE = 1;

const WORK_OF_PROTOCOL: Record<string, Work> = {
  DE: "index", SUE: "coins", OUE: "coins", auto: "coins", SHE: "noise", THE: "noise",
};

/** The window of `Budget.yearly`, in days, and its default as a multiple of `total` (the Python participant's YEAR_DAYS and YEARLY_SHARE). */
export const YEAR_DAYS = 365;
export const YEARLY_SHARE = 3;

export interface Budget {
  /** The most ε all fresh draws on this device cost within `perDays` days, at every service together. */
  total: number;
  perDays: number;
  /**
   * The most ε they cost within any 365 days: by default YEARLY_SHARE times `total`, 24 at the
   * default total (2 a month on average, a burst of 8 within one month), so at most 240 in any ten
   * years, where the rolling window alone would allow about 97 a year.
   */
  yearly?: number;
}

export interface LimitsOptions {
  maxEpsilon?: number;
  budget?: Budget;
  maxSpecBytes?: number;
  maxAnswerBytes?: number;
  maxDomain?: number;
  maxTotalDomain?: number;
  maxDrawSeconds?: number;
  /**
   * The most collections the device holds at one origin drawn within the budget's window or never
   * acknowledged (whatever their age), memoised answers included: 300 by default, counted per
   * origin, as the Python participant's `max_collections` (which says why).
   */
  maxCollections?: number;
  /**
   * The longest (days) the memo keeps a question's answer after it was last given: a question not
   * asked for that long is answered afresh, its ε counted, and its entry leaves the ledger.
   */
  memoDays?: number;
  /**
   * The most questions whose answers the memo keeps at one origin (none over all origins: one
   * origin's questions never give up another's answers): past it the answers given longest ago are given up first (their reports leave the
   * ledger; the question, asked again, is drawn afresh, its ε counted), their spend still counted.
   * 100 by default, as the Python participant's `max_memo_per_origin` (which says why).
   */
  maxMemoPerOrigin?: number;
  /**
   * The fewest people's reports a shuffled collection's batches may hold (its shuffler's view's
   * floor), or it is refused: 100 by default, the shuffler's own default floor.
   */
  minBatch?: number;
  /**
   * The fewest dummies a shuffled collection's batches may carry, as a share of the view's floor
   * (rounded up), or it is refused: as many as the floor by default (DUMMY_SHARE). At the default
   * maxEpsilon 2, a batch of 100 people and 100 dummies is (0.76, 1e-3)-DP against the aggregator
   * alone and (1.27, 1e-3)-DP against one that floods the batch; at a floor of 10, 1.96 and 1.98.
   */
  minDummyShare?: number;
}

function positive(value: number, name: string): number {
  if (typeof value !== "number" || !(value > 0) || !Number.isFinite(value))
    throw new RangeError(`${name} must be a positive finite number, got ${value}`);
  return value;
}

function count(value: unknown, what: string): number {
  if (!Array.isArray(value)) throw new SpecError(`${what} must be a list`);
  return value.length;
}

/** `[work, entries]` of every input a raw spec declares, counted without building anything. */
export function declaredInputs(data: unknown): [Work, number][] {
  if (typeof data !== "object" || data === null || Array.isArray(data)) throw new SpecError("a spec must be a mapping");
  const spec = data as Record<string, unknown>;
  const k = count(spec.classes, "classes");
  const work = typeof spec.protocol === "string" ? WORK_OF_PROTOCOL[spec.protocol] ?? "coins" : "coins";
  const inputs: [Work, number][] = [[work, k]];
  const continuous = spec.continuous;
  if (continuous === undefined || continuous === null) {
    const features = spec.features ?? [];
    count(features, "features");
    for (const f of features as unknown[]) {
      const categories = typeof f === "object" && f !== null ? (f as Record<string, unknown>).categories : undefined;
      inputs.push([work, count(categories, "every feature's categories") * k]);
    }
    return inputs;
  }
  if (typeof continuous !== "object" || Array.isArray(continuous)) throw new SpecError("continuous must be a mapping");
  const prep = continuous as Record<string, unknown>;
  const projection = prep.projection as Record<string, unknown> | null | undefined;
  const outputs = typeof projection === "object" && projection !== null ? projection.outputs : prep.inputs;
  const r = count(outputs, "the continuous outputs");
  if ((spec.model ?? "discrete") !== "gaussian") {
    const bins = prep.bins;
    if (!Number.isInteger(bins) || (bins as number) < 1) throw new SpecError("a discrete model of continuous features needs bins (an integer)");
    return [...inputs, ...Array.from({ length: r }, (): [Work, number] => [work, (bins as number) * k])];
  }
  const approach = spec.approach ?? 3;
  if (approach === 3) return [...inputs, ...Array.from({ length: 2 * r }, (): [Work, number] => ["noise", k])];
  const kind: Work = approach === 1 ? "noise" : "index";
  return [...inputs, [kind, r * k], [kind, r * k]];
}

export class Limits {
  readonly maxEpsilon: number;
  readonly budget: Required<Budget>;
  readonly maxSpecBytes: number;
  readonly maxAnswerBytes: number;
  readonly maxDomain: number;
  readonly maxTotalDomain: number;
  readonly maxDrawSeconds: number;
  readonly maxCollections: number;
  readonly memoDays: number;
  readonly maxMemoPerOrigin: number;
  readonly minBatch: number;
  readonly minDummyShare: number;

  /** The defaults protect a person whose app never sets them: 2 per collection, 8 over 30 days, 24 over a year. */
  constructor(options: LimitsOptions = {}) {
    this.maxEpsilon = positive(options.maxEpsilon ?? 2, "maxEpsilon");
    const budget = options.budget ?? { total: 8, perDays: 30 };
    this.budget = {
      total: positive(budget.total, "budget.total"),
      perDays: positive(budget.perDays, "budget.perDays"),
      yearly: positive(budget.yearly ?? YEARLY_SHARE * budget.total, "budget.yearly"),
    };
    this.maxSpecBytes = positive(options.maxSpecBytes ?? 256 * 1024, "maxSpecBytes");
    this.maxAnswerBytes = positive(options.maxAnswerBytes ?? 64 * 1024, "maxAnswerBytes");
    this.maxDomain = positive(options.maxDomain ?? 65_536, "maxDomain");
    this.maxTotalDomain = positive(options.maxTotalDomain ?? 1_048_576, "maxTotalDomain");
    this.maxDrawSeconds = positive(options.maxDrawSeconds ?? 1, "maxDrawSeconds");
    this.maxCollections = positive(options.maxCollections ?? 300, "maxCollections");
    this.memoDays = positive(options.memoDays ?? 365, "memoDays");
    this.maxMemoPerOrigin = positive(options.maxMemoPerOrigin ?? 100, "maxMemoPerOrigin");
    if (!Number.isInteger(this.maxMemoPerOrigin)) throw new RangeError(`maxMemoPerOrigin must be a positive integer, got ${this.maxMemoPerOrigin}`);
    this.minBatch = positive(options.minBatch ?? 100, "minBatch");
    if (!Number.isInteger(this.minBatch)) throw new RangeError(`minBatch must be a positive integer, got ${this.minBatch}`);
    const share = options.minDummyShare ?? DUMMY_SHARE;
    if (typeof share !== "number" || !(share >= 0) || !Number.isFinite(share))
      throw new RangeError(`minDummyShare must be a finite number >= 0, got ${share}`);
    this.minDummyShare = share;
  }

  /** Throw LimitExceeded unless the shuffler's `view` holds batches to at least `minBatch` people and adds at least `ceil(minDummyShare * view.minBatch)` dummies. */
  checkView(view: Pick<ShuffledView, "minBatch" | "dummies">, collection: string): void {
    const dummies = Math.ceil(this.minDummyShare * view.minBatch);
    if (view.minBatch < this.minBatch || view.dummies < dummies)
      throw new LimitExceeded(
        `collection '${collection}' is shuffled in batches of ${view.minBatch} people and ${view.dummies} dummies; this app needs ` +
          `at least ${this.minBatch} people (minBatch) and ${dummies} dummies, ${this.minDummyShare} times the floor (minDummyShare); ` +
          "nothing was drawn or sent",
      );
  }

  checkCollection(epsilon: number, collection: string): void {
    if (epsilon > this.maxEpsilon)
      throw new BudgetExceeded(
        `collection '${collection}' asks epsilon=${epsilon}; this app accepts at most ${this.maxEpsilon} per collection; nothing was drawn or sent`,
      );
  }

  /** Refuse a raw spec whose declared domains or draw time pass the limits; counts only. */
  checkSpec(data: unknown, collection: string): void {
    const inputs = declaredInputs(data);
    const refusal = `collection '${collection}' asks`;
    const largest = Math.max(...inputs.map(([, entries]) => entries));
    if (largest > this.maxDomain)
      throw new LimitExceeded(`${refusal} an input of ${largest} entries; this app accepts at most ${this.maxDomain}; nothing was drawn or sent`);
    const total = inputs.reduce((sum, [, entries]) => sum + entries, 0);
    if (total > this.maxTotalDomain)
      throw new LimitExceeded(`${refusal} ${total} entries over its ${inputs.length} inputs; this app accepts at most ${this.maxTotalDomain}; nothing was drawn or sent`);
    const seconds = Math.max(...inputs.map(([work, entries]) => drawSeconds(work, entries)));
    if (seconds > this.maxDrawSeconds)
      throw new LimitExceeded(`${refusal} a draw estimated at ${seconds.toPrecision(3)} s on a slow device; this app accepts at most ${this.maxDrawSeconds} s (maxDrawSeconds); nothing was drawn or sent`);
    if (onBrowserMainThread() && seconds > MAIN_THREAD_SECONDS)
      throw new LimitExceeded(
        `${refusal} a draw estimated at ${seconds.toPrecision(3)} s, longer than a page's main thread may be held ` +
          `(${MAIN_THREAD_SECONDS} s); nothing was drawn or sent`,
      );
  }
}
