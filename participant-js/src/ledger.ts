/**
 * The device's ledger: what it reported, where, and what that spent. The same rules, and the same
 * entries (version 2, keyed `"<origin> <collection id>"`), as the Python participant's
 * `participant/ledger.py`, whose opening note argues why they hold:
 *
 * - one report per collection: a collection reported to is never reported to again (a report
 *   never acknowledged is re-sent, the very same bytes);
 * - one answer per question (the memo): a collection asking a question this device answered
 *   before, anywhere, gets that same randomised answer again at no cost, whatever the record now
 *   is, so whether a device repeats itself depends on the questions alone;
 * - one budget per device: a fresh draw only if its ε fits the app's cap per collection and every
 *   fresh draw of the window, at every origin together, stays within the app's total.
 *
 * The storage (a file in Node, IndexedDB in a browser) makes each read-modify-write atomic.
 */
import { ParticipantError } from "./errors.js";
import { type Rational, rationalOf } from "./exact.js";
import { BudgetExceeded, type Limits } from "./limits.js";

export const VERSION = 2;
const SECONDS_PER_DAY = 86_400;

/** The ledger cannot be read or written, or is not a ledger. Nothing is sent. */
export class LedgerError extends ParticipantError {}
/** The service now publishes another spec for a collection this device reported to. Nothing is sent. */
export class CollectionChanged extends ParticipantError {}

export interface Entry {
  origin: string;
  collection: string;
  uid: string;
  fingerprint: string;
  question: string;
  group: number | null;
  epsilon: number | null;
  report: string; // base64 of the packed report
  sent: boolean;
  memo_of: string | null;
  reserved_at: number; // seconds since the epoch
  sent_at?: number;
}

export interface LedgerData {
  version: number;
  entries: Record<string, Entry>;
}

/** Where a ledger lives: each call runs `change` on the current ledger atomically, writing it when asked. */
export interface LedgerStorage {
  update<T>(change: (data: LedgerData) => { result: T; write: boolean }): Promise<T>;
}

export interface Asked {
  origin: string;
  collection: string;
  uid: string;
  fingerprint: string;
  epsilon: number;
  question: string;
  group: number | null;
}

export interface Claim {
  key: string;
  body: Uint8Array;
  sent: boolean;
  spent: number;
}

export function entryKey(origin: string, collection: string): string {
  return `${origin} ${collection}`;
}

const isNumber = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v);

function validReport(entry: Record<string, unknown>): boolean {
  return typeof entry.report === "string" && /^[A-Za-z0-9+/]*={0,2}$/.test(entry.report) && entry.report.length % 4 === 0;
}

/** `raw` (parsed JSON, or undefined for no ledger yet) as a ledger, or a LedgerError naming why not. */
export function checkedLedger(raw: unknown, where: string): LedgerData {
  if (raw === undefined) return { version: VERSION, entries: {} };
  const data = raw as Record<string, unknown>;
  const entries = data?.entries as Record<string, Record<string, unknown>> | undefined;
  const valid =
    typeof data === "object" && data !== null && data.version === VERSION && typeof entries === "object" && entries !== null &&
    Object.values(entries).every(
      (e) =>
        typeof e === "object" && e !== null && typeof e.sent === "boolean" && validReport(e) &&
        typeof e.fingerprint === "string" && typeof (e.question ?? "") === "string" &&
        (e.group === null || e.group === undefined || Number.isInteger(e.group)) &&
        isNumber(e.reserved_at) && (e.epsilon === null || e.epsilon === undefined || (isNumber(e.epsilon) && e.epsilon >= 0)),
    );
  if (!valid) throw new LedgerError(`the ledger ${where} does not hold ledger entries`);
  return data as unknown as LedgerData;
}

export function toBase64(bytes: Uint8Array): string {
  let text = "";
  for (const b of bytes) text += String.fromCharCode(b);
  return btoa(text);
}

export function fromBase64(text: string): Uint8Array {
  return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
}

function add(a: Rational, b: Rational): Rational {
  return { n: a.n * b.d + b.n * a.d, d: a.d * b.d };
}

/** The ε fresh draws spent within the window, exactly (each float a binary fraction). */
function spent(entries: Record<string, Entry>, limits: Limits, now: number): Rational {
  const since = now - limits.budget.perDays * SECONDS_PER_DAY;
  let total: Rational = { n: 0n, d: 1n };
  for (const e of Object.values(entries)) {
    if (e.epsilon === null || e.epsilon === undefined) total = add(total, rationalOf(limits.maxEpsilon));
    else if (e.reserved_at > since) total = add(total, rationalOf(e.epsilon));
  }
  return total;
}

