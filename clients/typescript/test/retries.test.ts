// Retries and typed errors against small local servers (no sendlater needed).
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  Client,
  RateLimitedError,
  RetryPolicy,
  SendlaterError,
  TransportError,
  UnavailableError,
  ValidationError,
} from "@sendlater/client";

import { alwaysAnswering, close } from "./support/http.js";
import { freePort } from "./support/service.js";

const FAST_RETRY = { attempts: 3, backoffSeconds: 0.01, maxBackoffSeconds: 0.05 };
const ID = "3f2b8c1e-5a3d-4c6e-9f10-2b7a9e4d1c05";

test("429 is retried, then RateLimitedError carries Retry-After", async () => {
  const server = await alwaysAnswering(
    429,
    { "Retry-After": "0" },
    { error: { code: "throttled", message: "slow down" } },
  );
  try {
    const client = new Client({ baseUrl: server.url, apiKey: "k", retry: FAST_RETRY });
    await assert.rejects(client.get(ID), (error: unknown) => {
      assert.ok(error instanceof RateLimitedError);
      assert.deepEqual(
        [error.status, error.code, error.message, error.retryAfter],
        [429, "throttled", "slow down", 0],
      );
      return true;
    });
    assert.equal(server.hits(), 3);
  } finally {
    await close(server.server);
  }
});

test("503 is retried, then UnavailableError; Retry-After is waited for, capped", async () => {
  const server = await alwaysAnswering(
    503,
    { "Retry-After": "0.2" },
    { error: { code: "unavailable", message: "db gone" } },
  );
  try {
    const client = new Client({
      baseUrl: server.url,
      apiKey: "k",
      retry: { attempts: 2, maxBackoffSeconds: 5 },
    });
    const started = performance.now();
    await assert.rejects(client.cancel(ID), UnavailableError);
    assert.ok(performance.now() - started >= 190, "waited Retry-After before the second try");
    assert.equal(server.hits(), 2);
  } finally {
    await close(server.server);
  }
});

test("400 is not retried and names the fields", async () => {
  const body = { error: { code: "invalid", message: "see fields", fields: { due_at: ["bad"] } } };
  const server = await alwaysAnswering(400, {}, body);
  try {
    const client = new Client({ baseUrl: server.url, apiKey: "k", retry: FAST_RETRY });
    await assert.rejects(
      client.schedule({ dueAt: new Date(), handler: "noop" }),
      (error: unknown) => {
        assert.ok(error instanceof ValidationError);
        assert.deepEqual(error.fields, { due_at: ["bad"] });
        assert.deepEqual(error.body, body);
        return true;
      },
    );
    assert.equal(server.hits(), 1);
  } finally {
    await close(server.server);
  }
});

test("an answer that is not JSON is an error, not a crash", async () => {
  const server = await alwaysAnswering(200, { "content-type": "text/html" }, Buffer.from("<html>"));
  try {
    const client = new Client({ baseUrl: server.url, apiKey: "k" });
    await assert.rejects(client.get(ID), (error: unknown) => {
      assert.ok(error instanceof SendlaterError);
      assert.equal(error.body, "<html>");
      assert.match(error.message, /not JSON/);
      return true;
    });
  } finally {
    await close(server.server);
  }
});

test("no answer: retried, then TransportError", async () => {
  const port = await freePort(); // nothing listens there
  const client = new Client({
    baseUrl: `http://127.0.0.1:${port}`,
    apiKey: "k",
    retry: FAST_RETRY,
  });
  await assert.rejects(client.get(ID), (error: unknown) => {
    assert.ok(error instanceof TransportError && error instanceof SendlaterError);
    assert.equal(error.status, 0);
    assert.match(error.message, /GET \/api\/v1\/jobs\/.*no answer/);
    return true;
  });
});

test("a timeout is a TransportError", async () => {
  const { createServer } = await import("node:http");
  const silent = createServer(() => {}); // accepts, never answers
  await new Promise<void>((done) => silent.listen(0, "127.0.0.1", done));
  const port = (silent.address() as { port: number }).port;
  try {
    const client = new Client({
      baseUrl: `http://127.0.0.1:${port}`,
      apiKey: "k",
      timeoutSeconds: 0.2,
      retry: { attempts: 1 },
    });
    await assert.rejects(client.get(ID), /timed out/);
  } finally {
    silent.closeAllConnections();
    await new Promise((done) => silent.close(done));
  }
});

test("bad options and inputs are refused before any request", async () => {
  assert.throws(
    () => new Client({ baseUrl: "localhost:8000", apiKey: "k" }),
    /baseUrl must be an http\(s\) URL/,
  );
  assert.throws(() => new Client({ baseUrl: "http://x", apiKey: "" }), /apiKey/);
  assert.throws(() => new RetryPolicy({ attempts: 0 }), /attempts/);
  const client = new Client({ baseUrl: "http://x", apiKey: "k" });
  await assert.rejects(client.cancelMany({}), /needs ids, metadata or both/);
  assert.throws(() => client.list({ state: "pending" } as never), /unknown field "state"/);
  await assert.rejects(
    client.setFlowControl("k", { rate: 1, burst: 2 } as never),
    /unknown field "burst"/,
  );
  await assert.rejects(
    client.scheduleMany([{ dueAt: new Date(), handler: "noop" }, { handler: "noop" } as never]),
    /jobs\[1\]: dueAt is required/,
  );
});

test("backoff doubles with jitter and stays under the cap; Retry-After wins", () => {
  const policy = new RetryPolicy({ backoffSeconds: 1, maxBackoffSeconds: 3 });
  for (let i = 0; i < 50; i++) {
    const first = policy.delaySeconds(1, null);
    const third = policy.delaySeconds(3, null);
    assert.ok(first >= 0.5 && first <= 1);
    assert.ok(third >= 1.5 && third <= 3); // 4 s capped at 3
  }
  assert.equal(policy.delaySeconds(1, 2), 2);
  assert.equal(policy.delaySeconds(1, 60), 3);
});
