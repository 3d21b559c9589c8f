#!/usr/bin/env bash
# Generates the Python client (messages + gRPC stubs) from proto/ into OUT (default: clients/python/gen, git-ignored).
#
#   clients/python/generate.sh [OUT]
#
# Needs Debian's protobuf-compiler (protoc 3.21: proto3 `optional` is allowed by default since 3.15),
# protobuf-compiler-grpc (grpc_python_plugin) and libprotobuf-dev (google/protobuf/*.proto in /usr/include; set
# PROTOC_INCLUDE to use another folder). The generated modules import `workspace.v1.*`, so put OUT on PYTHONPATH.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$here/gen}
include=${PROTOC_INCLUDE:-/usr/include}

die() {
  printf 'generate.sh: %s\n' "$*" >&2
  exit 1
}

protoc=$(command -v protoc) || die "protoc not found (Debian: apt-get install protobuf-compiler)"
plugin=$(command -v grpc_python_plugin) || die "grpc_python_plugin not found (Debian: apt-get install protobuf-compiler-grpc)"
[ -f "$include/google/protobuf/timestamp.proto" ] ||
  die "well-known type protos not found in $include (Debian: apt-get install libprotobuf-dev, or set PROTOC_INCLUDE)"

mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$root"
shopt -s nullglob
protos=(proto/workspace/v1/*.proto)
[ ${#protos[@]} -gt 0 ] || die "no protos found in $root/proto/workspace/v1"

"$protoc" -I proto -I "$include" \
  --python_out="$out" \
  --grpc_python_out="$out" \
  --plugin=protoc-gen-grpc_python="$plugin" \
  "${protos[@]}"

printf 'generated %d proto files into %s (%s)\n' "${#protos[@]}" "$out" "$("$protoc" --version)"
