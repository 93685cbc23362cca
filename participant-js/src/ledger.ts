/**
 * The device's ledger: what it reported, where, and what that spent. The same rules, and the same
 * entries (version 6, keyed `"<origin> <collection id>"`, a sum a day of the spend that left
 * them, and the markers of the collections they reported to), as the Python participant's
 * `participant/ledger.py`, whose opening note argues why they hold:
 *
 * - one report per collection: a collection reported to is never reported to again (a report
 *   never acknowledged is re-sent, the very same bytes); an entry that leaves the ledger leaves
 *   its markers ({@link marker}) for a year, and a collection found there is refused
 *   (`AlreadyReported`): within any year a collection receives at most one report from a device;
 * - one answer per question at an origin (the memo): a collection asking a question this device
 *   answered before at the same origin gets that same randomised answer again at no cost, whatever
 *   the record now is, so whether a device repeats itself depends on the questions alone; another
 *   origin gets a fresh draw, counted, so that no two services can link the device by its answers;
 * - one budget per device: a fresh draw only if its ε fits the app's cap per collection and every
 *   fresh draw of the window, and of the last 365 days, at every origin together, stays within the
 *   app's total and yearly cap;
 * - a small ledger whatever a service asks: at most `maxCollections` entries at an origin drawn
 *   within the window or never acknowledged (counted per origin: no service can make the device
 *   refuse another); the memo keeps at most `maxMemoPerOrigin` answers at an origin, the oldest
 *   given up first; an entry drawn on a day wholly
 *   before the rolling window leaves unless it holds a kept answer, its ε added to its day's sum,
 *   which the yearly cap counts while any moment of the day lies within the year.
 *
 * The storage (a file in Node, IndexedDB in a browser) makes each read-modify-write atomic.
 */
import { AlreadyReported, ClientError } from "./errors.js";
import { type Rational, rationalOf, reduce } from "./exact.js";
import { BudgetExceeded, LimitExceeded, type Limits, YEAR_DAYS } from "./limits.js";
import { normaliseOrigin } from "./origin.js";
import { PyFloat, canonicalJson } from "./pyjson.js";
import { sha256 } from "./sha256.js";

export const VERSION = 6;
/**
 * The versions read: version 2 held each report inline (base64), version 3 named its file by the
 * SHA-256 of its bytes, versions 4 and 5 by {@link reportBinding} and that SHA-256 (version 5 adds
 * `spent`, {@link spentProblem}; version 6 `reported`, {@link reportedProblem}); and the first
 * format, which states no version ({@link fromFirstFormat}).
 */
export const READABLE = [2, 3, 4, 5, 6];
const SECONDS_PER_DAY = 86_400;

/** The ledger cannot be read or written, or is not a ledger. Nothing is sent. */
export class LedgerError extends ClientError {}
/** The service now publishes another spec for a collection this device reported to. Nothing is sent. */
export class CollectionChanged extends ClientError {}

export interface Entry {
  origin: string;
  collection: string;
  uid: string;
  fingerprint: string;
  question: string;
  group: number | null;
  epsilon: number | null;
  report: string; // the packed report: base64 as the ledger hands it out, in a version 4 file the name of the file holding it (reportBinding); empty once acknowledged, for a shuffled entry
  sent: boolean;
  memo_of: string | null;
  reserved_at: number; // seconds since the epoch
  sent_at?: number;
  sealed?: string; // the report as sealed for a shuffler, kept as `report` is (empty once acknowledged)
}

export interface LedgerData {
  version: number;
  entries: Record<string, Entry>;
  /** The ε of entries that left the ledger, by day (since the epoch, UTC): {@link spendText}. */
  spent: Record<string, string>;
  /**
   * The markers ({@link marker}, concatenated) of the collections reported to in entries that
   * left the ledger, by the day they were drawn on: a collection found there is refused for a year
   * (absent from a storage of the app's own that keeps none yet).
   */
  reported?: Record<string, string>;
}

/**
 * Where a ledger lives: each `update` runs `change` on the current ledger atomically, writing it
 * when asked. A storage that keeps reports apart from the entries (IndexedDB) hands `change`
 * each entry with its `report` (and `sealed`) empty, and gives one entry whole from `entry`;
 * the ledger reads a report only through `entry`.
 */
export interface LedgerStorage {
  update<T>(change: (data: LedgerData) => { result: T; write: boolean }): Promise<T>;
  entry?(key: string): Promise<Entry | undefined>;
  /**
   * Replaces the entry under `key` by `change(entry)` (throwing a LedgerError when there is none),
   * reading no other: storages that keep entries apart. `change` sees the entry whole (its report
   * and sealed copy, base64), and what it returns is kept whole.
   */
  replace?(key: string, change: (entry: Entry) => Entry): Promise<void>;
  /** Readies `bodies` for the next change that stores them (a storage that deflates reports asynchronously: IndexedDB). */
  prepare?(bodies: Uint8Array[]): Promise<void>;
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
  /** For a shuffled collection, what goes to the shuffler: the report sealed (null otherwise). */
  sealed: Uint8Array | null;
}

type Settled = { kind: "entry" | "memo"; key: string } | { kind: "draw" };

export function entryKey(origin: string, collection: string): string {
  return `${origin} ${collection}`;
}

const isNumber = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v);
const isText = (v: unknown) => typeof v === "string";

/** The latest time (seconds since the epoch, in the year 2242) an entry may record: as in `participant/ledger_format.py`. */
const LATEST_TIME = 2 ** 33;
const isTime = (v: unknown) => isNumber(v) && v >= 0 && v <= LATEST_TIME;

function isBase64(v: unknown): boolean {
  return typeof v === "string" && v.length % 4 === 0 && /^[A-Za-z0-9+/]*={0,2}$/.test(v);
}

/** A SHA-256 (lowercase hex), or empty: versions 3 and 4's `report` and `sealed`, the names of their files. */
function isDigest(v: unknown): boolean {
  return typeof v === "string" && (v === "" || /^[0-9a-f]{64}$/.test(v));
}

