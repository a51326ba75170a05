//! What a user turn says: plain text, or content blocks (text and base64 images) in the shape
//! the Claude API and CLI take them, decoded and checked here.

use std::borrow::Cow;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::{ErrorCode, FrameError};

/// Image types a turn may carry (the ones the Claude API accepts).
pub const IMAGE_MEDIA_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// Most images in one turn.
pub const MAX_IMAGES: usize = 20;

/// Most blocks in one turn.
pub const MAX_BLOCKS: usize = 64;

/// The content of a user turn.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(untagged)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// Text and image blocks, in order.
    Blocks(Vec<ContentBlock>),
}

/// One block of a turn's content.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image, carried inline.
    Image {
        /// Where the image's bytes are.
        source: ImageSource,
    },
}

/// The bytes of an image block.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ImageSource {
    /// Standard base64 (with padding) of the image file.
    Base64 {
        /// One of [`IMAGE_MEDIA_TYPES`].
        media_type: String,
        /// The file's bytes, base64-encoded.
        data: String,
    },
}

impl Content {
    /// The turn's text: the text itself, or its text blocks joined by blank lines.
    pub fn text(&self) -> Cow<'_, str> {
        match self {
            Content::Text(text) => Cow::Borrowed(text),
            Content::Blocks(blocks) => Cow::Owned(
                blocks
                    .iter()
                    .filter_map(|b| match b {
                        ContentBlock::Text { text } => Some(text.as_str()),
                        ContentBlock::Image { .. } => None,
                    })
                    .collect::<Vec<_>>()
                    .join("\n\n"),
            ),
        }
    }

    /// The turn's images: media type and size in bytes, in order.
    pub fn images(&self) -> Vec<(&str, usize)> {
        match self {
            Content::Text(_) => Vec::new(),
            Content::Blocks(blocks) => blocks
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::Image {
                        source: ImageSource::Base64 { media_type, data },
                    } => Some((media_type.as_str(), decoded_len(data))),
                    ContentBlock::Text { .. } => None,
                })
                .collect(),
        }
    }

    /// The content of a stored `user` message (its whole payload, JSON text) when a user
    /// sent it: text, or valid text and image blocks in a message without the `uuid` every
    /// message an agent prints carries (tool results, the interruption marker). Only the
    /// fields a turn's content has are read, one block at a time: a payload is never built
    /// as a tree.
    pub fn of_stored(payload: &str) -> Option<Content> {
        let payload: StoredPayload = serde_json::from_str(payload).ok()?;
        let content = payload.message?.content?;
        if let Ok(text) = serde_json::from_str::<String>(content.get()) {
            return Some(Content::Text(text));
        }
        if payload.uuid.is_some() {
            return None;
        }
        let Blocks(blocks) = serde_json::from_str(content.get()).ok()?;
        let blocks = blocks
            .into_iter()
            .map(|block| {
                serde_json::from_str::<BlockShape>(block.get()).map(BlockShape::into_value)
            })
            .collect::<Result<Vec<_>, _>>()
            .ok()?;
        decode(Some(&Value::Array(blocks)), usize::MAX).ok()
    }

    /// A title for a conversation that starts with this turn: its text, or `[image]`.
    pub fn title_text(&self) -> Cow<'_, str> {
        let text = self.text();
        if text.trim().is_empty() {
            Cow::Borrowed("[image]")
        } else {
            text
        }
    }
}

/// JSON text `raw` written again compactly through a strict reader (every string decoded as
/// a parse into values would), without building it as a tree: how a payload from outside
/// (an import, an agent's transcript) is stored.
///
/// # Errors
/// When `raw` is not one JSON value.
pub fn strict_json(raw: &str) -> serde_json::Result<String> {
    let mut reader = serde_json::Deserializer::from_str(raw);
    let written = serde_json::to_string(&serde_transcode::Transcoder::new(&mut reader))?;
    reader.end()?;
    Ok(written)
}

