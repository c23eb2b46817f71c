//! The dispatcher's `getDynamicDisplay`, `getTemplateSchema` and `getTemplateCompletion`,
//! forwarded to the client agent they name when it implements them (`AgentQuery`), as
//! TypeAgent's `dispatcher.ts` forwards them to an app agent.
//!
//! Who talks to it: the dispatcher (`dispatcher.rs`) reads the query and awaits `ask_agent`.

use serde_json::{Map, Value};

use crate::agent::client_agent::{
    forwarded_args, ClientAgentSpec, GET_DYNAMIC_DISPLAY, GET_TEMPLATE_COMPLETION,
    GET_TEMPLATE_SCHEMA,
};
use crate::agent::LocalBoxFuture;
use crate::conversation::Conversation;
use crate::protocol::{RpcError, RpcResult};

/// A `dispatcher:<id>` method TypeAgent forwards to the app agent it names (its
/// `dispatcher.ts`), with its arguments.
pub(in crate::conversation) enum AgentQuery {
    /// `getDynamicDisplay` → the agent's `getDynamicDisplay({…, type, displayId})`.
    DynamicDisplay {
        /// `DisplayType` (`html`, `markdown`, …).
        display_type: String,
        /// The `dynamicDisplayId` of an earlier result.
        display_id: String,
    },
    /// `getTemplateSchema` → the agent's `getTemplateSchema({…, templateName, data})`.
    TemplateSchema {
        /// The template.
        template_name: String,
        /// The client's data (left out when it sent none).
        data: Option<Value>,
    },
    /// `getTemplateCompletion` → `getTemplateCompletion({…, templateName, data,
    /// propertyName})`.
    TemplateCompletion {
        /// The template.
        template_name: String,
        /// The client's data (left out when it sent none).
        data: Option<Value>,
        /// The property completed.
        property_name: String,
    },
}

impl AgentQuery {
    /// The agent-rpc method, whether `spec` implements it, and TypeAgent's text when not.
    fn method(&self, spec: &ClientAgentSpec) -> (&'static str, bool) {
        match self {
            AgentQuery::DynamicDisplay { .. } => (GET_DYNAMIC_DISPLAY, spec.dynamic_display),
            AgentQuery::TemplateSchema { .. } => (GET_TEMPLATE_SCHEMA, spec.template_schema),
            AgentQuery::TemplateCompletion { .. } => {
                (GET_TEMPLATE_COMPLETION, spec.template_completion)
            }
        }
    }

    /// TypeAgent's error when `agent` does not implement the method.
    fn unsupported(&self, agent: &str) -> RpcError {
        RpcError::Message(match self {
            AgentQuery::DynamicDisplay { .. } => {
                format!("Dynamic display not supported by '{agent}'")
            }
            _ => format!("Template schema not supported by '{agent}'"),
        })
    }

    /// The invoke's own fields (beside the session context's).
    fn fields(self) -> Map<String, Value> {
        let mut fields = Map::new();
        let mut template = |name: String, data: Option<Value>| {
            fields.insert("templateName".into(), name.into());
            if let Some(data) = data {
                fields.insert("data".into(), data);
            }
        };
        match self {
            AgentQuery::DynamicDisplay {
                display_type,
                display_id,
            } => {
                fields.insert("type".into(), display_type.into());
                fields.insert("displayId".into(), display_id.into());
            }
            AgentQuery::TemplateSchema {
                template_name,
                data,
            } => template(template_name, data),
            AgentQuery::TemplateCompletion {
                template_name,
                data,
                property_name,
            } => {
                template(template_name, data);
                fields.insert("propertyName".into(), property_name.into());
            }
        }
        fields
    }
}

impl Conversation {
    /// `dispatcher` `getDynamicDisplay` / `getTemplateSchema` / `getTemplateCompletion`
    /// for `agent`: TypeAgent's `Unknown app agent: <n>` or `… not supported by '<n>'`, else
    /// the invoke on the client agent's channel (bounded by `--client-agent-timeout`); its
    /// result, or its error text.
    pub(in crate::conversation) fn ask_agent(
        &self,
        agent: &str,
        query: AgentQuery,
    ) -> RpcResult<LocalBoxFuture<'static, RpcResult<Option<Value>>>> {
        self.known_agent(agent)?;
        let registered = self.client_agents.agents.get(agent);
        let Some((r, method)) = registered.and_then(|r| {
            let (method, implemented) = query.method(&r.spec);
            implemented.then_some((r, method))
        }) else {
            return Err(query.unsupported(agent));
        };
        let args = forwarded_args(&r.session, query.fields());
        let host = r.command_host();
        Ok(Box::pin(async move {
            let answer = host.invoke(method, args, false).await;
            answer.map(|a| a.result).map_err(RpcError::Message)
        }))
    }
}