/**
 * The fields of an entry as a device writes them, and what each must hold: the rules of the
 * Python participant's `participant/ledger.py`, case for case. `question`, `group`, `memo_of` and
 * `sent_at` are absent from entries of earlier formats, and `epsilon` is null for a first-format
 * entry alone (counted at the cap); `record` is an earlier format's field. Any other field or type is
 * not a ledger this library wrote, and the device refuses it rather than guess.
 */
const REQUIRED: Record<string, (v: unknown) => boolean> = {
  origin: isText,
  collection: isText,
  uid: isText,
  fingerprint: isText,
  epsilon: (v) => v === null || (isNumber(v) && v >= 0),
  report: isBase64,
  sent: (v) => typeof v === "boolean",
  reserved_at: isTime,
};
const OPTIONAL: Record<string, (v: unknown) => boolean> = {
  question: isText,
  group: (v) => v === null || (isNumber(v) && v >= 0 && Number.isInteger(v)),
  memo_of: (v) => v === null || isText(v),
  sent_at: isTime,
  record: isText,
  sealed: isBase64,
};

// The same tables as maps (an entry is checked thousands of times in a large ledger), by version:
// versions 3 and 4 hold names (digests) where version 2 held base64.
const NAMED: [Map<string, (v: unknown) => boolean>, Map<string, (v: unknown) => boolean>] = [
  new Map(Object.entries({ ...REQUIRED, report: isDigest })),
  new Map(Object.entries({ ...OPTIONAL, sealed: isDigest })),
];
const CHECKS: Record<number, [Map<string, (v: unknown) => boolean>, Map<string, (v: unknown) => boolean>]> = {
  2: [new Map(Object.entries(REQUIRED)), new Map(Object.entries(OPTIONAL))],
  3: NAMED,
  4: NAMED,
  5: NAMED,
  6: NAMED,
};

/** A plain object (as JSON.parse and IndexedDB's structured clone make one), nothing else. */
export const isMapping = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v) && Object.getPrototypeOf(v) === Object.prototype;

/**
 * How far past the device's clock an entry's times may lie (seconds): as in
 * `participant/ledger_format.py`, which says why a later one is refused.
 */
export const CLOCK_SKEW = 86_400;
/** The largest input group an entry may name: an integer either language holds exactly. */
const LARGEST_GROUP = 2 ** 53 - 1;

/** Step 1 of {@link entryProblem}: which field is missing, unknown or of another type, if any. */
function fieldsProblem(key: string, entry: unknown, version: number): string | null {
  const [REQUIRED_CHECKS, OPTIONAL_CHECKS] = CHECKS[version];
  if (!isMapping(entry)) return `entry '${key}' is not a mapping`;
  for (const [name, ok] of REQUIRED_CHECKS) {
    if (!Object.prototype.hasOwnProperty.call(entry, name)) return `entry '${key}' lacks '${name}'`;
    if (!ok(entry[name])) return `entry '${key}' holds an invalid '${name}'`;
  }
  // Own keys alone: a mapping's prototype is Object.prototype, which holds no enumerable key.
  for (const name in entry) {
    if (REQUIRED_CHECKS.has(name)) continue;
    const ok = OPTIONAL_CHECKS.get(name);
    if (ok === undefined || !ok(entry[name])) return `entry '${key}' holds an invalid or unknown '${name}'`;
  }
  return null;
}

/**
 * Step 2 of {@link entryProblem}: which combination of fields no writer makes, if any; the rules,
 * in the same order, of `participant/ledger_format.py`'s `_kind_problem`, whose note lists the
 * entries the writers make (of unknown spend; of known spend, fresh or memoised; shuffled;
 * unacknowledged; times the clock showed, at most `latest`).
 */
function kindProblem(key: string, e: Record<string, unknown>, version: number, latest: number): string | null {
  const has = (name: string) => Object.prototype.hasOwnProperty.call(e, name);
  if ((e.reserved_at as number) > latest || (has("sent_at") && (e.sent_at as number) > latest))
    return `entry '${key}' records a time past this device's clock`;
  if (e.epsilon === null) {
    if (["question", "group", "memo_of", "record", "sealed"].some(has)) return `entry '${key}' holds an invalid 'epsilon'`; // only a first-format entry has an unknown spend
    if (has("sent_at") && !e.sent) return `entry '${key}' holds 'sent_at' without 'sent' or 'sent' without 'sent_at'`;
  } else {
    if (!has("memo_of")) return `entry '${key}' lacks 'memo_of'`;
    if (has("sent_at") !== e.sent) return `entry '${key}' holds 'sent_at' without 'sent' or 'sent' without 'sent_at'`;
  }
  if (has("question") !== has("group")) return `entry '${key}' holds 'question' without 'group' or 'group' without 'question'`;
  if (has("record") && (version !== 2 || has("question"))) return `entry '${key}' holds an invalid or unknown 'record'`;
  if (has("sealed") && (e.question !== "" || (e.memo_of ?? null) !== null))
    return `entry '${key}' is shuffled but holds a question or a memo`;
  const memo = has("memo_of") ? (e.memo_of as string | null) : null;
  if (e.epsilon !== null && (memo === null) !== (e.epsilon as number) > 0)
    return `entry '${key}' spends epsilon=${e.epsilon}: a draw spends more than 0, a memo 0`;
  if (memo !== null && (memo === key || !memo.startsWith(`${e.origin} `) || (has("question") && e.question === "")))
    return `entry '${key}' copies a memo of another question or origin`;
  if (!e.sent && (e.report === "" || (has("sealed") && e.sealed === ""))) return `entry '${key}' is not sent but holds no report`;
  if (has("sealed") && (e.report === "") !== (e.sealed === ""))
    return `entry '${key}' holds 'report' without 'sealed' or 'sealed' without 'report'`;
  return null;
}

/** The origins seen spelt as {@link normaliseOrigin} spells them (a ledger holds few). */
const normalOrigins = new Set<string>();
function isNormalOrigin(origin: string): boolean {
  if (normalOrigins.has(origin)) return true;
  try {
    if (normaliseOrigin(origin) !== origin) return false;
  } catch {
    return false;
  }
  if (normalOrigins.size < 256) normalOrigins.add(origin);
  return true;
}

