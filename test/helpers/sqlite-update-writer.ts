// `node test/helpers/sqlite-update-writer.ts <database> <conversation id> <owner>`: updates the conversation's
// title over and over through the SQLite storage, four updates at a time (one group commit), and prints the last
// title's number of each round once all four were acknowledged, until killed. A test kills it with SIGKILL and
// checks that the store holds at least the last acknowledged title.
import { createSqliteStorage } from "../../src/adapters/storage/sqlite/sqlite-storage.ts";

const [path, id, owner] = process.argv.slice(2) as [string, string, string];
const storage = createSqliteStorage({ path });
for (let n = 1; ; n += 4) {
  const round = [n, n + 1, n + 2, n + 3];
  await Promise.all(
    round.map((i) =>
      storage.conversations.update(id, owner, { title: `title ${i}`, updatedAt: new Date(i) }),
    ),
  );
  process.stdout.write(`${n + 3}\n`);
}
