# shellcheck shell=bash
# Docker engine and test image for the Docker runtime tests. Sourced by .ci/run, which calls `docker_up` (non-zero
# when Docker cannot be set up: the Docker tests then skip and say so) and `docker_down` on exit.
#
# - The engine is a private dockerd with its own data root, exec root and socket under a temp dir, no default bridge
#   and no iptables rules (sandbox containers use `--network host` or `none`; nothing talks to bridge addresses).
# - Images cannot be pulled here, so the test image is made offline with `docker import` of a rootfs assembled from
#   this host: the running Node binary (the agent needs Node >= 22.18 for type stripping), bash/dash and a few
#   coreutils, each with the shared libraries `ldd` lists and the dynamic loader, plus a copy of agent/.
#   Copying the agent into the image (rather than bind-mounting the checkout) keeps the image self-contained, so the
#   runtime needs no host paths; the image is rebuilt on every CI run, so it cannot go stale there. The image has no
#   ENTRYPOINT and CMD = the built-in agent, so a spec with an empty command runs the agent, and any other command
#   (e.g. `sh -c 'exit 1'`) replaces it. Import takes about a second (the Node binary is most of the ~120 MB).
# - A second image stands in for the OpenHands agent-server image (see _docker_build_standin_image).
# - Exports DOCKER_HOST=unix://<sock>, WORKSPACE_TEST_DOCKER_IMAGE=<image> and WORKSPACE_TEST_AGENT_SERVER_IMAGE=<image>.
#
# Every step checks its own result: functions called as `docker_up || ...` run with `set -e` suspended.

DOCKER_TEST_IMAGE_NAME="${DOCKER_TEST_IMAGE_NAME:-workspace-test/builtin-agent:local}"
DOCKER_STANDIN_IMAGE_NAME="${DOCKER_STANDIN_IMAGE_NAME:-workspace-test/agent-server-standin:local}"
DOCKER_TEST_BRIDGE="${DOCKER_TEST_BRIDGE:-awsdock0}"
DOCKER_TEST_BRIDGE_CIDR="${DOCKER_TEST_BRIDGE_CIDR:-172.31.250.1/24}"
_docker_dir=""
_docker_pid=""

_docker_log() { printf '[docker] %s\n' "$*"; }

