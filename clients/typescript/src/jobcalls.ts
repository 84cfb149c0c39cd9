// The job endpoints, each one Call builder (the client only sends them).
import { type Call, call } from "./call.js";
import {
  type Instant,
  type JobFilters,
  type JobInput,
  type Payload,
  instant,
  jobFiltersToWire,
  jobToWire,
} from "./inputs.js";
import {
  type Attempt,
  type Job,
  type JobSummary,
  attemptFromWire,
  jobFromWire,
  jobSummaryFromWire,
} from "./models.js";

/** The API's limit per POST /api/v1/jobs/bulk. */
export const BULK_MAX_JOBS = 1000;

export interface Page<T> {
  results: T[];
  /** Pass as `cursor` for the next page; null on the last page. */
  nextCursor: string | null;
}

export function schedule(job: JobInput): Call<Job> {
  return call("post", "/api/v1/jobs", { body: jobToWire(job), parse: jobFromWire });
}

/** Bulk calls of up to BULK_MAX_JOBS jobs, in input order, each job with its idempotency key. */
export function* scheduleChunks(jobs: Iterable<JobInput>): Generator<Call<JobSummary[]>> {
  let chunk: ReturnType<typeof jobToWire>[] = [];
  let index = 0;
  for (const job of jobs) {
    chunk.push(jobToWire(job, `jobs[${index}]`));
    index += 1;
    if (chunk.length === BULK_MAX_JOBS) {
      yield bulk(chunk);
      chunk = [];
    }
  }
  if (chunk.length > 0) yield bulk(chunk);
}

function bulk(jobs: ReturnType<typeof jobToWire>[]): Call<JobSummary[]> {
  return call("post", "/api/v1/jobs/bulk", {
    body: { jobs },
    parse: (data) => data.jobs.map(jobSummaryFromWire),
  });
}

export function get(id: string): Call<Job> {
  return call("get", "/api/v1/jobs/{job_id}", { path: { job_id: id }, parse: jobFromWire });
}

export function listPage(filters: JobFilters = {}, cursor?: string | null): Call<Page<Job>> {
  return call("get", "/api/v1/jobs", {
    query: { ...jobFiltersToWire(filters), cursor: cursor ?? undefined },
    parse: (data) => ({ results: data.results.map(jobFromWire), nextCursor: data.next_cursor }),
  });
}

export function reschedule(id: string, dueAt: Instant, payload?: Payload): Call<Job> {
  return call("patch", "/api/v1/jobs/{job_id}", {
    path: { job_id: id },
    body: { due_at: instant(dueAt, "dueAt"), ...(payload === undefined ? {} : { payload }) },
    parse: jobFromWire,
  });
}

export function cancel(id: string): Call<Job> {
  return call("post", "/api/v1/jobs/{job_id}/cancel", { path: { job_id: id }, parse: jobFromWire });
}

export interface CancelManyInput {
  /** 1 to 1,000 job ids. */
  ids?: readonly string[];
  /** Every pair must match. */
  metadata?: Record<string, string>;
}

export function cancelMany({ ids, metadata }: CancelManyInput): Call<number> {
  if (ids === undefined && metadata === undefined) {
    throw new TypeError("cancelMany needs ids, metadata or both");
  }
  return call("post", "/api/v1/jobs/cancel", {
    body: {
      ...(ids === undefined ? {} : { ids: [...ids] }),
      ...(metadata === undefined ? {} : { metadata }),
    },
    parse: (data) => data.canceled,
  });
}

export function attempts(id: string): Call<Attempt[]> {
  return call("get", "/api/v1/jobs/{job_id}/attempts", {
    path: { job_id: id },
    parse: (data) => data.attempts.map(attemptFromWire),
  });
}

export function requeue(id: string): Call<Job> {
  return call("post", "/api/v1/jobs/{job_id}/requeue", {
    path: { job_id: id },
    parse: jobFromWire,
  });
}
