// What a caller sends, in camelCase, renamed to the API's snake_case fields. Each field
// map is checked against the schema's request fields at compile time (a field the API
// adds or drops fails the build), and at run time an unknown field (a typo from plain
// JavaScript) is refused before any request.
import { randomUUID } from "node:crypto";

import type { Query, Wire } from "./call.js";
import type { BodyFormat, HttpMethod, Json, MissedPolicy } from "./models.js";
import type { Assert, CamelKeys, SameNames } from "./schemacheck.js";

/** A JSON value other than null (the API refuses a null payload). */
export type Payload = Exclude<Json, null>;
export type Instant = Date | string;

/** Exactly one target: a webhook URL or a registered in-process handler. */
export type Target =
  { callbackUrl: string; handler?: never } | { handler: string; callbackUrl?: never };
/** A job's target: a webhook URL, a handler, or a topic (one delivery per endpoint). */
export type JobTarget =
  (Target & { topic?: never }) | { topic: string; callbackUrl?: never; handler?: never };

/** A retry policy: what it leaves out falls to the team's default, then the service's. */
export interface JobRetryInput {
  /** Tries in all, 1..50 (1: never retried). */
  maxAttempts?: number;
  minBackoffSeconds?: number;
  maxBackoffSeconds?: number;
}

/** What a job (or every occurrence of a schedule) sends, and who hears its outcome. */
export interface DeliveryInput {
  method?: HttpMethod;
  /** Sent with every delivery; kept encrypted, read back masked. */
  headers?: Record<string, string>;
  format?: BodyFormat;
  /** With format "payload" (given in the same call). */
  contentType?: string | null;
  timeoutSeconds?: number | null;
  retry?: JobRetryInput | null;
  onSuccessUrl?: string | null;
  onFailureUrl?: string | null;
  captureResponse?: boolean;
}

interface JobFields extends DeliveryInput {
  /** A Date, or RFC 3339 with a UTC offset ("2027-03-01T09:00:00+01:00"). */
  dueAt: Instant;
  callbackUrl?: string;
  handler?: string;
  topic?: string;
  payload?: Payload;
  metadata?: Record<string, string>;
  /** Generated (`slc-<uuid>`) when absent, so a retried create never schedules twice. */
  idempotencyKey?: string;
  windowSeconds?: number;
  expiresAfterSeconds?: number | null;
  flowControlKey?: string | null;
}
export type JobInput = Omit<JobFields, "callbackUrl" | "handler" | "topic"> & JobTarget;

interface ScheduleFields extends DeliveryInput {
  cron?: string;
  everySeconds?: number;
  /** IANA time zone of the cron expression; default UTC. */
  timezone?: string;
  callbackUrl?: string;
  handler?: string;
  topic?: string;
  payload?: Payload;
  metadata?: Record<string, string>;
  windowSeconds?: number;
  expiresAfterSeconds?: number | null;
  startAt?: Instant | null;
  endAt?: Instant | null;
  missed?: MissedPolicy;
  flowControlKey?: string | null;
}
export type ScheduleInput = Omit<
  ScheduleFields,
  "cron" | "everySeconds" | "callbackUrl" | "handler" | "topic"
> &
  ({ cron: string; everySeconds?: never } | { everySeconds: number; cron?: never }) &
  JobTarget;
/** A PATCH: only the fields given change (a new cron replaces everySeconds and back). */
export type ScheduleChanges = ScheduleFields;

export interface FlowControlLimits {
  /** Deliveries started per periodSeconds, across all pollers. */
  rate?: number;
  /** The rate's period, 1 second to a day; default 1. */
  periodSeconds?: number;
  /** Deliveries in flight at once, across all pollers. */
  parallelism?: number;
}

export interface JobFilters {
  status?: Wire["StatusEnum"];
  dueAfter?: Instant;
  dueBefore?: Instant;
  /** Every pair must match. */
  metadata?: Record<string, string>;
  flowControlKey?: string;
  scheduleId?: string;
  /** Page size, 1..1000 (default 100). */
  limit?: number;
}

type FieldMap<T> = { readonly [K in keyof Required<T>]: string };

const DELIVERY_FIELDS = {
  method: "method",
  headers: "headers",
  format: "format",
  contentType: "content_type",
  timeoutSeconds: "timeout_seconds",
  retry: "retry",
  onSuccessUrl: "on_success_url",
  onFailureUrl: "on_failure_url",
  captureResponse: "capture_response",
} as const satisfies FieldMap<DeliveryInput>;

const RETRY_FIELDS = {
  maxAttempts: "max_attempts",
  minBackoffSeconds: "min_backoff_seconds",
  maxBackoffSeconds: "max_backoff_seconds",
} as const satisfies FieldMap<JobRetryInput>;

export interface TeamDefaultsInput {
  /** The team's retry policy (null: none set, the service's applies). */
  retry?: JobRetryInput | null;
  /** Told when a job of the team ends dead or expired, unless the job names its own. */
  defaultOnFailureUrl?: string | null;
}

const TEAM_FIELDS = {
  retry: "retry",
  defaultOnFailureUrl: "default_on_failure_url",
} as const satisfies FieldMap<TeamDefaultsInput>;

const JOB_FIELDS = {
  dueAt: "due_at",
  callbackUrl: "callback_url",
  handler: "handler",
  topic: "topic",
  payload: "payload",
  metadata: "metadata",
  idempotencyKey: "idempotency_key",
  windowSeconds: "window_seconds",
  expiresAfterSeconds: "expires_after_seconds",
  flowControlKey: "flow_control_key",
  ...DELIVERY_FIELDS,
} as const satisfies FieldMap<JobFields>;

