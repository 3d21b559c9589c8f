#!/usr/bin/env python3
"""Example gRPC client generated from proto/: stores and reads settings, then starts, pauses, resumes and deletes
a sandbox. Prints one line per step; exits 1 with a message on the first failure.

    clients/python/generate.sh                      # writes clients/python/gen
    /usr/bin/python3 clients/python/example.py --grpc localhost:3001 --key ws_...

Needs the grpcio and protobuf Python packages (Debian: python3-grpcio, python3-protobuf, installed for
/usr/bin/python3).
"""

import argparse
import os
import sys
import time


def parse_args():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--grpc", default="localhost:3001", help="gRPC address host:port (default: %(default)s)")
    p.add_argument(
        "--key",
        default=os.environ.get("WORKSPACE_API_KEY"),
        help="API key, sent as x-session-api-key (default: $WORKSPACE_API_KEY)",
    )
    p.add_argument(
        "--gen",
        default=os.path.join(here, "gen"),
        help="folder with the generated modules (default: %(default)s)",
    )
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for a status (default: %(default)s)")
    args = p.parse_args()
    if not args.key:
        p.error("an API key is needed: --key or $WORKSPACE_API_KEY")
    return args


class Failure(Exception):
    pass


def main():
    args = parse_args()
    sys.path.insert(0, args.gen)
    try:
        import grpc
        from workspace.v1 import sandbox_pb2, sandbox_pb2_grpc, settings_pb2, settings_pb2_grpc
    except ImportError as e:
        print(f"error: {e} (generate the client with clients/python/generate.sh; "
              f"needs grpcio and protobuf, e.g. Debian's /usr/bin/python3 with python3-grpcio)", file=sys.stderr)
        return 1

    metadata = (("x-session-api-key", args.key),)
    rpc_timeout = 30.0

    def status_name(value):
        return sandbox_pb2.SandboxStatus.Name(value).removeprefix("SANDBOX_STATUS_")

    def get_sandbox(sandboxes, sandbox_id):
        reply = sandboxes.BatchGetSandboxes(
            sandbox_pb2.BatchGetSandboxesRequest(id=[sandbox_id]), metadata=metadata, timeout=rpc_timeout
        )
        slot = reply.items[0]
        if not slot.HasField("sandbox"):
            raise Failure(f"sandbox {sandbox_id} not found")
        return slot.sandbox

    def wait_for(sandboxes, sandbox_id, wanted):
        deadline = time.monotonic() + args.timeout
        while True:
            sandbox = get_sandbox(sandboxes, sandbox_id)
            status = status_name(sandbox.status)
            if status == wanted:
                return sandbox
            if status in ("ERROR", "MISSING"):
                raise Failure(f"sandbox {sandbox_id} is {status}, expected {wanted}")
            if time.monotonic() > deadline:
                raise Failure(f"sandbox {sandbox_id} still {status} after {args.timeout:g} s, expected {wanted}")
            time.sleep(0.2)

    sandbox_id = None
    deleted = False
    with grpc.insecure_channel(args.grpc) as channel:
        settings = settings_pb2_grpc.SettingsServiceStub(channel)
        sandboxes = sandbox_pb2_grpc.SandboxServiceStub(channel)
        try:
            # Settings: `optional` fields have presence; only the fields set here are changed.
            wanted = settings_pb2.Settings(
                language="de", llm_model="anthropic/claude-sonnet-4-5", llm_api_key="sk-example-python-client"
            )
            reply = settings.StoreSettings(
                settings_pb2.StoreSettingsRequest(settings=wanted), metadata=metadata, timeout=rpc_timeout
            )
            print(f"StoreSettings: {reply.message}")

            got = settings.GetSettings(settings_pb2.GetSettingsRequest(), metadata=metadata, timeout=rpc_timeout)
            print(
                f"GetSettings: language={got.settings.language} llm_model={got.settings.llm_model} "
                f"llm_api_key_set={got.llm_api_key_set}"
            )
            if got.settings.language != wanted.language or got.settings.llm_model != wanted.llm_model:
                raise Failure("the settings read back differ from the ones stored")
            if not got.llm_api_key_set or got.settings.HasField("llm_api_key"):
                raise Failure("llm_api_key should be stored (llm_api_key_set) and never returned")

            # Sandbox lifecycle: start (default spec), wait, pause, resume, wait, delete.
            started = sandboxes.StartSandbox(sandbox_pb2.StartSandboxRequest(), metadata=metadata, timeout=rpc_timeout)
            sandbox_id = started.sandbox.id
            print(f"StartSandbox: {sandbox_id} (spec {started.sandbox.sandbox_spec_id}, {status_name(started.sandbox.status)})")

            running = wait_for(sandboxes, sandbox_id, "RUNNING")
            urls = ", ".join(f"{u.name}={u.url}" for u in running.exposed_urls)
            print(f"RUNNING: {sandbox_id} ({urls})")

            sandboxes.PauseSandbox(
                sandbox_pb2.PauseSandboxRequest(sandbox_id=sandbox_id), metadata=metadata, timeout=rpc_timeout
            )
            wait_for(sandboxes, sandbox_id, "PAUSED")
            print(f"PauseSandbox: {sandbox_id} is PAUSED")

            sandboxes.ResumeSandbox(
                sandbox_pb2.ResumeSandboxRequest(sandbox_id=sandbox_id), metadata=metadata, timeout=rpc_timeout
            )
            print(f"ResumeSandbox: {sandbox_id}")
            wait_for(sandboxes, sandbox_id, "RUNNING")
            print(f"RUNNING: {sandbox_id}")

            sandboxes.DeleteSandbox(
                sandbox_pb2.DeleteSandboxRequest(sandbox_id=sandbox_id), metadata=metadata, timeout=rpc_timeout
            )
            deleted = True
            print(f"DeleteSandbox: {sandbox_id}")
        except grpc.RpcError as e:
            print(f"error: gRPC call failed: {e.code().name}: {e.details()}", file=sys.stderr)
            return 1
        except Failure as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        finally:
            if sandbox_id is not None and not deleted:
                # Best effort: do not leave the sandbox behind after a failure.
                try:
                    sandboxes.DeleteSandbox(
                        sandbox_pb2.DeleteSandboxRequest(sandbox_id=sandbox_id), metadata=metadata, timeout=rpc_timeout
                    )
                    print(f"cleanup: deleted sandbox {sandbox_id}", file=sys.stderr)
                except grpc.RpcError as e:
                    print(f"cleanup: could not delete sandbox {sandbox_id}: {e.code().name}: {e.details()}",
                          file=sys.stderr)
    print("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
