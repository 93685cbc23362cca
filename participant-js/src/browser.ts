/**
 * The ledger in a browser: this profile's IndexedDB database `ldpnb`, one record per entry, the
 * same entries as the file ledger. An entry is kept in two stores under its key: `entries` holds
 * it with `report` and `sealed` empty, `reports` holds those two with what binds them to their
 * entry (its key, question and group: a report record kept under another entry's key, or beside
 * an entry whose question changed, is refused, as the file ledger refuses a report file named by
 * another entry). A submit reads every entry but only the one report it repeats, and writes only
 * the entries it changes, so its work on the page's main thread grows with the number of entries,
 * not with their reports' bytes. The database of the layout before (version 2, report records
 * without their binding) has each well-formed record bound as it opens, in its upgrade's
 * transaction (all or none); a record left unbound is refused when it is needed. A report is kept
 * deflated (zlib, as the file ledger keeps it: CompressionStream, run before the transaction that
 * stores it, since a transaction cannot wait on a stream); one the layout before kept as base64
 * text is read as it is. The store `entries` marks an entry whose report is kept (`report` is
 * {@link KEPT}), so that the memo knows which answers it holds without reading a report; the
 * store `spent` holds the ledger's sums by day (version 5's `spent`) under one key, and the store
 * `reported` (database version 5: created, empty, by the upgrade from 4, in its one transaction)
 * the markers of the collections whose entries left (version 6's `reported`) under one key.
 *
 * Every change runs inside one read-write transaction, and IndexedDB runs read-write transactions
 * on a store one at a time across every tab of the profile: two tabs submitting at once cannot
 * both draw for a collection, and the device's budget counts both. A ledger of the earlier layout
 * (the whole ledger as one text record in the store `ledger`) is checked as a file is and moved
 * into the two stores by the first change.
 */
import {
  type Entry,
  Ledger,
  LedgerError,
  type LedgerData,
  type LedgerStorage,
  VERSION,
  checkedLedger,
  entriesProblem,
  entryProblem,
  fromBase64,
  isMapping,
  parseJson,
  reportedProblem,
  spentProblem,
  toBase64,
} from "./ledger.js";

const VERSION_OF_DATABASE = 5;
const LEGACY = "ledger";
const LEGACY_KEY = "ledger";
const ENTRIES = "entries";
const REPORTS = "reports";
const SPENT = "spent";
const SPENT_KEY = "spent";
const REPORTED = "reported";
const REPORTED_KEY = "reported";
const STORES = [LEGACY, ENTRIES, REPORTS, SPENT, REPORTED];
/** What the store `entries` holds as an entry's `report` while the store `reports` keeps it (the memo's answers are among these). */
export const KEPT = "kept";
// The most bytes a report may inflate to, as participant/ledger.py's LARGEST_REPORT.
const LARGEST_REPORT = 64 * 1024 * 1024;

