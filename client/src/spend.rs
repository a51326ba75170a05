//! What turns cost: `/usage` (the caller's report of the last 30 days, by day, conversation,
//! agent or model) and `/budget <usd>` (the current conversation's own spending cap).

use serde_json::Value;

use crate::render::say;
use crate::rest::Rest;

/// What a report may be grouped by.
const GROUPS: [&str; 4] = ["day", "conversation", "agent", "model"];

/// Prints the usage report grouped by `arg` (`day` when empty).
pub async fn usage(rest: &Rest, arg: &str) {
    let group = if arg.is_empty() { "day" } else { arg };
    if !GROUPS.contains(&group) {
        say(&format!("usage: /usage [{}]", GROUPS.join("|")));
        return;
    }
    match rest.usage(group).await {
        Ok(report) => say(&table(&report)),
        Err(err) => say(&format!("usage failed: {err}")),
    }
}

/// The report as aligned lines: one per group, then the total.
fn table(report: &Value) -> String {
    let empty = Vec::new();
    let rows = report["rows"].as_array().unwrap_or(&empty);
    let mut lines = vec![format!(
        "{:<24} {:>10} {:>10} {:>10} {:>6}",
        report["group_by"].as_str().unwrap_or("day"),
        "cost",
        "input",
        "output",
        "turns"
    )];
    let line = |name: &str, r: &Value| {
        format!(
            "{:<24} {:>10} {:>10} {:>10} {:>6}",
            plain(name),
            format!("${:.4}", r["cost_usd"].as_f64().unwrap_or(0.0)),
            r["input_tokens"].as_i64().unwrap_or(0),
            r["output_tokens"].as_i64().unwrap_or(0),
            r["turns"].as_i64().unwrap_or(0)
        )
    };
    for r in rows {
        let name = r["agent_id"].as_str().or(r["key"].as_str()).unwrap_or("");
        lines.push(line(name, r));
    }
    lines.push(line("total", &report["total"]));
    lines.join("\n")
}

/// `name` with control characters shown as `?` (a model name comes from an agent).
fn plain(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// Sets the conversation's own cap to `arg` US dollars.
pub async fn set_cap(rest: &Rest, agent_id: &str, arg: &str) {
    let Ok(usd) = arg.trim().trim_start_matches('$').parse::<f64>() else {
        say("usage: /budget <US dollars>, e.g. /budget 5");
        return;
    };
    match rest.set_cap(agent_id, usd).await {
        Ok(()) => say(&format!("This session's cap is now ${usd}.")),
        Err(err) => say(&format!("setting the cap failed: {err}")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::table;

    #[test]
    fn a_report_prints_a_line_per_group_and_the_total() {
        let report = json!({
            "group_by": "day",
            "rows": [{"key": "2026-11-27", "cost_usd": 0.0123, "input_tokens": 10, "output_tokens": 3, "turns": 2}],
            "total": {"cost_usd": 0.0123, "input_tokens": 10, "output_tokens": 3, "turns": 2},
        });
        let text = table(&report);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[1].starts_with("2026-11-27"), "{text}");
        assert!(lines[1].contains("$0.0123"), "{text}");
        assert!(lines[2].starts_with("total"), "{text}");
    }
}
