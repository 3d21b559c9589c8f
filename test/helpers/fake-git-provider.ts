import { createServer, type Server } from "node:http";

/**
 * A fake git provider API on loopback: answers the "current user" endpoints of GitHub (/api/v3/user), GitLab
 * (/api/v4/user), Bitbucket (/2.0/user) and Azure DevOps (/_apis/connectionData). Tokens in `valid` get 200,
 * others 401; `down` makes it answer 502 for everything, `slowMs` delays answers.
 */
export interface FakeProvider {
  /** 127.0.0.1:PORT, as a token's host holds it (the app must allow http://127.0.0.1). */
  host: string;
  valid: Set<string>;
  requests: { path: string; auth: string | undefined }[];
  setDown(down: boolean): void;
  setSlow(ms: number): void;
  close(): Promise<void>;
}

export async function startFakeProvider(valid: string[] = []): Promise<FakeProvider> {
  const state = { down: false, slowMs: 0 };
  const requests: FakeProvider["requests"] = [];
  const validSet = new Set(valid);
  const server: Server = createServer((req, res) => {
    const auth = req.headers.authorization;
    requests.push({ path: req.url ?? "", auth });
    const answer = () => {
      if (state.down) return res.writeHead(502).end();
      let token = "";
      if (auth?.startsWith("Bearer ")) token = auth.slice(7);
      else if (auth?.startsWith("Basic "))
        token = Buffer.from(auth.slice(6), "base64").toString().replace(/^:/, "");
      const ok = validSet.has(token);
      res
        .writeHead(ok ? 200 : 401, { "content-type": "application/json" })
        .end(ok ? '{"login":"u"}' : '{"message":"Bad credentials"}');
    };
    if (state.slowMs > 0) setTimeout(answer, state.slowMs);
    else answer();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : 0;
  return {
    host: `127.0.0.1:${port}`,
    valid: validSet,
    requests,
    setDown: (d) => {
      state.down = d;
    },
    setSlow: (ms) => {
      state.slowMs = ms;
    },
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
