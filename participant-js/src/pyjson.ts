/**
 * Python's `json.dumps(value, sort_keys=True, separators=(",", ":"))`, byte for byte: the text a
 * spec's fingerprint is the SHA-256 of. JavaScript's `JSON.stringify` differs in three ways that
 * matter here: it writes the float 1.0 as `1`, it does not escape non-ASCII characters, and it
 * keeps keys in insertion order. Values that must be floats are wrapped in {@link PyFloat}.
 */

/** A number Python holds as a float (written `1.0`, `1e-05`, as Python's `repr`). */
export class PyFloat {
  constructor(readonly value: number) {}
}

export type PyValue = null | boolean | string | number | PyFloat | PyValue[] | { [key: string]: PyValue };

/** Python's `repr` of a finite float. */
export function floatRepr(x: number): string {
  if (!Number.isFinite(x)) throw new RangeError(`not a finite float: ${x}`);
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  const sign = x < 0 ? "-" : "";
  // The shortest digits that read back as x, as Python's repr chooses them.
  const [mantissa, exponentText] = Math.abs(x).toExponential().split("e");
  const digits = mantissa.replace(".", "");
  const exponent = Number(exponentText);
  if (exponent < -4 || exponent >= 16) {
    const rest = digits.length > 1 ? `.${digits.slice(1)}` : "";
    const e = Math.abs(exponent).toString().padStart(2, "0");
    return `${sign}${digits[0]}${rest}e${exponent < 0 ? "-" : "+"}${e}`;
  }
  if (exponent < 0) return `${sign}0.${"0".repeat(-exponent - 1)}${digits}`;
  const whole = digits.slice(0, exponent + 1).padEnd(exponent + 1, "0");
  const fraction = digits.slice(exponent + 1) || "0";
  return `${sign}${whole}.${fraction}`;
}

/** A string as Python's `json.dumps` writes it (ensure_ascii: every non-ASCII character escaped). */
export function stringRepr(text: string): string {
  let out = '"';
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    const ch = text[i];
    if (ch === '"') out += '\\"';
    else if (ch === "\\") out += "\\\\";
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (ch === "\b") out += "\\b";
    else if (ch === "\f") out += "\\f";
    else if (c < 0x20 || c > 0x7e) out += `\\u${c.toString(16).padStart(4, "0")}`; // UTF-16 units, as Python
    else out += ch;
  }
  return `${out}"`;
}

function byCodePoint(a: string, b: string): number {
  const x = Array.from(a, (c) => c.codePointAt(0)!);
  const y = Array.from(b, (c) => c.codePointAt(0)!);
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i] - y[i];
  return x.length - y.length;
}

/** `json.dumps(value, sort_keys=True, separators=(",", ":"))`. */
export function canonicalJson(value: PyValue): string {
  if (value === null) return "null";
  if (value === true) return "true";
  if (value === false) return "false";
  if (value instanceof PyFloat) return floatRepr(value.value);
  if (typeof value === "number") {
    if (!Number.isSafeInteger(value)) throw new RangeError(`an integer was expected, got ${value}`);
    return String(value);
  }
  if (typeof value === "string") return stringRepr(value);
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  const keys = Object.keys(value).sort(byCodePoint);
  return `{${keys.map((k) => `${stringRepr(k)}:${canonicalJson(value[k])}`).join(",")}}`;
}
