/**
 * The single-file browser build (`dist/ldpnb.browser.js`, made by `npm run build`): the
 * participant and its browser ledger, with their dependencies, for a page that loads one script.
 */
export * from "./index.js";
export { browserLedger, IndexedDbStorage } from "./browser.js";
