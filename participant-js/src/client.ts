/**
 * Talking to an aggregator: fetch a collection's spec, send the one report, and never a second,
 * as the Python participant's `participant/client.py`. The report is written to the ledger before
 * it is sent, so a retry re-sends the very same report; what the device spends is decided from the
 * ledger and the app's limits, never from what the service publishes. The report leaves a fixed
 * `pace` after the spec arrived, so the moment a service sees it does not follow the draw.
 *
 * Shuffled collections: the app pins the shuffler it trusts (`shuffler`), and the device reports
 * to a shuffled collection only through it, under the collection's view as that shuffler pinned
 * it (`view.ts`), refusing one whose aggregator answer differs from the view or that names another
 * shuffler. A report to a shuffled collection is always a fresh draw, never a memoised answer.
 * An app that pins a shuffler reports to no collection unshuffled but those it names (`direct`),
 * and to none of those its shuffler holds a shuffled view of: an aggregator could otherwise show
 * one device a shuffled collection without its `shuffle` block and have its report, tied to its
 * address. The view's floor and dummies must meet the app's limits (`minBatch`, `minDummyShare`).
 *
 * A shuffled collection that takes reports only from enrolled people (its spec's
 * `shuffle.issuer_key`) gets, with each report, an anonymous token (`tokens.ts`): the person's
 * one-time code (`token`) obtains it from the issuer, blind, and goes nowhere else (never inside the
 * sealed report); the token travels behind the sealed report to the shuffler, which checks and
 * strips it. The request, then the token, are written to the ledger before they are used, so a
 * device stopped on the way asks the issuer the very same request again and re-sends the very same
 * bytes.
 */
import { decode, encode } from "@msgpack/msgpack";

import { AlreadyReported, ClientError, ParticipantError } from "./errors.js";
import { type Ledger, type Asked } from "./ledger.js";
import { LimitExceeded, Limits, type LimitsOptions } from "./limits.js";
import { normaliseOrigin } from "./origin.js";
import { type ExactRandomness } from "./exact.js";
import { Participant, type RawRecord, packReport } from "./report.js";
import { checkSealable, seal, sealedLength } from "./sealing.js";
import { CollectionSpec, SpecError } from "./spec.js";
import { INPUT_BYTES, concat, finish, issuingKey, tokenLength, tokenRequest } from "./tokens.js";
import { DEFAULT_MAX_RETRY_AFTER, DEFAULT_RETRY_DEADLINE, lastAnswer, refuser, retryAfter, waitBefore } from "./retrying.js";
import { ShuffledView } from "./view.js";

export { AlreadyReported }; // defined beside the other errors: the ledger raises it too
/** The aggregator refused the request (4xx): retrying would not help. */
export class ReportRejected extends ClientError {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(`aggregator answered ${status}: ${message}`);
  }
}
/**
 * A party (the aggregator, or the shuffler the app pins) could not be reached, or kept failing or
 * refusing, until the client's attempts ended (`retries`, `maxRetryAfter`, `retryDeadline`); the
 * report stays pending and is re-sent unchanged. The message names the party and, for a rate
 * limit, the option that lifts it. `url` is the address last asked, `party` the party it is,
 * `status` the last answer's (null when none came), `last` how that answer reads, `retryAfter`
 * the seconds its `Retry-After` asked (null when none), `option` the party's `serve` option that
 * lifts the limit a 429 names (null for any other answer).
 */
export class SubmissionFailed extends ClientError {
  declare readonly url: string;
  declare readonly status: number | null;
  declare readonly retryAfter: number | null;
  declare readonly party: string;
  declare readonly last: string;
  declare readonly option: string | null;

  constructor(message: string, details: Pick<SubmissionFailed, "url" | "status" | "retryAfter" | "party" | "last" | "option">) {
    super(message);
    Object.assign(this, details);
  }
}

