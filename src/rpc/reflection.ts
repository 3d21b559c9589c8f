import type { DescFile } from "@bufbuild/protobuf";
import { toBinary } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import type * as grpc from "@grpc/grpc-js";
import { ReflectionService } from "@grpc/reflection";
import type { ServiceBinding } from "./service-registry.ts";

/** Every file a service's file depends on, itself included, dependencies first. */
function closure(file: DescFile, seen: Map<string, DescFile>): void {
  if (seen.has(file.name)) return;
  for (const dep of file.dependencies) closure(dep, seen);
  seen.set(file.name, file);
}

/**
 * gRPC server reflection (v1 and v1alpha) for the served services, built from the protobuf-es descriptors, so
 * `grpcurl -plaintext host:port list` and `describe` work without the proto files.
 */
export function addReflection(server: grpc.Server, bindings: readonly ServiceBinding[]): void {
  const files = new Map<string, DescFile>();
  for (const b of bindings) closure(b.desc.file, files);
  const fileDescriptorProtos = [...files.values()].map((f) =>
    Buffer.from(toBinary(FileDescriptorProtoSchema, f.proto)),
  );
  const pkg = Object.fromEntries(bindings.map((b) => [b.desc.typeName, { fileDescriptorProtos }]));
  new ReflectionService(pkg as never, { services: bindings.map((b) => b.desc.typeName) }).addToServer(server);
}
