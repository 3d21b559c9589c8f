import type { DescService } from "@bufbuild/protobuf";
import { type Client, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import * as grpc from "@grpc/grpc-js";
import { grpcServiceDefinition } from "../../src/transports/grpc/grpc-server.ts";

/**
 * A Connect client over HTTP/1.1 (the REST listener) sending the session key; with `useHttpGet`, reads (methods
 * declared NO_SIDE_EFFECTS) go as Connect GETs.
 */
export function connectClient<S extends DescService>(
  service: S,
  baseUrl: string,
  key: string | undefined,
  protocol: "connect" | "grpc-web" = "connect",
  useHttpGet = false,
): Client<S> {
  const options = {
    baseUrl,
    httpVersion: "1.1" as const,
    useHttpGet,
    interceptors: [
      (next: Parameters<import("@connectrpc/connect").Interceptor>[0]) =>
        async (req: Parameters<Parameters<import("@connectrpc/connect").Interceptor>[0]>[0]) => {
          if (key !== undefined) req.header.set("x-session-api-key", key);
          return next(req);
        },
    ],
  };
  return createClient(
    service,
    protocol === "connect" ? createConnectTransport(options) : createGrpcWebTransport(options),
  );
}

type GrpcUnary = (
  req: unknown,
  md: grpc.Metadata,
  cb: (err: grpc.ServiceError | null, res: unknown) => void,
) => void;

/** A plain @grpc/grpc-js client (what any gRPC user runs), built from the same descriptor. */
export function grpcClient(service: DescService, address: string) {
  const Ctor = grpc.makeGenericClientConstructor(grpcServiceDefinition(service), service.name);
  const client = new Ctor(address, grpc.credentials.createInsecure()) as unknown as Record<
    string,
    GrpcUnary
  > &
    grpc.Client;
  const metadata = (key: string | undefined) => {
    const md = new grpc.Metadata();
    if (key !== undefined) md.set("x-session-api-key", key);
    return md;
  };
  return {
    raw: client,
    unary<T>(method: string, req: unknown, key: string | undefined): Promise<T> {
      return new Promise((resolve, reject) => {
        const fn = client[method];
        if (fn === undefined) throw new Error(`no method ${method}`);
        fn.call(client, req, metadata(key), (err, res) => (err ? reject(err) : resolve(res as T)));
      });
    },
    stream(method: string, req: unknown, key: string | undefined): grpc.ClientReadableStream<unknown> {
      const fn = (
        client as unknown as Record<
          string,
          (r: unknown, md: grpc.Metadata) => grpc.ClientReadableStream<unknown>
        >
      )[method];
      if (fn === undefined) throw new Error(`no method ${method}`);
      return fn.call(client, req, metadata(key));
    },
    close: () => client.close(),
  };
}