/**
 * This page or runtime has no Web Crypto (`crypto.getRandomValues` and `crypto.subtle`): a
 * browser offers it only in a secure context, a page served over https or from localhost. Nothing
 * was drawn or sent.
 */
export class InsecureContext extends ParticipantError {}

/** Throw InsecureContext unless the platform's CSPRNG and SHA-256 are here. */
export function requireWebCrypto(): void {
  const crypto = (globalThis as { crypto?: Crypto }).crypto;
  if (typeof crypto?.getRandomValues !== "function" || typeof crypto?.subtle?.digest !== "function")
    throw new InsecureContext(
      "this page has no Web Crypto (crypto.getRandomValues and crypto.subtle), which the participant draws and " +
        "fingerprints with: a browser offers it only to a page served over https or from localhost; nothing was drawn or sent",
    );
}

export interface SubmitOptions {
  /** The input group the operator assigned, for collections that assign inputs. */
  group?: number;
  /**
   * The enrollment token the operator gave this person, for collections that require one; for a
   * shuffled collection that takes reports only from enrolled people, the person's one-time code,
   * which obtains the report's anonymous token and is never sent with the report.
   */
  token?: string;
  /**
   * Values the app knows its people hold, by field (`{ age: ["Young", ...] }`): a spec that
   * leaves one out is refused (SpecError) before the record is read.
   */
  expected?: Record<string, string[]>;
  /**
   * What {@link Client.fetchCollection} returned when the person was shown the questions: the
   * collection is fetched again at submit, and a spec or collection that changed since is refused
   * (SpecError) before the record is read.
   */
  shown?: Published;
}

/** The content type of a sealed report, as a shuffler takes it. */
export const SEALED = "application/ldpnb-sealed";

/** Seconds from the spec's arrival to the report's departure (a whole multiple of it when drawing took longer). */
export const DEFAULT_PACE = 0.2;

export interface ClientOptions {
  ledger: Ledger;
  limits?: Limits | LimitsOptions;
  /** The shuffler this app trusts with shuffled collections (none: it reports to no shuffled collection). */
  shuffler?: string;
  /**
   * The collection ids at this aggregator that the app accepts reporting to directly although it
   * pins a shuffler; any other unshuffled collection is refused, and so is one of these whose id
   * the shuffler holds a shuffled view of.
   */
  direct?: string[];
  pace?: number;
  /**
   * Attempts after the first, for a network error or a 5xx or 429 answer (default 5), each
   * re-sending the same bytes after `backoff` seconds (default 0.2) doubled each time and
   * jittered, or after what a 429 or 503 answer's `Retry-After` asks (and up to a fifth more) when
   * that is longer. The wait depends only on the service's answers, never on the person's record.
   */
  retries?: number;
  backoff?: number;
  /** Seconds: a `Retry-After` asking more ends the attempts at once (default 60), so no service stalls a device. */
  maxRetryAfter?: number;
  /** Seconds from a request's first attempt past which it is not tried again (default 300). */
  retryDeadline?: number;
  timeout?: number;
  source?: ExactRandomness;
  /**
   * Refuse (RecordError) a record holding a key its spec does not know, lacking a field, or
   * holding a value it does not declare, before anything is drawn, the ledger touched or sent: the
   * refusal is the app's to see, never the service's (see {@link Participant}). By default such a
   * record is reported (unknown keys and wrong-case values warned of on the console), so that
   * whether a report is sent never depends on what a person answered.
   */
  strict?: boolean;
}

export interface Published {
  collectionId: string;
  uid: string;
  spec: CollectionSpec;
  fingerprint: string;
  raw: unknown;
}

/** Seconds to wait after `elapsed` so that the total is the smallest positive whole multiple of `pace`. */
export function pacedWait(elapsed: number, pace: number): number {
  if (pace <= 0) return 0;
  return Math.max(1, Math.ceil(elapsed / pace)) * pace - elapsed;
}

const sleep = (seconds: number) => new Promise((done) => setTimeout(done, seconds * 1000));

