/**
 * The agent URLs the OpenHands UI builds from a conversation's `conversation_url` (frontend/src/utils/websocket-url.ts:
 * `extractBaseHost`, `buildHttpBaseUrl`, `buildWebSocketUrl`): the URL's host when it is absolute, else the page's
 * own host (`window.location.host`); the scheme follows the page's (https → wss). `page` is the origin the UI was
 * loaded from (the service's URL in these tests).
 */
export function uiAgentBase(conversationUrl: string | null | undefined, page: string): string {
  const pageUrl = new URL(page);
  let host = pageUrl.host;
  if (conversationUrl && !conversationUrl.startsWith("/")) {
    try {
      host = new URL(conversationUrl).host;
    } catch {
      // the UI falls back to the page's host
    }
  }
  return `${pageUrl.protocol === "https:" ? "https:" : "http:"}//${host}`;
}

/** The UI's events websocket URL (without its query) for a conversation. */
export function uiSocketUrl(id: string, conversationUrl: string | null | undefined, page: string): string {
  const base = new URL(uiAgentBase(conversationUrl, page));
  return `${base.protocol === "https:" ? "wss:" : "ws:"}//${base.host}/sockets/events/${id}`;
}
