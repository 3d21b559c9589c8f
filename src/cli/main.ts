#!/usr/bin/env node
// Entry point of the CLI and the server (`npm run cli`, `npm start`, `node dist/src/cli/main.js`). The Node.js
// version check runs first and alone; the commands (cli.ts) are imported only once it passed, so that an old Node
// never parses or links them (docs/getting-started-notes.md).
import "../../agent/shared/require-node.mjs";

await import("./cli.ts");
