//! What the guard needs to know of a posted JSON-RPC message before rmcp sees it: each
//! request's method, id and tool, and an `initialize`'s parameters. A single message (a JSON
//! object) is read through a borrowing view that skips what the guard does not use (`_meta`,
//! a tool's arguments, a resource's URI); anything else (a batch, duplicate keys, a method that
//! is not a string) is read as a whole JSON value, so both ways see the same message.

use std::borrow::Cow;

use serde::{Deserialize, Deserializer};
use serde_json::{Value, value::RawValue};

/// A posted message, as far as the guard looks.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Message {
    /// The message's requests: one, or a batch's members.
    pub(super) calls: Vec<Call>,
    /// It was a batch (a JSON array).
    pub(super) batch: bool,
}

/// One JSON-RPC message of a post.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Call {
    /// `method`, when it is a string.
    pub(super) method: Option<String>,
    /// `id`, when the message has one (`null` included).
    pub(super) id: Option<Value>,
    /// `params.name` of a `tools/call`, when it is a string.
    pub(super) tool: Option<String>,
    /// `params` of an `initialize` (`null` when it has none).
    pub(super) initialize: Option<Value>,
}

impl Message {
    /// The message `body` holds; None when it is not JSON (rmcp answers that).
    pub(super) fn read(body: &[u8]) -> Option<Self> {
        let starts_object = body
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|b| *b == b'{');
        if starts_object
            && let Some(call) = serde_json::from_slice::<View<'_>>(body)
                .ok()
                .and_then(View::call)
        {
            return Some(Self {
                calls: vec![call],
                batch: false,
            });
        }
        serde_json::from_slice::<Value>(body)
            .ok()
            .map(|value| Self::of(&value))
    }

    fn of(value: &Value) -> Self {
        let mut calls = Vec::new();
        gather(value, &mut calls);
        Self {
            calls,
            batch: value.is_array(),
        }
    }
}

/// The calls in `value`: itself, or a batch's members, arrays inside it included (a scope check
/// must see a call however deep it is put).
fn gather(value: &Value, calls: &mut Vec<Call>) {
    match value {
        Value::Array(members) => members.iter().for_each(|m| gather(m, calls)),
        one => calls.push(Call::of(one)),
    }
}

impl Call {
    fn of(value: &Value) -> Self {
        let method = value.get("method").and_then(Value::as_str);
        Self {
            method: method.map(str::to_owned),
            id: value.get("id").cloned(),
            tool: (method == Some("tools/call"))
                .then(|| value.pointer("/params/name").and_then(Value::as_str))
                .flatten()
                .map(str::to_owned),
            initialize: (method == Some("initialize"))
                .then(|| value.get("params").cloned().unwrap_or(Value::Null)),
        }
    }

    /// A request (it has an id and a method), not a notification or a response.
    pub(super) fn is_request(&self) -> bool {
        self.id.is_some() && self.method.is_some()
    }
}

/// A JSON object's fields the guard reads, borrowed where they can be.
#[derive(Deserialize)]
struct View<'a> {
    #[serde(default, borrow)]
    method: Option<Cow<'a, str>>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
}

/// A field that is there, `null` included (a missing one is the default, None).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// `params.name`, borrowed where it can be.
#[derive(Deserialize)]
struct Named<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
}