/**
 * Return at `deadline` (seconds on the `performance.now()` clock). Timers fire on whole
 * milliseconds counted from when they were set, which would carry the sub-millisecond part of the
 * draw's time into the sending time: the timer ends 2 ms early and the last of the wait is spun
 * on the precise clock.
 */
export async function sleepUntil(deadline: number): Promise<void> {
  const early = deadline - performance.now() / 1000 - 0.002;
  if (early > 0) await sleep(early);
  while (performance.now() / 1000 < deadline) {
    /* the last two milliseconds, on the precise clock */
  }
}

/** The body of `response`, read as a stream and refused as soon as it passes `limit` bytes. */
async function bounded(response: Response, limit: number, what: string): Promise<Uint8Array> {
  const declared = Number(response.headers.get("content-length"));
  if (declared > limit) throw new LimitExceeded(`${what} answered ${declared} bytes; this app reads at most ${limit}`);
  const chunks: Uint8Array[] = [];
  let size = 0;
  if (response.body) {
    const reader = response.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      size += value.length;
      if (size > limit) {
        await reader.cancel();
        throw new LimitExceeded(`${what} answered more than ${limit} bytes; this app reads no more`);
      }
      chunks.push(value);
    }
  }
  const out = new Uint8Array(size);
  let at = 0;
  for (const chunk of chunks) {
    out.set(chunk, at);
    at += chunk.length;
  }
  return out;
}

/** An earlier report's randomised answer (input, value) under a fresh id, this spec's digest and token: a memo's re-send. */
export function rewrap(body: Uint8Array, digest: Uint8Array, token?: string): Uint8Array {
  const old = decode(body) as Record<string, unknown>;
  const wire: Record<string, unknown> = {
    id: globalThis.crypto.getRandomValues(new Uint8Array(16)),
    spec: digest,
    input: old.input,
    value: old.value,
  };
  if (token !== undefined) wire.token = token;
  return encode(wire);
}

/** The collection ids an app names in `direct`; RangeError for one string (an id, not a list of them) or anything but an iterable of strings. */
export function directIds(direct: Iterable<string> | undefined): ReadonlySet<string> {
  if (direct === undefined) return new Set();
  if (typeof direct === "string") throw new RangeError(`direct must be a list of collection ids, not one string: '${direct}'`.slice(0, 200));
  if (direct === null || typeof (direct as Iterable<string>)[Symbol.iterator] !== "function")
    throw new RangeError(`direct must be a list of collection ids, got ${String(direct)}`.slice(0, 200));
  const ids = new Set(direct);
  if (![...ids].every((id) => typeof id === "string")) throw new RangeError("direct must hold collection ids (strings)");
  return ids;
}

export class Client {
  readonly origin: string;
  readonly limits: Limits;
  readonly ledger: Ledger;
  readonly pace: number;
  readonly shuffler: string | null;
  readonly direct: ReadonlySet<string>;
  private readonly retries: number;
  private readonly backoff: number;
  readonly maxRetryAfter: number;
  readonly retryDeadline: number;
  private readonly timeout: number;
  private readonly source?: ExactRandomness;
  readonly strict: boolean;

  constructor(baseUrl: string, options: ClientOptions) {
    this.origin = normaliseOrigin(baseUrl);
    this.ledger = options.ledger;
    this.limits = options.limits instanceof Limits ? options.limits : new Limits(options.limits);
    const pace = options.pace ?? DEFAULT_PACE;
    if (!(pace >= 0) || !Number.isFinite(pace)) throw new RangeError(`pace must be a number of seconds >= 0, got ${pace}`);
    this.pace = pace;
    this.shuffler = options.shuffler === undefined ? null : normaliseOrigin(options.shuffler);
    this.direct = directIds(options.direct);
    this.retries = options.retries ?? 5;
    this.backoff = options.backoff ?? 0.2;
    this.maxRetryAfter = options.maxRetryAfter ?? DEFAULT_MAX_RETRY_AFTER;
    this.retryDeadline = options.retryDeadline ?? DEFAULT_RETRY_DEADLINE;
    for (const name of ["maxRetryAfter", "retryDeadline"] as const)
      if (typeof this[name] !== "number" || !(this[name] >= 0) || !Number.isFinite(this[name]))
        throw new RangeError(`${name} must be a number of seconds >= 0, got ${this[name]}`);
    this.timeout = options.timeout ?? 10;
    this.source = options.source;
    this.strict = options.strict ?? false;
  }

