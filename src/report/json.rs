//! JSON rendering: the [`Report`] as serde serialises it (top-level
//! `passed` and `findings`; every finding with check, id, severity,
//! migration, message, evidence, advice).

use super::Report;

pub fn render_json(report: &Report) -> String {
    let mut s = serde_json::to_string_pretty(report).expect("a report always serialises");
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_has_the_promised_keys() {
        let r = super::super::sample_report();
        let text = render_json(&r);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["passed"], false);
        for f in v["findings"].as_array().unwrap() {
            for key in [
                "check",
                "id",
                "severity",
                "migration",
                "message",
                "evidence",
                "advice",
            ] {
                assert!(f.get(key).is_some(), "finding lacks {key}: {f}");
            }
        }
        let back: Report = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
    }
}
