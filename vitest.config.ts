import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/global-setup.ts"],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Tests start real servers, processes and containers: keep files in separate forks, a few at a time.
    pool: "forks",
    maxWorkers: 2,
    reporters: ["default"],
  },
});