/** `bytes` deflated (zlib, RFC 1950: what the file ledger writes). */
async function deflated(bytes: Uint8Array): Promise<Uint8Array> {
  const stream = new Blob([bytes as BlobPart]).stream().pipeThrough(new CompressionStream("deflate"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

/** The bytes `packed` (zlib) inflates to, or a LedgerError when they are not zlib or inflate past any report. */
async function inflated(packed: Uint8Array, where: string): Promise<Uint8Array> {
  try {
    const reader = new Blob([packed as BlobPart]).stream().pipeThrough(new DecompressionStream("deflate")).getReader();
    const parts: Uint8Array[] = [];
    let size = 0;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      size += value.length;
      if (size > LARGEST_REPORT) {
        await reader.cancel();
        throw new Error("past any report");
      }
      parts.push(value);
    }
    const whole = new Uint8Array(size);
    let at = 0;
    for (const part of parts) whole.set(part, (at += part.length) - part.length);
    return whole;
  } catch {
    throw new LedgerError(`the ledger ${where} holds a report that does not inflate to one`);
  }
}

function opened(name: string): Promise<IDBDatabase> {
  return new Promise((resolve, reject) => {
    const request = indexedDB.open(name, VERSION_OF_DATABASE);
    request.onupgradeneeded = (event) => {
      for (const store of STORES) if (!request.result.objectStoreNames.contains(store)) request.result.createObjectStore(store);
      if (event.oldVersion === 2 || event.oldVersion === 3) bindReports(request.transaction as IDBTransaction, event.oldVersion === 2);
    };
    request.onsuccess = () => {
      // A later version of this library, in another tab, upgrading the database: let it.
      request.result.onversionchange = () => request.result.close();
      resolve(request.result);
    };
    request.onerror = () => reject(new LedgerError(`cannot open the ledger (IndexedDB '${name}'): ${request.error?.message}`));
  });
}

/** A report or sealed copy as the store `reports` keeps it: deflated bytes, or base64 text (the layout before; "" for none). */
type Stored = string | Uint8Array;

/** What the store `reports` keeps of an entry: its report and sealed copy, and what binds them to the entry (its key, question and group). */
interface ReportRecord {
  entry: string;
  question: string;
  group: number | null;
  report: Stored;
  sealed?: Stored;
}

/**
 * Brings each report record of database version 2 (`{report, sealed?}`, when `bind`) or 3 to
 * version 4 inside the upgrade's transaction (an error aborts it all, and the database stays as it
 * was): bound to its entry (version 2's), and its entry marked {@link KEPT} when it keeps a report.
 * Only a record of that shape beside an entry of the shape a device writes is changed; any other
 * is left as it is, and refused when it is needed.
 */
function bindReports(transaction: IDBTransaction, bind: boolean): void {
  const [entries, reports] = [transaction.objectStore(ENTRIES), transaction.objectStore(REPORTS)];
  const beside = new Map<IDBValidKey, unknown>();
  const abort = () => transaction.abort();
  readAll(entries, true, (keys, values) => keys.forEach((key, i) => beside.set(key, values[i])), () =>
    readAll(reports, true, (keys, values) => keys.forEach((key, i) => {
      const [stored, entry] = [values[i], beside.get(key)];
      if (!isMapping(stored) || typeof stored.report !== "string" || typeof key !== "string" || !isMapping(entry)) return;
      if (entryProblem(key, withReports(entry, stored.report !== "")) !== null) return;
      const whole = entry as unknown as Entry;
      if (bind && onlyReports(stored)) reports.put(reportOf(key, { ...whole, ...stored }), key);
      if (stored.report !== "" && whole.report === "") entries.put({ ...whole, report: KEPT }, key);
    }), () => {}, abort, 50), // 50 reports a task: one may be tens of KB
  abort);
}

/** The request's result, or a rejection naming what failed. */
function done<T>(request: IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(new LedgerError(`cannot read the ledger: ${request.error?.message}`));
  });
}

/** The entry as the store `entries` keeps it: its report {@link KEPT} (or empty), its sealed copy empty. */
function withoutReport(entry: Entry): Entry {
  return { ...entry, report: entry.report === "" ? "" : KEPT, ...(entry.sealed === undefined ? {} : { sealed: "" }) };
}

/** What stands, as an entry's shape is checked, for a report (and sealed copy) the store `reports` keeps: a name as a file's ledger holds. */
const NAME_KEPT = "0".repeat(64);

/**
 * The entry `record` as an entry's shape is checked, with a report (and a sealed copy, if it has
 * one) kept in the store `reports` when `kept`, else none: what a file's ledger would hold.
 */
const withReports = (record: Record<string, unknown>, kept: boolean): Record<string, unknown> => ({
  ...record,
  report: kept ? NAME_KEPT : "",
  ...("sealed" in record ? { sealed: kept ? NAME_KEPT : "" } : {}),
});

/** The record `record` of the store `entries` as an entry's shape is checked: its report, and sealed copy, kept when {@link KEPT}. */
const recordView = (record: unknown): unknown => (isMapping(record) && record.report === KEPT ? withReports(record, true) : record);

/** Whether `stored` holds nothing but a report and a sealed copy. */
const onlyReports = (stored: object) => Object.keys(stored).every((name) => name === "report" || name === "sealed");

