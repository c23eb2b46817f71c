//! One typed method per protocol call, on [`Connection`]: the `agent-server` calls (list,
//! create, rename, delete, find, search, join, leave, shutdown) and the `dispatcher:<id>` calls
//! (submit and wait, history, cancel, answers to questions and choices, the context meter).
//! Each builds the argument list the reference gives and reads the answer into its type.

use serde_json::{json, Value};

use super::{
    ClientError, ClientResult, Connection, ContentMatch, ConversationInfo, ConversationMatch,
    JoinResult,
};

impl Connection {
    // ---- agent-server ------------------------------------------------------------------

    /// `listConversations(filter)`.
    pub async fn list_conversations(
        &self,
        filter: Option<&str>,
    ) -> ClientResult<Vec<ConversationInfo>> {
        let v = self
            .invoke("agent-server", "listConversations", vec![json!(filter)])
            .await?;
        parse(v)
    }

    /// `createConversation(name)` with the default (`error`) collision behaviour.
    pub async fn create_conversation(&self, name: &str) -> ClientResult<ConversationInfo> {
        let v = self
            .invoke(
                "agent-server",
                "createConversation",
                vec![json!(name), Value::Null],
            )
            .await?;
        parse(v)
    }

    /// `renameConversation(id, newName)`.
    pub async fn rename_conversation(&self, id: &str, new_name: &str) -> ClientResult<()> {
        self.invoke(
            "agent-server",
            "renameConversation",
            vec![json!(id), json!(new_name), Value::Null],
        )
        .await
        .map(|_| ())
    }

    /// `deleteConversation(id)`.
    pub async fn delete_conversation(&self, id: &str) -> ClientResult<()> {
        self.invoke("agent-server", "deleteConversation", vec![json!(id)])
            .await
            .map(|_| ())
    }

    /// `findConversations(query, maxMatches)`.
    pub async fn find_conversations(
        &self,
        query: &str,
        max: Option<u64>,
    ) -> ClientResult<Vec<ConversationMatch>> {
        parse(
            self.invoke(
                "agent-server",
                "findConversations",
                vec![json!(query), json!(max)],
            )
            .await?,
        )
    }

    /// `searchConversationContent(query, maxMatches)`.
    pub async fn search_conversation_content(
        &self,
        query: &str,
        max: Option<u64>,
    ) -> ClientResult<Vec<ContentMatch>> {
        parse(
            self.invoke(
                "agent-server",
                "searchConversationContent",
                vec![json!(query), json!(max)],
            )
            .await?,
        )
    }

    /// `joinConversation({conversationId?, filter?})`.
    pub async fn join_conversation(
        &self,
        id: Option<&str>,
        filter: bool,
    ) -> ClientResult<JoinResult> {
        let mut options = json!({});
        if let Some(id) = id {
            options["conversationId"] = json!(id);
        }
        if filter {
            options["filter"] = json!(true);
        }
        parse(
            self.invoke("agent-server", "joinConversation", vec![options])
                .await?,
        )
    }

    /// `leaveConversation(id)`.
    pub async fn leave_conversation(&self, id: &str) -> ClientResult<()> {
        self.invoke("agent-server", "leaveConversation", vec![json!(id)])
            .await
            .map(|_| ())
    }

    /// `shutdown()`: answered, or the socket closes first (both count as done).
    pub async fn shutdown_server(&self) -> ClientResult<()> {
        match self.invoke("agent-server", "shutdown", vec![]).await {
            Ok(_) | Err(ClientError::Disconnected) => Ok(()),
            Err(e) => Err(e),
        }
    }

    // ---- dispatcher --------------------------------------------------------------------

    /// `submitCommand(command, null, null, clientRequestId, null)`: the ack's `requestId`.
    pub async fn submit_command(
        &self,
        conversation_id: &str,
        command: &str,
        client_request_id: &str,
    ) -> ClientResult<String> {
        let ack = self
            .invoke(
                &format!("dispatcher:{conversation_id}"),
                "submitCommand",
                vec![
                    json!(command),
                    Value::Null,
                    Value::Null,
                    json!(client_request_id),
                    Value::Null,
                ],
            )
            .await?;
        if ack["ok"] != true {
            return Err(ClientError::Rpc(format!(
                "the server did not take the command: {}",
                ack["error"].as_str().unwrap_or("unknown reason")
            )));
        }
        ack["entry"]["requestId"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| ClientError::Protocol(format!("submit answer without requestId: {ack}")))
    }