/**
 * What is wrong with the entry `entry` under `key` in a ledger of `version`, read when the
 * device's clock shows `now` (seconds since the epoch), or null when it has a shape a device
 * writes (the rules of `participant/ledger_format.py`'s `entry_problem`): 1. its fields and their
 * types; 2. their combination ({@link kindProblem}); 3. its key, origin and group.
 */
export function entryProblem(key: string, entry: unknown, version = VERSION, now = Date.now() / 1000): string | null {
  const problem = fieldsProblem(key, entry, version) ?? kindProblem(key, entry as Record<string, unknown>, version, now + CLOCK_SKEW);
  if (problem !== null) return problem;
  const e = entry as Record<string, unknown>;
  if (key !== entryKey(e.origin as string, e.collection as string)) return `entry '${key}' is not keyed by its origin and collection`;
  if (!isNormalOrigin(e.origin as string)) return `entry '${key}' names an origin no device spells so`;
  if (e.group !== undefined && e.group !== null && (e.group as number) > LARGEST_GROUP) return `entry '${key}' holds an invalid 'group'`;
  return null;
}

/**
 * Whether the memo could have copied `source`'s answer into `copy`: by question and group (an entry
 * stating no question: by its spec's fingerprint), never a shuffled one; as `participant/ledger_format.py`'s `_answers_alike`.
 */
function answersAlike(source: Entry, copy: Entry): boolean {
  if (source.sealed !== undefined || (source.group ?? null) !== (copy.group ?? null)) return false;
  if (source.question) return source.question === copy.question;
  return source.fingerprint === copy.fingerprint;
}

/**
 * What is wrong across the (each well-formed) `entries` of a ledger, or null (the rules of
 * `participant/ledger_format.py`'s `entries_problem`): no two at one origin hold the same
 * published uid, and a memoised copy whose source is still in the ledger copies a direct answer
 * to the same question.
 */
export function entriesProblem(entries: Record<string, Entry>): string | null {
  const seen = new Map<string, Set<string>>(); // the uids at each origin
  for (const key in entries) {
    const e = entries[key];
    let uids = seen.get(e.origin);
    if (uids === undefined) seen.set(e.origin, (uids = new Set()));
    if (uids.has(e.uid)) return `entry '${key}' holds a uid another entry at its origin holds`;
    uids.add(e.uid);
    const memo = e.memo_of ?? null;
    const source = memo !== null && Object.prototype.hasOwnProperty.call(entries, memo) ? entries[memo] : undefined;
    if (source !== undefined && !answersAlike(source, e)) return `entry '${key}' copies a memo of another question or origin`;
  }
  return null;
}

/** The day (since the epoch, UTC) of the time `at` (seconds since the epoch), exactly as the Python participant's `_day`: a day's first second is a float exactly, so comparing with it corrects the division's rounding. */
export function dayOf(at: number): number {
  const day = Math.floor(at / SECONDS_PER_DAY);
  if (day * SECONDS_PER_DAY > at) return day - 1;
  return (day + 1) * SECONDS_PER_DAY <= at ? day + 1 : day;
}

/** `value` (a positive binary fraction) as a day's spend is written: `"numerator/denominator"`, in lowest terms. */
export function spendText(value: Rational): string {
  const r = reduce(value);
  return `${r.n}/${r.d}`;
}

/** The exact ε a day's spend `text` (checked by {@link spentProblem}) holds. */
export function spendValue(text: string): Rational {
  const at = text.indexOf("/");
  return { n: BigInt(text.slice(0, at)), d: BigInt(text.slice(at + 1)) };
}

/** Whether `text` is exactly what {@link spendText} writes: a positive fraction in lowest terms over a power of two (at most 700 digits each, as in Python). */
function isSpend(text: unknown): boolean {
  if (typeof text !== "string" || !/^[1-9][0-9]{0,699}\/[1-9][0-9]{0,699}$/.test(text)) return false;
  const value = spendValue(text);
  return (value.d & (value.d - 1n)) === 0n && reduce(value).d === value.d;
}

/** What is wrong with a version 5 ledger's `spent` (day -> spend), or null when a device wrote it (the rules of `participant/ledger_format.py`'s `spent_problem`). */
export function spentProblem(spent: unknown, now = Date.now() / 1000): string | null {
  if (!isMapping(spent)) return "its spend by day is not a mapping";
  const last = Math.floor(Math.floor(Math.min(LATEST_TIME, now + CLOCK_SKEW)) / SECONDS_PER_DAY); // no day after the clock's
  for (const day in spent) {
    if (!/^(0|[1-9][0-9]{0,5})$/.test(day) || Number(day) > last) return `its spend names a day that is none: '${day.slice(0, 20)}'`;
    if (!isSpend(spent[day])) return `its spend of day ${day} is not a sum a device writes`;
  }
  return null;
}

/** The hex digits of a marker: 16 bytes of SHA-256. */
export const MARKER_HEX = 32;

/**
 * The marker (32 lowercase hex digits: the first 16 bytes of a SHA-256) that this device reported
 * at `origin` to the collection of id `name` (`kind` "collection") or of published uid `name`
 * (`kind` "uid"): of kind, a newline, origin, a newline and name, as UTF-8. As
 * `participant/ledger_format.py`'s `marker`.
 */
export function marker(kind: "collection" | "uid", origin: string, name: string): string {
  const digest = sha256(new TextEncoder().encode(`${kind}\n${origin}\n${name}`));
  let hex = "";
  for (let i = 0; i < MARKER_HEX / 2; i++) hex += digest[i].toString(16).padStart(2, "0");
  return hex;
}

/**
 * What is wrong with a version 6 ledger's `reported` (day -> concatenated markers), read when the
 * device's clock shows `now`, or null when a device wrote it: days as `spent` writes them (none
 * after the clock's), each holding one marker or more, no marker twice in the whole mapping. The
 * rules of `participant/ledger_format.py`'s `reported_problem`.
 */