  /**
   * `[status, decoded answer]` of the first answer not to try again; throws SubmissionFailed when
   * the attempts end (every one failed, a `Retry-After` asked more than `maxRetryAfter`, or the
   * next wait would pass `retryDeadline`), naming the party and the option that lifts its limit.
   * Each attempt sends the same bytes; how long it waits between them follows only the answers
   * (`retrying.ts`).
   */
  private async request(method: string, url: string, limit: number, init: RequestInit = {}): Promise<[number, unknown]> {
    let last = "no attempt made";
    let status: number | null = null;
    let asked: number | null = null;
    let named: unknown;
    let stop = "";
    let attempt = 0;
    const started = performance.now() / 1000;
    for (;;) {
      try {
        // Redirects are not followed: the app configured the one origin it reports to.
        const response = await fetch(url, { ...init, method, redirect: "manual", signal: AbortSignal.timeout(this.timeout * 1000) });
        const body = await bounded(response, limit, `${method} ${url}`);
        let data: unknown;
        const type = (response.headers.get("content-type") ?? "").split(";")[0].trim();
        try {
          data = type === "application/msgpack" ? decode(body) : body.length ? JSON.parse(new TextDecoder().decode(body)) : null;
        } catch {
          data = { error: `unreadable ${type || "untyped"} answer of ${body.length} bytes` };
        }
        if (response.status < 500 && response.status !== 429) return [response.status, data];
        status = response.status;
        last = lastAnswer(status, data);
        named = typeof data === "object" && data !== null ? (data as { option?: unknown }).option : undefined;
        asked = status === 429 || status === 503 ? retryAfter(response.headers.get("retry-after"), Date.now()) : null;
      } catch (error) {
        if (error instanceof ParticipantError) throw error;
        [last, status, asked, named] = [`${(error as Error).name}: ${(error as Error).message}`, null, null, undefined];
      }
      attempt++;
      if (attempt > this.retries) break;
      if (asked !== null && asked > this.maxRetryAfter) {
        stop = `; it asks to wait ${asked} s, over maxRetryAfter (${this.maxRetryAfter} s)`;
        break;
      }
      const wait = waitBefore(attempt, this.backoff, asked, Math.random()); // jitter: not a draw
      if (performance.now() / 1000 - started + wait > this.retryDeadline) {
        stop = `; another wait would pass retryDeadline (${this.retryDeadline} s)`;
        break;
      }
      await sleep(wait);
    }
    const [who, lift] = refuser(url, this.shuffler, this.origin, status, named);
    const verb = status === null ? "could not be reached" : status === 429 ? "refused" : status === 503 ? "was unavailable" : "failed";
    throw new SubmissionFailed(
      `${who} ${verb}: ${method} ${url} failed after ${attempt} attempts${stop}; last: ${last}` +
        (lift && !last.includes(lift) ? `; its operator can raise ${lift}` : ""),
      { url, status, retryAfter: asked, party: who, last, option: lift },
    );
  }

  private refusal(status: number, data: unknown): ReportRejected {
    const message = typeof data === "object" && data !== null && "error" in data ? String((data as { error: unknown }).error) : String(data);
    return new ReportRejected(status, message.slice(0, 500));
  }

  collectionUrl(id: string): string {
    return `${this.origin}/collections/${encodeURIComponent(id)}`;
  }

