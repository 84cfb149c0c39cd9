// The recurring-schedule endpoints (docs/schedules.md), each one Call builder.
import { type Call, call } from "./call.js";
import { type ScheduleChanges, type ScheduleInput, scheduleToWire } from "./inputs.js";
import type { Page } from "./jobcalls.js";
import { type Schedule, scheduleFromWire } from "./models.js";

export function create(schedule: ScheduleInput): Call<Schedule> {
  return call("post", "/api/v1/schedules", {
    body: scheduleToWire(schedule),
    parse: scheduleFromWire,
  });
}

export function get(id: string): Call<Schedule> {
  return call("get", "/api/v1/schedules/{schedule_id}", {
    path: { schedule_id: id },
    parse: scheduleFromWire,
  });
}

export function listPage(limit?: number, cursor?: string | null): Call<Page<Schedule>> {
  return call("get", "/api/v1/schedules", {
    query: { limit, cursor: cursor ?? undefined },
    parse: (data) => ({
      results: data.results.map(scheduleFromWire),
      nextCursor: data.next_cursor,
    }),
  });
}

export function update(id: string, changes: ScheduleChanges): Call<Schedule> {
  return call("patch", "/api/v1/schedules/{schedule_id}", {
    path: { schedule_id: id },
    body: scheduleToWire(changes, "changes"),
    parse: scheduleFromWire,
  });
}

export function remove(id: string): Call<void> {
  return call("delete", "/api/v1/schedules/{schedule_id}", {
    path: { schedule_id: id },
    parse: () => undefined,
  });
}

export function pause(id: string): Call<Schedule> {
  return call("post", "/api/v1/schedules/{schedule_id}/pause", {
    path: { schedule_id: id },
    parse: scheduleFromWire,
  });
}

export function resume(id: string): Call<Schedule> {
  return call("post", "/api/v1/schedules/{schedule_id}/resume", {
    path: { schedule_id: id },
    parse: scheduleFromWire,
  });
}

export function occurrences(id: string, count?: number): Call<Date[]> {
  return call("get", "/api/v1/schedules/{schedule_id}/occurrences", {
    path: { schedule_id: id },
    query: { count },
    parse: (data) => data.occurrences.map((instant) => new Date(instant)),
  });
}
