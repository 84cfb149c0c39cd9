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
  DeliveryInput,
  FlowControlLimits,
  Instant,
  JobFilters,
  JobInput,
  JobRetryInput,
  Payload,
  ScheduleChanges,
  ScheduleInput,
  JobTarget,
  Target,
  TeamDefaultsInput,
} from "./inputs.js";
export { newIdempotencyKey } from "./inputs.js";
export { BULK_MAX_JOBS, type CancelManyInput, type Page } from "./jobcalls.js";
export type {
  Attempt,
  AttemptResult,
  BodyFormat,
  Delivery,
  FlowControl,
  HttpMethod,
  Job,
  JobStatus,
  JobRetry,
  JobSummary,
  Json,
  KeptResponse,
  MissedPolicy,
  Schedule,
  TeamDefaults,
  TopicDelivery,
} from "./models.js";
export { RETRY_STATUSES, RetryPolicy, type RetryOptions } from "./retry.js";
export { TOLERANCE_SECONDS, verify, type VerifyOptions, type WebhookHeaders } from "./verify.js";