impl View<'_> {
    /// The call, or None when its parameters must be read as a whole value (a tool's name
    /// given twice, or not as a string).
    fn call(self) -> Option<Call> {
        let method = self.method.as_deref();
        let params = self.params.map(|p| p.get().trim_start());
        let tool = match params.filter(|p| p.starts_with('{')) {
            Some(p) if method == Some("tools/call") => serde_json::from_str::<Named<'_>>(p)
                .ok()?
                .name
                .map(Cow::into_owned),
            _ => None,
        };
        let initialize = match params {
            _ if method != Some("initialize") => None,
            Some(p) => Some(serde_json::from_str(p).ok()?),
            None => Some(Value::Null),
        };
        Some(Call {
            method: self.method.map(Cow::into_owned),
            id: self.id,
            tool,
            initialize,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Message {
        /// The message when it is one request or notification, not a batch.
        fn single(&self) -> Option<&Call> {
            if self.batch { None } else { self.calls.first() }
        }
    }

    /// Read through the view where it applies, and as a whole value: the same message.
    fn both(body: &str) -> Option<Message> {
        let read = Message::read(body.as_bytes());
        let whole = serde_json::from_str::<Value>(body)
            .ok()
            .map(|v| Message::of(&v));
        assert_eq!(read, whole, "{body}");
        read
    }

    #[test]
    fn the_view_reads_what_the_whole_value_holds() {
        let read = both(
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"_meta":{"a":[1,{"b":"c"}]},"arguments":{"name":"not this"},"name":"read_mcp_resource"}}"#,
        )
        .unwrap();
        assert_eq!(
            read.single().unwrap().tool.as_deref(),
            Some("read_mcp_resource")
        );
        assert!(read.single().unwrap().is_request());
        let read =
            both(r#" {"id":null,"method":"resources/read","params":{"uri":"mcp://a/b"}}"#).unwrap();
        assert_eq!(read.single().unwrap().id, Some(Value::Null));
        assert!(read.single().unwrap().tool.is_none());
        let spaced = both(
            "{ \"id\" : 1 , \"method\" : \"tools/call\" , \"params\" :\r\n { \"name\" : \"remove_mcp_server\" } }",
        )
        .unwrap();
        assert_eq!(
            spaced.single().unwrap().tool.as_deref(),
            Some("remove_mcp_server")
        );
        let read = both(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap();
        assert!(!read.single().unwrap().is_request());
        let read =
            both(r#"{"id":"x","method":"initialize","params":{"protocolVersion":"2025-11-25"}}"#)
                .unwrap();
        assert_eq!(
            read.single().unwrap().initialize,
            Some(serde_json::json!({"protocolVersion":"2025-11-25"}))
        );
        let read = both(r#"{"id":1,"method":"initialize"}"#).unwrap();
        assert_eq!(read.single().unwrap().initialize, Some(Value::Null));
    }

    #[test]
    fn odd_messages_read_as_the_whole_value_reads_them() {
        // Escapes in the method and the name, duplicate keys (the last wins), a method or name
        // that is not a string, params that are not an object, a response, a batch.
        for body in [
            r#"{"id":1,"method":"tools\/call","params":{"name":"read_mcp_\u0072esource"}}"#,
            r#"{"id":1,"method":"resources/list","method":"tools/call","params":{"name":"remove_mcp_server"}}"#,
            r#"{"id":1,"method":"tools/call","params":{"name":"a","name":"configure_resource_auth"}}"#,
            r#"{"id":1,"method":7}"#,
            r#"{"id":1,"method":"tools/call","params":{"name":["x"]}}"#,
            r#"{"id":1,"method":"tools/call","params":["configure_resource_auth"]}"#,
            r#"{"id":1,"method":"tools/call","params":null}"#,
            "{ \"id\" : 1 ,\n \"method\" :\t\"tools/call\" , \"params\" :\r\n { \"name\" : \"remove_mcp_server\" } }\n",
            r#"{"jsonrpc":"2.0","id":3,"result":{}}"#,
            r#"[{"id":1,"method":"tools/call","params":{"name":"remove_mcp_server"}},{"method":"x"},5]"#,
            r#"["tools/call"]"#,
            r#""text""#,
            "{}",
        ] {
            assert!(both(body).is_some(), "{body}");
        }
        let nested =
            both(r#"[[{"id":1,"method":"tools/call","params":{"name":"remove_mcp_server"}}]]"#)
                .unwrap();
        assert_eq!(nested.calls.len(), 1);
        assert_eq!(nested.calls[0].tool.as_deref(), Some("remove_mcp_server"));
        let batch = both(r#"[{"id":1,"method":"initialize"}]"#).unwrap();
        assert!(batch.batch && batch.single().is_none());
        let dup = both(r#"{"id":1,"method":"tools/call","params":{"name":"a","name":"b"}}"#);
        assert_eq!(dup.unwrap().single().unwrap().tool.as_deref(), Some("b"));
    }

    #[test]
    fn what_is_not_json_is_no_message() {
        for body in ["", "{", "{\"id\":1,}", "nope", "{\"method\":\"a\"} x"] {
            assert_eq!(Message::read(body.as_bytes()), None, "{body}");
        }
    }
}
