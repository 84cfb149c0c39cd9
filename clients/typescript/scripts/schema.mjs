// The API's OpenAPI schema as the TypeScript client sees it, and the types made from it.
//
//   node scripts/schema.mjs update [URL]   refresh openapi.json and src/generated/openapi.ts
//   node scripts/schema.mjs check [URL]    exit 1 if either differs from the server's schema
//
// Without URL the schema comes from `manage.py spectacular` of this checkout (the Python
// of ../../.venv, or SENDLATER_PYTHON). The snapshot keeps what types are made of
// (paths, parameters, bodies, fields, required, nullability, formats, enums) and drops
// what types cannot hold or what moves with the day or the deployment: descriptions and
// examples, patterns (the due_at pattern names the horizon's last date) and bounds (the
// horizon, in expires_after_seconds' maximum, is a setting), the registered handler names
// and the time zones of the machine's tz database.
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import openapiTS, { astToString } from "openapi-typescript";
import ts from "typescript";

export const PACKAGE_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const REPO_ROOT = resolve(PACKAGE_ROOT, "../..");
export const SNAPSHOT = join(PACKAGE_ROOT, "openapi.json");
export const GENERATED = join(PACKAGE_ROOT, "src/generated/openapi.ts");

const DROPPED_KEYS = new Set([
  ...["description", "summary", "examples", "example", "links"],
  ...["pattern", "minimum", "maximum", "minLength", "maxLength"],
  ...["minItems", "maxItems", "minProperties", "maxProperties"],
]);
// Names a deployment chooses (SENDLATER_HANDLER_MODULES) or its tz database holds.
const DEPLOYMENT_ENUMS = new Set(["handler", "timezone"]);

// Maps whose keys are names (a field called "description" is a field, not a comment).
const NAMED_MAPS = new Set(["properties", "schemas", "paths", "responses", "headers", "content"]);

function normalized(value, inNamedMap = false) {
  if (Array.isArray(value)) return value.map((item) => normalized(item));
  if (value === null || typeof value !== "object") return value;
  const out = {};
  for (const name of Object.keys(value).sort()) {
    if (!inNamedMap && DROPPED_KEYS.has(name)) continue;
    out[name] = normalized(value[name], !inNamedMap && NAMED_MAPS.has(name));
  }
  return out;
}

/** The schema with what varies by day and deployment removed, keys sorted. */
export function normalize(schema) {
  const copy = structuredClone(schema);
  const schemas = copy.components?.schemas ?? {};
  if (schemas.TimezoneEnum) schemas.TimezoneEnum = { type: "string" };
  const walk = (node) => {
    if (Array.isArray(node)) return node.forEach(walk);
    if (node === null || typeof node !== "object") return;
    for (const [name, child] of Object.entries(node)) {
      if (name === "properties" && child && typeof child === "object") {
        for (const [prop, propSchema] of Object.entries(child)) {
          if (DEPLOYMENT_ENUMS.has(prop) && propSchema && typeof propSchema === "object") {
            delete propSchema.enum;
          }
        }
      }
      walk(child);
    }
  };
  walk(copy);
  return normalized(copy);
}

/** The server's schema: from URL (its /api/schema/), else from this checkout's manage.py. */
export async function fetchSchema(url) {
  if (url) {
    const target = new URL(url);
    target.searchParams.set("format", "json");
    // A kept-alive connection the server closes as it is reused fails a try: try again.
    for (let attempt = 1; ; attempt += 1) {
      try {
        const response = await fetch(target);
        if (!response.ok) throw new Error(`GET ${target} answered ${response.status}`);
        return await response.json();
      } catch (error) {
        if (attempt === 3) throw error;
        await new Promise((done) => setTimeout(done, 500));
      }
    }
  }
  const python = process.env.SENDLATER_PYTHON || join(REPO_ROOT, ".venv/bin/python");
  const out = execFileSync(
    python,
    [join(REPO_ROOT, "manage.py"), "spectacular", "--format", "openapi-json"],
    {
      cwd: REPO_ROOT,
      env: {
        SECRET_KEY: "schema-only-not-a-secret",
        SENDLATER_ENCRYPTION_KEYS: "c2NoZW1hLW9ubHktbm90LWEtc2VjcmV0LXh4eHh4eHg=",
        ...process.env,
      },
      maxBuffer: 64 * 1024 * 1024,
    },
  );
  return JSON.parse(out.toString("utf8"));
}