    /// The conversation's context meter: `getStatus`'s `contextMeter` (a Roundtable
    /// extension; `None` when it is `null` or absent).
    pub async fn context_meter(
        &self,
        conversation_id: &str,
    ) -> ClientResult<Option<roundtable_actors::agent::usage::ContextMeter>> {
        let status = self
            .invoke(
                &format!("dispatcher:{conversation_id}"),
                "getStatus",
                vec![],
            )
            .await?;
        Ok(serde_json::from_value(status["contextMeter"].clone()).unwrap_or(None))
    }

    /// `getDisplayHistory(afterSeq?)`.
    pub async fn display_history(
        &self,
        conversation_id: &str,
        after_seq: Option<i64>,
    ) -> ClientResult<Vec<Value>> {
        let args = after_seq.map(|s| vec![json!(s)]).unwrap_or_default();
        parse(
            self.invoke(
                &format!("dispatcher:{conversation_id}"),
                "getDisplayHistory",
                args,
            )
            .await?,
        )
    }

    /// `getDisplayHistory(afterSeq, {limit, beforeSeq?})` (a Roundtable extension): the
    /// newest `limit` (1 to 1,000) entries with `after_seq < seq < before_seq` (either bound
    /// `None` = open), oldest first. Seqs start at 0 and are contiguous, so the first entry's
    /// `seq` is how many earlier entries there are.
    pub async fn display_page(
        &self,
        conversation_id: &str,
        after_seq: Option<i64>,
        before_seq: Option<u64>,
        limit: u32,
    ) -> ClientResult<Vec<Value>> {
        let mut page = json!({ "limit": limit });
        if let Some(before) = before_seq {
            page["beforeSeq"] = json!(before);
        }
        parse(
            self.invoke(
                &format!("dispatcher:{conversation_id}"),
                "getDisplayHistory",
                vec![json!(after_seq), page],
            )
            .await?,
        )
    }

    /// `cancelCommand(requestId)`: the `kind`.
    pub async fn cancel_command(
        &self,
        conversation_id: &str,
        request_id: &str,
    ) -> ClientResult<String> {
        let v = self
            .invoke(
                &format!("dispatcher:{conversation_id}"),
                "cancelCommand",
                vec![json!(request_id)],
            )
            .await?;
        Ok(v["kind"].as_str().unwrap_or("").to_string())
    }

    /// `respondToInteraction({interactionId, type:"question", value})`.
    pub async fn respond_to_interaction(
        &self,
        conversation_id: &str,
        interaction_id: &str,
        value: usize,
    ) -> ClientResult<()> {
        self.invoke(
            &format!("dispatcher:{conversation_id}"),
            "respondToInteraction",
            vec![json!({"interactionId": interaction_id, "type": "question", "value": value})],
        )
        .await
        .map(|_| ())
    }

    /// `respondToInteraction(response)` with a whole `PendingInteractionResponse` (a form's
    /// answers, a proposed action's decision).
    pub async fn respond_to_interaction_with(
        &self,
        conversation_id: &str,
        response: Value,
    ) -> ClientResult<()> {
        self.invoke(
            &format!("dispatcher:{conversation_id}"),
            "respondToInteraction",
            vec![response],
        )
        .await
        .map(|_| ())
    }

    /// `respondToChoice(choiceId, response)`.
    pub async fn respond_to_choice(
        &self,
        conversation_id: &str,
        choice_id: &str,
        response: Value,
    ) -> ClientResult<()> {
        self.invoke(
            &format!("dispatcher:{conversation_id}"),
            "respondToChoice",
            vec![json!(choice_id), response],
        )
        .await
        .map(|_| ())
    }
}

/// Reads an answer into its type; a shape this client does not know is a protocol error.
fn parse<T: serde::de::DeserializeOwned>(v: Value) -> ClientResult<T> {
    serde_json::from_value(v).map_err(|e| ClientError::Protocol(e.to_string()))
}
