//! `servers.NAME.expose`: how a server's resources are published. `"gateway"` (the default)
//! gives them gateway URIs; `"native"` (transparent mode) publishes one server's resources with
//! their own URIs, which only makes sense while it is the only server.

use quarry_domain::ServerName;

/// The server published natively, if one is, from each server's `expose` value.
///
/// # Errors
/// The message for an unknown value, for `native` beside other servers, and for `native` with
/// agents allowed to register more (`registry.allow_tool_registration`).
pub(super) fn native_server(
    exposed: Vec<(ServerName, Option<String>)>,
    allow_tool_registration: bool,
) -> Result<Option<ServerName>, String> {
    let count = exposed.len();
    let mut native = None;
    for (name, expose) in exposed {
        match expose.as_deref() {
            None | Some("gateway") => {}
            Some("native") => native = Some(name),
            Some(other) => {
                return Err(format!(
                    "servers.{name}.expose must be \"gateway\" or \"native\", got {:?}",
                    other.chars().take(40).collect::<String>()
                ));
            }
        }
    }
    let Some(name) = native else {
        return Ok(None);
    };
    if count > 1 {
        return Err(format!(
            "servers.{name}.expose = \"native\" publishes that server's own URIs, which needs it to be the only server ({count} are configured); with several servers, resources have gateway URIs"
        ));
    }
    if allow_tool_registration {
        return Err(format!(
            "servers.{name}.expose = \"native\" needs registry.allow_tool_registration = false: agents could add a second server"
        ));
    }
    Ok(Some(name))
}
