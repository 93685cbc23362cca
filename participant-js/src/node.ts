/**
 * The ledger as a file, for Node: `@ldpnb/participant/node`. The same JSON file the Python
 * participant keeps (mode 0600), written to a fresh temporary file, fsynced and renamed over the
 * ledger, so a reader sees the old or the new ledger, never half of one. Changes are serialised by
 * a lock file created exclusively next to it (`<ledger>.jslock`) that holds the owner's process
 * id: a lock whose process is gone is taken over. The path is resolved through symlinks, so every
 * name of one ledger shares its lock and its budget, and a file with more than one name (a hard
 * link, which the rename would split into two files, two budgets) is refused. Reports are kept
 * apart, as the Python participant keeps them: one file each in `<ledger>.reports`, holding them
 * zlib-compressed, named by the SHA-256 of the entry's binding ({@link reportBinding}: its field,
 * key, question and group) and of the bytes' SHA-256, written (and fsynced) before the ledger
 * names it, so a change rewrites the entries and adds one report, whatever the reports before it
 * weigh; a report named by another entry than its own is refused as altered. A ledger of version 3
 * (its files named by the bytes alone) has them named anew as it is read (a second link to each),
 * and the old names go with the next write.
 */
import { closeSync, constants, existsSync, fstatSync, fsyncSync, linkSync, mkdirSync, openSync, readFileSync, realpathSync, renameSync, unlinkSync, writeSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { createHash, randomBytes } from "node:crypto";
import { deflateSync, inflateSync } from "node:zlib";

import {
  type Entry,
  Ledger,
  LedgerError,
  type LedgerData,
  type LedgerStorage,
  VERSION,
  checkedLedger,
  clockProblem,
  fromBase64,
  fromFirstFormat,
  latestMoment,
  parseLedger,
  reportBinding,
  toBase64,
} from "./ledger.js";

const REPORT_FIELDS = ["report", "sealed"] as const;
// The most bytes a report file may inflate to, as participant/ledger.py's LARGEST_REPORT.
const LARGEST_REPORT = 64 * 1024 * 1024;

/** `bytes` written to a fresh temporary file in `directory` (mode 0600), fsynced and renamed to `target`. */
function replaced(directory: string, prefix: string, target: string, bytes: Uint8Array): void {
  const tmp = join(directory, `.${prefix}.${randomBytes(6).toString("hex")}.tmp`);
  try {
    const fd = openSync(tmp, "wx", 0o600);
    try {
      writeSync(fd, bytes);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, target);
  } catch (error) {
    try {
      unlinkSync(tmp);
    } catch {
      /* never created, or renamed */
    }
    throw error;
  }
}

function realPath(path: string): string {
  const absolute = resolve(path);
  try {
    return realpathSync(absolute);
  } catch {
    try {
      return join(realpathSync(dirname(absolute)), basename(absolute)); // the file does not exist yet
    } catch {
      return absolute;
    }
  }
}

/** The name of the file holding `field` of `entry` (kept under `key`) whose bytes have the SHA-256 `digest`: as `participant/ledger_format.py`'s `report_name`. */
function reportName(field: "report" | "sealed", key: string, entry: Entry, digest: Uint8Array): string {
  return createHash("sha256").update(reportBinding(field, key, entry)).update(digest).digest("hex");
}

const sha256 = (bytes: Uint8Array): Buffer => createHash("sha256").update(bytes).digest();

/** Makes the names in `directory` durable. */
function syncDirectory(directory: string): void {
  const fd = openSync(directory, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

const sleep = (ms: number) => new Promise((done) => setTimeout(done, ms));

// Each entry's JSON as bytes, kept while the entry object lives unchanged (the ledger replaces an
// entry it changes), so that a write encodes only what changed: a year's ledger is megabytes.
const encoded = new WeakMap<object, Buffer>();

/** The bytes of `JSON.stringify(data)`, each unchanged entry's reused. */
function serialised(data: LedgerData): Buffer {
  const parts: Buffer[] = [Buffer.from(`{"version":${JSON.stringify(data.version)},"entries":{`)];
  for (const [i, [key, entry]] of Object.entries(data.entries).entries()) {
    let bytes = encoded.get(entry);
    if (bytes === undefined) encoded.set(entry, (bytes = Buffer.from(JSON.stringify(entry))));
    parts.push(Buffer.from(`${i ? "," : ""}${JSON.stringify(key)}:`), bytes);
  }
  parts.push(Buffer.from(`},"spent":${JSON.stringify(data.spent)},"reported":${JSON.stringify(data.reported ?? {})}}`));
  return Buffer.concat(parts);
}

export class FileStorage implements LedgerStorage {
  readonly path: string;
  private readonly lockPath: string;
  /** The ledger's bytes as this storage last read or wrote them, and what they hold: parsed and checked again only when the file holds other bytes. */
  private cache: { bytes: Buffer; data: LedgerData; latest: number } | null = null;
  /** The names a version 3 ledger gave its reports' files, named anew as it was read: removed after the next write. */
  private superseded = new Set<string>();

  readonly reports: string;

  constructor(path: string) {
    this.path = realPath(path);
    this.lockPath = `${this.path}.jslock`;
    this.reports = `${this.path}.reports`;
  }

  /** The name of `bytes`, the `field` of `entry` under `key` ({@link reportName}), kept in the reports directory, written there first if it is not ("" for no bytes). */
  private store(bytes: Uint8Array, field: "report" | "sealed", key: string, entry: Entry): string {
    if (bytes.length === 0) return "";
    const name = reportName(field, key, entry, sha256(bytes));
    const target = join(this.reports, name);
    try {
      if (existsSync(target)) return name;
      mkdirSync(this.reports, { recursive: true, mode: 0o700 });
      replaced(this.reports, "", target, deflateSync(bytes));
      syncDirectory(this.reports); // the name is durable before the ledger names it
    } catch (error) {
      throw new LedgerError(`cannot write a report beside the ledger ${this.path}: ${(error as Error).message}; nothing was sent`);
    }
    return name;
  }

  /** The bytes of the `field` of `entry` under `key` (empty for none), from the file it names, checked against that name: bytes, entry and field alike. */
  private load(entry: Entry, field: "report" | "sealed", key: string): Uint8Array {
    const name = entry[field] as string;
    if (name === "") return new Uint8Array(0);
    let bytes: Buffer | null = null;
    try {
      bytes = inflateSync(readFileSync(join(this.reports, name)), { maxOutputLength: LARGEST_REPORT });
    } catch {
      /* refused below */
    }
    if (bytes === null || reportName(field, key, entry, sha256(bytes)) !== name)
      throw new LedgerError(
        `the ledger ${this.path} lost, or holds altered or another entry's bytes of, the ${field} of '${key}' (${join(this.reports, name)}); nothing was sent`,
      );
    return bytes;
  }

  /**
   * Gives each report file of `entries` (a version 3 ledger's: named by the SHA-256 of its bytes)
   * its version 4 name, a second link to the same file (or a copy where the file system has none),
   * and names that in its entry; the names they had go after the next write. A file that is
   * missing is named all the same: refused, as lost, when it is needed. As the Python participant's `_rename`.
   */
  private rename(entries: Record<string, Entry>): void {
    let named = false;
    try {
      for (const [key, entry] of Object.entries(entries))
        for (const field of REPORT_FIELDS) {
          const old = entry[field];
          if (!old) continue;
          const name = reportName(field, key, entry, Buffer.from(old, "hex"));
          entry[field] = name;
          this.superseded.add(old);
          try {
            linkSync(join(this.reports, old), join(this.reports, name));
          } catch (error) {
            const code = (error as NodeJS.ErrnoException).code;
            if (code === "EEXIST" || code === "ENOENT") continue; // named so already (an earlier read), or lost
            replaced(this.reports, "", join(this.reports, name), readFileSync(join(this.reports, old))); // no hard links here: a copy
          }
          named = true;
        }
      if (named) syncDirectory(this.reports);
    } catch (error) {
      throw new LedgerError(`cannot name the reports beside the ledger ${this.path} anew: ${(error as Error).message}; nothing was sent`);
    }
  }

  /** The report files `entries` name. */
  private static named(entries: Iterable<Entry>): Set<string> {
    const names = new Set<string>();
    for (const entry of entries) for (const field of REPORT_FIELDS) if (entry[field]) names.add(entry[field] as string);
    return names;
  }

  private async lock(): Promise<void> {
    try {
      mkdirSync(dirname(this.path), { recursive: true });
    } catch (error) {
      throw new LedgerError(`cannot open the ledger ${this.path} for writing: ${(error as Error).message}`);
    }
    for (let attempt = 0; ; attempt++) {
      try {
        const fd = openSync(this.lockPath, constants.O_CREAT | constants.O_EXCL | constants.O_WRONLY, 0o600);
        writeSync(fd, String(process.pid));
        closeSync(fd);
        return;
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== "EEXIST")
          throw new LedgerError(`cannot lock the ledger ${this.path}: ${(error as Error).message}`);
      }
      let owner = NaN;
      try {
        owner = Number(readFileSync(this.lockPath, "utf8"));
      } catch {
        continue; // released meanwhile
      }
      if (Number.isInteger(owner) && owner > 0 && owner !== process.pid && !alive(owner)) {
        try {
          unlinkSync(this.lockPath); // its owner died holding it
        } catch {
          /* another waiter took it over first */
        }
        continue;
      }
      await sleep(Math.min(50, 1 + attempt));
    }
  }

  private read(): LedgerData {
    let bytes: Buffer;
    let fd: number;
    try {
      fd = openSync(this.path, "r");
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return checkedLedger(undefined, this.path);
      throw new LedgerError(`cannot read the ledger ${this.path}: ${(error as Error).message}`);
    }
    try {
      const links = fstatSync(fd).nlink;
      if (links > 1)
        throw new LedgerError(
          `the ledger ${this.path} has ${links} names (hard links); one device keeps one ledger file, so that all its ` +
            "reports share one budget: remove the other links",
        );
      bytes = readFileSync(fd);
      if (this.cache !== null && this.cache.bytes.equals(bytes)) {
        // Bytes checked before, at another reading of the clock: it may have been set back since,
        // which the full check would refuse.
        const problem = clockProblem(this.cache.latest);
        if (problem !== null) throw new LedgerError(`the ledger ${this.path} does not hold ledger entries: ${problem}`);
        return this.cache.data;
      }
    } catch (error) {
      if (error instanceof LedgerError) throw error;
      throw new LedgerError(`cannot read the ledger ${this.path}: ${(error as Error).message}`);
    } finally {
      closeSync(fd);
    }
    const data = checkedLedger(fromFirstFormat(parseLedger(bytes, this.path), this.path), this.path);
    if (data.version === 2) {
      // Its reports inline: each moved to its file, named as version 4 names it.
      for (const [key, entry] of Object.entries(data.entries))
        for (const field of REPORT_FIELDS)
          if (entry[field] !== undefined) entry[field] = this.store(fromBase64(entry[field] as string), field, key, entry);
    } else if (data.version === 3) this.rename(data.entries); // its reports' files named by their bytes alone: named anew
    data.version = VERSION;
    this.cache = { bytes: Buffer.from(bytes), data, latest: latestMoment(data) };
    return data;
  }

  private write(data: LedgerData): void {
    try {
      const bytes = serialised(data);
      replaced(dirname(this.path), basename(this.path), this.path, bytes);
      this.cache = { bytes, data, latest: latestMoment(data) };
    } catch (error) {
      this.cache = null;
      throw new LedgerError(`cannot write the ledger ${this.path}: ${(error as Error).message}; nothing was sent`);
    }
  }

  private async locked<T>(work: () => T): Promise<T> {
    await this.lock();
    try {
      return work();
    } finally {
      try {
        unlinkSync(this.lockPath);
      } catch {
        /* taken over as stale: nothing to release */
      }
    }
  }

  async update<T>(change: (data: LedgerData) => { result: T; write: boolean }): Promise<T> {
    return this.locked(() => {
      const data = this.read();
      try {
        return this.changed(data, change);
      } catch (error) {
        this.cache = null; // the change may have altered what the cache holds
        throw error;
      }
    });
  }

  /** What `change` returns, run on `data` and then kept: reports it added stored, the ledger written, reports no entry names now removed. */
  private changed<T>(data: LedgerData, change: (data: LedgerData) => { result: T; write: boolean }): T {
    const before = new Map(Object.entries(data.entries));
    const { result, write } = change(data);
    if (!write) return result;
    // The ledger replaces the entries it changes, never edits one: `before` holds what was named.
    const named = FileStorage.named(before.values());
    // An entry the change made or replaced holds its report's bytes (base64) where the file held
    // a digest, unless it kept the one it had (marked sent) or emptied it (a shuffled one, sent).
    for (const [key, entry] of Object.entries(data.entries)) {
      const old = before.get(key);
      if (old === entry) continue;
      for (const field of REPORT_FIELDS)
        if (entry[field] !== undefined && entry[field] !== old?.[field]) entry[field] = this.store(fromBase64(entry[field] as string), field, key, entry);
    }
    this.write(data);
    const kept = FileStorage.named(Object.values(data.entries));
    for (const name of [...named, ...this.superseded])
      if (!kept.has(name))
        try {
          unlinkSync(join(this.reports, name));
        } catch {
          /* gone already */
        }
    this.superseded.clear();
    return result;
  }

  /** The entry under `key` with its report and sealed copy (base64), checked against the names the ledger gives them. */
  async entry(key: string): Promise<Entry | undefined> {
    return this.locked(() => {
      const entries = this.read().entries;
      if (!Object.prototype.hasOwnProperty.call(entries, key)) return undefined;
      const whole = { ...entries[key] };
      for (const field of REPORT_FIELDS) if (whole[field] !== undefined) whole[field] = toBase64(this.load(entries[key], field, key));
      return whole;
    });
  }
}

/** A ledger kept in the file at `path`. */
export function fileLedger(path: string): Ledger {
  return new Ledger(new FileStorage(path));
}
