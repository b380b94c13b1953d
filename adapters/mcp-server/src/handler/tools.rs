//! Each tool's call: its arguments parsed, the gateway asked, the answer shaped as the tool's
//! result.

use quarry_domain::Error;
use quarry_ports::Requester;
use serde_json::{Value, json};

use super::GatewayServer;
use crate::{
    args,
    catalogue::{CONFIGURE_AUTH_TOOL, READ_TOOL, REFRESH_AUTH_TOOL, TEST_AUTH_TOOL},
};

impl GatewayServer {
    pub(super) async fn call_list(
        &self,
        arguments: Option<rmcp::model::JsonObject>,
    ) -> Result<Value, Error> {
        let call = args::list(arguments)?;
        let mut result = self.gateway.list_resources(call.query).await?;
        if !call.include_metadata {
            for r in &mut result.resources {
                r.metadata.clear();
            }
        }
        serde_json::to_value(result).map_err(|_| Error::internal())
    }

    /// `read_mcp_resource`'s result for `arguments`, whichever path the call came by (rmcp's,
    /// or `http::direct`'s).
    pub(super) async fn read_tool(
        &self,
        arguments: Option<rmcp::model::JsonObject>,
    ) -> rmcp::model::CallToolResult {
        let uri = args::requested_uri(arguments.as_ref());
        let outcome = self.call_read(arguments).await.map_err(|e| (e, uri));
        super::tool_result(READ_TOOL, outcome)
    }

    async fn call_read(&self, arguments: Option<rmcp::model::JsonObject>) -> Result<Value, Error> {
        let request = args::read(
            arguments,
            self.options.inline_limit,
            self.options.principal.clone(),
        )?;
        let result = self.gateway.read_resource(request).await?;
        serde_json::to_value(result).map_err(|_| Error::internal())
    }

    pub(super) async fn call_versions(
        &self,
        arguments: Option<rmcp::model::JsonObject>,
    ) -> Result<Value, Error> {
        let uri = args::versions(arguments)?;
        let versions = self.gateway.versions(&uri).await?;
        Ok(json!({"success": true, "uri": uri, "versions": versions}))
    }

    pub(super) async fn call_purge(
        &self,
        arguments: Option<rmcp::model::JsonObject>,
    ) -> Result<Value, Error> {
        let (server, uri, key) = args::purge(arguments)?;
        let report = self.gateway.purge(server, uri, key).await?;
        Ok(
            json!({"success": true, "purged_contents": report.contents, "purged_listings": report.listings}),
        )
    }

    pub(super) async fn call_templates(
        &self,
        arguments: Option<rmcp::model::JsonObject>,
    ) -> Result<Value, Error> {
        let server = args::templates(arguments)?;
        let templates: Vec<_> = self
            .gateway
            .list_templates()
            .await?
            .into_iter()
            .filter(|t| server.as_ref().is_none_or(|s| &t.server == s))
            .collect();
        Ok(json!({"success": true, "templates": templates}))
    }

    pub(super) async fn call_audit_export(
        &self,
        arguments: Option<rmcp::model::JsonObject>,
    ) -> Result<Value, Error> {
        let (filter, after, limit) = args::audit_export(arguments)?;
        let page = self.gateway.export_audit(filter, after, limit).await?;
        Ok(json!({"success": true, "records": page.records, "next_after": page.next_after}))
    }

    pub(super) async fn call_add_server(
        &self,
        arguments: Option<rmcp::model::JsonObject>,
    ) -> Result<Value, Error> {
        let (server, key) = args::add_server(arguments)?;
        let status = self
            .gateway
            .add_server(server, Requester::Agent, key)
            .await?;
        let mut value = serde_json::to_value(status).map_err(|_| Error::internal())?;
        if let Some(map) = value.as_object_mut() {
            map.insert("success".into(), Value::Bool(true));
        }
        Ok(value)
    }

    pub(super) async fn call_remove_server(
        &self,
        arguments: Option<rmcp::model::JsonObject>,
    ) -> Result<Value, Error> {
        let (name, key) = args::remove_server(arguments)?;
        let removed = self
            .gateway
            .remove_server(name, Requester::Agent, key)
            .await?;
        Ok(
            json!({"success": true, "server_name": removed.server_name, "purged_contents": removed.purged_contents}),
        )
    }

    /// McpAuthTool's operations. A result that says `success: false` (a failed connection
    /// test) is an error result too.
    pub(super) async fn call_auth(
        &self,
        tool: &str,
        arguments: Option<rmcp::model::JsonObject>,
    ) -> Result<Value, Error> {
        let result = match tool {
            CONFIGURE_AUTH_TOOL => {
                let call = args::configure_auth(arguments)?;
                self.gateway
                    .configure_auth(
                        call.server,
                        call.auth,
                        call.test_connection,
                        Requester::Agent,
                        call.key,
                    )
                    .await?
            }
            TEST_AUTH_TOOL => {
                let (server, _, _) = args::auth_server(tool, arguments)?;
                self.gateway.test_auth(server).await?
            }
            REFRESH_AUTH_TOOL => {
                let (server, _, key) = args::auth_server(tool, arguments)?;
                self.gateway
                    .refresh_auth(server, Requester::Agent, key)
                    .await?
            }
            _ => {
                let (server, force, key) = args::auth_server(tool, arguments)?;
                self.gateway
                    .remove_auth(server, force, Requester::Agent, key)
                    .await?
            }
        };
        serde_json::to_value(result).map_err(|e| {
            tracing::error!("{e}");
            Error::internal()
        })
    }
}