  /** What the service publishes for the collection, checked: sizes against the limits before anything is built, then the spec and its fingerprint. */
  async fetchCollection(id: string): Promise<Published> {
    requireWebCrypto();
    const [status, data] = await this.request("GET", this.collectionUrl(id), this.limits.maxSpecBytes, {
      headers: { Accept: "application/json" },
    });
    if (status !== 200) throw this.refusal(status, data);
    if (typeof data !== "object" || data === null) throw new ClientError("the service's description of the collection is not a mapping");
    const { spec: raw, uid, fingerprint, id: published } = data as Record<string, unknown>;
    if (typeof uid !== "string" || uid.length < 16 || uid.length > 256)
      throw new ClientError("the service published no usable collection identity (uid)");
    if (typeof published !== "string" || typeof fingerprint !== "string")
      throw new ClientError("the service published a collection id or fingerprint that is not text");
    this.limits.checkSpec(raw, published);
    const spec = CollectionSpec.fromDict(raw);
    if ((await spec.fingerprint()) !== fingerprint)
      throw new ClientError("the published spec does not match its fingerprint; refusing to report");
    return { collectionId: published, uid, spec, fingerprint, raw };
  }

  /** The collection's view as this app's shuffler pinned it, checked (its spec against the limits before it is built, its fingerprint and digest). */
  async fetchView(id: string): Promise<ShuffledView> {
    if (this.shuffler === null) throw new SpecError("this app pins no shuffler (the shuffler option): it reports to no shuffled collection");
    const [status, data] = await this.askView(id);
    if (status !== 200) throw this.refusal(status, data);
    return ShuffledView.fromDict(data, this.limits);
  }

  /** `[status, decoded answer]` of the pinned shuffler to `GET /collections/{id}/view`. */
  private askView(id: string): Promise<[number, unknown]> {
    return this.request("GET", `${this.shuffler}/collections/${encodeURIComponent(id)}/view`, this.limits.maxSpecBytes, {
      headers: { Accept: "application/json" },
    });
  }

  /**
   * Return when this app, pinning a shuffler, may report to the unshuffled collection `id`
   * directly: it names the id in `direct`, and its shuffler answers 404 or 409 for the id's view
   * with the reason `unknown` or `not_shuffled` (the aggregator told it of no shuffled collection
   * of that id; `too_large`, a shuffled one whose batches do not fit, is refused). Throw SpecError
   * otherwise, or SubmissionFailed when the shuffler cannot be reached: an aggregator that shows
   * one device a shuffled collection unshuffled would have its report, tied to its address.
   */
  private async checkDirect(id: string): Promise<void> {
    if (!this.direct.has(id))
      throw new SpecError(
        `collection '${id}' is not shuffled, and this app pins a shuffler: it reports directly only to the collections it names ` +
          `(the direct option: ${JSON.stringify([...this.direct].sort())}); nothing was sent`,
      );
    const [status, data] = await this.askView(id);
    const reason = typeof data === "object" && data !== null ? (data as { reason?: unknown }).reason : undefined;
    if (status === 200)
      throw new SpecError(
        `the shuffler this app pins holds a shuffled view of collection '${id}', which the aggregator shows unshuffled; ` +
          "refusing to report directly; nothing was sent",
      );
    if ((status !== 404 && status !== 409) || (reason !== "unknown" && reason !== "not_shuffled"))
      throw new SpecError(
        `the shuffler this app pins answered ${status} (${String(reason ?? "no reason")}) when asked for a view of collection '${id}', ` +
          "so it may be shuffled; refusing to report directly; nothing was sent",
      );
  }

