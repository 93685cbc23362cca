/**
 * The ledger as a file, for Node: `@ldpnb/participant/node`. The same JSON file the Python
 * participant keeps (mode 0600), written to a fresh temporary file, fsynced and renamed over the
 * ledger, so a reader sees the old or the new ledger, never half of one. Changes are serialised by
 * a lock file created exclusively next to it (`<ledger>.jslock`) that holds the owner's process
 * id: a lock whose process is gone is taken over. The path is resolved through symlinks, so every
 * name of one ledger shares its lock and its budget, and a file with more than one name (a hard
 * link, which the rename would split into two files, two budgets) is refused.
 */
import { closeSync, constants, fstatSync, fsyncSync, openSync, readFileSync, realpathSync, renameSync, unlinkSync, writeSync, mkdirSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { randomBytes } from "node:crypto";

import { Ledger, LedgerError, type LedgerData, type LedgerStorage, checkedLedger, parseLedger } from "./ledger.js";

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
  parts.push(Buffer.from("}}"));
  return Buffer.concat(parts);
}

export class FileStorage implements LedgerStorage {
  readonly path: string;
  private readonly lockPath: string;
  /** The ledger's bytes as this storage last read or wrote them, and what they hold: parsed and checked again only when the file holds other bytes. */
  private cache: { bytes: Buffer; data: LedgerData } | null = null;

  constructor(path: string) {
    this.path = realPath(path);
    this.lockPath = `${this.path}.jslock`;
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
      if (this.cache !== null && this.cache.bytes.equals(bytes)) return this.cache.data;
    } catch (error) {
      if (error instanceof LedgerError) throw error;
      throw new LedgerError(`cannot read the ledger ${this.path}: ${(error as Error).message}`);
    } finally {
      closeSync(fd);
    }
    const data = checkedLedger(parseLedger(bytes, this.path), this.path);
    this.cache = { bytes: Buffer.from(bytes), data };
    return data;
  }

  private write(data: LedgerData): void {
    const tmp = join(dirname(this.path), `.${basename(this.path)}.${randomBytes(6).toString("hex")}.tmp`);
    try {
      const bytes = serialised(data);
      const fd = openSync(tmp, "wx", 0o600);
      try {
        writeSync(fd, bytes);
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
      renameSync(tmp, this.path);
      this.cache = { bytes, data };
    } catch (error) {
      this.cache = null;
      try {
        unlinkSync(tmp);
      } catch {
        /* never created, or renamed */
      }
      throw new LedgerError(`cannot write the ledger ${this.path}: ${(error as Error).message}; nothing was sent`);
    }
  }

  async update<T>(change: (data: LedgerData) => { result: T; write: boolean }): Promise<T> {
    await this.lock();
    try {
      const data = this.read();
      const { result, write } = change(data);
      if (write) this.write(data);
      return result;
    } finally {
      try {
        unlinkSync(this.lockPath);
      } catch {
        /* taken over as stale: nothing to release */
      }
    }
  }
}

/** A ledger kept in the file at `path`. */
export function fileLedger(path: string): Ledger {
  return new Ledger(new FileStorage(path));
}
