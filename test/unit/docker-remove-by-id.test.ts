// The Docker runtime's removeBySandboxId: containers found by the managed and sandbox-id labels, then stopped and
// removed with their volume, against a fake engine (the runtime-docker contract suite runs it on a real one).
import type Docker from "dockerode";
import { describe, expect, it } from "vitest";
import { createDockerRuntime } from "../../src/adapters/runtimes/docker/docker-runtime.ts";

function fakeEngine() {
  const calls: string[] = [];
  let filters: unknown = null;
  const containers = [
    { Id: "c1", State: "paused", Labels: { "workspace.volume": "openhands-workspace-sb1" } },
  ];
  const engine = {
    listContainers: async (options: { filters: unknown }) => {
      filters = options.filters;
      return containers;
    },
    getContainer: (id: string) => ({
      unpause: async () => void calls.push(`unpause ${id}`),
      stop: async () => void calls.push(`stop ${id}`),
      remove: async () => void calls.push(`remove ${id}`),
    }),
    getVolume: (name: string) => ({
      inspect: async () => ({ Labels: { "workspace.managed": "true" } }),
      remove: async () => void calls.push(`remove volume ${name}`),
    }),
  };
  return { engine: engine as unknown as Docker, calls, filters: () => filters, containers };
}

describe("docker removeBySandboxId", () => {
  it("finds containers by the managed and sandbox-id labels, unpauses, stops and removes them and the volume", async () => {
    const fake = fakeEngine();
    const runtime = createDockerRuntime({ docker: fake.engine });
    expect(await runtime.removeBySandboxId("sb1")).toBe(1);
    expect(fake.filters()).toStrictEqual({ label: ["workspace.managed=true", "workspace.sandbox.id=sb1"] });
    expect(fake.calls).toStrictEqual([
      "unpause c1",
      "stop c1",
      "remove c1",
      "remove volume openhands-workspace-sb1",
      "remove volume openhands-workspace-sb1",
    ]);
  });

  it("with nothing labelled with the id, removes only a leftover managed volume", async () => {
    const fake = fakeEngine();
    fake.containers.length = 0;
    const runtime = createDockerRuntime({ docker: fake.engine });
    expect(await runtime.removeBySandboxId("sb2")).toBe(0);
    expect(fake.calls).toStrictEqual(["remove volume openhands-workspace-sb2"]);
  });
});
