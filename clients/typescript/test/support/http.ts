// Small HTTP servers for the tests: a webhook receiver, a proxy that loses an answer, a
// server that always answers the same error.
import {
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
  createServer,
} from "node:http";
import type { AddressInfo } from "node:net";

export interface Received {
  body: Buffer;
  headers: IncomingHttpHeaders;
}

async function bodyOf(request: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

async function listen(server: Server): Promise<string> {
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

export async function close(server: Server): Promise<void> {
  server.closeAllConnections();
  await new Promise((done) => server.close(done));
}

/** Records every webhook and answers 204 (410 Gone under /gone/, which ends the job). */
export async function receiver(): Promise<{ url: string; received: Received[]; server: Server }> {
  const received: Received[] = [];
  const server = createServer(async (request, response) => {
    received.push({ body: await bodyOf(request), headers: request.headers });
    response.writeHead(request.url?.startsWith("/gone/") ? 410 : 204).end();
  });
  return { url: await listen(server), received, server };
}

/**
 * Forwards every request to `target`; the answer to the first POST is read from the
 * server and then lost: the client's connection is dropped instead.
 */
export async function losingProxy(
  target: string,
): Promise<{ url: string; posts: () => number; server: Server }> {
  let posts = 0;
  const server = createServer(async (request, response) => {
    const body = await bodyOf(request);
    const headers = new Headers();
    for (const [name, value] of Object.entries(request.headers)) {
      if (typeof value === "string" && !["host", "connection", "content-length"].includes(name)) {
        headers.set(name, value);
      }
    }
    let upstream: Response;
    let answer: Buffer;
    try {
      upstream = await fetch(target + (request.url ?? "/"), {
        method: request.method,
        headers,
        body: body.length ? body : undefined,
      });
      answer = Buffer.from(await upstream.arrayBuffer());
    } catch {
      request.socket.destroy(); // no answer from the server: none for the client either
      return;
    }
    if (request.method === "POST" && ++posts === 1) {
      request.socket.destroy(); // the server did the work; its answer never arrives
      return;
    }
    response.writeHead(upstream.status, {
      "content-type": upstream.headers.get("content-type") ?? "",
    });
    response.end(answer);
  });
  return { url: await listen(server), posts: () => posts, server };
}

/** Answers every request with `status`, `headers` and `body` (JSON, or bytes as they are); counts them. */
export async function alwaysAnswering(
  status: number,
  headers: Record<string, string>,
  body: unknown,
): Promise<{ url: string; hits: () => number; server: Server }> {
  let hits = 0;
  const server = createServer(async (request, response) => {
    await bodyOf(request);
    hits += 1;
    response.writeHead(status, { "content-type": "application/json", ...headers });
    response.end(Buffer.isBuffer(body) ? body : JSON.stringify(body));
  });
  return { url: await listen(server), hits: () => hits, server };
}