export function reportedProblem(reported: unknown, now = Date.now() / 1000): string | null {
  if (!isMapping(reported)) return "its markers by day are not a mapping";
  const seen = new Set<string>();
  const last = Math.floor(Math.floor(Math.min(LATEST_TIME, now + CLOCK_SKEW)) / SECONDS_PER_DAY); // as spentProblem
  for (const day in reported) {
    if (!/^(0|[1-9][0-9]{0,5})$/.test(day) || Number(day) > last) return `its markers name a day that is none: '${day.slice(0, 20)}'`;
    const text = reported[day];
    if (typeof text !== "string" || text.length % MARKER_HEX !== 0 || !/^[0-9a-f]+$/.test(text)) return `its markers of day ${day} are not markers a device writes`;
    for (let at = 0; at < text.length; at += MARKER_HEX) seen.add(text.slice(at, at + MARKER_HEX));
  }
  let markers = 0;
  for (const day in reported) markers += (reported[day] as string).length / MARKER_HEX;
  return seen.size === markers ? null : "its markers repeat a marker";
}

/**
 * What is wrong with a parsed ledger, read when the device's clock shows `now` (seconds since the
 * epoch), or null when it is a ledger a device writes: its keys, each entry ({@link entryProblem}),
 * the entries together ({@link entriesProblem}) and its spend by day ({@link spentProblem}); the
 * same steps as `participant/ledger_format.py`'s `ledger_problem`.
 */
export function ledgerProblem(data: unknown, now = Date.now() / 1000): string | null {
  if (!isMapping(data)) return "not a mapping";
  if (!READABLE.includes(data.version as number)) return `not version ${READABLE.join(" or ")}`;
  const keys = Object.keys(data);
  if (data.version === 6) {
    if (keys.length !== 4 || !keys.every((k) => k === "version" || k === "entries" || k === "spent" || k === "reported") || !isMapping(data.entries))
      return "not a mapping of version, entries, spend and markers";
  } else if (data.version === 5) {
    if (keys.length !== 3 || !keys.every((k) => k === "version" || k === "entries" || k === "spent") || !isMapping(data.entries))
      return "not a mapping of version, entries and spend";
  } else if (!keys.every((k) => k === "version" || k === "entries" || k === "salt") || !isMapping(data.entries))
    return "not a mapping of version and entries";
  for (const [key, entry] of Object.entries(data.entries)) {
    const problem = entryProblem(key, entry, data.version as number, now);
    if (problem !== null) return problem;
  }
  const problem = entriesProblem(data.entries as Record<string, Entry>);
  if (problem !== null || (data.version as number) < 5) return problem;
  return spentProblem(data.spent, now) ?? (data.version === 6 ? reportedProblem(data.reported, now) : null);
}

/** `raw` (parsed JSON, or undefined for no ledger yet) as a ledger, or a LedgerError naming why not. */
/**
 * The latest moment (seconds since the epoch) a checked ledger records: its entries' times, and the
 * start of the last day of its spend and markers (a day is refused, as {@link spentProblem} refuses
 * one, when its start lies past the clock's skew). What {@link clockProblem} holds against the clock
 * when the ledger's bytes were checked before, at another reading of the clock. As
 * `participant/ledger_format.py`'s `latest_moment`.
 */
export function latestMoment(data: LedgerData): number {
  let latest = 0;
  for (const e of Object.values(data.entries)) latest = Math.max(latest, e.reserved_at, e.sent_at ?? 0);
  for (const days of [data.spent ?? {}, data.reported ?? {}]) for (const day in days) latest = Math.max(latest, Number(day) * SECONDS_PER_DAY);
  return latest;
}

/**
 * What is wrong with a ledger recording `latest` ({@link latestMoment}) when the device's clock shows
 * `now`: a time past the clock by more than a day (the clock was set back since, or the file came
 * from a device whose clock ran ahead), or null. As `participant/ledger_format.py`'s `clock_problem`.
 */
export function clockProblem(latest: number, now = Date.now() / 1000): string | null {
  return latest > Math.min(LATEST_TIME, now + CLOCK_SKEW) ? "it records a time past this device's clock (set back since it was written?)" : null;
}

export function checkedLedger(raw: unknown, where: string): LedgerData {
  if (raw === undefined) return { version: VERSION, entries: {}, spent: {}, reported: {} };
  const problem = ledgerProblem(raw);
  if (problem !== null) throw new LedgerError(`the ledger ${where} does not hold ledger entries: ${problem}`);
  const data = raw as LedgerData & { salt?: unknown };
  for (const entry of Object.values(data.entries)) delete (entry as unknown as Record<string, unknown>).record;
  delete data.salt;
  data.spent ??= {}; // before version 5 every spend was an entry's
  data.reported ??= {}; // before version 6 no marker was kept
  return data;
}

/** The text of a ledger file as JSON, or a LedgerError: strict UTF-8 (no replacement characters, a byte-order mark refused as Python refuses it), then {@link parseJson}. */
export function parseLedger(bytes: Uint8Array, where: string): unknown {
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    throw new LedgerError(`the ledger ${where} is not UTF-8 text (overwritten by another program?)`);
  }
  return parseJson(text, where);
}

/**
 * The ledger text `text` as JSON, or a LedgerError: not JSON, or an object in it that repeats a
 * key. JSON.parse keeps a repeated key's last value (as Python's json does), so a file could say
 * two things at once (a second `entries`, an entry's `epsilon` given and taken back); a device
 * never writes one, and the Python participant refuses it too (`participant/ledger_format.py`).
 */
export function parseJson(text: string, where: string): unknown {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new LedgerError(`the ledger ${where} is not valid JSON (truncated or overwritten)`);
  }
  if (keysWritten(text) !== keysHeld(value))
    throw new LedgerError(`the ledger ${where} repeats a key in one object, which no device writes`);
  return value;
}

