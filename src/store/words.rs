//! What a search matches, by one rule for both engines: the words of a stored message's text
//! and of a title as each engine's index keeps them, and the words of a search.
//!
//! A word is a run of letters and digits (Unicode's), lowercased and cut to
//! [`MAX_WORD_CHARS`]; everything else separates words. A message's text is what the user or
//! the agent wrote: the string values under its `message.content` (a prompt, `text` blocks,
//! tool results), never JSON keys, ids or other fields, and only its first [`MAX_TEXT_BYTES`].
//! A search matches a title or a message that has, for each of its words, a word starting with
//! it. Both engines are given the words made here, so that they agree on what a word is:
//! SQLite's FTS5 table splits them again only at the spaces between them, and PostgreSQL takes
//! them as the lexemes of a `tsvector` as they are.

use std::borrow::Cow;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::protocol::StoredPayload;

/// Longest word kept, in characters; a longer one is kept cut to this length (and a search's
/// word too, so that it still finds it).
pub const MAX_WORD_CHARS: usize = 64;
/// How much of a message's text is indexed, in bytes.
pub const MAX_TEXT_BYTES: usize = 64 * 1024;

/// Words gathered from texts into one buffer, then made distinct, sorted and joined by single
/// spaces, as both engines store them.
#[derive(Default)]
struct Words {
    /// Each word lowercased, one after the other.
    buf: String,
    /// Where each word is in `buf`.
    spans: Vec<(usize, usize)>,
    /// Bytes of text still to take (see [`MAX_TEXT_BYTES`]).
    budget: usize,
}

impl Words {
    fn new() -> Self {
        Words {
            budget: MAX_TEXT_BYTES,
            ..Words::default()
        }
    }

    /// Takes the words of `text`, or of as much of it as the budget leaves.
    fn add(&mut self, text: &str) {
        let mut end = text.len().min(self.budget);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        // A text cut short uses the whole budget.
        self.budget = if end < text.len() {
            0
        } else {
            self.budget - end
        };
        for word in text[..end]
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
        {
            let start = self.buf.len();
            let word = crate::protocol::truncate_chars(word, MAX_WORD_CHARS);
            if word.is_ascii() {
                self.buf
                    .extend(word.bytes().map(|b| b.to_ascii_lowercase() as char));
            } else {
                self.buf.extend(word.chars().flat_map(char::to_lowercase));
            }
            self.spans.push((start, self.buf.len()));
        }
    }

    /// The distinct words, in the order first found.
    fn distinct(&self) -> Vec<String> {
        let mut words: Vec<String> = Vec::new();
        for &(a, b) in &self.spans {
            let word = &self.buf[a..b];
            if !words.iter().any(|w| w == word) {
                words.push(word.to_owned());
            }
        }
        words
    }

    /// The distinct words, sorted and joined; None when there is none.
    fn joined(self) -> Option<String> {
        let mut words: Vec<&str> = self.spans.iter().map(|&(a, b)| &self.buf[a..b]).collect();
        words.sort_unstable();
        words.dedup();
        (!words.is_empty()).then(|| words.join(" "))
    }
}

/// The stored words of a title.
pub fn title_words(title: &str) -> Option<String> {
    let mut words = Words::new();
    words.add(title);
    words.joined()
}

/// The stored words of a message: those of the text of a `user` or `assistant` message whose
/// payload is JSON; None for any other message, or when its text has no word.
pub fn message_words(message_type: &str, payload: &str) -> Option<String> {
    if !matches!(message_type, "user" | "assistant") {
        return None;
    }
    let content = serde_json::from_str::<StoredPayload>(payload)
        .ok()?
        .message?
        .content?;
    let mut words = Words::new();
    let mut reader = serde_json::Deserializer::from_str(content.get());
    Text {
        key: None,
        words: &mut words,
    }
    .deserialize(&mut reader)
    .ok()?;
    words.joined()
}

/// The text under a node of a message's `content`, found under `key` (None at the top), read
/// into `words` as it is parsed: the node itself when it is a string at the top or under a
/// `text` or `content` key, and the same below it; never an array's strings, keys or other
/// fields.
struct Text<'w, 'k> {
    key: Option<&'k str>,
    words: &'w mut Words,
}

