// The client's types are tied to the schema's: a field the API adds, drops or makes
// nullable fails the build (tsc), naming the field.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";

import { PACKAGE_ROOT } from "./support/service.js";

const run = promisify(execFile);
const GENERATED = "src/generated/openapi.ts";

/** tsc's complaints about the package's sources with the generated types edited by `edit`. */
async function compileWith(edit: (types: string) => string): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), "sendlater-ts-drift-"));
  try {
    cpSync(join(PACKAGE_ROOT, "src"), join(dir, "src"), { recursive: true });
    cpSync(join(PACKAGE_ROOT, "tsconfig.json"), join(dir, "tsconfig.json"));
    const types = readFileSync(join(dir, GENERATED), "utf8");
    const edited = edit(types);
    assert.notEqual(edited, types, "the edit changed nothing");
    writeFileSync(join(dir, GENERATED), edited);
    const tsc = join(PACKAGE_ROOT, "node_modules/typescript/bin/tsc");
    const args = [
      tsc,
      "-p",
      "tsconfig.json",
      "--noEmit",
      "--typeRoots",
      join(PACKAGE_ROOT, "node_modules/@types"),
    ];
    try {
      await run(process.execPath, args, { cwd: dir });
      return "";
    } catch (error) {
      return String((error as { stdout?: string }).stdout);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test("the sources compile against the committed types", async () => {
  assert.equal(await compileWith((t) => `${t}\n`), "");
});

test("a field the API adds to Job fails the build, named", async () => {
  const out = await compileWith((t) =>
    t.replace(/(        Job: \{\n)/, "$1            retention_days: number;\n"),
  );
  assert.match(out, /onlyInSchema: "retentionDays"/);
});

test("a request field the API adds fails the build, named", async () => {
  const out = await compileWith((t) =>
    t.replace(/(        JobCreateRequest: \{\n)/, "$1            priority?: number;\n"),
  );
  assert.match(out, /onlyInSchema: "priority"/);
});

test("a field the API drops or makes nullable fails the build", async () => {
  const dropped = await compileWith((t) =>
    t.replace(/(        FlowControl: \{[^}]*?)\n\s+in_flight: number;/, "$1"),
  );
  assert.match(dropped, /in_flight|inFlight/);
  const nullable = await compileWith((t) =>
    t.replace(/(        Job: \{[\s\S]*?)created_at: string;/, "$1created_at: string | null;"),
  );
  assert.match(nullable, /Type 'Date \| null' is not assignable to type 'Date'/);
});
