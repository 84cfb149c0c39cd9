// The client: sends Calls with retries, one short method per endpoint.
import type { Call } from "./call.js";
import { SendlaterError, TransportError, errorFor } from "./errors.js";
import * as flowControls from "./flowcontrolcalls.js";
import type {
  FlowControlLimits,
  Instant,
  JobFilters,
  JobInput,
  Payload,
  ScheduleChanges,
  ScheduleInput,
  TeamDefaultsInput,
} from "./inputs.js";
import * as jobs from "./jobcalls.js";
import type { CancelManyInput, Page } from "./jobcalls.js";
import type { Attempt, FlowControl, Job, JobSummary, Schedule, TeamDefaults } from "./models.js";
import { RETRY_STATUSES, RetryPolicy, type RetryOptions, retryAfterOf } from "./retry.js";
import * as schedules from "./schedulecalls.js";
import * as team from "./teamcalls.js";

export const DEFAULT_TIMEOUT_SECONDS = 10;
const USER_AGENT = "sendlater-client-js/0.1.0";

export interface ClientOptions {
  /** Where the API is served, e.g. "https://sendlater.example.com". */
  baseUrl: string;
  /** A team API key (`sl_...`). */
  apiKey: string;
  /** Per try (default 10). */
  timeoutSeconds?: number;
  retry?: RetryPolicy | RetryOptions;
  /** A fetch of your own (a proxy agent, instrumentation); default the global fetch. */
  fetch?: typeof fetch;
}

export class Client {
  readonly baseUrl: string;
  readonly retry: RetryPolicy;
  readonly #apiKey: string;
  readonly #timeoutMs: number;
  readonly #fetch: typeof fetch;

  constructor(options: ClientOptions) {
    const { baseUrl, apiKey, timeoutSeconds = DEFAULT_TIMEOUT_SECONDS } = options ?? {};
    if (typeof baseUrl !== "string" || !/^https?:\/\//.test(baseUrl)) {
      throw new TypeError(`baseUrl must be an http(s) URL, not ${JSON.stringify(baseUrl)}`);
    }
    if (typeof apiKey !== "string" || apiKey === "") {
      throw new TypeError("apiKey must be a non-empty string");
    }
    if (!(timeoutSeconds > 0)) throw new RangeError("timeoutSeconds must be positive");
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.#apiKey = apiKey;
    this.#timeoutMs = timeoutSeconds * 1000;
    this.retry =
      options.retry instanceof RetryPolicy ? options.retry : new RetryPolicy(options.retry);
    this.#fetch = options.fetch ?? globalThis.fetch;
  }

