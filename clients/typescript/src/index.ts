// @sendlater/client: schedule jobs over the sendlater REST API, verify the webhooks it sends.
export { Client, DEFAULT_TIMEOUT_SECONDS, type ClientOptions } from "./client.js";
export type { Call } from "./call.js";
export {
  AuthenticationError,
  ConflictError,
  InvalidSignatureError,
  NotFoundError,
  RateLimitedError,
  SendlaterError,
  TransportError,
  UnavailableError,
  ValidationError,
} from "./errors.js";
export type {
  FlowControlLimits,
  Instant,
  JobFilters,
  JobInput,
  Payload,
  ScheduleChanges,
  ScheduleInput,
  Target,
} from "./inputs.js";
export { newIdempotencyKey } from "./inputs.js";
export { BULK_MAX_JOBS, type CancelManyInput, type Page } from "./jobcalls.js";
export type {
  Attempt,
  AttemptResult,
  FlowControl,
  Job,
  JobStatus,
  JobSummary,
  Json,
  MissedPolicy,
  Schedule,
} from "./models.js";
export { RETRY_STATUSES, RetryPolicy, type RetryOptions } from "./retry.js";
export { TOLERANCE_SECONDS, verify, type VerifyOptions, type WebhookHeaders } from "./verify.js";
