//! The `get_current_time` tool: the current time in an IANA time zone (via `jiff` with its
//! bundled tz database), with the zone's abbreviation and UTC offset; and [`zone_for_place`],
//! which the offline `builtin` provider uses to turn "in Tokyo" into `Asia/Tokyo`.

use serde_json::{json, Value};

use super::{optional_str, ToolSpec};

/// Name of the clock tool.
pub const GET_CURRENT_TIME: &str = "get_current_time";

/// What the model is offered.
pub(super) fn spec() -> ToolSpec {
    ToolSpec {
        name: GET_CURRENT_TIME.to_owned(),
        description: "Get the current date and time in a time zone, with the zone's \
            abbreviation and UTC offset."
            .to_owned(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "timezone": {
                    "type": "string",
                    "description": "IANA time zone name such as \"Europe/Paris\" or \
                        \"America/New_York\". Optional; defaults to \"UTC\"."
                }
            },
            "required": []
        }),
    }
}

/// Runs a call: `{"timezone"?: string}` (blank or absent: UTC) → the local time.
pub(super) fn run(input: &Value) -> Result<String, String> {
    let zone = optional_str(input, "timezone")?
        .map(str::trim)
        .filter(|z| !z.is_empty())
        .unwrap_or("UTC");
    current_time_in(jiff::Timestamp::now(), zone)
}

/// Places whose zone is not named after them in the tz database (its names use one city per
/// zone: `America/Los_Angeles`, `Asia/Kolkata`, …): common cities and countries.
const PLACE_ALIASES: &[(&str, &str)] = &[
    ("san francisco", "America/Los_Angeles"),
    ("seattle", "America/Los_Angeles"),
    ("california", "America/Los_Angeles"),
    ("washington", "America/New_York"),
    ("boston", "America/New_York"),
    ("miami", "America/New_York"),
    ("atlanta", "America/New_York"),
    ("dallas", "America/Chicago"),
    ("houston", "America/Chicago"),
    ("austin", "America/Chicago"),
    ("montreal", "America/Toronto"),
    ("beijing", "Asia/Shanghai"),
    ("china", "Asia/Shanghai"),
    ("mumbai", "Asia/Kolkata"),
    ("delhi", "Asia/Kolkata"),
    ("new delhi", "Asia/Kolkata"),
    ("bangalore", "Asia/Kolkata"),
    ("india", "Asia/Kolkata"),
    ("japan", "Asia/Tokyo"),
    ("korea", "Asia/Seoul"),
    ("uk", "Europe/London"),
    ("england", "Europe/London"),
    ("france", "Europe/Paris"),
    ("germany", "Europe/Berlin"),
    ("spain", "Europe/Madrid"),
    ("italy", "Europe/Rome"),
    ("brazil", "America/Sao_Paulo"),
    ("são paulo", "America/Sao_Paulo"),
    ("australia", "Australia/Sydney"),
    ("gmt", "UTC"),
];

/// The IANA zone of a place as people name it ("Tokyo", "new york", "Europe/Paris", "UTC"):
/// a zone name itself, else a zone whose city part matches (`New_York` in
/// `America/New_York`, case and spaces ignored) in the tz database, else a common alias.
/// `None` when the database knows no such place.
pub fn zone_for_place(place: &str) -> Option<String> {
    let place = place
        .trim()
        .trim_start_matches("the ")
        .trim_end_matches(['?', '.', '!', ','])
        .trim();
    if place.is_empty() {
        return None;
    }
    if let Ok(tz) = jiff::tz::TimeZone::get(place) {
        return Some(tz.iana_name().unwrap_or(place).to_owned());
    }
    let wanted = place.to_lowercase();
    let as_city = wanted.replace(' ', "_");
    let in_db = jiff::tz::db().available().find_map(|name| {
        let name = name.as_str();
        let city = name.rsplit('/').next()?;
        (name.contains('/') && city.eq_ignore_ascii_case(&as_city)).then(|| name.to_owned())
    });
    in_db.or_else(|| {
        PLACE_ALIASES
            .iter()
            .find(|(alias, _)| *alias == wanted)
            .map(|(_, zone)| (*zone).to_owned())
    })
}

