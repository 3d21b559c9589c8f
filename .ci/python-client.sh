# shellcheck shell=bash
# Toolchain for the generated Python client test (test/e2e/python-client.test.ts). Sourced by .ci/run, which calls
# `python_client_up` (non-zero when the toolchain cannot be installed: the test then skips and says so).
#
# Everything comes from Debian: protoc 3.21 (`protobuf-compiler`, proto3 `optional` allowed by default since 3.15),
# `grpc_python_plugin` (`protobuf-compiler-grpc`), the well-known type protos in /usr/include (`libprotobuf-dev`, only
# a recommendation of protobuf-compiler), and the runtime `python3-grpcio` / `python3-protobuf`. Debian's
# `python3-grpc-tools` is not used: its bundled protoc is too old for proto3 `optional`.
#
# The runtime modules install for Debian's own interpreter, /usr/bin/python3. A `python3` earlier on PATH (e.g. a
# pyenv build) does not see them, so the check and the test use /usr/bin/python3 explicitly.
#
# Every step checks its own result: functions called as `python_client_up || ...` run with `set -e` suspended.

PYTHON_CLIENT_PACKAGES=(protobuf-compiler protobuf-compiler-grpc libprotobuf-dev python3-grpcio python3-protobuf)

_python_client_log() { printf '[python-client] %s\n' "$*"; }

# True when every tool the test needs is present.
_python_client_ready() {
  command -v protoc >/dev/null 2>&1 &&
    command -v grpc_python_plugin >/dev/null 2>&1 &&
    [ -f /usr/include/google/protobuf/timestamp.proto ] &&
    [ -x /usr/bin/python3 ] &&
    /usr/bin/python3 -c 'import grpc, google.protobuf' >/dev/null 2>&1
}

python_client_up() {
  if _python_client_ready; then
    _python_client_log "toolchain present: $(protoc --version), grpcio $(/usr/bin/python3 -c 'import grpc; print(grpc.__version__)')"
    return 0
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    _python_client_log "apt-get not available: cannot install ${PYTHON_CLIENT_PACKAGES[*]}"
    return 1
  fi
  _python_client_log "installing ${PYTHON_CLIENT_PACKAGES[*]}"
  if ! timeout 300 apt-get update -qq >/dev/null 2>&1; then
    _python_client_log "apt-get update failed or timed out"
    return 1
  fi
  if ! DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq --no-install-recommends \
    "${PYTHON_CLIENT_PACKAGES[@]}" >/dev/null 2>&1; then
    _python_client_log "apt-get install failed or timed out"
    return 1
  fi
  if ! _python_client_ready; then
    _python_client_log "packages installed, but protoc, grpc_python_plugin or /usr/bin/python3's grpc module is missing"
    return 1
  fi
  _python_client_log "toolchain installed: $(protoc --version), grpcio $(/usr/bin/python3 -c 'import grpc; print(grpc.__version__)')"
}
