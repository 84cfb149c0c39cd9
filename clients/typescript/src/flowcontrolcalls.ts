// The flow-control endpoints, each one Call builder. Keys are escaped in the path.
import { type Call, call } from "./call.js";
import { type FlowControlLimits, flowControlLimitsToWire } from "./inputs.js";
import type { Page } from "./jobcalls.js";
import { type FlowControl, flowControlFromWire } from "./models.js";

export function set(key: string, limits: FlowControlLimits): Call<FlowControl> {
  return call("put", "/api/v1/flow-controls/{key}", {
    path: { key },
    body: flowControlLimitsToWire(limits),
    parse: flowControlFromWire,
  });
}

export function get(key: string): Call<FlowControl> {
  return call("get", "/api/v1/flow-controls/{key}", { path: { key }, parse: flowControlFromWire });
}

export function listPage(limit?: number, cursor?: string | null): Call<Page<FlowControl>> {
  return call("get", "/api/v1/flow-controls", {
    query: { limit, cursor: cursor ?? undefined },
    parse: (data) => ({
      results: data.results.map(flowControlFromWire),
      nextCursor: data.next_cursor,
    }),
  });
}

export function remove(key: string): Call<void> {
  return call("delete", "/api/v1/flow-controls/{key}", { path: { key }, parse: () => undefined });
}

export function pause(key: string): Call<FlowControl> {
  return call("post", "/api/v1/flow-controls/{key}/pause", {
    path: { key },
    parse: flowControlFromWire,
  });
}

export function resume(key: string): Call<FlowControl> {
  return call("post", "/api/v1/flow-controls/{key}/resume", {
    path: { key },
    parse: flowControlFromWire,
  });
}