/**
 * What the store `reports` keeps of the entry `entry` under `key`: its report (and sealed copy)
 * bound to it, each the deflated bytes `packed` holds for its base64 (or, not prepared, the base64
 * itself; or what was stored, left as it was).
 */
function reportOf(key: string, entry: Entry, packed = new Map<string, Uint8Array>()): ReportRecord {
  const stored = (value: Stored): Stored => {
    const deflatedBytes = typeof value === "string" ? packed.get(value) : undefined;
    if (deflatedBytes === undefined) return value;
    packed.delete(value as string); // each prepared report is stored once
    return deflatedBytes;
  };
  const bound: ReportRecord = { entry: key, question: entry.question ?? "", group: entry.group ?? null, report: stored(entry.report) };
  if (entry.sealed !== undefined) bound.sealed = stored(entry.sealed);
  return bound;
}

// Records read per request: each request's results arrive, and are checked, in a task of their
// own, so a ledger of thousands of entries is read in short tasks rather than one that holds the page.
const CHUNK = 500;

/**
 * Every key of `store` (and its value, when `values`) in key order, `chunk` at a time: `each`
 * sees every chunk as it arrives, then `then` runs; whatever throws goes to `fail`.
 */
function readAll(
  store: IDBObjectStore,
  values: boolean,
  each: (keys: IDBValidKey[], values: unknown[]) => void,
  then: () => void,
  fail: (error: unknown) => void,
  chunk = CHUNK,
): void {
  const next = (after?: IDBValidKey) => {
    const range = after === undefined ? undefined : IDBKeyRange.lowerBound(after, true);
    const keys = store.getAllKeys(range, chunk);
    const last = values ? store.getAll(range, chunk) : keys;
    last.onsuccess = () => {
      try {
        each(keys.result, values ? (last.result as unknown[]) : []);
        if (keys.result.length < chunk) then();
        else next(keys.result[keys.result.length - 1]);
      } catch (error) {
        fail(error);
      }
    };
  };
  next();
}

/** Settles when `transaction` commits; rejects with what `failure()` names (or the transaction's own error) when it aborts. */
function finished(transaction: IDBTransaction, failure: () => unknown): Promise<void> {
  return new Promise((resolve, reject) => {
    transaction.oncomplete = () => resolve();
    transaction.onabort = () => reject(failure() ?? new LedgerError(`the ledger's transaction was aborted: ${transaction.error?.message}`));
    transaction.onerror = () => reject(failure() ?? new LedgerError(`cannot write the ledger: ${transaction.error?.message}`));
  });
}

export class IndexedDbStorage implements LedgerStorage {
  private database: Promise<IDBDatabase> | null = null;
  /** Reports deflated ahead of the transaction that stores them, by their base64 (see {@link prepare}): each taken once. */
  private readonly packed = new Map<string, Uint8Array>();

  constructor(readonly name = "ldpnb") {}

  private db(): Promise<IDBDatabase> {
    this.database ??= opened(this.name);
    return this.database;
  }

  private get where(): string {
    return `in IndexedDB '${this.name}'`;
  }

  private refuse(problem: string): never {
    throw new LedgerError(`the ledger ${this.where} does not hold ledger entries: ${problem}`);
  }

  /** Deflates `bodies` ahead of the transaction that stores them: a transaction cannot wait on CompressionStream. */
  async prepare(bodies: Uint8Array[]): Promise<void> {
    for (const body of bodies) if (body.length > 0) this.packed.set(toBase64(body), await deflated(body));
  }

  /** Adds the entries of `keys` and `values` (from the store `entries`) to `entries`, checked as a file's are: each a device's entry, its report left out ({@link KEPT} or empty). */
  private take(entries: Record<string, Entry>, keys: IDBValidKey[], values: unknown[]): void {
    keys.forEach((key, i) => {
      if (typeof key !== "string") this.refuse("a key that is not text");
      const entry = values[i] as Entry;
      const problem = entryProblem(key, recordView(entry));
      if (problem !== null) this.refuse(problem);
      if ((entry.report !== "" && entry.report !== KEPT) || (entry.sealed !== undefined && entry.sealed !== ""))
        this.refuse(`entry '${key}' holds its report beside its record`);
      delete (entry as unknown as Record<string, unknown>).record; // an earlier format's field, dropped as the file ledger drops it
      entries[key] = entry; // its key holds a space (origin, then collection): never "__proto__"
    });
  }

