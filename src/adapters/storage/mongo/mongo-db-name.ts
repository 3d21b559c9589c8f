// Apart from mongo-storage.ts so that naming the database (the admin CLI says which store it opened) does not load
// the MongoDB driver.

/** Default database when neither MONGODB_DB nor the URI names one. */
export const DEFAULT_MONGO_DB_NAME = "agent_workspace";

/** The database a MongoDB store uses: `dbName`, else the one in the URI's path, else the default. */
export function mongoDbName(uri: string, dbName: string | undefined): string {
  const match = /^mongodb(?:\+srv)?:\/\/[^/?]*\/([^?]+)/.exec(uri);
  const fromUri = match?.[1];
  return (
    dbName ??
    (fromUri === undefined || fromUri === "" ? undefined : decodeURIComponent(fromUri)) ??
    DEFAULT_MONGO_DB_NAME
  );
}

/** The hosts of a connection string, without its credentials. */
export function mongoHosts(uri: string): string {
  return /^mongodb(?:\+srv)?:\/\/(?:[^@/?]*@)?([^/?]*)/.exec(uri)?.[1] ?? "";
}
