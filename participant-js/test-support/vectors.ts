/**
 * The known-answer vectors the Python participant generated (`test/vectors.json`, committed; the
 * Python suite checks that it is current, and `python -m tests.js_vectors` rewrites it).
 */
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const path = fileURLToPath(new URL("../../test/vectors.json", import.meta.url));

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export const vectors: any = JSON.parse(readFileSync(path, "utf8"));
