// verify() on hand-made Standard Webhooks messages: what it accepts and what it refuses.
// (The end-to-end tests verify the service's own deliveries.)
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { test } from "node:test";

import { InvalidSignatureError, verify } from "@sendlater/client";

const KEY = Buffer.alloc(32, 1);
const SECRET = `whsec_${KEY.toString("base64")}`;
const OTHER = `whsec_${Buffer.alloc(32, 2).toString("base64")}`;
const NOW = new Date("2027-03-01T09:00:00Z");

function signed(body: string, secrets: Buffer[], at = NOW) {
  const timestamp = String(Math.floor(at.getTime() / 1000));
  const signatures = secrets.map(
    (key) =>
      `v1,${createHmac("sha256", key).update(`msg_1.${timestamp}.${body}`).digest("base64")}`,
  );
  return {
    "webhook-id": "msg_1",
    "webhook-timestamp": timestamp,
    "webhook-signature": signatures.join(" "),
  };
}

test("a valid message gives its JSON body, headers in any case", () => {
  const body = '{"id":"j1","payload":{"n":1}}';
  const headers = signed(body, [KEY]);
  assert.deepEqual(verify(body, headers, SECRET, { now: NOW }), { id: "j1", payload: { n: 1 } });
  const upper = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toUpperCase(), v]));
  assert.ok(verify(Buffer.from(body), upper, SECRET, { now: NOW }));
  assert.ok(
    verify(
      new Uint8Array(Buffer.from(body)),
      { ...headers, "webhook-id": [headers["webhook-id"]] },
      SECRET,
      { now: NOW },
    ),
  );
});

test("rotation: several signatures, several secrets", () => {
  const body = '{"id":"j2"}';
  const both = signed(body, [Buffer.alloc(32, 2), KEY]);
  assert.ok(verify(body, both, SECRET, { now: NOW }));
  assert.ok(verify(body, both, OTHER, { now: NOW }));
  assert.ok(verify(body, signed(body, [KEY]), [OTHER, SECRET], { now: NOW }));
  assert.throws(
    () => verify(body, signed(body, [KEY]), [OTHER], { now: NOW }),
    InvalidSignatureError,
  );
});

test("forged body, forged id, unknown version, stale and future timestamps are refused", () => {
  const body = '{"id":"j3","amount":1}';
  const headers = signed(body, [KEY]);
  assert.throws(
    () => verify(body.replace("1", "9"), headers, SECRET, { now: NOW }),
    /no matching signature/,
  );
  assert.throws(
    () => verify(body, { ...headers, "webhook-id": "msg_2" }, SECRET, { now: NOW }),
    /no matching/,
  );
  const v2 = {
    ...headers,
    "webhook-signature": headers["webhook-signature"].replace("v1,", "v2,"),
  };
  assert.throws(() => verify(body, v2, SECRET, { now: NOW }), /no matching/);
  const later = new Date(NOW.getTime() + 301_000);
  assert.throws(() => verify(body, headers, SECRET, { now: later }), /too old/);
  assert.ok(verify(body, headers, SECRET, { now: later, toleranceSeconds: 600 }));
  const earlier = new Date(NOW.getTime() - 301_000);
  assert.throws(() => verify(body, headers, SECRET, { now: earlier }), /in the future/);
  const old = signed(body, [KEY], new Date("2020-01-01T00:00:00Z"));
  assert.throws(() => verify(body, old, SECRET), /too old/); // by the real clock
});

test("missing or malformed headers and secrets are refused", () => {
  const body = "{}";
  const headers = signed(body, [KEY]);
  assert.throws(
    () => verify(body, { ...headers, "webhook-signature": "" }, SECRET, { now: NOW }),
    /missing/,
  );
  assert.throws(
    () => verify(body, { ...headers, "webhook-timestamp": "soon" }, SECRET, { now: NOW }),
    /not a number/,
  );
  assert.throws(() => verify(body, headers, [], { now: NOW }), /no signing secret/);
  assert.throws(() => verify(body, headers, "", { now: NOW }), /non-empty/);
  assert.throws(
    () => verify("not json", signed("not json", [KEY]), SECRET, { now: NOW }),
    /not JSON/,
  );
});