/**
 * The keys the JSON text `text` (valid JSON) writes, in every object, repeated ones each time: its
 * colons outside strings, since a colon outside a string follows a key and nothing else. A string
 * ends at the first quote after its opening one that an odd run of backslashes does not escape.
 * Compared with {@link keysHeld}, this tells whether any object repeats a key, whatever the
 * nesting and however the key is escaped (JSON.parse has compared the keys themselves).
 */
function keysWritten(text: string): number {
  let count = 0;
  for (let at = 0; ; ) {
    const open = text.indexOf('"', at);
    const end = open === -1 ? text.length : open;
    for (let i = at; i < end; i++) if (text.charCodeAt(i) === 58) count++; // ":"
    if (open === -1) return count;
    let close = open;
    for (;;) {
      close = text.indexOf('"', close + 1);
      if (close === -1) return -1; // no string ends here: not the JSON JSON.parse read (never so)
      let before = close - 1;
      while (text.charCodeAt(before) === 92) before--; // "\\"
      if ((close - 1 - before) % 2 === 0) break;
    }
    at = close + 1;
  }
}

/** The keys the parsed JSON `value` holds, in every object (each once: JSON.parse kept one of a repeated key). Without recursion: JSON.parse takes deeper nesting than a stack would. */
function keysHeld(value: unknown): number {
  let count = 0;
  const pending: unknown[] = [value];
  while (pending.length > 0) {
    const next = pending.pop();
    if (typeof next !== "object" || next === null) continue;
    const keyed = !Array.isArray(next); // an array's items are no keys
    // JSON.parse makes every key an own property, "__proto__" too; a mapping's prototype holds no enumerable key.
    for (const key in next) {
      if (keyed) count++;
      const item = (next as Record<string, unknown>)[key];
      if (typeof item === "object" && item !== null) pending.push(item);
    }
  }
  return count;
}

/**
 * What the name of a report file commits to besides the bytes, in a ledger of version 4: the field
 * (`report` or `sealed`), the entry's key, question and group, as canonical JSON (the group a
 * float), exactly as `participant/ledger_format.py`'s `report_name` writes it. The name is the
 * SHA-256 (hex) of these bytes followed by the SHA-256 of the report's bytes, so a report named by
 * another entry or field, or kept by an entry whose question or group changed, is refused as altered.
 */
export function reportBinding(field: "report" | "sealed", key: string, entry: Entry): Uint8Array {
  const group = entry.group ?? null;
  // + 0: a group of -0 is 0, as in Python (whose JSON reads "-0" as the integer 0).
  const binding = canonicalJson([field, key, entry.question ?? "", group === null ? null : new PyFloat(group + 0)]);
  return new TextEncoder().encode(binding); // ASCII: canonicalJson escapes every other character
}

/**
 * The first format (the Python device before version 2, which stated no version): a mapping of
 * the published uid (at least 16 characters) to an entry holding exactly the report (base64 of a
 * packed report: never empty), whether it was acknowledged, when it was drawn (and acknowledged),
 * the collection's URL (`<service>/collections/<id>`) and its spec's fingerprint (SHA-256, hex).
 */
const FIRST_REQUIRED: Record<string, (v: unknown) => boolean> = {
  report: (v) => isBase64(v) && v !== "",
  sent: (v) => typeof v === "boolean",
  reserved_at: isTime,
  collection: isText,
  fingerprint: (v) => typeof v === "string" && /^[0-9a-f]{64}$/.test(v),
};
const FIRST_OPTIONAL: Record<string, (v: unknown) => boolean> = { sent_at: isTime };

/**
 * The origin (normalised) and collection id of `entry`, kept under `uid` in a ledger of the first
 * format, from the URL it recorded; null unless it is exactly an entry that format's device wrote
 * (the rules of `participant/ledger_format.py`'s `first_format_place`).
 */
export function firstFormatPlace(uid: string, entry: unknown): [string, string] | null {
  const own = (o: object, name: string) => Object.prototype.hasOwnProperty.call(o, name);
  // Characters as Python counts them (code points), not UTF-16 units.
  if (Array.from(uid).length < 16 || !isMapping(entry)) return null;
  for (const name in FIRST_REQUIRED) if (!own(entry, name) || !FIRST_REQUIRED[name](entry[name])) return null;
  for (const name in entry) if (!own(FIRST_REQUIRED, name) && !(own(FIRST_OPTIONAL, name) && FIRST_OPTIONAL[name](entry[name]))) return null;
  const url = entry.collection as string;
  const at = url.lastIndexOf("/collections/");
  const collection = at === -1 ? "" : url.slice(at + "/collections/".length);
  if (collection === "") return null;
  try {
    return [normaliseOrigin(url.slice(0, at)), collection];
  } catch {
    return null;
  }
}

/**
 * A parsed ledger that states no version, as version 2 holds it (its reports inline) when it is
 * exactly a ledger of the first format: each entry keeps its report, its origin and id come from
 * the URL it recorded, its spend is unknown (null, counted as the app's cap per collection).
 * `data` unchanged otherwise (refused then, as stating no version); a LedgerError if two of its
 * entries name one collection (one would be lost, and its spend with it). As the Python participant's `_from_v1`.
 */
export function fromFirstFormat(data: unknown, where: string): unknown {
  if (!isMapping(data) || Object.prototype.hasOwnProperty.call(data, "version")) return data;
  const uids = Object.keys(data);
  const places = uids.map((uid) => firstFormatPlace(uid, data[uid]));
  if (places.length === 0 || places.includes(null)) return data;
  const entries: Record<string, Entry> = {};
  uids.forEach((uid, i) => {
    const [origin, collection] = places[i] as [string, string];
    const key = entryKey(origin, collection);
    if (Object.prototype.hasOwnProperty.call(entries, key))
      throw new LedgerError(`the ledger ${where} (of the first format) names the collection '${key}' twice`);
    const entry = data[uid] as Record<string, unknown>;
    entries[key] = {
      origin, collection, uid, fingerprint: entry.fingerprint as string, epsilon: null,
      report: entry.report as string, sent: entry.sent as boolean, reserved_at: 0,
    } as Entry;
  });
  return { version: 2, entries };
}

