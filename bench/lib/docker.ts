// The Docker runtime of the docker and agent-server scenarios.
/** The benchmarks' Docker runtime: the host network, containers labelled for removal, a short stop. */
export const benchDockerRuntime = (
  create: typeof import("../../src/adapters/runtimes/docker/docker-runtime.ts").createDockerRuntime,
  docker: import("dockerode"),
) => create({ docker, network: "host", labels: { "workspace.bench": "1" }, stopTimeoutSeconds: 2 });
