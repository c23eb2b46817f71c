//! Conversation helpers with TypeAgent's race handling (reference section 7): find-or-create
//! by name, join with fallback, join-before-leave switching, ephemeral conversations, and
//! `manage_conversation` for every `manage-conversation` subcommand (typed as
//! [`ManageConversation`] in `clientio.rs`). Shared by the CLI (typed `@conversation`
//! commands and `takeAction` from the server) and usable by any client.

pub use super::clientio::ManageConversation;
use super::{
    ClientError, ClientResult, Connection, ContentMatch, ConversationInfo, ConversationMatch,
    JoinResult,
};

/// The key names are compared by: the server's uniqueness rule itself (JavaScript `trim()`,
/// which also strips a BOM, then lower case), so the client and the server never disagree.
pub use roundtable_actors::naming::normalize;

/// `Conversation YYYY-MM-DD HH:MM` in local time (TypeAgent's `formatAutoConversationName`).
pub fn auto_name() -> String {
    format!(
        "Conversation {}",
        jiff::ZonedDateTime::now().strftime("%Y-%m-%d %H:%M")
    )
}

/// Newest first by `createdAt` (ISO-8601 strings sort chronologically).
pub fn sort_newest_first(list: &mut [ConversationInfo]) {
    list.sort_by(|a, b| b.created_at.cmp(&a.created_at));
}

/// Finds the conversation named `name` (trimmed, case-insensitive) or creates it. A failed
/// create re-lists *unfiltered* and adopts the winner of a race; otherwise the create error.
pub async fn find_or_create_named(conn: &Connection, name: &str) -> ClientResult<ConversationInfo> {
    let trimmed = name.trim();
    let key = normalize(trimmed);
    if let Some(found) = conn
        .list_conversations(Some(trimmed))
        .await?
        .into_iter()
        .find(|c| normalize(&c.name) == key)
    {
        return Ok(found);
    }
    match conn.create_conversation(trimmed).await {
        Ok(info) => Ok(info),
        Err(create_error) => conn
            .list_conversations(None)
            .await?
            .into_iter()
            .find(|c| normalize(&c.name) == key)
            .ok_or(create_error),
    }
}

