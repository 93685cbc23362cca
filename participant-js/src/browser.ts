/**
 * The ledger in a browser: one IndexedDB record per device profile (database `ldpnb`, store
 * `ledger`, key `ledger`), the same entries as the file ledger. Every change runs inside one
 * read-write transaction, and IndexedDB runs read-write transactions on one store one at a time
 * across every tab of the profile: two tabs submitting at once cannot both draw for a collection,
 * and the device's budget counts both.
 */
import { Ledger, LedgerError, type LedgerData, type LedgerStorage, checkedLedger } from "./ledger.js";

const STORE = "ledger";
const KEY = "ledger";

function opened(name: string): Promise<IDBDatabase> {
  return new Promise((resolve, reject) => {
    const request = indexedDB.open(name, 1);
    request.onupgradeneeded = () => request.result.createObjectStore(STORE);
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(new LedgerError(`cannot open the ledger (IndexedDB '${name}'): ${request.error?.message}`));
  });
}

export class IndexedDbStorage implements LedgerStorage {
  private database: Promise<IDBDatabase> | null = null;

  constructor(readonly name = "ldpnb") {}

  async update<T>(change: (data: LedgerData) => { result: T; write: boolean }): Promise<T> {
    this.database ??= opened(this.name);
    const db = await this.database;
    return new Promise<T>((resolve, reject) => {
      const transaction = db.transaction(STORE, "readwrite");
      const store = transaction.objectStore(STORE);
      let result: T;
      let failure: unknown = null;
      const read = store.get(KEY);
      read.onsuccess = () => {
        try {
          // Text, as in the file: a value another script put there is checked like a file's.
          if (read.result !== undefined && typeof read.result !== "string")
            throw new LedgerError(`the ledger in IndexedDB '${this.name}' is not ledger text`);
          const raw = read.result === undefined ? undefined : JSON.parse(read.result);
          const data = checkedLedger(raw, `IndexedDB '${this.name}'`);
          const outcome = change(data);
          result = outcome.result;
          if (outcome.write) store.put(JSON.stringify(data), KEY);
        } catch (error) {
          failure = error instanceof SyntaxError ? new LedgerError(`the ledger in IndexedDB '${this.name}' is not valid JSON`) : error;
          transaction.abort();
        }
      };
      transaction.oncomplete = () => resolve(result);
      transaction.onabort = () => reject(failure ?? new LedgerError(`the ledger's transaction was aborted: ${transaction.error?.message}`));
      transaction.onerror = () => reject(failure ?? new LedgerError(`cannot write the ledger: ${transaction.error?.message}`));
    });
  }
}

/** A ledger kept in this browser profile's IndexedDB. */
export function browserLedger(name = "ldpnb"): Ledger {
  return new Ledger(new IndexedDbStorage(name));
}
