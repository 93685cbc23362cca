/**
 * A service's address as the device keys it, one spelling per address, as the Python
 * participant's `participant/origin.py` writes it: the WHATWG URL parser (the platform's `URL`)
 * for the host and port, an IPv4-mapped IPv6 address as its IPv4 form, no user information, empty
 * and dot segments of the path resolved, no trailing slash, unreserved characters' escapes decoded
 * and the others upper-cased.
 */

const UNRESERVED = /^[A-Za-z0-9\-._~]$/;

function escapes(segment: string): string {
  return segment.replace(/%([0-9A-Fa-f]{2})/g, (_, hex: string) => {
    const char = String.fromCharCode(parseInt(hex, 16));
    return UNRESERVED.test(char) ? char : `%${hex.toUpperCase()}`;
  });
}

function path(raw: string): string {
  const kept: string[] = [];
  for (let segment of raw.split("/")) {
    segment = escapes(segment);
    if (segment === "" || segment === ".") continue;
    if (segment === "..") {
      kept.pop();
      continue;
    }
    kept.push(segment);
  }
  return kept.map((s) => `/${s}`).join("");
}

function host(url: URL): string {
  const name = url.hostname;
  const mapped = /^\[::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})\]$/.exec(name);
  if (mapped) {
    const high = parseInt(mapped[1], 16);
    const low = parseInt(mapped[2], 16);
    return [high >> 8, high & 255, low >> 8, low & 255].join(".");
  }
  // A trailing dot names the same host (the Python participant drops it; WHATWG URL keeps it).
  return name.length > 1 && name.endsWith(".") ? name.slice(0, -1) : name;
}

/** `baseUrl` in the one spelling the ledger keys by (`scheme://host[:port][/path]`); throws RangeError otherwise. */
export function normaliseOrigin(baseUrl: string): string {
  let url: URL;
  try {
    url = new URL(baseUrl.trim());
  } catch {
    throw new RangeError(`the aggregator's address must be an http(s) URL with a host, got '${baseUrl}'`);
  }
  if ((url.protocol !== "http:" && url.protocol !== "https:") || !url.hostname)
    throw new RangeError(`the aggregator's address must be an http(s) URL with a host, got '${baseUrl}'`);
  if (url.search || url.hash || baseUrl.includes("?") || baseUrl.includes("#"))
    throw new RangeError(`the aggregator's address must not carry a query or fragment, got '${baseUrl}'`);
  const port = url.port ? `:${url.port}` : ""; // URL drops the scheme's default port
  return `${url.protocol}//${host(url)}${port}${path(url.pathname)}`;
}
