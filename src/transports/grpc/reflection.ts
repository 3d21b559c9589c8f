import { EventEmitter } from "node:events";
import type { DescFile } from "@bufbuild/protobuf";
import { toBinary } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import type * as grpc from "@grpc/grpc-js";
import type { ServiceBinding } from "../kit/service-binding.ts";

/** Every file a service's file depends on, itself included, dependencies first. */
function closure(file: DescFile, seen: Map<string, DescFile>): void {
  if (seen.has(file.name)) return;
  for (const dep of file.dependencies) closure(dep, seen);
  seen.set(file.name, file);
}

/** The reflection services' one method, in both versions grpcurl and other clients use. */
const METHODS = [
  { service: "grpc.reflection.v1.ServerReflection", method: "ServerReflectionInfo" },
  { service: "grpc.reflection.v1alpha.ServerReflection", method: "ServerReflectionInfo" },
];

/** What @grpc/reflection registers for one method: its definition (codecs) and its handler. */
interface Registered {
  definition: grpc.MethodDefinition<unknown, unknown>;
  handler: (stream: EventEmitter & { write(m: unknown): void; end(): void }) => void;
}

/**
 * gRPC server reflection (v1 and v1alpha) for the served services, built from the protobuf-es descriptors, so
 * `grpcurl -plaintext host:port list` and `describe` work without the proto files.
 *
 * @grpc/reflection does the work, but it loads its own proto with protobufjs and @grpc/proto-loader, ~6 MiB of the
 * idle RSS of a server that may never be asked. So the two methods are registered at once with pass-through
 * (bytes) codecs, and the library is loaded on the first reflection call: its handler then runs behind a small
 * bridge that decodes each request and encodes each response with the library's own codecs.
 */
export function addReflection(server: grpc.Server, bindings: readonly ServiceBinding[]): void {
  let loaded: Promise<Map<string, Registered>> | undefined;
  const load = (): Promise<Map<string, Registered>> => {
    loaded ??= (async () => {
      const { ReflectionService } = await import("@grpc/reflection");
      const files = new Map<string, DescFile>();
      for (const b of bindings) closure(b.desc.file, files);
      const fileDescriptorProtos = [...files.values()].map((f) =>
        Buffer.from(toBinary(FileDescriptorProtoSchema, f.proto)),
      );
      const pkg = Object.fromEntries(bindings.map((b) => [b.desc.typeName, { fileDescriptorProtos }]));
      const registered = new Map<string, Registered>();
      const capture = {
        addService(definition: grpc.ServiceDefinition, impl: Record<string, unknown>) {
          for (const [name, method] of Object.entries(definition))
            registered.set(method.path, { definition: method, handler: impl[name] as Registered["handler"] });
        },
      };
      new ReflectionService(pkg as never, { services: bindings.map((b) => b.desc.typeName) }).addToServer(
        capture as never,
      );
      return registered;
    })();
    loaded.catch(() => {
      loaded = undefined;
    });
    return loaded;
  };

  for (const { service, method } of METHODS) {
    const path = `/${service}/${method}`;
    const definition: grpc.ServiceDefinition = {
      [method]: {
        path,
        requestStream: true,
        responseStream: true,
        requestSerialize: (b: Buffer) => b,
        requestDeserialize: (b: Buffer) => b,
        responseSerialize: (b: Buffer) => b,
        responseDeserialize: (b: Buffer) => b,
      },
    };
    const handler = (call: grpc.ServerDuplexStream<Buffer, Buffer>): void => {
      // Requests that arrive while the library loads wait in order.
      const early: Buffer[] = [];
      let ended = false;
      const onEarlyData = (b: Buffer) => early.push(b);
      const onEarlyEnd = () => {
        ended = true;
      };
      call.on("data", onEarlyData);
      call.once("end", onEarlyEnd);
      load().then(
        (registered) => {
          const r = registered.get(path);
          if (r === undefined) throw new Error(`@grpc/reflection registered no ${path}`);
          const bridge = Object.assign(new EventEmitter(), {
            write: (m: unknown) => call.write(r.definition.responseSerialize(m)),
            end: () => call.end(),
          });
          r.handler(bridge);
          call.off("data", onEarlyData);
          call.off("end", onEarlyEnd);
          for (const b of early) bridge.emit("data", r.definition.requestDeserialize(b));
          call.on("data", (b: Buffer) => bridge.emit("data", r.definition.requestDeserialize(b)));
          if (ended) bridge.emit("end");
          else call.once("end", () => bridge.emit("end"));
        },
        (err: unknown) => {
          call.destroy(Object.assign(new Error(`reflection unavailable: ${String(err)}`), { code: 13 }));
        },
      );
    };
    server.addService(definition, { [method]: handler });
  }
}
