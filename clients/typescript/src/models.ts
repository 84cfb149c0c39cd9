// What the API answers, in camelCase with Dates, built from the schema's wire types.
import type { Wire } from "./call.js";
import type { Assert, CamelKeys, SameNames } from "./schemacheck.js";

export type JobStatus = Wire["StatusEnum"];
export type AttemptResult = Wire["ResultEnum"];
export type MissedPolicy = Wire["MissedEnum"];
/** Any JSON value. */
export type Json = Wire["JsonValue"];

export interface Job {
  id: string;
  status: JobStatus;
  /** The effective due time (inside the window, if any). */
  dueAt: Date;
  /** Start of the bucket the job is stored in. */
  bucket: Date;
  shard: number;
  attempts: number;
  callbackUrl: string | null;
  handler: string | null;
  payload: unknown;
  metadata: Record<string, string>;
  idempotencyKey: string | null;
  windowSeconds: number;
  expiresAt: Date | null;
  deliveredAt: Date | null;
  lastError: string;
  createdAt: Date;
  updatedAt: Date;
  /** The recurring schedule this job is an occurrence of. */
  scheduleId: string | null;
  scheduledFor: Date | null;
  flowControlKey: string | null;
}

/** A bulk answer's job: compact (no payload); `created` is false for an idempotent replay. */
export interface JobSummary {
  id: string;
  status: JobStatus;
  dueAt: Date;
  bucket: Date;
  shard: number;
  created: boolean;
}

export interface Attempt {
  attempt: number;
  startedAt: Date;
  durationMs: number | null;
  result: AttemptResult;
  /** HTTP status of a webhook delivery. */
  statusCode: number | null;
  error: string;
}

export interface Schedule {
  id: string;
  cron: string | null;
  everySeconds: number | null;
  timezone: string;
  callbackUrl: string | null;
  handler: string | null;
  payload: unknown;
  metadata: Record<string, string>;
  windowSeconds: number;
  expiresAfterSeconds: number | null;
  startAt: Date | null;
  endAt: Date | null;
  missed: MissedPolicy;
  flowControlKey: string | null;
  paused: boolean;
  /** The next five instants from now; empty after endAt. */
  nextOccurrences: Date[];
  createdAt: Date;
  updatedAt: Date;
}

/** A flow-control key's limits and live state. */
export interface FlowControl {
  key: string;
  /** Deliveries per period (null: no rate). */
  rate: number | null;
  periodSeconds: number;
  /** Deliveries in flight at once (null: unbounded). */
  parallelism: number | null;
  paused: boolean;
  /** Due jobs held back by the key. */
  waiting: number;
  inFlight: number;
  deliveredInPeriod: number;
  createdAt: Date;
  updatedAt: Date;
}

export type _JobFields = Assert<SameNames<keyof Job, CamelKeys<Wire["Job"]>>>;
export type _JobSummaryFields = Assert<SameNames<keyof JobSummary, CamelKeys<Wire["JobSummary"]>>>;
export type _AttemptFields = Assert<SameNames<keyof Attempt, CamelKeys<Wire["DeliveryAttempt"]>>>;
export type _ScheduleFields = Assert<SameNames<keyof Schedule, CamelKeys<Wire["Schedule"]>>>;
export type _FlowControlFields = Assert<
  SameNames<keyof FlowControl, CamelKeys<Wire["FlowControl"]>>
>;

function date(value: string): Date;
function date(value: string | null): Date | null;
function date(value: string | null): Date | null {
  return value === null ? null : new Date(value);
}

export function jobFromWire(w: Wire["Job"]): Job {
  return {
    id: w.id,
    status: w.status,
    dueAt: date(w.due_at),
    bucket: date(w.bucket),
    shard: w.shard,
    attempts: w.attempts,
    callbackUrl: w.callback_url,
    handler: w.handler,
    payload: w.payload,
    metadata: w.metadata,
    idempotencyKey: w.idempotency_key,
    windowSeconds: w.window_seconds,
    expiresAt: date(w.expires_at),
    deliveredAt: date(w.delivered_at),
    lastError: w.last_error,
    createdAt: date(w.created_at),
    updatedAt: date(w.updated_at),
    scheduleId: w.schedule_id,
    scheduledFor: date(w.scheduled_for),
    flowControlKey: w.flow_control_key,
  };
}

export function jobSummaryFromWire(w: Wire["JobSummary"]): JobSummary {
  return {
    id: w.id,
    status: w.status,
    dueAt: date(w.due_at),
    bucket: date(w.bucket),
    shard: w.shard,
    created: w.created,
  };
}

export function attemptFromWire(w: Wire["DeliveryAttempt"]): Attempt {
  return {
    attempt: w.attempt,
    startedAt: date(w.started_at),
    durationMs: w.duration_ms,
    result: w.result,
    statusCode: w.status_code,
    error: w.error,
  };
}

export function scheduleFromWire(w: Wire["Schedule"]): Schedule {
  return {
    id: w.id,
    cron: w.cron,
    everySeconds: w.every_seconds,
    timezone: w.timezone,
    callbackUrl: w.callback_url,
    handler: w.handler,
    payload: w.payload,
    metadata: w.metadata,
    windowSeconds: w.window_seconds,
    expiresAfterSeconds: w.expires_after_seconds,
    startAt: date(w.start_at),
    endAt: date(w.end_at),
    missed: w.missed,
    flowControlKey: w.flow_control_key,
    paused: w.paused,
    nextOccurrences: w.next_occurrences.map((instant) => date(instant)),
    createdAt: date(w.created_at),
    updatedAt: date(w.updated_at),
  };
}

export function flowControlFromWire(w: Wire["FlowControl"]): FlowControl {
  return {
    key: w.key,
    rate: w.rate,
    periodSeconds: w.period_seconds,
    parallelism: w.parallelism,
    paused: w.paused,
    waiting: w.waiting,
    inFlight: w.in_flight,
    deliveredInPeriod: w.delivered_in_period,
    createdAt: date(w.created_at),
    updatedAt: date(w.updated_at),
  };
}