/// `now` in the IANA zone `zone`, e.g. `2026-11-30 14:05:09 CET (Europe/Paris, UTC+01:00)`.
fn current_time_in(now: jiff::Timestamp, zone: &str) -> Result<String, String> {
    let tz = jiff::tz::TimeZone::get(zone).map_err(|_| format!("unknown time zone: {zone}"))?;
    let name = tz.iana_name().unwrap_or(zone).to_owned();
    let zoned = now.to_zoned_datetime(tz);
    let local = jiff::fmt::strtime::format("%Y-%m-%d %H:%M:%S %Z", &zoned)
        .map_err(|e| format!("could not format the time in {name}: {e}"))?;
    let offset = jiff::fmt::strtime::format("%:z", &zoned)
        .map_err(|e| format!("could not format the UTC offset of {name}: {e}"))?;
    Ok(format!("{local} ({name}, UTC{offset})"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::agent::tools::run_builtin_tool;

    #[test]
    fn time_zone_success() {
        // 2026-11-30T13:05:09Z is 14:05:09 in Paris (CET, UTC+01:00).
        let instant: jiff::Timestamp = "2026-11-30T13:05:09Z".parse().unwrap();
        assert_eq!(
            current_time_in(instant, "Europe/Paris").unwrap(),
            "2026-11-30 14:05:09 CET (Europe/Paris, UTC+01:00)"
        );
        let summer: jiff::Timestamp = "2026-07-01T12:00:00Z".parse().unwrap();
        assert_eq!(
            current_time_in(summer, "America/New_York").unwrap(),
            "2026-07-01 08:00:00 EDT (America/New_York, UTC-04:00)"
        );
        let out = run_builtin_tool(GET_CURRENT_TIME, &json!({"timezone": "Asia/Tokyo"}))
            .unwrap()
            .unwrap();
        assert!(out.contains("(Asia/Tokyo, UTC+09:00)"), "{out}");
    }

    /// Places resolve through the tz database's zone names, then the alias table.
    #[test]
    fn places_resolve_to_zones() {
        for (place, zone) in [
            ("Tokyo", "Asia/Tokyo"),
            ("new york", "America/New_York"),
            ("New York?", "America/New_York"),
            ("Europe/Paris", "Europe/Paris"),
            ("utc", "UTC"),
            ("London", "Europe/London"),
            ("San Francisco", "America/Los_Angeles"),
            ("India", "Asia/Kolkata"),
            ("Buenos Aires", "America/Argentina/Buenos_Aires"),
        ] {
            assert_eq!(zone_for_place(place).as_deref(), Some(zone), "{place}");
        }
        for place in ["Mars", "", "  ", "Atlantis City"] {
            assert_eq!(zone_for_place(place), None, "{place}");
        }
    }

    #[test]
    fn time_zone_defaults_to_utc() {
        for input in [
            json!({}),
            json!({"timezone": null}),
            json!({"timezone": "  "}),
        ] {
            let out = run_builtin_tool(GET_CURRENT_TIME, &input).unwrap().unwrap();
            assert!(out.ends_with("(UTC, UTC+00:00)"), "{input}: {out}");
        }
    }

    #[test]
    fn time_zone_failure() {
        assert_eq!(
            run_builtin_tool(GET_CURRENT_TIME, &json!({"timezone": "Mars/Olympus_Mons"})),
            Some(Err("unknown time zone: Mars/Olympus_Mons".to_owned()))
        );
        let e = run_builtin_tool(GET_CURRENT_TIME, &json!({"timezone": 5}))
            .unwrap()
            .unwrap_err();
        assert!(e.contains("must be a string"), "{e}");
    }
}