function answers(entry: Entry, asked: Asked): boolean {
  const group = entry.group ?? null;
  if (entry.question) return entry.question === asked.question && group === asked.group;
  return entry.fingerprint === asked.fingerprint && group === asked.group;
}

export class Ledger {
  constructor(
    readonly storage: LedgerStorage,
    private readonly now: () => number = () => Date.now() / 1000,
  ) {}

  private settle(
    data: LedgerData,
    asked: Asked,
    limits: Limits,
    resend: (old: Uint8Array) => Uint8Array,
  ): { claim: Claim | null; write: boolean } {
    const entries = data.entries;
    let key = entryKey(asked.origin, asked.collection);
    let entry: Entry | undefined = entries[key];
    if (entry === undefined) {
      const found = Object.entries(entries).find(([, e]) => e.uid === asked.uid);
      if (found) [key, entry] = found;
    }
    if (entry !== undefined) {
      if (entry.fingerprint !== asked.fingerprint)
        throw new CollectionChanged(
          `this device reported to '${entry.collection}' at ${entry.origin} under another spec; nothing was sent`,
        );
      return { claim: { key, body: fromBase64(entry.report), sent: entry.sent, spent: 0 }, write: false };
    }
    limits.checkCollection(asked.epsilon, asked.collection);
    const memo = asked.question ? Object.entries(entries).find(([, e]) => answers(e, asked)) : undefined;
    if (memo) {
      const body = resend(fromBase64(memo[1].report));
      this.record(data, asked, body, 0, memo[0]);
      return { claim: { key, body, sent: false, spent: 0 }, write: true };
    }
    const used = spent(entries, limits, this.now());
    const asking = rationalOf(asked.epsilon);
    const total = rationalOf(limits.budget.total);
    const after = add(used, asking);
    if (after.n * total.d > total.n * after.d)
      throw new BudgetExceeded(
        `this device spent epsilon=${Number(used.n) / Number(used.d)} in the last ${limits.budget.perDays} days; ` +
          `another ${asked.epsilon} would pass this app's total of ${limits.budget.total}; nothing was drawn or sent`,
      );
    return { claim: null, write: false };
  }

  private record(data: LedgerData, asked: Asked, body: Uint8Array, spentNow: number, memo: string | null): void {
    data.entries[entryKey(asked.origin, asked.collection)] = {
      origin: asked.origin,
      collection: asked.collection,
      uid: asked.uid,
      fingerprint: asked.fingerprint,
      question: asked.question,
      group: asked.group,
      epsilon: spentNow,
      report: toBase64(body),
      sent: false,
      memo_of: memo,
      reserved_at: this.now(),
    };
  }

  /**
   * The report for `asked`, recorded before it is sent: this collection's earlier report
   * unchanged; else (within the cap) a memoised answer to the same question; else (within the
   * budget) a fresh draw. Nothing random is drawn before the last step, and a claim recorded
   * meanwhile by another tab or process wins over this draw, which is then dropped unsent.
   */
  async claim(
    asked: Asked,
    limits: Limits,
    draw: () => Uint8Array,
    resend: (old: Uint8Array) => Uint8Array,
  ): Promise<Claim> {
    const first = await this.storage.update((data) => {
      const { claim, write } = this.settle(data, asked, limits, resend);
      return { result: claim, write };
    });
    if (first !== null) return first;
    const body = draw();
    return this.storage.update((data) => {
      const { claim, write } = this.settle(data, asked, limits, resend);
      if (claim !== null) return { result: claim, write };
      this.record(data, asked, body, asked.epsilon, null);
      return { result: { key: entryKey(asked.origin, asked.collection), body, sent: false, spent: asked.epsilon }, write: true };
    });
  }

  /** Record that the service acknowledged the report under `key`. */
  async markSent(key: string): Promise<void> {
    await this.storage.update((data) => {
      data.entries[key].sent = true;
      data.entries[key].sent_at = this.now();
      return { result: undefined, write: true };
    });
  }

  async entries(): Promise<Record<string, Entry>> {
    return this.storage.update((data) => ({ result: data.entries, write: false }));
  }
}