export function toBase64(bytes: Uint8Array): string {
  let text = "";
  for (const b of bytes) text += String.fromCharCode(b);
  return btoa(text);
}

export function fromBase64(text: string): Uint8Array {
  return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
}

/** a + b, exactly; over the larger denominator when one divides the other (binary fractions always), so a sum of thousands stays small. */
function add(a: Rational, b: Rational): Rational {
  if (a.d >= b.d && a.d % b.d === 0n) return { n: a.n + b.n * (a.d / b.d), d: a.d };
  if (b.d % a.d === 0n) return { n: b.n + a.n * (b.d / a.d), d: b.d };
  return { n: a.n * b.d + b.n * a.d, d: a.d * b.d };
}

/**
 * The ε the fresh draws of `data` spent within the last `days` days before `now` (seconds since
 * the epoch), exactly (each float a binary fraction). A day whose spend left its entries counts
 * whole while any moment of it lies within the window: never less than the entries it holds.
 */
function spent(data: LedgerData, limits: Limits, now: number, days: number): Rational {
  const since = now - days * SECONDS_PER_DAY;
  // Each value once, times how often it is spent: a ledger of thousands of entries holds few.
  const times = new Map<number, number>();
  for (const key in data.entries) {
    const e = data.entries[key];
    const value = e.epsilon === null || e.epsilon === undefined ? limits.maxEpsilon : e.reserved_at > since ? e.epsilon : 0;
    if (value !== 0) times.set(value, (times.get(value) ?? 0) + 1);
  }
  let total: Rational = { n: 0n, d: 1n };
  for (const [value, count] of times) {
    const exact = rationalOf(value);
    total = add(total, { n: exact.n * BigInt(count), d: exact.d });
  }
  for (const day in data.spent) if ((Number(day) + 1) * SECONDS_PER_DAY > since) total = add(total, spendValue(data.spent[day]));
  return total;
}

/** Which of two strings comes first in code point order (Python's), -1, 0 or 1: `<` compares UTF-16 units. */
function compareCodePoints(a: string, b: string): number {
  const [x, y] = [Array.from(a), Array.from(b)];
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const [p, q] = [x[i].codePointAt(0) as number, y[i].codePointAt(0) as number];
    if (p !== q) return p < q ? -1 : 1;
  }
  return x.length - y.length < 0 ? -1 : x.length > y.length ? 1 : 0;
}

/** Whether the entry `a` under `keyA` was given after `b` under `keyB`: by time, then key (as the Python participant orders them). */
function later(a: Entry, keyA: string, b: Entry, keyB: string): boolean {
  if (a.reserved_at !== b.reserved_at) return a.reserved_at > b.reserved_at;
  return compareCodePoints(keyA, keyB) > 0;
}

/** The question an entry answers, as text: its origin, group and question (its spec's fingerprint for an earlier format's). */
function questionOf(e: Entry): string {
  return JSON.stringify([e.origin, e.group ?? null, e.question || `fingerprint ${e.fingerprint}`]);
}

/**
 * The answers the memo keeps, by question ({@link questionOf}): the key of the newest entry
 * holding the question's answer (a direct entry with its report, drawn within `memoDays` of
 * `now`), for the `maxMemoPerOrigin` questions at each origin answered most recently (ties by key, in code point order); every other question's
 * answer is given up. As the Python participant's `_memo`.
 */
function memoOf(entries: Record<string, Entry>, limits: Limits, now: number): Map<string, string> {
  const remembered = now - limits.memoDays * SECONDS_PER_DAY;
  const newest = new Map<string, string>();
  for (const key in entries) {
    const e = entries[key];
    // A shuffled answer holds no memo, nor an answer given up (its report gone).
    if (e.sealed !== undefined || !e.report || e.reserved_at <= remembered) continue;
    const question = questionOf(e);
    const held = newest.get(question);
    if (held === undefined || later(e, key, entries[held], held)) newest.set(question, key);
  }
  const newestFirst = (a: [string, string], b: [string, string]) => (later(entries[a[1]], a[1], entries[b[1]], b[1]) ? -1 : 1);
  const byOrigin = new Map<string, [string, string][]>();
  for (const [question, key] of newest) {
    const origin = entries[key].origin;
    if (!byOrigin.has(origin)) byOrigin.set(origin, []);
    (byOrigin.get(origin) as [string, string][]).push([question, key]);
  }
  const kept: [string, string][] = [];
  for (const answers of byOrigin.values()) kept.push(...answers.sort(newestFirst).slice(0, limits.maxMemoPerOrigin));
  return new Map(kept.sort(newestFirst));
}

/** Whether `data` holds a marker that this device reported to `asked`'s collection (its id, or its published uid at its origin) in an entry that has left. */
function left(data: LedgerData, asked: Asked): boolean {
  const reported = data.reported ?? {};
  for (const wanted of [marker("collection", asked.origin, asked.collection), marker("uid", asked.origin, asked.uid)])
    for (const day in reported) {
      const text = reported[day];
      for (let at = text.indexOf(wanted); at !== -1; at = text.indexOf(wanted, at + 1)) if (at % MARKER_HEX === 0) return true;
    }
  return false;
}

/**
 * Adds to `data.reported` the markers of the entries `gone` (each with its day), a marker already
 * held added no more, and drops the days wholly before the last year; `data.reported` is a new
 * object when it changed (a storage writes it only then). As the Python participant's `_mark`.
 */
function mark(data: LedgerData, gone: [number, Entry][], now: number, limits: Limits): void {
  const before = data.reported ?? {};
  const reported = { ...before };
  let changed = false;
  if (gone.length > 0) {
    const held = new Set<string>();
    for (const day in reported) for (let at = 0; at < reported[day].length; at += MARKER_HEX) held.add(reported[day].slice(at, at + MARKER_HEX));
    for (const [day, e] of gone)
      for (const m of [marker("collection", e.origin, e.collection), marker("uid", e.origin, e.uid)])
        if (!held.has(m)) {
          held.add(m);
          reported[day] = (reported[day] ?? "") + m;
          changed = true;
        }
  }
  const counted = now - Math.max(limits.budget.perDays, YEAR_DAYS) * SECONDS_PER_DAY;
  for (const day of Object.keys(reported))
    if ((Number(day) + 1) * SECONDS_PER_DAY <= counted) {
      delete reported[day];
      changed = true;
    }
  data.reported = changed || data.reported === undefined ? reported : before;
}

