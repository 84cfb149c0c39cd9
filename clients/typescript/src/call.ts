// One API call described once: verb, path, query, body and how to read the answer.
// The route, the body and the answer are typed by the OpenAPI schema (generated/openapi.ts),
// so a call the schema no longer has, or a body or answer it shapes differently, does not compile.
import type { components, paths } from "./generated/openapi.js";

export type Wire = components["schemas"];
export type Verb = "get" | "put" | "post" | "patch" | "delete";
export type Route<V extends Verb> = {
  [P in keyof paths]: paths[P][V] extends object ? P : never;
}[keyof paths];

type Operation<V extends Verb, P extends Route<V>> = NonNullable<paths[P][V]>;
type Json<R> = R extends { content: { "application/json": infer B } } ? B : never;
type Responses<V extends Verb, P extends Route<V>> =
  Operation<V, P> extends { responses: infer R } ? R : never;
/** The JSON of the call's success answers (200, 201), or undefined for a 204. */
export type Answer<V extends Verb, P extends Route<V>> =
  | Json<Responses<V, P>[200 & keyof Responses<V, P>]>
  | Json<Responses<V, P>[201 & keyof Responses<V, P>]>
  | (204 extends keyof Responses<V, P> ? undefined : never);
export type Body<V extends Verb, P extends Route<V>> =
  Operation<V, P> extends {
    requestBody?: { content: { "application/json": infer B } };
  }
    ? B
    : never;
export type Query<V extends Verb, P extends Route<V>> = NonNullable<
  Operation<V, P>["parameters"]["query"]
>;
type PathParams<V extends Verb, P extends Route<V>> = NonNullable<
  Operation<V, P>["parameters"]["path"]
>;

export interface Call<T> {
  readonly method: Uppercase<Verb>;
  readonly path: string;
  readonly query: ReadonlyArray<readonly [string, string]>;
  readonly body: unknown;
  readonly parse: (data: unknown) => T;
}

export interface CallParts<V extends Verb, P extends Route<V>, T> {
  path?: PathParams<V, P>;
  query?: Query<V, P>;
  body?: Body<V, P>;
  parse: (data: Answer<V, P>) => T;
}

/** Builds a Call for `route`, typed by the schema: `call("get", "/api/v1/jobs/{job_id}", ...)`. */
export function call<V extends Verb, P extends Route<V>, T>(
  verb: V,
  route: P,
  parts: CallParts<V, P, T>,
): Call<T> {
  const params = (parts.path ?? {}) as Record<string, string>;
  // Every character of a path parameter escaped: a flow-control key may hold "?", "#", "%".
  const path = route.replace(/\{(\w+)\}/g, (_, name: string) => {
    const value: unknown = params[name];
    if (typeof value !== "string" || value === "") {
      throw new TypeError(`${name} must be a non-empty string, not ${JSON.stringify(value)}`);
    }
    return encodeURIComponent(value);
  });
  return {
    method: verb.toUpperCase() as Uppercase<V>,
    path,
    query: queryPairs((parts.query ?? {}) as Record<string, unknown>),
    body: parts.body,
    parse: parts.parse as (data: unknown) => T,
  };
}

function queryPairs(query: Record<string, unknown>): Array<[string, string]> {
  const pairs: Array<[string, string]> = [];
  for (const [name, value] of Object.entries(query)) {
    if (value === undefined || value === null) continue;
    for (const item of Array.isArray(value) ? value : [value]) pairs.push([name, String(item)]);
  }
  return pairs;
}
