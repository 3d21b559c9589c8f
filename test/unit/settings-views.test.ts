// The one cache of the settings read path: the GetSettings answer per user and stored version, in the service,
// so that it behaves the same on every storage (each of which hands out a fresh document per read).

import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { createHandlerContext } from "@connectrpc/connect";
import type { Db } from "mongodb";
import { afterAll, describe, expect, it } from "vitest";
import { createMongoStorageFromDb } from "../../src/adapters/storage/mongo/mongo-storage.ts";
import { createSqliteStorage } from "../../src/adapters/storage/sqlite/sqlite-storage.ts";
import { callerValues } from "../../src/core/context.ts";
import { SecretBox } from "../../src/core/secret-box.ts";
import { SettingsService } from "../../src/domain/settings/settings-service.ts";
import { UserDataStore } from "../../src/domain/user-data-store.ts";
import {
  GetSettingsRequestSchema,
  SettingsService as SettingsDesc,
  StoreSettingsRequestSchema,
} from "../../src/gen/workspace/v1/settings_pb.js";
import type { Storage } from "../../src/ports/storage.ts";
import { createMongoStandin } from "../helpers/mongo-standin.ts";

const dir = mkdtempSync(join(tmpdir(), "settings-views-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const ctx = (userId: string) =>
  createHandlerContext({
    service: SettingsDesc,
    method: SettingsDesc.method.getSettings,
    protocolName: "test",
    requestMethod: "POST",
    url: "/",
    contextValues: callerValues({ userId, keyId: "k" }),
  });

describe.each([
  ["sqlite", () => createSqliteStorage({ path: join(dir, "views.db") })],
  ["mongo (in-process stand-in)", () => createMongoStorageFromDb(createMongoStandin() as unknown as Db)],
] as [string, () => Storage | Promise<Storage>][])("GetSettings answers on %s", (_name, make) => {
  it("are built once per stored version, and a store is seen at once", async () => {
    const storage = await make();
    const service = new SettingsService({
      store: new UserDataStore(storage.userData),
      box: new SecretBox(randomBytes(32)),
      verifier: null,
    });
    const get = () => service.getSettings(create(GetSettingsRequestSchema), ctx("u"));
    const store = (language: string) =>
      service.storeSettings(create(StoreSettingsRequestSchema, { settings: { language } }), ctx("u"));
    await store("en");
    const first = await get();
    expect(first.settings?.language).toBe("en");
    // Two reads of one version: two fresh documents from storage, one answer.
    const [a, b] = [await storage.userData.get("u"), await storage.userData.get("u")];
    expect(a?.value).not.toBe(b?.value);
    expect(await get()).toBe(first);
    await store("fr");
    const second = await get();
    expect(second.settings?.language).toBe("fr");
    expect(second).not.toBe(first);
    // Another user's answer is never confused with this one's.
    await service.storeSettings(
      create(StoreSettingsRequestSchema, { settings: { language: "de" } }),
      ctx("v"),
    );
    expect((await service.getSettings(create(GetSettingsRequestSchema), ctx("v"))).settings?.language).toBe(
      "de",
    );
    expect(await get()).toBe(second);
    await storage.close();
  });
});
