// `npm pack` makes a tarball that a fresh ESM project installs, imports and type-checks.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";

import { PACKAGE_ROOT, REPO_ROOT } from "./support/service.js";

// The TypeScript examples of the docs, compiled against the packed package (all but the
// Express one, whose types are not here). Names the examples take as given are declared.
const DOCS = ["docs/clients.md", "README.md", "clients/typescript/README.md"];
const GIVEN: Record<string, string> = {
  client: 'declare const client: import("@sendlater/client").Client;',
  due: "declare const due: Date;",
  rawBody: "declare const rawBody: Buffer;",
  headers: "declare const headers: Record<string, string>;",
  req: "declare const req: { headers: Record<string, string> };",
};

/** Runs tsc; its complaints (on stdout) become the failure's message. */
async function typecheck(tsc: () => Promise<unknown>): Promise<void> {
  try {
    await tsc();
  } catch (error) {
    throw new Error(`tsc: ${String((error as { stdout?: string }).stdout)}`);
  }
}

function docExamples(): string[] {
  const examples: string[] = [];
  for (const doc of DOCS) {
    const text = readFileSync(join(REPO_ROOT, doc), "utf8");
    for (const [, code] of text.matchAll(/```ts\n([\s\S]*?)```/g)) {
      if (code && !code.includes('from "express"')) examples.push(code);
    }
  }
  return examples;
}

const run = promisify(execFile);

test("the packed tarball installs into a fresh project, imports as ESM and type-checks", async () => {
  const dir = mkdtempSync(join(tmpdir(), "sendlater-ts-consumer-"));
  try {
    const packed = await run(
      "npm",
      ["pack", "--ignore-scripts", "--json", "--pack-destination", dir],
      { cwd: PACKAGE_ROOT },
    );
    const [info] = JSON.parse(packed.stdout) as Array<{
      filename: string;
      files: Array<{ path: string }>;
    }>;
    assert.ok(info);
    const files = info.files.map((f) => f.path);
    assert.ok(
      files.includes("dist/index.js") && files.includes("dist/index.d.ts"),
      files.join(", "),
    );
    assert.ok(!files.some((f) => f.startsWith("src/") || f.startsWith("test/")), files.join(", "));

    writeFileSync(
      join(dir, "package.json"),
      JSON.stringify({ name: "consumer", private: true, type: "module" }),
    );
    // No runtime dependencies: installing the tarball needs no registry.
    await run(
      "npm",
      ["install", "--offline", "--no-audit", "--no-fund", join(dir, info.filename)],
      { cwd: dir },
    );
    writeFileSync(
      join(dir, "main.ts"),
      [
        'import { Client, ValidationError, verify, type Job, type JobInput } from "@sendlater/client";',
        'const client = new Client({ baseUrl: "http://127.0.0.1:8000", apiKey: "sl_x" });',
        'const input: JobInput = { dueAt: new Date(), handler: "noop", payload: { n: 1 } };',
        "const pending: Promise<Job> = client.schedule(input);",
        "void pending.catch((e: unknown) => e instanceof ValidationError && e.fields);",
        "void verify;",
        // exactly one target: both is a type error
        "// @ts-expect-error callbackUrl and handler together",
        'const both: JobInput = { dueAt: new Date(), handler: "noop", callbackUrl: "https://x.example" };',
        "void both;",
      ].join("\n"),
    );
    const examples = docExamples();
    assert.ok(examples.length >= 5, `${examples.length} TypeScript examples in the docs`);
    const exampleFiles = examples.map((code, i) => {
      const given = Object.entries(GIVEN)
        .filter(([name]) => new RegExp(`\\b${name}\\b`).test(code))
        .filter(([name]) => !new RegExp(`const ${name}\\b`).test(code))
        .map(([, declaration]) => declaration);
      const file = `example${i}.ts`;
      writeFileSync(join(dir, file), [...given, code, "export {};"].join("\n"));
      return file;
    });
    const tsc = join(PACKAGE_ROOT, "node_modules/typescript/bin/tsc");
    await typecheck(() =>
      run(
        process.execPath,
        [
          tsc,
          "--noEmit",
          "--strict",
          "--module",
          "nodenext",
          "--moduleResolution",
          "nodenext",
          "--target",
          "es2022",
          "--types",
          "node",
          "--typeRoots",
          join(PACKAGE_ROOT, "node_modules/@types"),
          "main.ts",
          ...exampleFiles,
        ],
        { cwd: dir },
      ),
    );
    const imported = await run(
      process.execPath,
      [
        "--input-type=module",
        "-e",
        'import * as m from "@sendlater/client"; console.log(Object.keys(m).sort().join(","));',
      ],
      { cwd: dir },
    );
    assert.match(imported.stdout, /Client,.*InvalidSignatureError,.*verify/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