/// Joins `saved` if given; on `Conversation not found` (only) falls back to find-or-create
/// `default_name` and joins that, retrying once if it vanished in between. Returns the join
/// and whether it fell back.
pub async fn join_named_or_fallback(
    conn: &Connection,
    saved: Option<&str>,
    default_name: &str,
) -> ClientResult<(JoinResult, bool)> {
    if let Some(id) = saved {
        match conn.join_conversation(Some(id), false).await {
            Ok(j) => return Ok((j, false)),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    for attempt in 0..2 {
        let target = find_or_create_named(conn, default_name).await?;
        match conn
            .join_conversation(Some(&target.conversation_id), false)
            .await
        {
            Ok(j) => return Ok((j, saved.is_some())),
            Err(e) if e.is_not_found() && attempt == 0 => continue,
            Err(e) => return Err(e),
        }
    }
    unreachable!("the loop returns on its second attempt")
}

/// What a switch did.
#[derive(Debug)]
pub enum SwitchOutcome {
    /// The target is the current conversation; nothing was sent.
    AlreadyOn,
    /// Joining the target failed; the caller stays where it was.
    JoinFailed {
        /// The target.
        target: String,
        /// Why.
        error: ClientError,
    },
    /// Joined the target and left the old one.
    Switched(JoinResult),
}

/// Join-before-leave: join `target`, run `on_joined` (rebind the UI; on error the new join is
/// undone), `on_persist` (best effort), then leave `current` (best effort).
pub async fn switch_safe(
    conn: &Connection,
    current: Option<&str>,
    target: &str,
    on_joined: impl FnOnce(&JoinResult) -> Result<(), String>,
    on_persist: impl FnOnce(&JoinResult),
) -> ClientResult<SwitchOutcome> {
    if current == Some(target) {
        return Ok(SwitchOutcome::AlreadyOn);
    }
    let joined = match conn.join_conversation(Some(target), false).await {
        Ok(j) => j,
        Err(error) => {
            return Ok(SwitchOutcome::JoinFailed {
                target: target.to_string(),
                error,
            })
        }
    };
    if let Err(e) = on_joined(&joined) {
        let _ = conn.leave_conversation(target).await;
        return Err(ClientError::Rpc(e));
    }
    on_persist(&joined);
    if let Some(old) = current {
        if let Err(e) = conn.leave_conversation(old).await {
            log::debug!("leaving {old} after a switch failed: {e}");
        }
    }
    Ok(SwitchOutcome::Switched(joined))
}

/// Creates `<prefix>-<uuid>` and joins it; deletes it again if the join fails.
pub async fn create_ephemeral(conn: &Connection, prefix: &str) -> ClientResult<JoinResult> {
    let info = conn
        .create_conversation(&format!("{prefix}-{}", uuid::Uuid::new_v4()))
        .await?;
    match conn
        .join_conversation(Some(&info.conversation_id), false)
        .await
    {
        Ok(j) => Ok(j),
        Err(e) => {
            let _ = conn.delete_conversation(&info.conversation_id).await;
            Err(e)
        }
    }
}

/// Deletes an ephemeral conversation; errors are ignored (the server sweeps leftovers).
pub async fn delete_ephemeral(conn: &Connection, id: &str) {
    let _ = conn.leave_conversation(id).await;
    let _ = conn.delete_conversation(id).await;
}

/// The result of a `manage-conversation` subcommand, for the caller to render.
#[derive(Debug, Clone, PartialEq)]
pub enum ActionResult {
    /// Done; `switched` is set when the current conversation changed.
    Ok {
        /// What happened.
        message: String,
        /// The conversation switched to.
        switched: Option<ConversationInfo>,
    },
    /// Nothing done, with a reason.
    Warning(String),
    /// Failed.
    Error(String),
    /// `list`.
    List {
        /// Newest first.
        conversations: Vec<ConversationInfo>,
        /// The current one.
        current: Option<String>,
    },
    /// `find`.
    Matches {
        /// The query.
        query: String,
        /// Best first.
        matches: Vec<ConversationMatch>,
        /// The current one.
        current: Option<String>,
    },
    /// `search`.
    ContentMatches {
        /// The query.
        query: String,
        /// Best first, with snippets.
        matches: Vec<ContentMatch>,
    },
    /// `info`.
    Info {
        /// Id.
        conversation_id: String,
        /// Name.
        name: String,
    },
    /// A confirmation was declined.
    Cancelled(String),
    /// `help`.
    Help,
}

/// What `manage_conversation` needs from its caller.
pub trait ManageHost {
    /// The current conversation (id, name).
    fn current(&self) -> Option<(String, String)>;
    /// Rebind to a newly joined conversation (the switch's `on_joined`).
    fn rebind(&mut self, joined: &JoinResult) -> Result<(), String>;
    /// Remember the current conversation (state file), best effort.
    fn persist(&mut self, joined: &JoinResult);
    /// Ask the user to confirm; `true` = go ahead.
    fn confirm(&mut self, question: &str) -> bool;
}

/// Runs one `manage-conversation` subcommand (decoded from its payload with
/// [`ManageConversation::from_payload`]).
pub async fn manage_conversation(
    conn: &Connection,
    host: &mut dyn ManageHost,
    command: &ManageConversation,
) -> ActionResult {
    match manage(conn, host, command).await {
        Ok(r) => r,
        Err(e) => ActionResult::Error(e.to_string()),
    }
}

async fn manage(
    conn: &Connection,
    host: &mut dyn ManageHost,
    command: &ManageConversation,
) -> ClientResult<ActionResult> {
    let current = host.current();
    let current_id = current.as_ref().map(|c| c.0.clone());
    let warn = |text: &str| Ok(ActionResult::Warning(text.into()));
    match command {
        ManageConversation::Help => Ok(ActionResult::Help),
        ManageConversation::Info => Ok(match current {
            Some((conversation_id, name)) => ActionResult::Info {
                conversation_id,
                name,
            },
            None => ActionResult::Warning("Not in a conversation.".into()),
        }),
        ManageConversation::List(name) => {
            let mut conversations = conn.list_conversations(name.as_deref()).await?;
            if conversations.is_empty() {
                return warn("No conversations found.");
            }
            sort_newest_first(&mut conversations);
            Ok(ActionResult::List {
                conversations,
                current: current_id,
            })
        }
        ManageConversation::Find(None) => warn("Give a query: @conversation find <text>"),
        ManageConversation::Find(Some(query)) => Ok(ActionResult::Matches {
            query: query.clone(),
            matches: conn.find_conversations(query, None).await?,
            current: current_id,
        }),
        ManageConversation::Search(None) => warn("Give a query: @conversation search <text>"),
        ManageConversation::Search(Some(query)) => Ok(ActionResult::ContentMatches {
            query: query.clone(),
            matches: conn.search_conversation_content(query, None).await?,
        }),
        ManageConversation::New(name) => new_conversation(conn, host, name.as_deref()).await,
        ManageConversation::Switch(None) => warn("Give a name: @conversation switch <name>"),
        ManageConversation::Switch(Some(name)) => switch_named(conn, host, name).await,
        ManageConversation::Prev => cycle(conn, host, false).await,
        ManageConversation::Next => cycle(conn, host, true).await,
        ManageConversation::Rename { new_name: None, .. } => {
            warn("Give the new name: @conversation rename [name] <new name>")
        }
        ManageConversation::Rename {
            name,
            new_name: Some(new_name),
        } => rename(conn, current, name.as_deref(), new_name).await,
        ManageConversation::Delete(None) => warn("Give a name: @conversation delete <name>"),
        ManageConversation::Delete(Some(name)) => delete(conn, host, current_id, name).await,
        ManageConversation::Unknown(other) => Ok(ActionResult::Warning(format!(
            "Unknown subcommand \"{other}\"; try @conversation help."
        ))),
    }
}

/// `new [name]`: switch to the conversation of that name, creating it if there is none.
async fn new_conversation(
    conn: &Connection,
    host: &mut dyn ManageHost,
    name: Option<&str>,
) -> ClientResult<ActionResult> {
    let name = name.map(str::to_string).unwrap_or_else(auto_name);
    let key = normalize(&name);
    let existing = conn
        .list_conversations(Some(&name))
        .await?
        .into_iter()
        .find(|c| normalize(&c.name) == key);
    let (target, message) = match existing {
        Some(c) => {
            let m = format!(
                "A conversation named \"{}\" already exists — switched to it.",
                c.name
            );
            (c, m)
        }
        None => {
            let c = find_or_create_named(conn, &name).await?;
            let m = format!("Created \"{}\" and switched to it.", c.name);
            (c, m)
        }
    };
    let current = host.current().map(|c| c.0);
    switch_to(conn, host, current.as_deref(), target, message).await
}

/// `switch <name>`: by exact name, else the best name match (score 0.6 or more), else, as
/// TypeAgent's `manageSwitch`, the conversation whose content matches best.
async fn switch_named(
    conn: &Connection,
    host: &mut dyn ManageHost,
    name: &str,
) -> ClientResult<ActionResult> {
    let key = normalize(name);
    let all = conn.list_conversations(None).await?;
    let mut target = all.into_iter().find(|c| normalize(&c.name) == key);
    if target.is_none() {
        target = conn
            .find_conversations(name, Some(1))
            .await
            .ok()
            .and_then(|m| m.into_iter().next())
            .filter(|m| m.score >= 0.6)
            .map(|m| m.conversation);
    }
    if target.is_none() {
        target = conn
            .search_conversation_content(name, Some(1))
            .await
            .ok()
            .and_then(|m| m.into_iter().next())
            .map(|m| m.conversation);
    }
    let Some(target) = target else {
        return Ok(ActionResult::Warning(format!(
            "No conversation named or matching \"{name}\"."
        )));
    };
    let current = host.current().map(|c| c.0);
    if Some(&target.conversation_id) == current.as_ref() {
        return Ok(ActionResult::Warning(format!(
            "Already in \"{}\".",
            target.name
        )));
    }
    let message = format!("Switched to \"{}\".", target.name);
    switch_to(conn, host, current.as_deref(), target, message).await
}

/// `prev` / `next` (`forward`): the neighbour in the newest-first list, wrapping around.
async fn cycle(
    conn: &Connection,
    host: &mut dyn ManageHost,
    forward: bool,
) -> ClientResult<ActionResult> {
    let mut all = conn.list_conversations(None).await?;
    if all.len() < 2 {
        return Ok(ActionResult::Warning(
            "There is no other conversation to switch to.".into(),
        ));
    }
    sort_newest_first(&mut all);
    let current = host.current().map(|c| c.0);
    let pos = current
        .as_ref()
        .and_then(|id| all.iter().position(|c| &c.conversation_id == id))
        .unwrap_or(0);
    let n = all.len();
    let next = if forward {
        (pos + 1) % n
    } else {
        (pos + n - 1) % n
    };
    let target = all.swap_remove(next);
    let message = format!("Switched to \"{}\".", target.name);
    switch_to(conn, host, current.as_deref(), target, message).await
}

/// `rename [name] <new name>`: the one named (default: `current`), unless the new name is
/// another conversation's.
async fn rename(
    conn: &Connection,
    current: Option<(String, String)>,
    name: Option<&str>,
    new_name: &str,
) -> ClientResult<ActionResult> {
    let all = conn.list_conversations(None).await?;
    let (target_id, target_name) = match (name, current) {
        (Some(name), _) => match all.iter().find(|c| normalize(&c.name) == normalize(name)) {
            Some(c) => (c.conversation_id.clone(), c.name.clone()),
            None => {
                return Ok(ActionResult::Warning(format!(
                    "No conversation named \"{name}\"."
                )))
            }
        },
        (None, Some(current)) => current,
        (None, None) => return Ok(ActionResult::Warning("Not in a conversation.".into())),
    };
    if let Some(clash) = all
        .iter()
        .find(|c| c.conversation_id != target_id && normalize(&c.name) == normalize(new_name))
    {
        return Ok(ActionResult::Error(format!(
            "A conversation named \"{}\" already exists. Pick a different name.",
            clash.name
        )));
    }
    conn.rename_conversation(&target_id, new_name).await?;
    Ok(ActionResult::Ok {
        message: format!("Renamed \"{target_name}\" to \"{new_name}\"."),
        switched: None,
    })
}

/// `delete <name>`: not the current one, and only once the host confirms.
async fn delete(
    conn: &Connection,
    host: &mut dyn ManageHost,
    current_id: Option<String>,
    name: &str,
) -> ClientResult<ActionResult> {
    let all = conn.list_conversations(None).await?;
    let Some(target) = all
        .into_iter()
        .find(|c| normalize(&c.name) == normalize(name))
    else {
        return Ok(ActionResult::Warning(format!(
            "No conversation named \"{name}\"."
        )));
    };
    if Some(&target.conversation_id) == current_id.as_ref() {
        return Ok(ActionResult::Warning(
            "You cannot delete the conversation you are in; switch to another one first.".into(),
        ));
    }
    if !host.confirm(&format!("Delete conversation \"{}\"?", target.name)) {
        return Ok(ActionResult::Cancelled(target.name));
    }
    match conn.delete_conversation(&target.conversation_id).await {
        Ok(()) | Err(ClientError::ConversationNotFound(_)) => Ok(ActionResult::Ok {
            message: format!("Deleted \"{}\".", target.name),
            switched: None,
        }),
        Err(e) => Err(e),
    }
}

async fn switch_to(
    conn: &Connection,
    host: &mut dyn ManageHost,
    current: Option<&str>,
    target: ConversationInfo,
    message: String,
) -> ClientResult<ActionResult> {
    let mut rebind_error = None;
    let outcome = {
        let host_cell = std::cell::RefCell::new(&mut *host);
        switch_safe(
            conn,
            current,
            &target.conversation_id,
            |j| {
                host_cell
                    .borrow_mut()
                    .rebind(j)
                    .inspect_err(|e| rebind_error = Some(e.clone()))
            },
            |j| host_cell.borrow_mut().persist(j),
        )
        .await
    };
    match outcome {
        Err(e) => Ok(ActionResult::Error(
            rebind_error.unwrap_or_else(|| e.to_string()),
        )),
        Ok(SwitchOutcome::AlreadyOn) => Ok(ActionResult::Warning(format!(
            "Already in \"{}\".",
            target.name
        ))),
        Ok(SwitchOutcome::JoinFailed { error, .. }) => Ok(ActionResult::Error(format!(
            "Could not switch to \"{}\": {error}",
            target.name
        ))),
        Ok(SwitchOutcome::Switched(_)) => Ok(ActionResult::Ok {
            message,
            switched: Some(target),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_names_carry_the_date() {
        let name = auto_name();
        assert!(
            name.starts_with("Conversation 20")
                && name.len() == "Conversation 2026-01-01 10:00".len(),
            "{name}"
        );
        assert_eq!(normalize("  CLI "), "cli");
    }
}
