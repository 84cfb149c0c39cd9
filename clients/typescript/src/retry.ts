// When to retry, and how long to wait.

/** Answers worth another try: throttled, and gateways or a database that went away. */
export const RETRY_STATUSES: ReadonlySet<number> = new Set([429, 502, 503, 504]);

export interface RetryOptions {
  /** Tries in all, the first included (default 4; 1 turns retries off). */
  attempts?: number;
  /** The first wait, doubled each try, with jitter (default 0.5). */
  backoffSeconds?: number;
  /** No wait is longer, Retry-After included (default 30). */
  maxBackoffSeconds?: number;
}

export class RetryPolicy {
  readonly attempts: number;
  readonly backoffSeconds: number;
  readonly maxBackoffSeconds: number;

  constructor({ attempts = 4, backoffSeconds = 0.5, maxBackoffSeconds = 30 }: RetryOptions = {}) {
    if (!Number.isInteger(attempts) || attempts < 1) {
      throw new RangeError(`retry attempts must be an integer of at least 1, not ${attempts}`);
    }
    if (!(backoffSeconds >= 0) || !(maxBackoffSeconds >= 0)) {
      throw new RangeError("retry backoffSeconds and maxBackoffSeconds must not be negative");
    }
    this.attempts = attempts;
    this.backoffSeconds = backoffSeconds;
    this.maxBackoffSeconds = maxBackoffSeconds;
  }

  /** Seconds to wait after try `attempt` (1-based); the server's Retry-After wins. */
  delaySeconds(attempt: number, retryAfter: number | null): number {
    if (retryAfter !== null) return Math.min(Math.max(retryAfter, 0), this.maxBackoffSeconds);
    const base = Math.min(this.backoffSeconds * 2 ** (attempt - 1), this.maxBackoffSeconds);
    return base * (0.5 + Math.random() / 2);
  }
}

/** Retry-After in seconds: delta-seconds or an HTTP date; null when absent or unreadable. */
export function retryAfterOf(headers: Headers, now: number = Date.now()): number | null {
  const value = headers.get("retry-after");
  if (value === null || value.trim() === "") return null;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.max(seconds, 0);
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max((at - now) / 1000, 0);
}
