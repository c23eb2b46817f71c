// The one agent-server Connection and the RPCs the client makes on it: conversation
// management on `agent-server`, history and join / leave of one conversation's channels.
// connection.js opens and reopens the socket; everyone else calls the functions here.
import { Connection } from "./rpc.js";

/** The channel for conversation management (create, list, join…). */
const AGENT = "agent-server";

/** A joined conversation's channels: requests to it, and the calls it makes on this client. */
export const dispatcherOf = (id) => `dispatcher:${id}`;
const clientioOf = (id) => `clientio:${id}`;

/** The socket to this server. connection.js sets its URL (with the token) and its handlers. */
export const conn = new Connection(null, {});

// The RPCs (absent arguments are JSON null).

const agent = (name, args) => conn.invoke(AGENT, name, args);
export const listConversations = (filter = null) => agent("listConversations", [filter]);
/** Roundtable extension: the list now, then `conversationsChanged` calls on agent-server. */
export const subscribeConversations = () => agent("subscribeConversations", []);
export const createConversation = (name) => agent("createConversation", [name, null]);
export const renameConversation = (id, name) => agent("renameConversation", [id, name, null]);
export const deleteConversation = (id) => agent("deleteConversation", [id]);
export const findConversations = (q) => agent("findConversations", [q, null]);
export const searchConversationContent = (q, max = null) => agent("searchConversationContent", [q, max]);
/** getStatus: the agents, and (Roundtable extension) `mcpServers` with each one's state. */
export const getStatus = (id) => conn.invoke(dispatcherOf(id), "getStatus", []);
/**
 * getDisplayHistory(afterSeq?, page?): the entries after `afterSeq` (all when null); with
 * `page` = {limit, beforeSeq?} (Roundtable extension) only the newest `limit` of those
 * before `beforeSeq`, in seq order.
 */
export const history = (id, afterSeq, page = null) =>
  conn.invoke(
    dispatcherOf(id),
    "getDisplayHistory",
    page ? [afterSeq ?? null, page] : afterSeq == null ? [] : [afterSeq],
    60000,
  );

export async function joinConversation(view) {
  const result = await agent("joinConversation", [{ conversationId: view.id }]);
  conn.createChannel(clientioOf(view.id));
  conn.createChannel(dispatcherOf(view.id));
  view.connectionId = result?.connectionId ?? null;
  view.name = result?.name ?? view.name;
  return result;
}

export function dropChannels(id) {
  conn.deleteChannel(clientioOf(id));
  conn.deleteChannel(dispatcherOf(id));
}

export async function leaveConversation(id) {
  dropChannels(id);
  try {
    await agent("leaveConversation", [id]);
  } catch {
    /* best effort (deleted, or never joined on this socket) */
  }
}