/** Whether `entry` answered `asked`'s question at `asked`'s origin: another origin's answer is never repeated (see the module's note). */
function answers(entry: Entry, asked: Asked): boolean {
  if (entry.sealed !== undefined || entry.origin !== asked.origin) return false; // shuffled: never sent again anywhere
  const group = entry.group ?? null;
  if (entry.question) return entry.question === asked.question && group === asked.group;
  return entry.fingerprint === asked.fingerprint && group === asked.group;
}

export class Ledger {
  constructor(
    readonly storage: LedgerStorage,
    private readonly now: () => number = () => Date.now() / 1000,
  ) {}

  /**
   * Steps 1 to 4 of {@link claim} on `data`, writing nothing: this collection's earlier report
   * (`entry`), the key of an entry answering the same question (`memo`), or leave to draw (`draw`);
   * throws when the collection changed or a limit would be passed.
   */
  private settle(data: LedgerData, asked: Asked, limits: Limits): Settled {
    const entries = data.entries;
    let key = entryKey(asked.origin, asked.collection);
    let entry: Entry | undefined = Object.prototype.hasOwnProperty.call(entries, key) ? entries[key] : undefined;
    if (entry === undefined)
      // The published uid reached under another id at this origin; never at another origin, where a
      // refusal (or a re-send) would tell that origin what this device did at the first.
      for (const other in entries)
        if (entries[other].uid === asked.uid && entries[other].origin === asked.origin) {
          [key, entry] = [other, entries[other]];
          break;
        }
    if (entry !== undefined) {
      if (entry.fingerprint !== asked.fingerprint)
        throw new CollectionChanged(
          `this device reported to '${entry.collection}' at ${entry.origin} under another spec; nothing was sent`,
        );
      return { kind: "entry", key };
    }
    if (left(data, asked))
      throw new AlreadyReported(
        `this device already reported to collection '${asked.collection}' at ${asked.origin}; a second report would spend epsilon twice`,
      );
    limits.checkCollection(asked.epsilon, asked.collection);
    const now = this.now();
    const since = now - limits.budget.perDays * SECONDS_PER_DAY;
    // At this origin alone (no refusal tells one service what another asked), unacknowledged entries whatever their age.
    let held = 0;
    for (const other in entries) {
      const e = entries[other];
      if (e.origin === asked.origin && (e.reserved_at > since || !e.sent)) held++;
    }
    if (held >= limits.maxCollections)
      throw new LimitExceeded(
        `this device holds ${held} collections at ${asked.origin} drawn in the last ${limits.budget.perDays} days or never ` +
          `acknowledged; this app holds at most ${limits.maxCollections} an origin (maxCollections); nothing was drawn or sent`,
      );
    if (asked.question)
      for (const other of memoOf(entries, limits, now).values()) if (answers(entries[other], asked)) return { kind: "memo", key: other };
    const asking = rationalOf(asked.epsilon);
    const windows: [number, number, string][] = [
      [limits.budget.perDays, limits.budget.total, "total"],
      [YEAR_DAYS, limits.budget.yearly, "yearly cap"],
    ];
    for (const [days, cap, name] of windows) {
      const used = spent(data, limits, now, days);
      const total = rationalOf(cap);
      const after = add(used, asking);
      if (after.n * total.d > total.n * after.d)
        throw new BudgetExceeded(
          `this device spent epsilon=${Number(used.n) / Number(used.d)} in the last ${days} days; ` +
            `another ${asked.epsilon} would pass this app's ${name} of ${cap}; nothing was drawn or sent`,
        );
    }
    return { kind: "draw" };
  }

  /**
   * Keep, of `data`, what the device needs and no more, as of `now` (as the Python participant's
   * `_expire`, which says why): an entry drawn on a day wholly before the rolling window whose
   * answer the memo does not keep ({@link memoOf}) leaves once acknowledged, its ε added to its
   * day's sum (an unacknowledged one stays, its report with it); an acknowledged direct entry whose question's answer the memo gave up loses its
   * report; a day's sum leaves once it counts toward no window. Entries of unknown spend stay.
   */
  private expire(data: LedgerData, limits: Limits, now: number): void {
    const entries = data.entries;
    const sums = (data.spent ??= {}); // a storage of the app's own may keep none yet
    const memo = memoOf(entries, limits, now);
    const kept = new Set(memo.values());
    const window = now - limits.budget.perDays * SECONDS_PER_DAY;
    const gone: [number, Entry][] = [];
    for (const key of Object.keys(entries)) {
      const e = entries[key];
      // An unacknowledged entry stays with its report, however old: a retry re-sends those bytes (participant/ledger.py).
      if (kept.has(key) || e.epsilon === null || e.epsilon === undefined || !e.sent) continue;
      const day = dayOf(e.reserved_at);
      if ((day + 1) * SECONDS_PER_DAY <= window) {
        if (e.epsilon !== 0) sums[day] = spendText(add(sums[day] === undefined ? { n: 0n, d: 1n } : spendValue(sums[day]), rationalOf(e.epsilon)));
        // Its markers dated by its last send: a report re-sent for months stays refused a year after
        // the service last heard it, not after it was drawn.
        gone.push([dayOf(Math.max(e.reserved_at, e.sent_at ?? 0)), e]);
        delete entries[key];
      } else if (e.sent && e.report && e.sealed === undefined && !memo.has(questionOf(e))) entries[key] = { ...e, report: "" }; // a new object: encoded anew
    }
    const counted = now - Math.max(limits.budget.perDays, YEAR_DAYS) * SECONDS_PER_DAY;
    for (const day of Object.keys(sums)) if ((Number(day) + 1) * SECONDS_PER_DAY <= counted) delete sums[day];
    mark(data, gone, now, limits);
  }