impl<'de> DeserializeSeed<'de> for Text<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Text<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("JSON")
    }

    fn visit_str<E>(self, text: &str) -> Result<(), E> {
        if matches!(self.key, None | Some("text" | "content")) && self.words.budget > 0 {
            self.words.add(text);
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            map.next_value_seed(Text {
                key: Some(&key),
                words: &mut *self.words,
            })?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<(), A::Error> {
        while items
            .next_element_seed(Text {
                key: Some("#"),
                words: &mut *self.words,
            })?
            .is_some()
        {}
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

/// The words of a search, distinct, in the order given. A search without any matches nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchWords(Vec<String>);

impl SearchWords {
    /// The words of the search text `q`; whatever else it holds (quotes, `*`, parentheses,
    /// operators of either engine's query language) only separates them.
    pub fn parse(q: &str) -> Self {
        let mut words = Words::new();
        words.add(q);
        SearchWords(words.distinct())
    }

    /// Whether the search has no word (and so matches nothing).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Each word with a space before it: in stored words (joined by single spaces) with a
    /// space put before them, it is found exactly where a word starts with it.
    pub fn needles(&self) -> impl Iterator<Item = String> + '_ {
        self.0.iter().map(|w| format!(" {w}"))
    }

    /// The search as an FTS5 query: each word a quoted prefix, all of them required. A word
    /// holds no quote, so quoting takes it literally.
    pub fn fts5(&self) -> String {
        let terms: Vec<String> = self.0.iter().map(|w| format!("\"{w}\"*")).collect();
        terms.join(" ")
    }

    /// The search as a PostgreSQL `tsquery` (read by a cast, which takes each quoted lexeme as
    /// it is): each word a prefix, all of them required.
    pub fn tsquery(&self) -> String {
        let terms: Vec<String> = self
            .0
            .iter()
            .map(|w| format!("'{}':*", w.replace('\\', "\\\\").replace('\'', "''")))
            .collect();
        terms.join(" & ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn words_of(kind: &str, payload: Value) -> Option<String> {
        message_words(kind, &payload.to_string())
    }

    #[test]
    fn text_is_what_was_written_never_keys_or_ids() {
        assert_eq!(
            words_of(
                "user",
                json!({"type": "user", "uuid": "u-1", "message": {"role": "user", "content": "Deploy the API, then café!"}})
            )
            .as_deref(),
            Some("api café deploy the then")
        );
        let blocks = json!({"message": {"id": "msg_42", "content": [
            {"type": "text", "text": "Hello World"},
            {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}},
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "100% done"}]},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "plain output"},
            {"type": "image", "source": {"type": "base64", "data": "AAAAQQ"}},
            ["loose", "strings"]
        ]}});
        assert_eq!(
            words_of("assistant", blocks).as_deref(),
            Some("100 done hello output plain world")
        );
        assert_eq!(words_of("result", json!({"result": "done"})), None);
        assert_eq!(
            words_of("status", json!({"message": {"content": "x"}})),
            None
        );
        assert_eq!(message_words("user", "not json: needle"), None);
        assert_eq!(
            words_of("user", json!({"message": {"content": "?!"}})),
            None
        );
    }

    #[test]
    fn long_words_and_long_texts_are_cut() {
        let long = "x".repeat(MAX_WORD_CHARS + 10);
        assert_eq!(title_words(&long).unwrap().chars().count(), MAX_WORD_CHARS);
        let text = format!("{} tail", "abc ".repeat(MAX_TEXT_BYTES));
        let words = words_of("user", json!({"message": {"content": text}})).unwrap();
        assert_eq!(words, "abc", "what follows the first 64 KiB is not indexed");
    }

    #[test]
    fn a_search_is_words_whatever_else_it_holds() {
        let s = SearchWords::parse(r#"  "deploy" OR (api*) NEAR -x - it's  DEPLOY "#);
        assert_eq!(s.0, ["deploy", "or", "api", "near", "x", "it", "s"]);
        assert_eq!(
            s.fts5(),
            r#""deploy"* "or"* "api"* "near"* "x"* "it"* "s"*"#
        );
        assert_eq!(SearchWords::parse("a b").tsquery(), "'a':* & 'b':*");
        assert!(SearchWords::parse(r#"" * ( ) - % _"#).is_empty());
        assert_eq!(SearchWords::parse("ÉCOLE").0, ["école"]);
    }
}