  /** POST one packed report, or to `shuffler` (its URL) one sealed report; `"accepted"` or `"duplicate"` (already stored). */
  async sendReport(id: string, body: Uint8Array, shuffler: string | null = null): Promise<string> {
    const url = shuffler === null ? `${this.collectionUrl(id)}/reports` : `${shuffler.replace(/\/+$/, "")}/collections/${encodeURIComponent(id)}/reports`;
    const [status, data] = await this.request("POST", url, this.limits.maxAnswerBytes, {
      body: body as unknown as BodyInit,
      headers: { "Content-Type": shuffler === null ? "application/msgpack" : SEALED, Accept: "application/json" },
    });
    const answer = typeof data === "object" && data !== null ? (data as { status?: unknown }).status : undefined;
    if ((status !== 200 && status !== 201) || (answer !== "accepted" && answer !== "duplicate")) throw this.refusal(status, data);
    return answer;
  }

  /**
   * This person's one report for `record`, sent; returns the service's status. Whether it is sent
   * never depends on `record`: a value the spec does not declare is reported as one drawn from the
   * declared values. Throws, sending nothing, a ParticipantError: AlreadyReported,
   * CollectionChanged, BudgetExceeded, LimitExceeded (a spec or answer over the limits, or a
   * shuffled collection's floor or dummies below them), LedgerError, InsecureContext, SpecError (a
   * spec that cannot be read, lacks an `expected` value, or is no longer the one `shown`; an
   * unshuffled collection that an app pinning a shuffler does not name in `direct`, or whose id its
   * shuffler holds a shuffled view of; a collection taking reports only from enrolled people when
   * no code was given, or whose issuing key is not an RSA key of 2048 bits or more),
   * ReportRejected (the issuer refused the code), BlindSignatureError (the issuer answered
   * anything but a signature under the collection's issuing key) or RecordError (a group the spec
   * does not take, a record that is not a mapping).
   */
  async submit(id: string, record: RawRecord, options: SubmitOptions = {}): Promise<string> {
    requireWebCrypto();
    const { group, expected } = options;
    let token = options.token;
    let code: string | undefined;
    const published = await this.fetchCollection(id);
    const shown = options.shown;
    if (shown !== undefined && (shown.fingerprint !== published.fingerprint || shown.uid !== published.uid))
      throw new SpecError(`collection '${id}' changed after its questions were shown; refusing to report (show them again)`);
    const spec = published.spec;
    if (expected !== undefined) spec.checkExpected(expected);
    const participant = new Participant(spec, this.source, this.strict);
    const digest = await spec.fingerprintDigest();
    // A shuffled collection: refused before the record is read without the trusted shuffler, its view or a usable key.
    let view: ShuffledView | null = null;
    if (spec.shuffle !== null) {
      await checkSealable(spec);
      if (this.shuffler === null)
        throw new SpecError(`collection '${id}' is shuffled through ${spec.shuffle.url}; this app pins no shuffler, so it reports to none: nothing was sent`);
      let named: string;
      try {
        named = normaliseOrigin(spec.shuffle.url!);
      } catch {
        throw new SpecError(`collection '${id}' names a shuffler no device can call; nothing was sent`);
      }
      if (named !== this.shuffler)
        throw new SpecError(`collection '${id}' names the shuffler ${spec.shuffle.url}; this app trusts ${this.shuffler}: nothing was sent`);
      view = await this.fetchView(id);
      view.checkPublished(id, published.uid, published.fingerprint);
      this.limits.checkView(view, id);
      // The code obtains an anonymous token; nothing that names a person travels inside a sealed report.
      [code, token] = [token, undefined];
      if (spec.shuffle.issuerKey !== null) {
        await issuingKey(spec.shuffle.issuerKey); // a key no token could be checked under: refused now
        if (code === undefined)
          throw new SpecError(
            `collection '${id}' takes reports only from enrolled people: pass the code you were given (token); nothing was sent`,
          );
      }
    } else if (this.shuffler !== null) {
      await this.checkDirect(id); // refused before the record is read: a shuffled collection shown unshuffled
    }
    const arrived = performance.now() / 1000;
    const shuffler = view === null ? null : this.shuffler;
    const sealer = view === null ? undefined : (body: Uint8Array) => seal(body, view, digest);
    participant.validate(record, group); // nothing drawn yet; strict refuses here, the ledger untouched
    if (this.pace === 0 && spec.oracles.some((o) => o.name === "SHE" || o.name === "THE" || o.name === "laplace"))
      throw new LimitExceeded(
        `collection '${id}' uses ${spec.protocol} or a Laplace mean, whose draw time follows its noise: with pace=0 the moment a report ` +
          "leaves would tell it; set pace > 0; nothing was drawn or sent",
      );
    const asked: Asked = {
      origin: this.origin,
      collection: id,
      uid: published.uid,
      fingerprint: published.fingerprint,
      epsilon: spec.epsilonPerPerson,
      question: view === null ? await spec.question() : "", // a shuffled collection's answer is drawn afresh, never memoised
      group: group ?? null,
    };
    const claim = await this.ledger.claim(
      asked,
      this.limits,
      () => packReport(participant.draw(record, group), digest, token),
      (old) => rewrap(old, digest, token),
      sealer,
    );
    if (claim.sent)
      throw new AlreadyReported(`this device already reported to collection '${id}' at ${this.origin}; a second report would spend epsilon twice`);
    let outgoing = claim.sealed ?? claim.body;
    // Paced before the first request that follows the draw: a token request leaving right after
    // it would tell the issuer the draw's time, which follows the input and noise drawn.
    const now = performance.now() / 1000;
    await sleepUntil(now + pacedWait(now - arrived, this.pace));
    if (view !== null && view.spec.shuffle!.issuerKey !== null) outgoing = await this.tokened(id, view, digest, outgoing, code!, claim.key);
    const status = await this.sendReport(id, outgoing, shuffler);
    await this.ledger.markSent(claim.key);
    return status;
  }

