// REST GET and POST /api/settings of the service against the reference Python stack (FastAPI + uvicorn,
// bench/servers/reference.py), on the service the settings throughput scenario started (./settings-throughput.ts).
import { spawnSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { freePort, type HttpLoadConfig, type LoadResult, ROOT, type ServerChild } from "../lib/bench-util.ts";
import { type Bench, log, type Row, ratioRow, request, type ServiceInfo } from "../lib/harness.ts";

/** A Python that imports FastAPI and uvicorn (Debian's packages serve /usr/bin/python3, which a pyenv may shadow). */
function referencePython(): string | null {
  for (const python of ["python3", "/usr/bin/python3"]) {
    if (spawnSync(python, ["-c", "import fastapi, uvicorn"], { stdio: "ignore" }).status === 0) return python;
  }
  return null;
}

export async function referenceBenchmarks(
  bench: Bench,
  service: ServerChild<ServiceInfo>,
  oursRest: (
    config: Omit<HttpLoadConfig, "durationS" | "connections">,
  ) => (durationS: number) => Promise<LoadResult>,
  getConfig: Omit<HttpLoadConfig, "durationS" | "connections">,
  postConfig: Omit<HttpLoadConfig, "durationS" | "connections">,
): Promise<Row[]> {
  if (referencePython() === null && process.env.BENCH_INSTALL_REFERENCE === "1") {
    log("[reference] installing python3-fastapi python3-uvicorn (BENCH_INSTALL_REFERENCE=1)");
    spawnSync("apt-get", ["update"], { stdio: ["ignore", 2, 2] });
    spawnSync("apt-get", ["install", "-y", "python3-fastapi", "python3-uvicorn"], {
      stdio: ["ignore", 2, 2],
      env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" },
    });
  }
  const python = referencePython();
  if (python === null) {
    log("[reference] reference stack not installed (set BENCH_INSTALL_REFERENCE=1 to apt-get install it)");
    return ["GET", "POST"].map((what) => ({
      bench: "reference",
      what: `REST ${what} /api/settings vs the reference Python stack`,
      ours: "—",
      baseline: "reference stack not installed",
      ratio: "—",
      target: "≥ 10×",
      pass: null,
    }));
  }
  const port = await freePort();
  const key = (getConfig.headers["x-session-api-key"] ?? "") as string;
  const dataDir = join(bench.work, "reference-data");
  mkdirSync(dataDir, { recursive: true });
  const refBase = `http://127.0.0.1:${port}`;
  const ref = await bench.start<Record<string, never>>({
    name: "reference (FastAPI + uvicorn)",
    command: python,
    args: [join(ROOT, "bench", "servers", "reference.py"), String(port), dataDir, key],
    logPath: join(bench.work, "reference.log"),
    ready: async () => (await request(refBase, key, "GET", "/api/settings")).status > 0,
    timeoutMs: 30_000,
  });
  const rows: Row[] = [];
  try {
    const seeded = await request(refBase, key, "POST", "/api/settings", postConfig.body);
    const read = await request(refBase, key, "GET", "/api/settings");
    if (seeded.status !== 200 || read.status !== 200)
      throw new Error(
        `reference stack answered ${seeded.status}/${read.status}: ${seeded.text} ${read.text}`,
      );
    const getAlt = await bench.alternate(
      "reference-get",
      { pid: service.pid, load: oursRest(getConfig) },
      { pid: ref.pid, load: bench.httpLoad({ ...getConfig, url: `${refBase}/api/settings` }) },
      "req/s",
    );
    rows.push(
      ratioRow(
        "reference",
        "REST GET /api/settings vs the reference Python stack",
        getAlt,
        "FastAPI + uvicorn",
        10,
        "req/s",
      ),
    );
    const postAlt = await bench.alternate(
      "reference-post",
      { pid: service.pid, load: oursRest(postConfig) },
      { pid: ref.pid, load: bench.httpLoad({ ...postConfig, url: `${refBase}/api/settings` }) },
      "req/s",
    );
    rows.push(
      ratioRow(
        "reference",
        "REST POST /api/settings vs the reference Python stack",
        postAlt,
        "FastAPI + uvicorn",
        10,
        "req/s",
      ),
    );
  } finally {
    await bench.stop(ref as ServerChild<unknown>);
  }
  return rows;
}
