//! One message from an agent as the server routes it: the line kept verbatim, with its
//! `type`, `subtype`, `uuid` and `session_id` read without a value tree of the whole line when
//! that is sure to agree with one (and through one otherwise).

use serde_json::Value;

/// One message from the agent, kept verbatim.
#[derive(Debug, Clone)]
pub struct AgentMessage {
    /// The message's `type` (`system`, `assistant`, `user`, `result`, `stream_event`, ...).
    pub kind: String,
    /// The message's `subtype`, if any.
    pub subtype: Option<String>,
    /// The message's `uuid`, if any.
    pub uuid: Option<String>,
    /// The message's `session_id`, if any.
    pub session_id: Option<String>,
    /// The JSON object exactly as the agent wrote it.
    pub raw: String,
}

impl AgentMessage {
    /// Reads the routing fields of one JSON object line.
    ///
    /// # Errors
    /// When the line is not a JSON object with a string `type`.
    pub fn parse(raw: String) -> Result<Self, String> {
        // The common case (an object with each key once) reads the four fields without building
        // a value tree of the whole line; anything else takes the general path below.
        if raw.trim_start().starts_with('{')
            && !needs_value_tree(&raw)
            && let Ok(head) = serde_json::from_str::<Head>(&raw)
            && let Some(kind) = head.kind.and_then(RawField::into_string)
        {
            return Ok(AgentMessage {
                kind,
                subtype: head.subtype.and_then(RawField::into_string),
                uuid: head.uuid.and_then(RawField::into_string),
                session_id: head.session_id.and_then(RawField::into_string),
                raw,
            });
        }
        let value: Value = serde_json::from_str(&raw).map_err(|e| format!("not JSON: {e}"))?;
        let field = |k: &str| value.get(k).and_then(Value::as_str).map(str::to_owned);
        let kind = field("type").ok_or("no string `type`")?;
        Ok(AgentMessage {
            subtype: field("subtype"),
            uuid: field("uuid"),
            session_id: field("session_id"),
            kind,
            raw,
        })
    }
}

/// Whether `raw` holds something that skipping a field does not check, so that the line must
/// take the general path, which refuses it as the rest of the server would: a number too large
/// for an `f64` (a run of 300 digits, or an exponent of three digits or more), or a `\u` escape
/// naming a UTF-16 surrogate (which may stand alone). Such text inside a string only costs that
/// line the slower path.
fn needs_value_tree(raw: &str) -> bool {
    may_overflow(raw) || names_a_surrogate(raw)
}

/// Whether `raw` has a `\uD800`–`\uDFFF` escape (in either case).
fn names_a_surrogate(raw: &str) -> bool {
    raw.as_bytes().windows(4).any(|w| {
        w[0] == b'\\'
            && w[1] == b'u'
            && w[2].eq_ignore_ascii_case(&b'd')
            && matches!(w[3].to_ascii_lowercase(), b'8'..=b'9' | b'a'..=b'f')
    })
}

/// Whether `raw` may hold a number too large for an `f64`.
fn may_overflow(raw: &str) -> bool {
    let bytes = raw.as_bytes();
    let mut digits = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if b.is_ascii_digit() {
            digits += 1;
            if digits >= 300 {
                return true;
            }
            continue;
        }
        if digits > 0 && (b == b'e' || b == b'E') {
            let rest = &bytes[i + 1..];
            let rest = rest
                .strip_prefix(b"-")
                .or(rest.strip_prefix(b"+"))
                .unwrap_or(rest);
            if rest.iter().take_while(|d| d.is_ascii_digit()).count() >= 3 {
                return true;
            }
        }
        if b != b'.' {
            digits = 0;
        }
    }
    false
}

/// The routing fields of an agent's line, each as it is written (other fields are skipped).
#[derive(serde::Deserialize)]
struct Head<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<RawField<'a>>,
    #[serde(borrow)]
    subtype: Option<RawField<'a>>,
    #[serde(borrow)]
    uuid: Option<RawField<'a>>,
    #[serde(borrow)]
    session_id: Option<RawField<'a>>,
}

/// A field's JSON text, whatever its type.
#[derive(serde::Deserialize)]
#[serde(transparent)]
struct RawField<'a>(#[serde(borrow)] &'a serde_json::value::RawValue);

impl RawField<'_> {
    /// The field's value when it is a string (`None` for any other type).
    fn into_string(self) -> Option<String> {
        let text = self.0.get();
        if text.starts_with('"') {
            serde_json::from_str(text).ok()
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `type`, `subtype`, `uuid` and `session_id` as read.
    type Fields = (String, Option<String>, Option<String>, Option<String>);

    fn parsed(line: &str) -> Result<Fields, String> {
        AgentMessage::parse(line.to_owned()).map(|m| {
            assert_eq!(m.raw, line, "kept verbatim");
            (m.kind, m.subtype, m.uuid, m.session_id)
        })
    }

    #[test]
    fn routing_fields_are_read_as_the_value_tree_reads_them() {
        let s = |v: &str| Some(v.to_owned());
        assert_eq!(
            parsed(
                r#"{"type":"system","subtype":"init","uuid":"u-1","session_id":"s\u002d1","x":{"type":"no"}}"#
            ),
            Ok(("system".into(), s("init"), s("u-1"), s("s-1")))
        );
        // Fields of other types count as absent, as `null` does.
        assert_eq!(
            parsed(r#"{"type":"result","subtype":null,"uuid":7,"session_id":["s"]}"#),
            Ok(("result".into(), None, None, None))
        );
        // A repeated key: the last one wins, as in a parsed value.
        assert_eq!(
            parsed(r#"{"type":"user","type":"assistant"}"#),
            Ok(("assistant".into(), None, None, None))
        );
        assert!(parsed(r#"{"type":1}"#).is_err(), "type must be a string");
        assert!(parsed(r#"{"subtype":"x"}"#).is_err(), "type is required");
        assert!(parsed(r#"["type","x"]"#).is_err(), "not an object");
        assert!(parsed(r#"{"type":"x""#).is_err(), "not JSON");
        assert!(parsed(r#"{"type":"x"} trailing"#).is_err(), "not JSON");
        // A number out of an f64's range is refused, as a parsed value refuses it (found by
        // fuzzing); one in range, or such text inside a string, is fine.
        assert!(parsed(r#"{"type":"result","total_cost_usd":1e1111}"#).is_err());
        assert!(parsed(&format!(r#"{{"type":"result","n":{}}}"#, "9".repeat(400))).is_err());
        assert_eq!(
            parsed(r#"{"type":"result","total_cost_usd":1.5e-300,"note":"1e999"}"#),
            Ok(("result".into(), None, None, None))
        );
        // Surrogate escapes in a skipped field are taken or refused as a parsed value takes or
        // refuses them (found by fuzzing): a leading one followed by another escape, or a
        // trailing one alone, is refused; a pair is a character like any other.
        assert!(parsed(r#"{"type":"user","x":"\ud9e3\n"}"#).is_err());
        assert!(parsed(r#"{"type":"user","x":"\uDC00"}"#).is_err());
        assert_eq!(
            parsed(r#"{"type":"user","x":"\ud83d\ude00"}"#),
            Ok(("user".into(), None, None, None))
        );
    }
}