# Copies an executable and every shared library it needs (as ldd reports them) into the rootfs at the same paths.
_docker_copy_with_libs() {
  local rootfs=$1 bin=$2 dest=${3:-$2} lib
  mkdir -p "$rootfs$(dirname "$dest")" || return 1
  cp -L "$bin" "$rootfs$dest" || return 1
  # ldd lines: "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)".
  for lib in $(ldd "$bin" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'); do
    [ -e "$rootfs$lib" ] && continue
    mkdir -p "$rootfs$(dirname "$lib")" && cp -L "$lib" "$rootfs$lib" || return 1
  done
}

# Builds the test image from host binaries (see the header). $1 = project root.
_docker_build_image() {
  local root=$1 rootfs="$_docker_dir/rootfs" node bin f
  node=$(command -v node) || return 1
  rm -rf "$rootfs" && mkdir -p "$rootfs"/{bin,usr/bin,usr/local/bin,etc,tmp,root,workspace,opt/agent} || return 1
  chmod 1777 "$rootfs/tmp"
  _docker_copy_with_libs "$rootfs" "$node" /usr/local/bin/node || return 1
  if command -v bash >/dev/null; then _docker_copy_with_libs "$rootfs" "$(command -v bash)" /bin/bash || return 1; fi
  _docker_copy_with_libs "$rootfs" "$(readlink -f /bin/sh)" /bin/sh || return 1
  for bin in sleep cat ls head tail echo env pwd mkdir rm touch true false yes wc id sort seq printf find grep chmod tr; do
    f=$(command -v "$bin" 2>/dev/null) || continue
    case $f in /*) _docker_copy_with_libs "$rootfs" "$f" "/usr/bin/$bin" || return 1 ;; esac
  done
  # git: a conversation start clones or initialises its repository through the agent's bash API.
  if command -v git >/dev/null && [ -d /usr/lib/git-core ]; then
    _docker_copy_with_libs "$rootfs" "$(command -v git)" /usr/bin/git || return 1
    mkdir -p "$rootfs/usr/lib" && cp -a /usr/lib/git-core "$rootfs/usr/lib/" || return 1
  fi
  printf 'root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000:sandbox:/workspace:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n' >"$rootfs/etc/passwd"
  printf 'root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n' >"$rootfs/etc/group"
  # Sandbox containers run as 1000:1000 (SANDBOX_DOCKER_USER's default): a new workspace volume takes the owner
  # of the image's folder it is mounted on.
  chown 1000:1000 "$rootfs/workspace" || return 1
  # The agent's folder as it is (its modules only, in subfolders too): it imports nothing from outside it.
  cp -R "$root/agent/." "$rootfs/opt/agent/" || return 1
  printf '{"type":"module"}\n' >"$rootfs/opt/agent/package.json"
  # The packages the agent loads on its first conversation (the events websocket and the model client), without
  # their type declarations, source maps and TypeScript sources.
  mkdir -p "$rootfs/opt/agent/node_modules" || return 1
  tar -C "$root/node_modules" --exclude='*.d.ts' --exclude='*.d.mts' --exclude='*.d.cts' --exclude='*.map' \
    --exclude='openai/src' -c ws openai | tar -C "$rootfs/opt/agent/node_modules" -x || return 1
  tar -C "$rootfs" -c . | docker import \
    --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
    --change 'WORKDIR /workspace' \
    --change 'CMD ["/usr/local/bin/node", "--import", "/opt/agent/shared/require-node.mjs", "/opt/agent/main.ts"]' \
    - "$DOCKER_TEST_IMAGE_NAME" >/dev/null || return 1
  rm -rf "$rootfs"
}

# The stand-in for the OpenHands agent-server image (test/standin-agent-server, see docs/agent-server-standin.md),
# laid out like the SDK's docker/Dockerfile `binary` target (software-agent-sdk v1.3.0): user `openhands`
# uid/gid 10001 (home /home/openhands, shell /bin/bash), /workspace and /workspace/project owned by it with mode
# 0755 (so only that user can create the agent's state folders /workspace/conversations and
# /workspace/bash_events), `USER openhands`, `WORKDIR /` (the real image's; the sandbox gives the container its
# working dir), the real ENV lines that change behaviour (OH_ENABLE_VNC=false, LOG_JSON=true, the VS Code and
# noVNC variables), and ENTRYPOINT /usr/local/bin/openhands-agent-server: here a sh wrapper exec'ing Node on the
# stand-in's main.ts with "$@" (so `--host H --port P` reach it as they reach the real binary). The real image
# EXPOSEs 8000 (agent) and 8002 (noVNC); VS Code listens on 8001 and the reference publishes workers 8011/8012.
# Built offline from host binaries like the test image. $1 = project root.
_docker_build_standin_image() {
  local root=$1 rootfs="$_docker_dir/rootfs-standin" node bin f
  node=$(command -v node) || return 1
  rm -rf "$rootfs" && mkdir -p "$rootfs"/{bin,usr/bin,usr/local/bin,etc,tmp,root,home/openhands,workspace/project,opt/agent-server-standin} || return 1
  chmod 1777 "$rootfs/tmp"
  _docker_copy_with_libs "$rootfs" "$node" /usr/local/bin/node || return 1
  if command -v bash >/dev/null; then _docker_copy_with_libs "$rootfs" "$(command -v bash)" /bin/bash || return 1; fi
  _docker_copy_with_libs "$rootfs" "$(readlink -f /bin/sh)" /bin/sh || return 1
  for bin in sleep cat ls head tail echo env pwd mkdir rm touch true false id wc sort seq printf find grep chmod tr; do
    f=$(command -v "$bin" 2>/dev/null) || continue
    case $f in /*) _docker_copy_with_libs "$rootfs" "$f" "/usr/bin/$bin" || return 1 ;; esac
  done
  # git, as the real image has it: the service clones and initialises repositories through the agent's bash API.
  if command -v git >/dev/null && [ -d /usr/lib/git-core ]; then
    _docker_copy_with_libs "$rootfs" "$(command -v git)" /usr/bin/git || return 1
    mkdir -p "$rootfs/usr/lib" && cp -a /usr/lib/git-core "$rootfs/usr/lib/" || return 1
  fi
  printf 'root:x:0:0:root:/root:/bin/sh\nopenhands:x:10001:10001::/home/openhands:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' >"$rootfs/etc/passwd"
  printf 'root:x:0:\nsudo:x:27:openhands\nopenhands:x:10001:\nnogroup:x:65534:\n' >"$rootfs/etc/group"
  chown 10001:10001 "$rootfs/home/openhands" "$rootfs/workspace" "$rootfs/workspace/project" || return 1
  chmod 0755 "$rootfs/workspace" "$rootfs/workspace/project" || return 1
  for f in "$root"/test/standin-agent-server/*.ts; do
    case $f in *.test.ts) ;; *) cp "$f" "$rootfs/opt/agent-server-standin/" || return 1 ;; esac
  done
  printf '{"type":"module"}\n' >"$rootfs/opt/agent-server-standin/package.json"
  printf '#!/bin/sh\nexec /usr/local/bin/node /opt/agent-server-standin/main.ts "$@"\n' >"$rootfs/usr/local/bin/openhands-agent-server"
  chmod 0755 "$rootfs/usr/local/bin/openhands-agent-server"
  tar -C "$rootfs" -c . | docker import \
    --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
    --change 'ENV EDITOR=code VISUAL=code OPENVSCODE_SERVER_ROOT=/openhands/.openvscode-server' \
    --change 'ENV NOVNC_PORT=8002 DISPLAY=:1' \
    --change 'ENV OH_ENABLE_VNC=false LOG_JSON=true' \
    --change 'EXPOSE 8000 8002' \
    --change 'USER openhands' \
    --change 'WORKDIR /' \
    --change 'ENTRYPOINT ["/usr/local/bin/openhands-agent-server"]' \
    - "$DOCKER_STANDIN_IMAGE_NAME" >/dev/null || return 1
  rm -rf "$rootfs"
}

# Starts a private dockerd and builds the test image. Returns non-zero (and cleans up) when anything fails.
docker_up() {
  local root started i
  root=$(pwd)
  started=$(date +%s%N)
  if ! command -v dockerd >/dev/null 2>&1; then
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
      _docker_log "no dockerd and no way to install it"
      return 1
    fi
    _docker_log "installing docker.io"
    if ! { timeout 300 apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq --no-install-recommends docker.io; } \
      >/tmp/docker-apt.log 2>&1; then
      _docker_log "apt-get install docker.io failed (see /tmp/docker-apt.log)"
      return 1
    fi
  fi
  # A short path: the engine puts unix sockets under the exec root, and socket paths are limited to 108 bytes.
  _docker_dir=$(mktemp -d /tmp/ohd.XXXXXX) || return 1
  mkdir -p "$_docker_dir/data" "$_docker_dir/exec" || return 1
  local sock="$_docker_dir/docker.sock"
  # A bridge of its own (the engine makes only docker0 by itself), so that the bridge network's tests run (a
  # container reaching the host's loopback model at host.docker.internal); without it, --bridge=none.
  local bridge="none" iptables="false"
  ip link del "$DOCKER_TEST_BRIDGE" 2>/dev/null || true
  if ip link add "$DOCKER_TEST_BRIDGE" type bridge 2>/dev/null &&
    ip addr add "$DOCKER_TEST_BRIDGE_CIDR" dev "$DOCKER_TEST_BRIDGE" && ip link set "$DOCKER_TEST_BRIDGE" up; then
    bridge="$DOCKER_TEST_BRIDGE" iptables="true"
  else
    _docker_log "no bridge device could be made: containers on the bridge network are not tested"
  fi
  dockerd --data-root "$_docker_dir/data" --exec-root "$_docker_dir/exec" -H "unix://$sock" \
    --pidfile "$_docker_dir/docker.pid" --bridge="$bridge" --iptables="$iptables" --ip6tables=false \
    >"$_docker_dir/dockerd.log" 2>&1 </dev/null &
  _docker_pid=$!
  for i in $(seq 1 150); do
    if DOCKER_HOST="unix://$sock" timeout 5 docker info >/dev/null 2>&1; then break; fi
    if ! kill -0 "$_docker_pid" 2>/dev/null; then
      _docker_log "dockerd exited; last log lines:"
      tail -n 20 "$_docker_dir/dockerd.log" || true
      docker_down
      return 1
    fi
    sleep 0.1
  done
  if ! DOCKER_HOST="unix://$sock" timeout 5 docker info >/dev/null 2>&1; then
    _docker_log "dockerd did not answer within 15 s"
    docker_down
    return 1
  fi
  export DOCKER_HOST="unix://$sock"
  _docker_log "dockerd ready on $DOCKER_HOST ($(( ($(date +%s%N) - started) / 1000000 )) ms)"
  started=$(date +%s%N)
  if ! _docker_build_image "$root"; then
    _docker_log "building the test image failed"
    docker_down
    return 1
  fi
  export WORKSPACE_TEST_DOCKER_IMAGE="$DOCKER_TEST_IMAGE_NAME"
  _docker_log "test image $WORKSPACE_TEST_DOCKER_IMAGE built ($(( ($(date +%s%N) - started) / 1000000 )) ms)"
  started=$(date +%s%N)
  # Not fatal: without it only the tests that need the stand-in skip (and say why).
  if _docker_build_standin_image "$root"; then
    export WORKSPACE_TEST_AGENT_SERVER_IMAGE="$DOCKER_STANDIN_IMAGE_NAME"
    _docker_log "agent-server stand-in image $WORKSPACE_TEST_AGENT_SERVER_IMAGE built ($(( ($(date +%s%N) - started) / 1000000 )) ms)"
  else
    _docker_log "building the agent-server stand-in image failed: its tests will be skipped"
  fi
}

# Stops the private dockerd by PID and removes its folders. Never fails (it runs from an EXIT trap under set -e).
docker_down() {
  local i m
  if [ -n "$_docker_pid" ] && kill -0 "$_docker_pid" 2>/dev/null; then
    kill -TERM "$_docker_pid" 2>/dev/null || true
    for i in $(seq 1 150); do
      kill -0 "$_docker_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$_docker_pid" 2>/dev/null || true
    wait "$_docker_pid" 2>/dev/null || true
  fi
  _docker_pid=""
  if [ -n "$_docker_dir" ] && [ -d "$_docker_dir" ]; then
    # The engine leaves <exec-root>/netns/default (and, if killed, container mounts) mounted: unmount deepest first.
    for m in $(awk -v d="$_docker_dir" 'index($2, d) == 1 { print $2 }' /proc/mounts 2>/dev/null | sort -r); do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
    rm -rf "$_docker_dir" 2>/dev/null || true
  fi
  _docker_dir=""
  ip link del "$DOCKER_TEST_BRIDGE" 2>/dev/null || true
  unset WORKSPACE_TEST_DOCKER_IMAGE WORKSPACE_TEST_AGENT_SERVER_IMAGE
  return 0
}