  private record(
    data: LedgerData,
    asked: Asked,
    body: Uint8Array,
    spentNow: number,
    memo: string | null,
    limits: Limits,
    sealed: Uint8Array | null,
  ): Claim {
    const now = this.now();
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
      reserved_at: now,
      ...(sealed === null ? {} : { sealed: toBase64(sealed) }),
    };
    this.expire(data, limits, now);
    return { key: entryKey(asked.origin, asked.collection), body, sent: false, spent: spentNow, sealed };
  }

  /** The entry under `key` with its report, as stored now (undefined once it has left the ledger). */
  private stored(key: string): Promise<Entry | undefined> {
    if (this.storage.entry) return this.storage.entry(key);
    return this.storage.update((data) => ({ result: Object.prototype.hasOwnProperty.call(data.entries, key) ? data.entries[key] : undefined, write: false }));
  }

  /**
   * The report for `asked`, recorded before it is sent: this collection's earlier report
   * unchanged; else (within the cap) a memoised answer to the same question; else (within the
   * budget) a fresh draw. Nothing random is drawn before the last step, and a claim recorded
   * meanwhile by another tab or process wins over this draw, which is then dropped unsent. For a
   * shuffled collection `seal` seals a new report for its shuffler (outside any transaction: Web
   * Crypto is asynchronous), and the sealed bytes are recorded with it, so a retry re-sends them.
   */
  async claim(
    asked: Asked,
    limits: Limits,
    draw: () => Uint8Array,
    resend: (old: Uint8Array) => Uint8Array,
    seal?: (body: Uint8Array) => Promise<Uint8Array>,
  ): Promise<Claim> {
    if (seal && asked.question)
      // The reader refuses a shuffled entry holding a question: never write one.
      throw new TypeError("a shuffled collection's answer is never memoised: ask it without a question");
    for (let attempt = 0; attempt < 3; attempt++) {
      const first = await this.storage.update((data) => ({ result: this.settle(data, asked, limits), write: false }));
      let memo: { key: string; body: Uint8Array } | null = null;
      if (first.kind !== "draw") {
        const entry = await this.stored(first.key);
        if (entry === undefined) continue; // it left the ledger meanwhile (another tab's expiry): settle again
        if (first.kind === "entry") {
          const sealed = entry.sealed === undefined ? null : fromBase64(entry.sealed);
          return { key: first.key, body: fromBase64(entry.report), sent: entry.sent, spent: 0, sealed };
        }
        memo = { key: first.key, body: resend(fromBase64(entry.report)) };
      }
      const body = memo !== null ? memo.body : draw();
      const sealed = seal === undefined ? null : await seal(body);
      await this.storage.prepare?.(sealed === null ? [body] : [body, sealed]);
      const recorded = await this.storage.update((data): { result: Claim | null; write: boolean } => {
        const settled = this.settle(data, asked, limits);
        // Another tab claimed this collection, or answered the question, meanwhile: settle again.
        if (settled.kind === "entry" || (settled.kind === "memo" && memo === null)) return { result: null, write: false };
        const spentNow = memo === null ? asked.epsilon : 0;
        const memoOf = memo === null ? null : settled.kind === "memo" ? settled.key : memo.key;
        return { result: this.record(data, asked, body, spentNow, memoOf, limits, sealed), write: true };
      });
      if (recorded !== null) return recorded;
    }
    throw new LedgerError("the ledger kept changing under this submission; nothing was sent");
  }

  /** Record that the service acknowledged the report under `key`. */
  async markSent(key: string): Promise<void> {
    // A new object: a changed entry is encoded anew. A shuffled entry's report and sealed copy
    // are emptied, as in participant/ledger.py: never sent again, never an answer to repeat.
    const sent = (entry: Entry): Entry => {
      const done: Entry = { ...entry, sent: true, sent_at: this.now() };
      if (done.sealed !== undefined) Object.assign(done, { report: "", sealed: "" });
      return done;
    };
    if (this.storage.replace) return this.storage.replace(key, sent);
    await this.storage.update((data) => {
      const entry = Object.prototype.hasOwnProperty.call(data.entries, key) ? data.entries[key] : undefined;
      if (entry === undefined) throw new LedgerError(`the ledger lost the entry '${key}' while its report was sent`);
      data.entries[key] = sent(entry);
      return { result: undefined, write: true };
    });
  }

  /**
   * Replace the sealed copy of the unsent shuffled entry under `key` with `sealed` (the same sealed
   * report with what its anonymous token needs behind it: the pending request and the blind's
   * inverse, then the token), written before anything is sent with it, so that a retry after a
   * crash re-sends the very same bytes; the copy it replaces is dropped. A LedgerError when there
   * is no such entry (none, unshuffled, or acknowledged).
   */
  async reseal(key: string, sealed: Uint8Array): Promise<void> {
    const resealed = (entry: Entry | undefined): Entry => {
      if (entry === undefined || entry.sealed === undefined || entry.sent)
        throw new LedgerError(`the ledger holds no unsent shuffled entry '${key}' to attach a token to; nothing was sent`);
      return { ...entry, sealed: toBase64(sealed) }; // a new object: a changed entry is encoded anew
    };
    await this.storage.prepare?.([sealed]);
    if (this.storage.replace) return this.storage.replace(key, resealed);
    await this.storage.update((data) => {
      data.entries[key] = resealed(Object.prototype.hasOwnProperty.call(data.entries, key) ? data.entries[key] : undefined);
      return { result: undefined, write: true };
    });
  }

  /** Every entry, each with its report. */
  async entries(): Promise<Record<string, Entry>> {
    const entries = await this.storage.update((data) => ({ result: data.entries, write: false }));
    if (!this.storage.entry) return entries;
    const whole = await Promise.all(Object.keys(entries).map(async (key) => [key, await this.stored(key)] as const));
    return Object.fromEntries(whole.filter((pair): pair is readonly [string, Entry] => pair[1] !== undefined));
  }
}
