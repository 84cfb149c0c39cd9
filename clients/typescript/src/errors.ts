// Typed errors: one class per answer a caller may want to handle.

export interface ErrorDetails {
  status?: number;
  code?: string;
  body?: unknown;
  cause?: unknown;
}

/** Any error answer of the API (`status` 0 when no answer came). */
export class SendlaterError extends Error {
  readonly status: number;
  readonly code: string;
  readonly body: unknown;

  constructor(message: string, details: ErrorDetails = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.name = new.target.name;
    this.status = details.status ?? 0;
    this.code = details.code ?? "";
    this.body = details.body;
  }
}

/** 401: no key, or an unknown or revoked one. */
export class AuthenticationError extends SendlaterError {}

/** 404: no such job, schedule or flow-control key for this team. */
export class NotFoundError extends SendlaterError {}

/** 409: the job is not pending (or being delivered), or an idempotency key was reused with another body. */
export class ConflictError extends SendlaterError {}

/** 400/413/414/415: `fields` maps each bad input (`dueAt`'s wire name `due_at`, `jobs[17].due_at`) to its messages. */
export class ValidationError extends SendlaterError {
  readonly fields: Readonly<Record<string, string[]>>;

  constructor(message: string, details: ErrorDetails & { fields?: Record<string, string[]> } = {}) {
    super(message, details);
    this.fields = details.fields ?? {};
  }
}

/** 429 after the retries ran out; `retryAfter` in seconds when the server said. */
export class RateLimitedError extends SendlaterError {
  readonly retryAfter: number | null;

  constructor(message: string, details: ErrorDetails & { retryAfter?: number | null } = {}) {
    super(message, details);
    this.retryAfter = details.retryAfter ?? null;
  }
}

/** 5xx after the retries ran out (503: the database went away mid-request). */
export class UnavailableError extends SendlaterError {
  readonly retryAfter: number | null;

  constructor(message: string, details: ErrorDetails & { retryAfter?: number | null } = {}) {
    super(message, details);
    this.retryAfter = details.retryAfter ?? null;
  }
}

/** The request never got an answer (connection refused or dropped, timeout). */
export class TransportError extends SendlaterError {}

/** A webhook whose signature, timestamp or headers do not verify. */
export class InvalidSignatureError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "InvalidSignatureError";
  }
}

interface ErrorBody {
  error?: { code?: unknown; message?: unknown; fields?: unknown };
}

/** The typed error for an error answer (the API's `{"error": {code, message, fields}}`). */
export function errorFor(status: number, body: unknown, retryAfter: number | null): SendlaterError {
  const detail = typeof body === "object" && body !== null ? (body as ErrorBody).error : undefined;
  const code = typeof detail?.code === "string" ? detail.code : "";
  const message =
    typeof detail?.message === "string" && detail.message ? detail.message : `HTTP ${status}`;
  const details = { status, code, body };
  if (status === 401) return new AuthenticationError(message, details);
  if (status === 404) return new NotFoundError(message, details);
  if (status === 409) return new ConflictError(message, details);
  if (status === 429) return new RateLimitedError(message, { ...details, retryAfter });
  if ([400, 413, 414, 415, 422].includes(status)) {
    return new ValidationError(message, { ...details, fields: fieldsOf(detail?.fields) });
  }
  if (status >= 500) return new UnavailableError(message, { ...details, retryAfter });
  return new SendlaterError(message, details);
}

function fieldsOf(value: unknown): Record<string, string[]> {
  if (typeof value !== "object" || value === null) return {};
  const fields: Record<string, string[]> = {};
  for (const [name, messages] of Object.entries(value)) {
    fields[name] = Array.isArray(messages) ? messages.map(String) : [String(messages)];
  }
  return fields;
}
