// What the API answers, in camelCase with Dates, built from the schema's wire types.
import type { Wire } from "./call.js";
import type { Assert, CamelKeys, SameNames } from "./schemacheck.js";

export type JobStatus = Wire["StatusEnum"];
export type AttemptResult = Wire["ResultEnum"];
export type MissedPolicy = Wire["MissedEnum"];
export type HttpMethod = Wire["MethodEnum"];
export type BodyFormat = Wire["FormatEnum"];
/** Any JSON value. */
export type Json = Wire["JsonValue"];

/** A retry policy; what it leaves null falls to the team's default, then the service's. */
export interface JobRetry {
  maxAttempts: number | null;
  minBackoffSeconds: number | null;
  maxBackoffSeconds: number | null;
}

/** A successful response, kept where the job asked (`captureResponse`). */
export interface KeptResponse {
  statusCode: number;
  contentType: string | null;
  bodyExcerpt: string;
  durationMs: number | null;
}

/** What a job (or each occurrence of a schedule) sends, and who hears its outcome. */
export interface Delivery {
  method: HttpMethod;
  /** Header names; every value reads "********" (kept encrypted, never returned). */
  headers: Record<string, string>;
  format: BodyFormat;
  contentType: string | null;
  timeoutSeconds: number | null;
  retry: JobRetry | null;
  onSuccessUrl: string | null;
  onFailureUrl: string | null;
  captureResponse: boolean;
}

/** A fanned-out topic job's delivery to one endpoint: a job of its own. */
export interface TopicDelivery {
  endpoint: string;
  jobId: string;
  /** null: pruned by retention. */
  status: JobStatus | null;
  attempts: number;
  lastError: string;
  deliveredAt: Date | null;
}

export interface Job extends Delivery {
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
  topic: string | null;
  /** Each endpoint's delivery of a fanned-out topic job (null: none yet, or no topic). */
  deliveries: TopicDelivery[] | null;
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
  /** The callback jobs its outcome made: event (job.delivered, ...) -> job id. */
  callbacks: Record<string, string>;
  response: KeptResponse | null;
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

export interface Schedule extends Delivery {
  id: string;
  cron: string | null;
  everySeconds: number | null;
  timezone: string;
  callbackUrl: string | null;
  handler: string | null;
  topic: string | null;
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

/** The team's delivery defaults, and the service's retry policy under them. */
export interface TeamDefaults {
  slug: string;
  name: string;
  retry: JobRetry | null;
  defaultOnFailureUrl: string | null;
  serviceRetry: JobRetry;
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
export type _TeamFields = Assert<SameNames<keyof TeamDefaults, CamelKeys<Wire["Team"]>>>;
export type _RetryFields = Assert<SameNames<keyof JobRetry, CamelKeys<Wire["RetryPolicy"]>>>;
export type _KeptResponseFields = Assert<
  SameNames<keyof KeptResponse, CamelKeys<Wire["KeptResponse"]>>
>;
export type _FlowControlFields = Assert<
  SameNames<keyof FlowControl, CamelKeys<Wire["FlowControl"]>>
>;

export function retryFromWire(w: Wire["RetryPolicy"] | null): JobRetry | null {
  if (w === null) return null;
  return {
    maxAttempts: w.max_attempts ?? null,
    minBackoffSeconds: w.min_backoff_seconds ?? null,
    maxBackoffSeconds: w.max_backoff_seconds ?? null,
  };
}

function deliveryFromWire(w: Wire["Job"] | Wire["Schedule"]): Delivery {
  return {
    method: w.method,
    headers: w.headers,
    format: w.format,
    contentType: w.content_type,
    timeoutSeconds: w.timeout_seconds,
    retry: retryFromWire(w.retry),
    onSuccessUrl: w.on_success_url,
    onFailureUrl: w.on_failure_url,
    captureResponse: w.capture_response,
  };
}

export function teamFromWire(w: Wire["Team"]): TeamDefaults {
  return {
    slug: w.slug,
    name: w.name,
    retry: retryFromWire(w.retry),
    defaultOnFailureUrl: w.default_on_failure_url,
    serviceRetry: retryFromWire(w.service_retry)!,
  };
}

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
    topic: w.topic,
    deliveries:
      w.deliveries === null
        ? null
        : w.deliveries.map((d) => ({
            endpoint: d.endpoint,
            jobId: d.job_id,
            status: d.status,
            attempts: d.attempts,
            lastError: d.last_error,
            deliveredAt: date(d.delivered_at),
          })),
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
    ...deliveryFromWire(w),
    callbacks: w.callbacks,
    response:
      w.response === null
        ? null
        : {
            statusCode: w.response.status_code,
            contentType: w.response.content_type,
            bodyExcerpt: w.response.body_excerpt,
            durationMs: w.response.duration_ms,
          },
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
    topic: w.topic,
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
    ...deliveryFromWire(w),
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