export function snapshotText(schema) {
  return `${JSON.stringify(normalize(schema), null, 2)}\n`;
}

// A combinator whose members only name required fields ("callback_url or handler") is
// a rule on presence that openapi-typescript turns into `unknown`, erasing the whole
// body's type. The client states those rules in its own input types (unions), so the
// generated types leave them out; the snapshot keeps them.
const COMBINATORS = ["anyOf", "oneOf", "allOf", "not"];
function presenceRule(node) {
  if (node === null || typeof node !== "object" || Array.isArray(node)) return false;
  const keys = Object.keys(node);
  if (keys.length === 1 && keys[0] === "required") return true;
  return keys.every((key) => COMBINATORS.includes(key) && presenceRules(node[key]));
}
function presenceRules(value) {
  return Array.isArray(value) ? value.every(presenceRule) : presenceRule(value);
}
function withoutPresenceRules(node) {
  if (Array.isArray(node)) return node.map(withoutPresenceRules);
  if (node === null || typeof node !== "object") return node;
  const out = {};
  for (const [key, value] of Object.entries(node)) {
    if (COMBINATORS.includes(key) && presenceRules(value)) continue;
    out[key] = withoutPresenceRules(value);
  }
  return out;
}

/** TypeScript declarations of a normalized schema (openapi-typescript). */
export async function typesText(normalizedSchema) {
  const ast = await openapiTS(withoutPresenceRules(normalizedSchema), {
    alphabetize: true,
    // The schema's recursive JsonValue, written as an interface member, refers to itself
    // (TS2502); a top-level alias may.
    transform: (_schema, { path }) =>
      path === "#/components/schemas/JsonValue"
        ? ts.factory.createTypeReferenceNode("JsonValue")
        : undefined,
  });
  return [
    "// Generated by openapi-typescript from openapi.json: `npm run schema:update`. Do not edit.",
    "export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };",
    astToString(ast),
  ].join("\n");
}

/** What differs between the server's schema and the committed snapshot and types. */
export async function schemaDrift(schema) {
  const problems = [];
  const live = snapshotText(schema);
  const committed = readFileSync(SNAPSHOT, "utf8");
  if (live !== committed)
    problems.push(
      `openapi.json differs from the server's schema:\n${firstDifference(committed, live)}`,
    );
  const types = await typesText(JSON.parse(committed));
  if (types !== readFileSync(GENERATED, "utf8")) {
    problems.push("src/generated/openapi.ts is not what openapi-typescript makes of openapi.json");
  }
  return problems;
}

function firstDifference(before, after) {
  const a = before.split("\n");
  const b = after.split("\n");
  const at = a.findIndex((line, i) => line !== b[i]);
  const line = at === -1 ? a.length : at;
  return [
    `  first difference at line ${line + 1}:`,
    `  snapshot: ${a[line] ?? "(end)"}`,
    `  server:   ${b[line] ?? "(end)"}`,
    "  run `npm run schema:update` and update the client's types if the API changed",
  ].join("\n");
}

async function main([command, url]) {
  const schema = await fetchSchema(url);
  if (command === "update") {
    const text = snapshotText(schema);
    writeFileSync(SNAPSHOT, text);
    writeFileSync(GENERATED, await typesText(JSON.parse(text)));
    console.log(`wrote ${SNAPSHOT} and ${GENERATED}`);
  } else if (command === "check") {
    const problems = await schemaDrift(schema);
    for (const problem of problems) console.error(problem);
    process.exitCode = problems.length ? 1 : 0;
  } else {
    console.error("usage: node scripts/schema.mjs update|check [SCHEMA_URL]");
    process.exitCode = 2;
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await main(process.argv.slice(2));