const SCHEDULE_FIELDS = {
  cron: "cron",
  everySeconds: "every_seconds",
  timezone: "timezone",
  callbackUrl: "callback_url",
  handler: "handler",
  topic: "topic",
  payload: "payload",
  metadata: "metadata",
  windowSeconds: "window_seconds",
  expiresAfterSeconds: "expires_after_seconds",
  startAt: "start_at",
  endAt: "end_at",
  missed: "missed",
  flowControlKey: "flow_control_key",
  ...DELIVERY_FIELDS,
} as const satisfies FieldMap<ScheduleFields>;

const FLOW_CONTROL_FIELDS = {
  rate: "rate",
  periodSeconds: "period_seconds",
  parallelism: "parallelism",
} as const satisfies FieldMap<FlowControlLimits>;

const JOB_FILTERS = {
  status: "status",
  dueAfter: "due_after",
  dueBefore: "due_before",
  metadata: "metadata",
  flowControlKey: "flow_control_key",
  scheduleId: "schedule_id",
  limit: "limit",
} as const satisfies FieldMap<JobFilters>;

const INSTANT_FIELDS = new Set(["dueAt", "startAt", "endAt", "dueAfter", "dueBefore"]);

type ValuesOf<T> = T[keyof T];
export type _JobInputFields = Assert<
  SameNames<keyof JobFields, CamelKeys<Wire["JobCreateRequest"]>> &
    SameNames<ValuesOf<typeof JOB_FIELDS>, keyof Wire["JobCreateRequest"]>
>;
export type _ScheduleInputFields = Assert<
  SameNames<keyof ScheduleFields, CamelKeys<Wire["ScheduleCreateRequest"]>> &
    SameNames<keyof ScheduleFields, CamelKeys<Wire["PatchedScheduleUpdateRequest"]>> &
    SameNames<ValuesOf<typeof SCHEDULE_FIELDS>, keyof Wire["ScheduleCreateRequest"]>
>;
export type _RetryInputFields = Assert<
  SameNames<ValuesOf<typeof RETRY_FIELDS>, keyof Wire["RetryPolicyRequest"]>
>;
export type _TeamInputFields = Assert<
  SameNames<ValuesOf<typeof TEAM_FIELDS>, keyof Wire["PatchedTeamDefaultsRequest"]>
>;
export type _FlowControlInputFields = Assert<
  SameNames<ValuesOf<typeof FLOW_CONTROL_FIELDS>, keyof Wire["FlowControlLimitsRequest"]>
>;
type JobQuery = Query<"get", "/api/v1/jobs">;
export type _JobFilterFields = Assert<
  SameNames<ValuesOf<typeof JOB_FILTERS>, Exclude<keyof JobQuery, "cursor">>
>;

/** An instant on the wire: a Date as ISO 8601 UTC, a string as given (the API checks it). */
export function instant(value: Instant, field: string): string {
  if (value instanceof Date) {
    if (Number.isNaN(value.getTime())) throw new TypeError(`${field} is an invalid Date`);
    return value.toISOString();
  }
  if (typeof value !== "string") {
    throw new TypeError(`${field} must be a Date or an RFC 3339 string, not ${typeof value}`);
  }
  return value;
}

function renamed(
  input: object,
  fields: Readonly<Record<string, string>>,
  what: string,
): Record<string, unknown> {
  if (input === null || typeof input !== "object" || Array.isArray(input)) {
    throw new TypeError(`${what} must be an object`);
  }
  const out: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(input)) {
    const wire = fields[name];
    if (wire === undefined) {
      const known = Object.keys(fields).join(", ");
      throw new TypeError(`${what}: unknown field "${name}" (known: ${known})`);
    }
    if (value === undefined) continue;
    if (name === "retry" && value !== null) {
      out[wire] = renamed(value as object, RETRY_FIELDS, `${what}.retry`);
      continue;
    }
    out[wire] = INSTANT_FIELDS.has(name) && value !== null ? instant(value, name) : value;
  }
  return out;
}

export function newIdempotencyKey(): string {
  return `slc-${randomUUID()}`;
}

/** The job's wire body, with an idempotency key generated when the caller gave none. */
export function jobToWire(job: JobInput, what = "job"): Wire["JobCreateRequest"] {
  const body = renamed(job, JOB_FIELDS, what);
  if (body.due_at === undefined) throw new TypeError(`${what}: dueAt is required`);
  body.idempotency_key ??= newIdempotencyKey();
  return body as Wire["JobCreateRequest"];
}

export function scheduleToWire(
  schedule: ScheduleChanges,
  what = "schedule",
): Wire["ScheduleCreateRequest"] {
  return renamed(schedule, SCHEDULE_FIELDS, what) as Wire["ScheduleCreateRequest"];
}

export function teamDefaultsToWire(
  defaults: TeamDefaultsInput,
): Wire["PatchedTeamDefaultsRequest"] {
  return renamed(defaults, TEAM_FIELDS, "defaults") as Wire["PatchedTeamDefaultsRequest"];
}

export function flowControlLimitsToWire(
  limits: FlowControlLimits,
): Wire["FlowControlLimitsRequest"] {
  return renamed(limits, FLOW_CONTROL_FIELDS, "limits") as Wire["FlowControlLimitsRequest"];
}

/** The list's query: filters renamed, instants formatted, metadata as `key=value` pairs. */
export function jobFiltersToWire(filters: JobFilters): JobQuery {
  const query = renamed(filters, JOB_FILTERS, "filters");
  const metadata = query.metadata as Record<string, string> | undefined;
  if (metadata !== undefined) {
    if (typeof metadata !== "object" || metadata === null) {
      throw new TypeError("filters: metadata must be an object of labels");
    }
    query.metadata = Object.entries(metadata).map(([key, value]) => `${key}=${value}`);
  }
  return query as JobQuery;
}