  async update<T>(change: (data: LedgerData) => { result: T; write: boolean }): Promise<T> {
    const transaction = (await this.db()).transaction(STORES, "readwrite");
    let result: T | undefined;
    let failure: unknown = null;
    const committed = finished(transaction, () => failure);
    const [legacy, entries, reports, sums, marked] = STORES.map((store) => transaction.objectStore(store));
    const fail = (error: unknown) => {
      failure = error instanceof SyntaxError ? new LedgerError(`the ledger ${this.where} is not valid JSON`) : error;
      transaction.abort();
    };
    const run = (data: LedgerData, moving: boolean) => {
      const before = new Map(Object.entries(data.entries));
      const markers = data.reported;
      const outcome = change(data);
      result = outcome.result;
      if (!outcome.write && !moving) return;
      for (const [key, entry] of Object.entries(data.entries)) {
        if (before.get(key) === entry && !moving) continue; // the ledger replaces an entry it changes
        entries.put(withoutReport(entry), key);
        // An entry changed with its report kept (read as KEPT) keeps the stored one; one whose
        // report is new is stored, and one whose report the memo gave up is emptied.
        if (moving || entry.report !== KEPT) reports.put(reportOf(key, entry, this.packed), key);
      }
      sums.put(data.spent, SPENT_KEY);
      if (moving || data.reported !== markers) marked.put(data.reported ?? {}, REPORTED_KEY); // a year of markers: written when they change
      for (const key of before.keys())
        if (!Object.prototype.hasOwnProperty.call(data.entries, key)) {
          entries.delete(key);
          reports.delete(key);
        }
      if (moving) legacy.delete(LEGACY_KEY);
    };
    const read = legacy.get(LEGACY_KEY);
    read.onsuccess = () => {
      try {
        if (read.result !== undefined) {
          // Text, as in the file: a value another script put there is checked like a file's.
          if (typeof read.result !== "string") throw new LedgerError(`the ledger ${this.where} is not ledger text`);
          const moved = checkedLedger(parseJson(read.result, this.where), this.where);
          if (moved.version !== 2) this.refuse("the earlier layout holds another version than 2");
          const counts = [entries.count(), reports.count()];
          counts[1].onsuccess = () => {
            try {
              // Both layouts at once is not a ledger this library wrote.
              if (counts[0].result + counts[1].result !== 0) this.refuse("entries in both layouts");
              run(moved, true);
            } catch (error) {
              fail(error);
            }
          };
          return;
        }
        const data: LedgerData = { version: VERSION, entries: {}, spent: {}, reported: {} };
        // As many reports as entries; a report missing where it is needed is refused by `entry`.
        const reported = reports.count();
        const summed = sums.get(SPENT_KEY);
        summed.onsuccess = () => {
          if (summed.result === undefined) return; // none written yet
          const problem = spentProblem(summed.result);
          if (problem !== null) fail(new LedgerError(`the ledger ${this.where} does not hold ledger entries: ${problem}`));
          else data.spent = summed.result as Record<string, string>;
        };
        const markedRead = marked.get(REPORTED_KEY);
        markedRead.onsuccess = () => {
          if (markedRead.result === undefined) return; // none written yet
          const problem = reportedProblem(markedRead.result);
          if (problem !== null) fail(new LedgerError(`the ledger ${this.where} does not hold ledger entries: ${problem}`));
          else data.reported = markedRead.result as Record<string, string>;
        };
        readAll(
          entries,
          true,
          (keys, values) => this.take(data.entries, keys, values),
          () => {
            if (reported.result !== Object.keys(data.entries).length) this.refuse("the entries and their reports differ in number");
            const problem = entriesProblem(data.entries);
            if (problem !== null) this.refuse(problem);
            run(data, false);
          },
          fail,
        );
      } catch (error) {
        fail(error);
      }
    };
    await committed;
    return result as T;
  }

