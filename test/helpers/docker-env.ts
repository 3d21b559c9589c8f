import Docker from "dockerode";
import { BUILTIN_AGENT_COMMAND } from "../../agent/shared/builtin-agent.ts";
import type { SandboxSpec } from "../../src/domain/sandboxes/sandbox-spec-service.ts";

/** Engine client for DOCKER_HOST (unix:// or tcp://), else /var/run/docker.sock. */
export function dockerFromEnv(host: string | undefined = process.env.DOCKER_HOST): Docker {
  if (!host) return new Docker({ socketPath: "/var/run/docker.sock" });
  if (host.startsWith("unix://")) return new Docker({ socketPath: host.slice("unix://".length) });
  const url = new URL(host.replace(/^tcp:/, "http:"));
  return new Docker({ host: url.hostname, port: Number(url.port || 2375) });
}

/**
 * The Docker engine and the offline-built test image (WORKSPACE_TEST_DOCKER_IMAGE, made by .ci/docker.sh), or the
 * reason Docker tests must skip.
 */
export function findDocker(docker: Docker): Promise<{ image: string } | string> {
  return findImage(docker, "WORKSPACE_TEST_DOCKER_IMAGE");
}

/**
 * The Docker engine and the offline-built stand-in for the OpenHands agent-server image
 * (WORKSPACE_TEST_AGENT_SERVER_IMAGE, made by .ci/docker.sh from test/standin-agent-server), or the reason the
 * tests that need it must skip.
 */
export function findAgentServerImage(docker: Docker): Promise<{ image: string } | string> {
  return findImage(docker, "WORKSPACE_TEST_AGENT_SERVER_IMAGE");
}

/** The engine answering and the image named by the environment variable `variable` present, or why not. */
async function findImage(docker: Docker, variable: string): Promise<{ image: string } | string> {
  try {
    await Promise.race([
      docker.ping(),
      new Promise((_, reject) => setTimeout(() => reject(new Error("timeout")), 3000)),
    ]);
  } catch {
    return "no Docker socket";
  }
  const image = process.env[variable];
  if (!image) return `${variable} is not set (.ci/docker.sh builds it)`;
  try {
    await docker.getImage(image).inspect();
  } catch {
    return `image ${image} not found`;
  }
  return { image };
}

/** The one sandbox spec of a service whose Docker sandboxes run the test image's built-in agent. */
export function builtinImageSpec(image: string): SandboxSpec {
  return {
    id: image,
    command: [BUILTIN_AGENT_COMMAND],
    initialEnv: {},
    workingDir: "/workspace",
    createdAt: new Date(),
  };
}