  /**
   * Sends one call; retries lost connections, timeouts, 429 and 502/503/504 with backoff
   * (Retry-After honoured), then throws the typed error of the last answer.
   */
  async request<T>(call: Call<T>): Promise<T> {
    const url = new URL(this.baseUrl + call.path);
    for (const [name, value] of call.query) url.searchParams.append(name, value);
    const init: RequestInit = {
      method: call.method,
      headers: {
        Authorization: `Bearer ${this.#apiKey}`,
        Accept: "application/json",
        "User-Agent": USER_AGENT,
        ...(call.body === undefined ? {} : { "Content-Type": "application/json" }),
      },
      body: call.body === undefined ? undefined : JSON.stringify(call.body),
    };
    for (let attempt = 1; ; attempt += 1) {
      const last = attempt >= this.retry.attempts;
      let response: Response;
      let text: string;
      try {
        response = await this.#fetch(url, {
          ...init,
          signal: AbortSignal.timeout(this.#timeoutMs),
        });
        text = await response.text();
      } catch (error) {
        if (last) throw new TransportError(transportMessage(error, call), { cause: error });
        await sleep(this.retry.delaySeconds(attempt, null));
        continue;
      }
      if (RETRY_STATUSES.has(response.status) && !last) {
        await sleep(this.retry.delaySeconds(attempt, retryAfterOf(response.headers)));
        continue;
      }
      const body = parseBody(text);
      if (response.status >= 400) {
        throw errorFor(response.status, body, retryAfterOf(response.headers));
      }
      if (body === NOT_JSON) {
        throw new SendlaterError(`${call.method} ${call.path}: the answer is not JSON`, {
          status: response.status,
          body: text,
        });
      }
      return call.parse(body);
    }
  }

  // Jobs

  /** Schedules one job; without an idempotencyKey one is generated, so a retry never doubles it. */
  async schedule(job: JobInput): Promise<Job> {
    return this.request(jobs.schedule(job));
  }

  /** Schedules any number of jobs, 1,000 a request, in input order (answers are compact). */
  async scheduleMany(input: Iterable<JobInput>): Promise<JobSummary[]> {
    const out: JobSummary[] = [];
    for (const call of jobs.scheduleChunks(input)) out.push(...(await this.request(call)));
    return out;
  }

  async get(id: string): Promise<Job> {
    return this.request(jobs.get(id));
  }

  /** Every job matching `filters`, page after page, ordered by due time then id. */
  list(filters: JobFilters = {}): AsyncIterableIterator<Job> {
    jobs.listPage(filters); // a bad filter throws here, not at the first next()
    return this.#pages((cursor) => jobs.listPage(filters, cursor));
  }

  /** One page of the list; pass its nextCursor back for the next. */
  async listPage(filters: JobFilters = {}, cursor?: string | null): Promise<Page<Job>> {
    return this.request(jobs.listPage(filters, cursor));
  }

  async reschedule(id: string, dueAt: Instant, options: { payload?: Payload } = {}): Promise<Job> {
    return this.request(jobs.reschedule(id, dueAt, options.payload));
  }

  async cancel(id: string): Promise<Job> {
    return this.request(jobs.cancel(id));
  }

  /** Cancels the pending jobs matching ids and/or metadata; answers how many. */
  async cancelMany(input: CancelManyInput): Promise<number> {
    return this.request(jobs.cancelMany(input));
  }

  async attempts(id: string): Promise<Attempt[]> {
    return this.request(jobs.attempts(id));
  }

  /** A dead or expired job gets a new attempt series, due now. */
  async requeue(id: string): Promise<Job> {
    return this.request(jobs.requeue(id));
  }

  // Recurring schedules

  async createSchedule(schedule: ScheduleInput): Promise<Schedule> {
    return this.request(schedules.create(schedule));
  }

  async getSchedule(id: string): Promise<Schedule> {
    return this.request(schedules.get(id));
  }

  listSchedules(options: { limit?: number } = {}): AsyncIterableIterator<Schedule> {
    return this.#pages((cursor) => schedules.listPage(options.limit, cursor));
  }

  /** Changes the given fields; the schedule's future occurrences are re-planned. */
  async updateSchedule(id: string, changes: ScheduleChanges): Promise<Schedule> {
    return this.request(schedules.update(id, changes));
  }

  async deleteSchedule(id: string): Promise<void> {
    return this.request(schedules.remove(id));
  }

  async pauseSchedule(id: string): Promise<Schedule> {
    return this.request(schedules.pause(id));
  }

  async resumeSchedule(id: string): Promise<Schedule> {
    return this.request(schedules.resume(id));
  }

  /** The team's retry defaults and default failure callback (and the service's policy). */
  async getTeam(): Promise<TeamDefaults> {
    return this.request(team.get());
  }

  /** Set the team's delivery defaults: what is given replaces, null clears. */
  async updateTeam(defaults: TeamDefaultsInput): Promise<TeamDefaults> {
    return this.request(team.update(defaults));
  }

  /** The next `count` instants (1 to 100, default 10) of the schedule, planned or not. */
  async scheduleOccurrences(id: string, count?: number): Promise<Date[]> {
    return this.request(schedules.occurrences(id, count));
  }

  // Flow control

  async setFlowControl(key: string, limits: FlowControlLimits): Promise<FlowControl> {
    return this.request(flowControls.set(key, limits));
  }

  async getFlowControl(key: string): Promise<FlowControl> {
    return this.request(flowControls.get(key));
  }

  listFlowControls(options: { limit?: number } = {}): AsyncIterableIterator<FlowControl> {
    return this.#pages((cursor) => flowControls.listPage(options.limit, cursor));
  }

  async deleteFlowControl(key: string): Promise<void> {
    return this.request(flowControls.remove(key));
  }

  async pauseFlowControl(key: string): Promise<FlowControl> {
    return this.request(flowControls.pause(key));
  }

  async resumeFlowControl(key: string): Promise<FlowControl> {
    return this.request(flowControls.resume(key));
  }

  async *#pages<T>(page: (cursor: string | null) => Call<Page<T>>): AsyncIterableIterator<T> {
    let cursor: string | null = null;
    do {
      const { results, nextCursor }: Page<T> = await this.request(page(cursor));
      yield* results;
      cursor = nextCursor;
    } while (cursor);
  }
}

const NOT_JSON = Symbol("not JSON");

function parseBody(text: string): unknown {
  if (text === "") return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return NOT_JSON;
  }
}

function transportMessage(error: unknown, call: Call<unknown>): string {
  const reason =
    error instanceof Error
      ? error.name === "TimeoutError"
        ? "timed out"
        : `${error.message}${error.cause instanceof Error ? `: ${error.cause.message}` : ""}`
      : String(error);
  return `${call.method} ${call.path}: no answer (${reason})`;
}

function sleep(seconds: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, seconds * 1000));
}
