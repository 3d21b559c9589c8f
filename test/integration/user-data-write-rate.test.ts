/**
 * One user's write rate (USER_DATA_WRITES_PER_SECOND; here 1, burst 2) on the RPC protocols. On gRPC it is checked with
 * the caller's admission, before the request message is decoded: a call over the rate is refused even when its
 * message could not be decoded, and a malformed message within the rate is INVALID_ARGUMENT (not INTERNAL). Connect
 * likewise, on its hand-written unary path and on connect-node's. REST: test/integration/user-data-fairness.test.ts.
 */
import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TOO_MANY_WRITES } from "../../src/domain/user-data-store.ts";
import { CreateSecretRequestSchema, SecretsService } from "../../src/gen/workspace/v1/secrets_pb.js";
import { DEFAULT_QUOTAS } from "../../src/server/container.ts";
import { connectClient } from "../helpers/rpc-clients.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

let t: TestApp;
beforeAll(async () => {
  // One write a second, burst 2, so that a refill between the burst and the checks after it (100 ms at the default
  // 10 a second, which a loaded machine can take) does not let a call through that the test expects refused.
  t = await startTestApp({
    quotas: {
      ...DEFAULT_QUOTAS,
      userData: { ...DEFAULT_QUOTAS.userData, writesPerSecond: 1, writesBurst: 2 },
    },
  });
});
afterAll(async () => {
  await t?.close();
});

/** A gRPC client of CreateSecret that sends the bytes it is given, as they are. */
function rawCreateSecret(address: string) {
  const Ctor = grpc.makeGenericClientConstructor(
    {
      CreateSecret: {
        path: "/workspace.v1.SecretsService/CreateSecret",
        requestStream: false,
        responseStream: false,
        requestSerialize: (b: Buffer) => b,
        requestDeserialize: (b: Buffer) => b,
        responseSerialize: (b: Buffer) => b,
        responseDeserialize: (b: Buffer) => b,
      },
    },
    "SecretsService",
  );
  const client = new Ctor(address, grpc.credentials.createInsecure()) as unknown as grpc.Client & {
    CreateSecret: (
      req: Buffer,
      md: grpc.Metadata,
      cb: (err: grpc.ServiceError | null, res?: Buffer) => void,
    ) => void;
  };
  const send = (key: string, bytes: Buffer): Promise<grpc.ServiceError | null> =>
    new Promise((resolve) => {
      const md = new grpc.Metadata();
      md.set("x-session-api-key", key);
      client.CreateSecret(bytes, md, (err) => resolve(err));
    });
  return { send, close: () => client.close() };
}

const secret = (name: string): Buffer =>
  Buffer.from(toBinary(CreateSecretRequestSchema, create(CreateSecretRequestSchema, { name, value: "v" })));
/** Field 1 (name) announced with 127 bytes that never come. */
const MALFORMED = Buffer.from([0x0a, 0x7f, 0x41]);

const listed = async (key: string): Promise<number> =>
  ((await call(t.url, key, "GET", "/api/secrets")).body as { custom_secrets: unknown[] }).custom_secrets
    .length;

describe("a user's write rate on gRPC and Connect", () => {
  it("gRPC: refused before the message is decoded; a malformed message within the rate is INVALID_ARGUMENT", async () => {
    const key = await t.keyFor("grpc-writer");
    const client = rawCreateSecret(t.grpcAddress);
    try {
      const malformed = await client.send(key, MALFORMED);
      expect(malformed?.code).toBe(grpc.status.INVALID_ARGUMENT);

      const answers = await Promise.all(
        Array.from({ length: 30 }, (_, i) => client.send(key, secret(`G${i}`))),
      );
      const refused = answers.filter((e) => e !== null);
      expect(answers.length - refused.length).toBeGreaterThanOrEqual(1);
      expect(refused.length).toBeGreaterThan(0);
      for (const e of refused) {
        expect(e?.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
        expect(e?.details).toBe(TOO_MANY_WRITES);
      }
      // Over the rate, a message that cannot be decoded is refused for the rate: it was never decoded.
      const overRate = await client.send(key, MALFORMED);
      expect(overRate?.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
      expect(overRate?.details).toBe(TOO_MANY_WRITES);
      expect(await listed(key)).toBe(answers.length - refused.length);
      // Reads are not writes: another method of the same user is not held to the write rate.
      expect((await call(t.url, key, "GET", "/api/secrets")).status).toBe(200);
    } finally {
      client.close();
    }
  });

  it("Connect: writes beyond the rate are RESOURCE_EXHAUSTED and store nothing, refused before the body is decoded", async () => {
    const key = await t.keyFor("connect-writer");
    // A body that is no JSON: with a Content-Length (the unary fast path) and chunked (connect-node's handler).
    const malformed = (chunked: boolean) =>
      fetch(`${t.url}/workspace.v1.SecretsService/CreateSecret`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-session-api-key": key },
        body: chunked
          ? new ReadableStream({
              start(c) {
                c.enqueue(new TextEncoder().encode("{not json"));
                c.close();
              },
            })
          : "{not json",
        duplex: "half",
      } as RequestInit).then(async (r) => ({ status: r.status, body: (await r.json()) as { code: string } }));
    for (const chunked of [false, true]) {
      const within = await malformed(chunked);
      expect(within.status).toBe(400);
      expect(within.body.code).toBe("invalid_argument");
    }
    const client = connectClient(SecretsService, t.url, key);
    const answers = await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        client.createSecret({ name: `C${i}`, value: "v" }).then(
          () => null,
          (e: unknown) => ConnectError.from(e),
        ),
      ),
    );
    const refused = answers.filter((e) => e !== null);
    expect(answers.length - refused.length).toBeGreaterThanOrEqual(1);
    expect(refused.length).toBeGreaterThan(0);
    for (const e of refused) {
      expect(e?.code).toBe(Code.ResourceExhausted);
      expect(e?.rawMessage).toBe(TOO_MANY_WRITES);
    }
    // Over the rate, a body that could not be decoded is refused for the rate: it was never decoded.
    for (const chunked of [false, true]) {
      const over = await malformed(chunked);
      expect(over.status).toBe(429);
      expect(over.body.code).toBe("resource_exhausted");
    }
    expect(await listed(key)).toBe(answers.length - refused.length);
  });
});