  /**
   * The sealed report in `kept` with its anonymous token behind it (`tokens.ts`): `kept` is the
   * sealed report alone, with its token already, or with a request sent before and the blind's
   * inverse (a device stopped while its token was issued). The request and the inverse, then the
   * token, are written to the ledger under `key` before they are used, so that a retry asks the
   * issuer the very same request (answered the same) and re-sends the very same bytes. Throws
   * ReportRejected when the issuer refuses the code, and BlindSignatureError when its answer is
   * not a signature under the view's issuing key.
   */
  private async tokened(id: string, view: ShuffledView, digest: Uint8Array, kept: Uint8Array, code: string, key: string): Promise<Uint8Array> {
    const length = sealedLength(view.spec, digest);
    const whole = await tokenLength(view);
    const size = whole - INPUT_BYTES;
    if (kept.length === length + whole) return kept;
    const sealed = kept.slice(0, length);
    let request: Uint8Array;
    let inverse: Uint8Array;
    if (kept.length === length + 3 + 2 * size) {
      [request, inverse] = [kept.slice(length, length + 3 + size), kept.slice(length + 3 + size)];
    } else {
      ({ request, inverse } = await tokenRequest(view, sealed));
      await this.ledger.reseal(key, concat(sealed, request, inverse));
    }
    const response = await this.issue(id, code, request);
    const token = await finish(view, sealed, response, inverse);
    const outgoing = concat(sealed, token);
    await this.ledger.reseal(key, outgoing);
    return outgoing;
  }

  /** The issuer's answer (a blind signature) to the TokenRequest `request` with `code`: `POST /collections/{id}/tokens`, msgpack both ways. */
  private async issue(id: string, code: string, request: Uint8Array): Promise<Uint8Array> {
    const [status, data] = await this.request("POST", `${this.collectionUrl(id)}/tokens`, this.limits.maxAnswerBytes, {
      body: encode({ code, request }) as unknown as BodyInit,
      headers: { "Content-Type": "application/msgpack", Accept: "application/msgpack" },
    });
    const response = typeof data === "object" && data !== null ? (data as { response?: unknown }).response : undefined;
    if (status !== 200 || !(response instanceof Uint8Array)) throw this.refusal(status, data);
    return response;
  }
}
