import { randomUUID } from "node:crypto";
import { type Db, MongoClient } from "mongodb";
import { afterAll } from "vitest";
import {
  createMongoStorage,
  createMongoStorageFromDb,
} from "../../src/adapters/storage/mongo/mongo-storage.ts";
import { createMongoStandin } from "../helpers/mongo-standin.ts";
import { describeStorageContract } from "./storage-contract.ts";

const uri = process.env.MONGODB_URI;

if (uri !== undefined && uri !== "") {
  const dbName = `aws_contract_${Date.now()}_${randomUUID().slice(0, 8)}`;
  console.log(`storage-mongo: running against a real MongoDB server (MONGODB_URI), database ${dbName}`);
  describeStorageContract("mongo (real server)", () => createMongoStorage({ uri, dbName }));
  afterAll(async () => {
    const client = new MongoClient(uri);
    try {
      await client.db(dbName).dropDatabase();
    } finally {
      await client.close();
    }
  });
} else {
  console.log(
    "storage-mongo: running against in-process stand-in (mingo); set MONGODB_URI to run against a real MongoDB server",
  );
  // One stand-in database for the whole suite: every make() sees the same data, like a server would.
  const standin = createMongoStandin();
  describeStorageContract("mongo (in-process stand-in)", () =>
    createMongoStorageFromDb(standin as unknown as Db),
  );
}
