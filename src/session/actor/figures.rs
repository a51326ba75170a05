//! The figures of an agent's `result`, read without a value tree: what it cost and used, the
//! model that cost the most, and whether the model API's rate limit ended it.

use serde_json::{Map, Value};

/// The figures a `result` reports; a field that is absent or of another type counts as absent.
#[derive(Debug, Default, PartialEq, serde::Deserialize)]
pub(super) struct ResultFigures {
    /// The agent's running total for its process, in US dollars.
    pub(super) total_cost_usd: Option<f64>,
    usage: Option<UsageFigures>,
    pub(super) duration_ms: Option<i64>,
    is_error: Option<bool>,
    api_error_status: Option<i64>,
    api_error_type: Option<String>,
    error: Option<String>,
    /// What each model cost, by name.
    #[serde(rename = "modelUsage")]
    model_usage: Option<Map<String, Value>>,
}

/// The token counts of a `result`'s `usage`.
#[derive(Debug, Default, PartialEq, serde::Deserialize)]
pub(super) struct UsageFigures {
    pub(super) input_tokens: Option<i64>,
    pub(super) output_tokens: Option<i64>,
    pub(super) cache_read_input_tokens: Option<i64>,
    pub(super) cache_creation_input_tokens: Option<i64>,
}

impl ResultFigures {
    /// Reads the figures of a result, skipping the rest of it (its reply text and so on)
    /// without building a value tree; all absent when it is not JSON. A result that the typed
    /// read refuses (a field of another type, a key given twice) is read from a value tree
    /// instead, field by field.
    pub(super) fn read(raw: &str) -> Self {
        serde_json::from_str(raw).unwrap_or_else(|_| {
            let v: Value = serde_json::from_str(raw).unwrap_or_default();
            let u = &v["usage"];
            let text = |v: &Value| v.as_str().map(str::to_owned);
            ResultFigures {
                total_cost_usd: v["total_cost_usd"].as_f64(),
                usage: Some(UsageFigures {
                    input_tokens: u["input_tokens"].as_i64(),
                    output_tokens: u["output_tokens"].as_i64(),
                    cache_read_input_tokens: u["cache_read_input_tokens"].as_i64(),
                    cache_creation_input_tokens: u["cache_creation_input_tokens"].as_i64(),
                }),
                duration_ms: v["duration_ms"].as_i64(),
                is_error: v["is_error"].as_bool(),
                api_error_status: v["api_error_status"].as_i64(),
                api_error_type: text(&v["api_error_type"]),
                error: text(&v["error"]),
                model_usage: v["modelUsage"].as_object().cloned(),
            }
        })
    }

    /// A count of the result's `usage` (0 when absent).
    pub(super) fn tokens(&self, count: fn(&UsageFigures) -> Option<i64>) -> i64 {
        self.usage.as_ref().and_then(count).unwrap_or(0)
    }

    /// Whether the model API's rate limit ended the turn (an error with HTTP 429, or a
    /// `rate_limit` error).
    pub(super) fn rate_limited(&self) -> bool {
        self.is_error == Some(true)
            && (self.api_error_status == Some(429)
                || self.api_error_type.as_deref() == Some("rate_limit_error")
                || self.error.as_deref() == Some("rate_limit"))
    }

    /// The model that cost the most in the result's `modelUsage`, if it names any (the last
    /// named of those that cost the same).
    pub(super) fn costliest_model(&self) -> Option<String> {
        self.model_usage
            .as_ref()?
            .iter()
            .max_by(|a, b| {
                let cost = |v: &Value| v["costUSD"].as_f64().unwrap_or(0.0);
                cost(a.1).total_cmp(&cost(b.1))
            })
            .map(|(model, _)| crate::protocol::truncate_chars(model, 128).to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::{ResultFigures, UsageFigures};

    #[test]
    fn a_result_s_figures_are_read_whatever_else_it_holds() {
        let figures = |cost, input, output, duration| ResultFigures {
            total_cost_usd: cost,
            usage: Some(UsageFigures {
                input_tokens: input,
                output_tokens: output,
                ..UsageFigures::default()
            }),
            duration_ms: duration,
            ..ResultFigures::default()
        };
        let read = |raw: &str| {
            let mut f = ResultFigures::read(raw);
            f.usage.get_or_insert_default();
            f
        };
        assert_eq!(
            read(
                r#"{"type":"result","result":"a \"long\" reply","total_cost_usd":0.25,"usage":{"input_tokens":3,"output_tokens":5,"cache":{"x":1}},"duration_ms":12,"errors":[]}"#
            ),
            figures(Some(0.25), Some(3), Some(5), Some(12))
        );
        // Absent, null, or of another type: absent, and the other figures are still read.
        assert_eq!(
            read(
                r#"{"type":"result","total_cost_usd":"1","usage":{"input_tokens":2.5,"output_tokens":7},"duration_ms":null}"#
            ),
            figures(None, None, Some(7), None)
        );
        assert_eq!(
            read(r#"{"type":"result","usage":5,"duration_ms":9}"#),
            figures(None, None, None, Some(9))
        );
        assert_eq!(
            read(r#"{"type":"result","total_cost_usd":1}"#),
            figures(Some(1.0), None, None, None)
        );
        // A key given twice counts once, with its last value, as everywhere else.
        assert_eq!(
            read(r#"{"type":"result","duration_ms":1,"duration_ms":2}"#),
            figures(None, None, None, Some(2))
        );
        assert_eq!(read("not json"), read("{}"));
        let cache = ResultFigures::read(
            r#"{"usage":{"cache_read_input_tokens":40,"cache_creation_input_tokens":2}}"#,
        )
        .usage
        .unwrap();
        assert_eq!(
            (
                cache.cache_read_input_tokens,
                cache.cache_creation_input_tokens
            ),
            (Some(40), Some(2))
        );
    }

    #[test]
    fn only_a_result_of_a_rate_limit_is_limited() {
        for limited in [
            r#"{"type":"result","is_error":true,"api_error_status":429}"#,
            r#"{"type":"result","is_error":true,"api_error_status":null,"error":"rate_limit"}"#,
            r#"{"type":"result","is_error":true,"api_error_type":"rate_limit_error","usage":"x"}"#,
        ] {
            assert!(ResultFigures::read(limited).rate_limited(), "{limited}");
        }
        for other in [
            r#"{"type":"result","is_error":false,"api_error_status":429}"#,
            r#"{"type":"result","is_error":true,"api_error_status":500}"#,
            r#"{"type":"result","is_error":true,"api_error_status":"429"}"#,
            r#"{"type":"result","is_error":"true","api_error_status":429}"#,
            "[]",
        ] {
            assert!(!ResultFigures::read(other).rate_limited(), "{other}");
        }
    }

    #[test]
    fn a_turn_counts_for_the_model_that_cost_the_most() {
        let model = |raw: &str| ResultFigures::read(raw).costliest_model();
        assert_eq!(
            model(
                r#"{"modelUsage": {"claude-haiku": {"costUSD": 0.001}, "claude-opus-5-5": {"costUSD": 0.01}}}"#
            )
            .as_deref(),
            Some("claude-opus-5-5")
        );
        assert_eq!(model(r#"{"modelUsage": {}}"#), None);
        assert_eq!(model("{}"), None);
        // Not an object: no model, and the rest is still read.
        let odd = ResultFigures::read(r#"{"modelUsage": [1], "duration_ms": 3}"#);
        assert_eq!((odd.costliest_model(), odd.duration_ms), (None, Some(3)));
    }
}
