// The team's delivery defaults (GET/PATCH /api/v1/team), each one Call builder.
import { type Call, call } from "./call.js";
import { type TeamDefaultsInput, teamDefaultsToWire } from "./inputs.js";
import { type TeamDefaults, teamFromWire } from "./models.js";

export function get(): Call<TeamDefaults> {
  return call("get", "/api/v1/team", { parse: teamFromWire });
}

export function update(defaults: TeamDefaultsInput): Call<TeamDefaults> {
  return call("patch", "/api/v1/team", { body: teamDefaultsToWire(defaults), parse: teamFromWire });
}
