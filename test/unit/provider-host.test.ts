import { describe, expect, it } from "vitest";
import { isInternalAddress, ProviderHostPolicy, parseHost } from "../../src/core/provider-host.ts";

describe("ProviderHostPolicy", () => {
  const none = new ProviderHostPolicy();

  it("accepts host names with an optional port, in canonical lower case", () => {
    expect(parseHost("GitLab.Example.com:8443")).toEqual({
      hostname: "gitlab.example.com",
      port: 8443,
      authority: "gitlab.example.com:8443",
    });
    expect(none.check("github.example.com")).toMatchObject({ hostname: "github.example.com", port: null });
  });

  it.each([
    "http://github.example.com",
    "github.example.com/x",
    "u@github.example.com",
    "github.example.com:",
    "github.example.com:65536",
    "-bad.example.com",
    "example.123",
    "",
  ])("refuses %j", (host) => {
    expect(typeof none.check(host)).toBe("string");
  });

  it.each([
    "127.0.0.1",
    "2130706433",
    "0x7f.1",
    "0177.0.0.1",
    "[::1]",
    "[::ffff:127.0.0.1]",
    "localhost",
    "a.localhost",
    "metadata",
    "x.internal",
    "printer.local",
  ])("refuses IP literals and internal names unless allowed: %j", (host) => {
    expect(typeof none.check(host)).toBe("string");
  });

  it("an allow list entry admits a host (any port or one port), and http:// entries switch to plain HTTP", () => {
    const p = new ProviderHostPolicy(["http://127.0.0.1", "gitcorp:8443", "10.0.0.5"]);
    const lo = p.check("127.0.0.1:4000");
    expect(typeof lo).toBe("object");
    expect(p.scheme(lo as never)).toBe("http");
    expect(typeof p.check("gitcorp:8443")).toBe("object");
    expect(typeof p.check("gitcorp:9000")).toBe("string");
    expect(p.scheme(p.check("10.0.0.5") as never)).toBe("https");
    expect(() => new ProviderHostPolicy(["http://x/path"])).toThrow();
  });

  it("knows internal address ranges", () => {
    for (const a of [
      "127.0.0.1",
      "10.1.2.3",
      "172.16.0.1",
      "192.168.1.1",
      "169.254.169.254",
      "100.64.0.1",
      "::1",
      "fd00::1",
      "fe80::1",
      "::ffff:10.0.0.1",
      "0.0.0.0",
    ])
      expect(isInternalAddress(a), a).toBe(true);
    for (const a of ["140.82.112.3", "2606:50c0:8000::153", "8.8.8.8"])
      expect(isInternalAddress(a), a).toBe(false);
  });
});
