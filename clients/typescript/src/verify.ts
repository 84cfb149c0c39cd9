// Verify a sendlater webhook: Standard Webhooks signatures (webhook-id, webhook-timestamp,
// webhook-signature), HMAC-SHA256 with the team's whsec_ secret.
import { createHmac, timingSafeEqual } from "node:crypto";

import { InvalidSignatureError } from "./errors.js";

/** How far a timestamp may be from now, either way (Standard Webhooks' five minutes). */
export const TOLERANCE_SECONDS = 5 * 60;

export type WebhookHeaders =
  Headers | Readonly<Record<string, string | readonly string[] | undefined>>;

export interface VerifyOptions {
  /** Default 300 seconds. */
  toleranceSeconds?: number;
  /** The clock to judge the timestamp by (default now). */
  now?: Date;
}

/**
 * The decoded JSON body if one of `secrets` signed it; else throws InvalidSignatureError.
 *
 * `body` must be the raw bytes or text as received (not re-serialized JSON). Pass several
 * secrets during a rotation (the new one and the previous one): the service then sends a
 * signature by each, and any one that matches a secret verifies.
 */
export function verify(
  body: string | Uint8Array,
  headers: WebhookHeaders,
  secrets: string | readonly string[],
  options: VerifyOptions = {},
): unknown {
  const keys = (typeof secrets === "string" ? [secrets] : [...secrets]).map(secretBytes);
  if (keys.length === 0) throw new InvalidSignatureError("no signing secret configured");
  const id = header(headers, "webhook-id");
  const timestamp = header(headers, "webhook-timestamp");
  const signatures = header(headers, "webhook-signature");
  if (!id || !timestamp || !signatures) {
    throw new InvalidSignatureError(
      "missing webhook-id, webhook-timestamp or webhook-signature header",
    );
  }
  checkTimestamp(timestamp, options);
  const payload = typeof body === "string" ? Buffer.from(body, "utf8") : Buffer.from(body);
  const signed = Buffer.concat([Buffer.from(`${id}.${timestamp}.`, "utf8"), payload]);
  const expected = keys.map((key) => createHmac("sha256", key).update(signed).digest());
  for (const candidate of signatures.split(" ")) {
    const [version, value] = candidate.split(",", 2);
    if (version !== "v1" || !value) continue;
    const given = Buffer.from(value, "base64");
    if (expected.some((mac) => mac.length === given.length && timingSafeEqual(mac, given))) {
      try {
        return JSON.parse(payload.toString("utf8"));
      } catch {
        throw new InvalidSignatureError("the signed body is not JSON");
      }
    }
  }
  throw new InvalidSignatureError("no matching signature");
}

function secretBytes(secret: string): Buffer {
  if (typeof secret !== "string" || secret === "") {
    throw new InvalidSignatureError("a signing secret must be a non-empty string");
  }
  const encoded = secret.startsWith("whsec_") ? secret.slice("whsec_".length) : secret;
  const bytes = Buffer.from(encoded, "base64");
  if (bytes.length === 0) throw new InvalidSignatureError("a signing secret is not base64");
  return bytes;
}

function header(headers: WebhookHeaders, name: string): string | undefined {
  if (typeof (headers as Headers).get === "function") {
    return (headers as Headers).get(name) ?? undefined;
  }
  const record = headers as Readonly<Record<string, string | readonly string[] | undefined>>;
  for (const [key, value] of Object.entries(record)) {
    if (key.toLowerCase() === name) return typeof value === "string" ? value : value?.[0];
  }
  return undefined;
}

function checkTimestamp(value: string, options: VerifyOptions): void {
  if (!/^\d+$/.test(value)) throw new InvalidSignatureError("webhook-timestamp is not a number");
  const now = Math.floor((options.now ?? new Date()).getTime() / 1000);
  const tolerance = options.toleranceSeconds ?? TOLERANCE_SECONDS;
  const sent = Number(value);
  if (sent < now - tolerance) throw new InvalidSignatureError("webhook-timestamp is too old");
  if (sent > now + tolerance) throw new InvalidSignatureError("webhook-timestamp is in the future");
}