/// The fields of a stored message's payload (JSON text) that are read by their shape, without
/// building the payload as a tree: its `uuid` (every message an agent prints carries one) and
/// its `message`.
#[derive(Deserialize)]
pub struct StoredPayload<'a> {
    /// The `uuid`, unread.
    #[serde(borrow, default)]
    pub uuid: Option<&'a RawValue>,
    /// The `message`, for payloads that have one in its shape (one that hasn't is no
    /// message: the `uuid` is still read).
    #[serde(borrow, default, deserialize_with = "shaped")]
    pub message: Option<PayloadMessage<'a>>,
}

/// A value read as `T` when it has `T`'s shape, else none.
fn shaped<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    let raw = <Option<&'de RawValue>>::deserialize(deserializer)?;
    Ok(raw.and_then(|raw| serde_json::from_str(raw.get()).ok()))
}

impl StoredPayload<'_> {
    /// The `uuid`, when it is a string (as every agent's is).
    pub fn uuid(&self) -> Option<String> {
        serde_json::from_str(self.uuid?.get()).ok()
    }
}

/// The `role` and `content` of a stored payload's `message`.
#[derive(Deserialize)]
pub struct PayloadMessage<'a> {
    /// `user` or `assistant`, for messages that have a role.
    #[serde(borrow, default)]
    pub role: Option<Cow<'a, str>>,
    /// The `content`, unread: a string or a list of blocks.
    #[serde(borrow, default)]
    pub content: Option<&'a RawValue>,
}

/// The blocks of a list of at most [`MAX_BLOCKS`], each unread; a longer list is refused
/// before more is read.
struct Blocks<'a>(Vec<&'a RawValue>);

impl<'de: 'a, 'a> Deserialize<'de> for Blocks<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Reader;
        impl<'de> serde::de::Visitor<'de> for Reader {
            type Value = Blocks<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                write!(f, "a list of at most {MAX_BLOCKS} blocks")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Blocks<'de>, A::Error> {
                let mut blocks = Vec::new();
                while let Some(block) = seq.next_element()? {
                    if blocks.len() == MAX_BLOCKS {
                        return Err(serde::de::Error::invalid_length(MAX_BLOCKS + 1, &self));
                    }
                    blocks.push(block);
                }
                Ok(Blocks(blocks))
            }
        }
        deserializer.deserialize_seq(Reader)
    }
}

/// A block with only the fields a turn's blocks may have (anything else is not a turn's).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BlockShape<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    source: Option<SourceShape<'a>>,
}

/// An image source with only the fields one may have.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SourceShape<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    media_type: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    data: Option<Cow<'a, str>>,
}

impl BlockShape<'_> {
    /// The block as a value for [`decode`] to check: small, its shape is known.
    fn into_value(self) -> Value {
        let mut block = Map::new();
        block.insert("type".into(), self.kind.into());
        if let Some(text) = self.text {
            block.insert("text".into(), text.into());
        }
        if let Some(source) = self.source {
            let mut fields = Map::new();
            for (key, value) in [
                ("type", source.kind),
                ("media_type", source.media_type),
                ("data", source.data),
            ] {
                if let Some(value) = value {
                    fields.insert(key.into(), value.into());
                }
            }
            block.insert("source".into(), fields.into());
        }
        block.into()
    }
}

/// The number of bytes `data` (checked standard base64) decodes to.
fn decoded_len(data: &str) -> usize {
    let padding = data.bytes().rev().take_while(|&b| b == b'=').count();
    data.len() / 4 * 3 - padding
}

