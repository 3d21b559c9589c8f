/**
 * Loopback URLs seen from a sandbox whose loopback is its own (a process sandbox's network namespace, a container on
 * a bridge): the host's loopback services are at the sandbox's host gateway. Used by the service (the model URL in
 * an agent's start request), the runtimes (the webhook URL) and the built-in agent (a model URL given directly).
 */

/** True for a loopback host name or address as it appears in a URL's hostname. */
export function isLoopbackHost(host: string): boolean {
  const h = host.toLowerCase();
  return h === "localhost" || h.endsWith(".localhost") || /^127\./.test(h) || h === "[::1]" || h === "::1";
}

/**
 * `url` with a loopback host replaced by `gateway` (the host as the sandbox reaches it); other URLs, and what is
 * not a URL, unchanged. The caller's form is kept otherwise (no trailing "/" added to a bare origin).
 */
export function viaGateway(url: string, gateway: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return url;
  }
  if (!isLoopbackHost(parsed.hostname)) return url;
  parsed.hostname = gateway;
  const out = parsed.toString();
  return !url.endsWith("/") && out.endsWith("/") && parsed.pathname === "/" ? out.slice(0, -1) : out;
}