  /**
   * Replaces the entry under `key` by `change(entry)` in one transaction that reads no other entry:
   * `change` sees it whole (its report and sealed copy from the store `reports`, checked as
   * {@link entry} checks them). A shuffled entry's report record is rewritten with what `change`
   * returns (its sealed copy replaced, its token attached, or both emptied once acknowledged), so
   * the copy it held is gone; an unshuffled entry's stays as it was.
   */
  async replace(key: string, change: (entry: Entry) => Entry): Promise<void> {
    const transaction = (await this.db()).transaction([ENTRIES, REPORTS], "readwrite");
    let failure: unknown = null;
    const committed = finished(transaction, () => failure);
    const [entries, reports] = [transaction.objectStore(ENTRIES), transaction.objectStore(REPORTS)];
    const read = entries.get(key);
    const stored = reports.get(key);
    stored.onsuccess = () => {
      try {
        if (read.result === undefined) throw new LedgerError(`the ledger ${this.where} lost the entry '${key}' while its report was sent`);
        const problem = entryProblem(key, recordView(read.result));
        if (problem !== null) this.refuse(problem);
        const entry = change(this.whole(key, read.result, stored.result));
        entries.put(withoutReport(entry), key);
        if (entry.sealed !== undefined) reports.put(reportOf(key, entry, this.packed), key); // a shuffled one: resealed, or emptied once sent
      } catch (error) {
        failure = error;
        transaction.abort();
      }
    };
    await committed;
  }

  /**
   * The entry `record` (from the store `entries`) with its report record `stored`, checked whole as
   * version 2 held an entry (its report inline, base64), and the report checked to be bound to it:
   * its key, question and group.
   */
  private whole(key: string, record: unknown, stored: unknown): Entry {
    if (!isMapping(record) || !isMapping(stored)) this.refuse(`entry '${key}' or its report is missing`);
    const { entry: of, question, group, ...report } = stored;
    if (!onlyReports(report) || ("sealed" in report) !== ("sealed" in record))
      this.refuse(`entry '${key}' holds a report of another shape`);
    if (of !== key || question !== (record.question ?? "") || group !== (record.group ?? null))
      this.refuse(`entry '${key}' holds a report not bound to it`);
    // Deflated bytes, or base64 text (the layout before); the record says whether one is kept.
    const bytes = (v: unknown) => v instanceof Uint8Array && v.length > 0;
    const text = (v: unknown) => (bytes(v) ? "AAAA" : v); // base64 standing for the bytes kept
    if ((record.report === KEPT) !== (bytes(report.report) || (typeof report.report === "string" && report.report !== "")))
      this.refuse(`entry '${key}' holds a report of another shape`);
    const problem = entryProblem(key, { ...record, ...report, report: text(report.report), ...("sealed" in report ? { sealed: text(report.sealed) } : {}) }, 2);
    if (problem !== null) this.refuse(problem);
    return { ...record, ...report } as unknown as Entry;
  }

  /** The entry under `key` with its report and sealed copy (base64, inflated), checked as a file's entry is. */
  async entry(key: string): Promise<Entry | undefined> {
    const transaction = (await this.db()).transaction([ENTRIES, REPORTS], "readonly");
    const [record, stored] = await Promise.all([done(transaction.objectStore(ENTRIES).get(key)), done(transaction.objectStore(REPORTS).get(key))]);
    if (record === undefined && stored === undefined) return undefined;
    const entry = this.whole(key, record, stored);
    for (const field of ["report", "sealed"] as const) {
      const value = entry[field] as Stored | undefined;
      if (value instanceof Uint8Array) entry[field] = toBase64(await inflated(value, this.where));
    }
    return entry;
  }
}

/** A ledger kept in this browser profile's IndexedDB. */
export function browserLedger(name = "ldpnb"): Ledger {
  return new Ledger(new IndexedDbStorage(name));
}