/// Decodes a chat's `content`: a non-blank string, or a list of text and image blocks with at
/// least one image or non-blank text. Text counts against `max_text_bytes`; images must be
/// valid base64 of a file whose first bytes match its media type.
pub(super) fn decode(value: Option<&Value>, max_text_bytes: usize) -> Result<Content, FrameError> {
    let invalid = |msg: String| FrameError::new(ErrorCode::InvalidContent, msg);
    match value {
        Some(Value::String(s)) if s.trim().is_empty() => Err(invalid("`content` is empty".into())),
        Some(Value::String(s)) if s.len() > max_text_bytes => Err(invalid(format!(
            "`content` is longer than {max_text_bytes} bytes"
        ))),
        Some(Value::String(s)) => Ok(Content::Text(s.clone())),
        Some(Value::Array(items)) => {
            if items.is_empty() {
                return Err(invalid("`content` is empty".into()));
            }
            if items.len() > MAX_BLOCKS {
                return Err(invalid(format!(
                    "`content` has more than {MAX_BLOCKS} blocks"
                )));
            }
            let blocks = items
                .iter()
                .enumerate()
                .map(|(i, item)| block(i, item).map_err(invalid))
                .collect::<Result<Vec<_>, _>>()?;
            let content = Content::Blocks(blocks);
            let images = content.images().len();
            if images > MAX_IMAGES {
                return Err(invalid(format!(
                    "`content` has more than {MAX_IMAGES} images"
                )));
            }
            let text = content.text();
            if text.len() > max_text_bytes {
                return Err(invalid(format!(
                    "the text of `content` is longer than {max_text_bytes} bytes"
                )));
            }
            if images == 0 && text.trim().is_empty() {
                return Err(invalid("`content` has no text and no image".into()));
            }
            Ok(content)
        }
        Some(_) => Err(invalid(
            "`content` must be a string or a list of text and image blocks".into(),
        )),
        None => Err(invalid("`content` is missing".into())),
    }
}

/// Decodes block `i` of a content list.
fn block(i: usize, item: &Value) -> Result<ContentBlock, String> {
    let Value::Object(obj) = item else {
        return Err(format!("`content[{i}]` must be an object"));
    };
    match obj.get("type").and_then(Value::as_str) {
        Some("text") => {
            only_keys(obj, &["type", "text"], &format!("content[{i}]"))?;
            match obj.get("text") {
                Some(Value::String(text)) => Ok(ContentBlock::Text { text: text.clone() }),
                _ => Err(format!("`content[{i}].text` must be a string")),
            }
        }
        Some("image") => {
            only_keys(obj, &["type", "source"], &format!("content[{i}]"))?;
            let Some(Value::Object(source)) = obj.get("source") else {
                return Err(format!("`content[{i}].source` must be an object"));
            };
            image_source(i, source)
        }
        _ => Err(format!("`content[{i}].type` must be `text` or `image`")),
    }
}

/// Decodes and checks the `source` of image block `i`.
fn image_source(i: usize, source: &Map<String, Value>) -> Result<ContentBlock, String> {
    let at = format!("content[{i}].source");
    only_keys(source, &["type", "media_type", "data"], &at)?;
    if source.get("type").and_then(Value::as_str) != Some("base64") {
        return Err(format!("`{at}.type` must be `base64`"));
    }
    let media_type = match source.get("media_type").and_then(Value::as_str) {
        Some(m) if IMAGE_MEDIA_TYPES.contains(&m) => m,
        _ => {
            return Err(format!(
                "`{at}.media_type` must be one of {}",
                IMAGE_MEDIA_TYPES.join(", ")
            ));
        }
    };
    let Some(data) = source.get("data").and_then(Value::as_str) else {
        return Err(format!("`{at}.data` must be a base64 string"));
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|e| format!("`{at}.data` is not standard base64: {e}"))?;
    if !magic_matches(media_type, &bytes) {
        return Err(format!(
            "`{at}.data` is not {media_type} data (its first bytes don't match)"
        ));
    }
    Ok(ContentBlock::Image {
        source: ImageSource::Base64 {
            media_type: media_type.to_owned(),
            data: data.to_owned(),
        },
    })
}

/// Whether `bytes` start as a file of `media_type` does.
fn magic_matches(media_type: &str, bytes: &[u8]) -> bool {
    match media_type {
        "image/png" => bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
        "image/jpeg" => bytes.starts_with(&[0xFF, 0xD8, 0xFF]),
        "image/gif" => bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a"),
        "image/webp" => bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP",
        _ => false,
    }
}

