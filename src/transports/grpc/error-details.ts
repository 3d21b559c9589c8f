import { create, toBinary } from "@bufbuild/protobuf";
import { AnySchema, anyPack } from "@bufbuild/protobuf/wkt";
import type { ConnectError } from "@connectrpc/connect";
import { StatusSchema } from "../../gen/google/rpc/status_pb.js";

/** google.rpc.Status (with the error's details, e.g. BadRequest field violations) for grpc-status-details-bin. */
export function encodeErrorDetails(err: ConnectError): Buffer | null {
  if (err.details.length === 0) return null;
  const details = err.details.map((d) =>
    "desc" in d
      ? anyPack(d.desc, create(d.desc, d.value))
      : create(AnySchema, { typeUrl: `type.googleapis.com/${d.type}`, value: d.value }),
  );
  return Buffer.from(
    toBinary(StatusSchema, create(StatusSchema, { code: err.code, message: err.rawMessage, details })),
  );
}
