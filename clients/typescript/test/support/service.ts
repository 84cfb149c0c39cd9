// The real service for the tests: a scratch database (SQLite file, or a PostgreSQL database
// beside DATABASE_URL's), migrated, a team key, and `manage.py runservice` (gunicorn and a
// poller) on a free port. Stopped (its process group) when the tests end.
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);

/** clients/typescript (tests run from .test-build/test/support). */
export const PACKAGE_ROOT = resolve(fileURLToPath(import.meta.url), "../../../..");
export const REPO_ROOT = resolve(PACKAGE_ROOT, "../..");
const PYTHON = process.env.SENDLATER_PYTHON || join(REPO_ROOT, ".venv/bin/python");
const MANAGE = join(REPO_ROOT, "manage.py");
const START_TIMEOUT_MS = 90_000;

export interface Service {
  baseUrl: string;
  apiKey: string;
  signingSecret: string;
  team: string;
  /** `manage.py shell -c code` against the service's database; its stdout. */
  shell(code: string): Promise<string>;
  stop(): Promise<void>;
}

export function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const server = createServer();
    server.once("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => done(typeof address === "object" && address ? address.port : 0));
    });
  });
}

/** A database of its own: "<name>_tsclient" on DATABASE_URL's server, or an SQLite file. */
async function scratchDatabase(): Promise<{ url: string; drop: () => Promise<void> }> {
  const given = process.env.DATABASE_URL ?? "";
  if (/^postgres(ql)?:/.test(given)) {
    const url = new URL(given);
    const name = `${url.pathname.slice(1) || "sendlater"}_tsclient`;
    if (!/^\w+$/.test(name)) throw new Error(`unexpected database name ${name}`);
    const admin = new URL(given);
    admin.pathname = "/postgres";
    const sql = async (statement: string) =>
      run(PYTHON, [
        "-c",
        "import psycopg, sys\n" +
          "with psycopg.connect(sys.argv[1], autocommit=True) as c: c.execute(sys.argv[2])",
        admin.toString(),
        statement,
      ]);
    await sql(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await sql(`CREATE DATABASE ${name}`);
    url.pathname = `/${name}`;
    return {
      url: url.toString(),
      drop: async () => void (await sql(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)),
    };
  }
  const dir = mkdtempSync(join(tmpdir(), "sendlater-ts-"));
  return {
    url: `sqlite:///${join(dir, "db.sqlite3")}`,
    drop: async () => rmSync(dir, { recursive: true, force: true }),
  };
}

export async function startService(): Promise<Service> {
  const database = await scratchDatabase();
  try {
    return await serveOn(database);
  } catch (error) {
    await database.drop(); // nothing left behind by a start that failed
    throw error;
  }
}

async function serveOn(database: { url: string; drop: () => Promise<void> }): Promise<Service> {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    DATABASE_URL: database.url,
    DJANGO_SETTINGS_MODULE: "sendlater_site.settings",
    SECRET_KEY: process.env.SECRET_KEY || "test-only-not-a-secret",
    SENDLATER_ENCRYPTION_KEYS:
      process.env.SENDLATER_ENCRYPTION_KEYS || "dGVzdC1vbmx5LW5vdC1hLXNlY3JldC14eHh4eHh4eHg=",
    SECURE_SSL_REDIRECT: "false",
    DEBUG: "false",
    ALLOWED_HOSTS: "127.0.0.1",
    SENDLATER_PARTITION_AHEAD_DAYS: "2",
    // The tests' webhook receiver listens on 127.0.0.1.
    SENDLATER_CALLBACK_ALLOWLIST: "127.0.0.1",
  };
  const manage = async (...args: string[]) =>
    (await run(PYTHON, [MANAGE, ...args], { cwd: REPO_ROOT, env, maxBuffer: 16 << 20 })).stdout;
  await manage("migrate", "--noinput", "-v", "0");
  const team = "ts-client";
  const printed = await manage("create_api_key", "--team", team);
  const apiKey = /^api_key: (\S+)$/m.exec(printed)?.[1];
  const signingSecret = /^signing_secret: (\S+)$/m.exec(printed)?.[1];
  if (!apiKey || !signingSecret) throw new Error(`create_api_key printed:\n${printed}`);

  const port = await freePort();
  const bind = `127.0.0.1:${port}`;
  const child = spawn(
    PYTHON,
    [MANAGE, "runservice", "--bind", bind, "--workers", "1", "--pollers", "1"],
    { cwd: REPO_ROOT, env, detached: true, stdio: ["ignore", "ignore", "pipe"] },
  );
  let log = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    log = (log + chunk.toString()).slice(-20_000);
  });
  const baseUrl = `http://${bind}`;
  try {
    await waitUntilServing(baseUrl, child, () => log);
  } catch (error) {
    await stopGroup(child);
    throw error;
  }
  return {
    baseUrl,
    apiKey,
    signingSecret,
    team,
    shell: (code) => manage("shell", "-c", code),
    stop: async () => {
      await stopGroup(child);
      await database.drop();
    },
  };
}

async function waitUntilServing(baseUrl: string, child: ChildProcess, log: () => string) {
  const deadline = Date.now() + START_TIMEOUT_MS;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`runservice exited:\n${log()}`);
    try {
      const answer = await fetch(`${baseUrl}/api/v1/jobs`);
      if (answer.status === 401) return;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`runservice did not serve in time:\n${log()}`);
    await new Promise((done) => setTimeout(done, 200));
  }
}

async function stopGroup(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.pid === undefined) return;
  const exited = new Promise((done) => child.once("exit", done));
  process.kill(-child.pid, "SIGTERM"); // runservice stops gunicorn and the poller
  const killer = setTimeout(() => {
    if (child.exitCode === null && child.pid !== undefined) process.kill(-child.pid, "SIGKILL");
  }, 30_000);
  await exited;
  clearTimeout(killer);
}