/// Refuses keys of `obj` other than `allowed`.
fn only_keys(obj: &Map<String, Value>, allowed: &[&str], at: &str) -> Result<(), String> {
    match obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(key) => Err(format!("`{at}` has an unknown field `{key}`")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n0000IHDR";

    /// A payload's `uuid` is its string, whatever shape its `message` has.
    #[test]
    fn a_payloads_uuid_is_read_whatever_its_message() {
        let uuid = |payload: &str| {
            serde_json::from_str::<StoredPayload>(payload)
                .unwrap()
                .uuid()
        };
        assert_eq!(
            uuid(r#"{"uuid":"u1","message":{"role":"user"}}"#).as_deref(),
            Some("u1")
        );
        assert_eq!(
            uuid(r#"{"uuid":"u2","message":{"role":5}}"#).as_deref(),
            Some("u2")
        );
        assert_eq!(
            uuid(r#"{"uuid":"u3","message":"text"}"#).as_deref(),
            Some("u3")
        );
        assert_eq!(uuid(r#"{"uuid":7}"#), None);
        assert_eq!(uuid(r#"{"message":{"content":"hi"}}"#), None);
    }

    fn png() -> String {
        base64::engine::general_purpose::STANDARD.encode(PNG)
    }

    fn image(media_type: &str, data: &str) -> Value {
        json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}})
    }

    fn err(value: Value) -> String {
        decode(Some(&value), 100).unwrap_err().message
    }

    #[test]
    fn blocks_round_trip_and_describe_themselves() {
        let value = json!([{"type": "text", "text": "what is this?"}, image("image/png", &png())]);
        let content = decode(Some(&value), 100).unwrap();
        assert_eq!(serde_json::to_value(&content).unwrap(), value);
        assert_eq!(content.text(), "what is this?");
        assert_eq!(content.images(), vec![("image/png", PNG.len())]);
        let only_image = decode(Some(&json!([image("image/png", &png())])), 100).unwrap();
        assert_eq!(only_image.title_text(), "[image]");
        let stored = json!({"type": "user", "message": {"role": "user", "content": value}});
        assert_eq!(Content::of_stored(&stored.to_string()), Some(content));
        let marker = json!({"type": "user", "uuid": "u1", "message": {"role": "user",
            "content": [{"type": "text", "text": "[Request interrupted by user]"}]}});
        assert_eq!(
            Content::of_stored(&marker.to_string()),
            None,
            "an agent's message"
        );
    }

    #[test]
    fn bad_blocks_are_refused_with_where_and_why() {
        assert_eq!(err(json!([])), "`content` is empty");
        assert_eq!(
            err(json!([{"type": "text", "text": "  "}])),
            "`content` has no text and no image"
        );
        assert_eq!(
            err(json!([{"type": "document"}])),
            "`content[0].type` must be `text` or `image`"
        );
        assert_eq!(
            err(json!([{"type": "text", "text": "a", "cache_control": {}}])),
            "`content[0]` has an unknown field `cache_control`"
        );
        assert!(
            err(json!([image("image/svg+xml", &png())])).contains("media_type` must be one of")
        );
        assert!(err(json!([image("image/png", "not base64!")])).contains("not standard base64"));
        assert_eq!(
            err(json!([image("image/jpeg", &png())])),
            "`content[0].source.data` is not image/jpeg data (its first bytes don't match)"
        );
        let url = json!([{"type": "image", "source": {"type": "url", "url": "http://x/"}}]);
        assert!(err(url).contains("has an unknown field `url`"));
        assert_eq!(
            err(json!([{"type": "text", "text": "x".repeat(101)}])),
            "the text of `content` is longer than 100 bytes"
        );
        let many: Vec<Value> = (0..=MAX_IMAGES)
            .map(|_| image("image/png", &png()))
            .collect();
        assert_eq!(
            err(Value::Array(many)),
            format!("`content` has more than {MAX_IMAGES} images")
        );
        assert_eq!(
            err(json!(42)),
            "`content` must be a string or a list of text and image blocks"
        );
    }

    #[test]
    fn decoded_len_counts_padding() {
        for n in 0..10 {
            let data = base64::engine::general_purpose::STANDARD.encode(vec![7u8; n]);
            assert_eq!(decoded_len(&data), n);
        }
    }
}
