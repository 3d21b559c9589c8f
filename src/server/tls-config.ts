import { createPrivateKey, type KeyObject, X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { createSecureContext } from "node:tls";

/** TLS of the HTTP and gRPC listeners: the certificate (chain) and its private key, both PEM. */
export interface TlsConfig {
  /** TLS_CERT_FILE's content: the server's certificate first, then any intermediates. */
  readonly cert: Buffer;
  /** TLS_KEY_FILE's content: the unencrypted private key of the first certificate. */
  readonly key: Buffer;
  /** The certificate file's absolute path (for the startup log). */
  readonly certFile: string;
}

export const TLS_ENV_DOC: readonly [string, string][] = [
  [
    "TLS_CERT_FILE",
    "PEM certificate (the server's first, then intermediates): PORT serves HTTPS and GRPC_PORT gRPC over TLS; with TLS_KEY_FILE (default none: plain HTTP, cleartext HTTP/2)",
  ],
  ["TLS_KEY_FILE", "PEM private key of TLS_CERT_FILE, unencrypted; with TLS_CERT_FILE"],
  [
    "WEBHOOK_PORT",
    "with TLS and no WEBHOOK_BASE_URL: port of the plain-HTTP listener on 127.0.0.1 that answers only sandboxes' webhooks (/api/v1/webhooks/...) and is their default webhook URL (default 0: any free port)",
  ],
];

type Env = Record<string, string | undefined>;

/** The file's content, or a problem saying why it cannot be read. */
function readPem(name: string, path: string): Buffer | string {
  try {
    return readFileSync(path);
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    const why =
      e.code === "ENOENT"
        ? "no such file"
        : e.code === "EACCES"
          ? "permission denied for the server's user"
          : e.code === "EISDIR"
            ? "a folder, not a file"
            : e.message;
    return `${name} ${path} cannot be read: ${why}`;
  }
}

/**
 * Parses TLS_CERT_FILE and TLS_KEY_FILE: both or neither. Each must be readable PEM, the key unencrypted and the
 * certificate's (the first in the file); undefined when neither is set. `error` builds the ConfigError of config.ts
 * from every problem found.
 */
export function loadTlsConfig(
  env: Env,
  cwd: string,
  error: (problems: readonly string[]) => Error,
): TlsConfig | undefined {
  const certName = env.TLS_CERT_FILE?.trim() || undefined;
  const keyName = env.TLS_KEY_FILE?.trim() || undefined;
  if (certName === undefined && keyName === undefined) return undefined;
  if (certName === undefined || keyName === undefined)
    throw error([
      `TLS_CERT_FILE and TLS_KEY_FILE go together: ${certName === undefined ? "TLS_KEY_FILE" : "TLS_CERT_FILE"} is set, ${certName === undefined ? "TLS_CERT_FILE" : "TLS_KEY_FILE"} is not (set both to serve TLS, neither for plain HTTP)`,
    ]);
  const certFile = resolve(cwd, certName);
  const keyFile = resolve(cwd, keyName);
  const cert = readPem("TLS_CERT_FILE", certFile);
  const key = readPem("TLS_KEY_FILE", keyFile);
  const unreadable = [cert, key].filter((c): c is string => typeof c === "string");
  if (unreadable.length > 0) throw error(unreadable);
  const problems: string[] = [];
  let certificate: X509Certificate | undefined;
  try {
    certificate = new X509Certificate(cert as Buffer);
  } catch {
    problems.push(`TLS_CERT_FILE ${certFile} holds no PEM certificate (-----BEGIN CERTIFICATE-----)`);
  }
  let privateKey: KeyObject | undefined;
  try {
    privateKey = createPrivateKey(key as Buffer);
  } catch (err) {
    const encrypted =
      /BEGIN ENCRYPTED PRIVATE KEY|Proc-Type: 4,ENCRYPTED/.test((key as Buffer).toString("latin1")) ||
      /passphrase/i.test((err as Error).message);
    problems.push(
      encrypted
        ? `TLS_KEY_FILE ${keyFile} is encrypted; the server takes an unencrypted key (openssl pkey -in ${keyName} -out key.pem)`
        : `TLS_KEY_FILE ${keyFile} holds no PEM private key (-----BEGIN PRIVATE KEY-----)`,
    );
  }
  if (certificate !== undefined && privateKey !== undefined && !certificate.checkPrivateKey(privateKey))
    problems.push(
      `TLS_KEY_FILE ${keyFile} is not the private key of TLS_CERT_FILE ${certFile}'s certificate (${certificate.subject.replaceAll("\n", ", ")})`,
    );
  if (problems.length === 0) {
    // What the listeners will do with them, so that nothing they refuse is found only at the first connection.
    try {
      createSecureContext({ cert, key });
    } catch (err) {
      problems.push(
        `TLS_CERT_FILE ${certFile} and TLS_KEY_FILE ${keyFile} are refused by TLS: ${(err as Error).message}`,
      );
    }
  }
  if (problems.length > 0) throw error(problems);
  return Object.freeze({ cert: cert as Buffer, key: key as Buffer, certFile });
}
