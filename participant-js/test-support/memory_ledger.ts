/**
 * Test support: a ledger kept in memory, each change made on a copy and kept only when written (as
 * the file and IndexedDB storages keep it), its clock `state.now`; a test may read or replace
 * `state.stored` between steps.
 */
import { Ledger } from "../src/ledger.js";

export function memoryLedger(stored: any = { version: 6, entries: {}, spent: {}, reported: {} }, now = 1_700_000_000) {
  const state: { stored: any; now: number } = { stored, now };
  const storage = {
    async update<T>(change: (data: any) => { result: T; write: boolean }): Promise<T> {
      const copy = JSON.parse(JSON.stringify(state.stored));
      const { result, write } = change(copy);
      if (write) state.stored = copy;
      return result;
    },
  };
  return { ledger: new Ledger(storage as any, () => state.now), state };
}
